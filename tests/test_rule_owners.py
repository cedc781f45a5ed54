"""The "One owner per rule" table of docs/architecture.md, checked against the code (issue 31, point 5).

The table stays written by hand, but it can no longer go wrong silently. For each row:
- every owner in backticks exists: ``module.name`` (``a/b.name`` or ``a.b.name``: a def, class or
  module-level name of src/glassformer/a/b.py), a bare ``name`` after it (same module), or ``file.py``;
- every caller in backticks uses an owner: a def or class (``module.name`` or a bare name, looked up in
  all of src/) whose body names an owner, directly or through a function of its own module that does; a
  module or package (``generation/api``, ``nn/``) that names an owner somewhere; or a verb with a
  ``cli/commands/<verb>.py`` (``glassformer bench``, ``demo``). A name found nowhere fails.
Then a few cheap scans show that the rule is not written a second time elsewhere (token id ranges, head
counts, atomic renames, error types).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "glassformer"
TREES = {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(SRC.rglob("*.py"))}
Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _table() -> list[tuple[str, str, str]]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("### One owner per rule", 1)[1].split("\n###", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    return [tuple(c.strip() for c in row) for row in rows[1:]]  # type: ignore[misc]


def _module(dotted: str) -> Path | None:
    base = SRC / dotted.replace(".", "/").strip("/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def _defined(path: Path, name: str) -> list[ast.AST]:
    """Defs, classes and module-level assignments of ``name`` in ``path``."""
    found: list[ast.AST] = [n for n in ast.walk(TREES[path]) if isinstance(n, Def) and n.name == name]
    for n in TREES[path].body:
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
        found += [n for t in targets if isinstance(t, ast.Name) and t.id == name]
    return found


def _names(node: ast.AST) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
            if isinstance(n, (ast.Name, ast.Attribute))}


def _users(path: Path, owners: set[str]) -> set[str]:
    """Names of the defs of ``path`` that name an owner, directly or through another def of ``path``."""
    defs = [n for n in ast.walk(TREES[path]) if isinstance(n, Def)]
    users: set[str] = set()
    while True:
        more = {d.name for d in defs if d.name not in users and _names(d) & (owners | users)}
        if not more:
            return users
        users |= more


def _owners(cell: str) -> tuple[set[str], list[str]]:
    """(the owners' names, what was not found) of an owner cell."""
    names, missing, module = set(), [], None
    for token in re.findall(r"`([^`]+)`", cell):
        if token.endswith(".py"):
            module = SRC / token
            if not module.exists():
                missing.append(token)
            continue
        dotted, _, name = token.rpartition(".")
        module = _module(dotted) if dotted else module
        if module is None or (not _defined(module, name) and _module(token) is None):
            missing.append(token)
        names.add(name)
    return names, missing


def _caller_ok(token: str, owners: set[str]) -> bool:
    verb = token.removeprefix("glassformer ")
    if (SRC / "cli" / "commands" / f"{verb}.py").exists():
        return True
    package = _module(token)
    if package is not None or (SRC / token.strip("/")).is_dir():
        paths = [package] if package else sorted((SRC / token.strip("/")).rglob("*.py"))
        return any(_names(TREES[p]) & owners for p in paths)
    dotted, _, name = token.rpartition(".")
    paths = [_module(dotted)] if dotted else list(TREES)
    found = [p for p in paths if p is not None and _defined(p, name)]
    return bool(found) and any(name in _users(p, owners) for p in found)


@pytest.mark.parametrize("rule, owner, callers", _table(), ids=[row[0][:40] for row in _table()])
def test_each_owner_exists_and_each_caller_uses_it(rule, owner, callers):
    owners, missing = _owners(owner)
    assert missing == [], f"{rule}: owners not found where the table says: {missing}"
    wrong = [t for t in re.findall(r"`([^`]+)`", callers) if not _caller_ok(t, owners)]
    assert wrong == [], f"{rule}: callers that do not use {sorted(owners)}: {wrong}"


def test_the_check_catches_a_wrong_row():
    assert _owners("`errors.no_such_check`")[1] == ["errors.no_such_check"]
    assert not _caller_ok("ModelConfig", {"check_token_id"})
    assert _caller_ok("ModelConfig", {"check_fields"})


def _nodes(kind: type) -> list[tuple[str, ast.AST]]:
    return [(str(p.relative_to(SRC)), n) for p, t in TREES.items() for n in ast.walk(t) if isinstance(n, kind)]


def test_token_id_ranges_are_checked_only_in_errors():
    """``low <= id < vocab_size`` is written once (io/checks.check_token_id, models/inputs.check_token_ids)."""
    where = {f for f, n in _nodes(ast.Compare) if len(n.ops) == 2 and "vocab_size" in _names(n.comparators[-1])}
    assert where <= {"io/checks.py", "models/inputs.py"}


def test_head_counts_are_divided_only_in_config():
    """``x % n_heads`` / ``x % n_kv_heads`` belongs to config.check_head_counts."""
    where = {f for f, n in _nodes(ast.BinOp) if isinstance(n.op, ast.Mod)
             and isinstance(n.right, (ast.Name, ast.Attribute)) and _names(n.right) & {"n_heads", "n_kv_heads"}}
    assert where <= {"config.py"}


def test_errors_holds_error_types_only():
    """errors.py defines exception classes and nothing else: the checks live where the input enters (issue 43)."""
    body = TREES[SRC / "errors.py"].body
    kinds = {type(node).__name__ for node in body[1:]}  # after the docstring
    assert kinds == {"ClassDef"}, kinds


def test_atomic_renames_only_in_fileio():
    """``os.replace`` (the last step of an atomic write) belongs to io/fileio.py. training/trackers.py
    renames ``tracker.json`` itself, without fsync, at every log step: a known exception."""
    where = {f for f, n in _nodes(ast.Call) if ast.unparse(n.func) in ("os.replace", "os.rename")}
    assert where <= {"io/fileio.py", "training/trackers.py"}


def test_signal_handlers_only_in_io_signals():
    """``signal.signal`` (a trainer's Ctrl-C/SIGTERM at a step's end) belongs to io/signals.py's StopSignals."""
    where = {f for f, n in _nodes(ast.Call) if ast.unparse(n.func) == "signal.signal"}
    assert where <= {"io/signals.py"}


def test_error_types_live_in_errors():
    """Every public error class of glassformer is defined in errors.py (other modules import it from
    there; a private class used for control flow, like sae's ``_Captured``, is not an error type).
    ``TrainingDiverged`` still lives in training/loop.py: a known exception, to move with the trainer."""
    where = {f"{f}:{n.name}" for f, n in _nodes(ast.ClassDef) if f != "errors.py" and not n.name.startswith("_")
             and any(ast.unparse(b).endswith(("Error", "Exception")) for b in n.bases)}
    assert where <= {"training/loop.py:TrainingDiverged"}


@pytest.mark.parametrize("kw", [{}, {"pos": "rope", "activation": "swiglu", "norm": "rmsnorm"},
                                {"norm_first": False, "pos": "learned", "n_token_types": 2, "embed_norm": True},
                                {"arch": "encoder-decoder"}, {"arch": "encoder-decoder", "norm_first": False}])
def test_declared_hook_points_are_the_taps_forward_reaches_in_order(kw):
    """The parts declare their hook points (``Tap`` modules, registered in forward order) and
    interpret/points.py only names them: with every point hooked, a forward reaches exactly the
    declared points, in the declared order."""
    import torch

    from glassformer.config import ModelConfig
    from glassformer.interpret import hook_points
    from glassformer.models import EncoderDecoder, TransformerLM

    config = ModelConfig(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=16, max_len=16, **kw)
    model = (EncoderDecoder if config.arch == "encoder-decoder" else TransformerLM)(config).eval()
    points, reached = hook_points(model), []
    for name, point in points.items():
        point.module.fn = lambda x, name=name: (reached.append(name), x)[1]
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        model(ids, ids) if config.arch == "encoder-decoder" else model(ids)
    assert list(dict.fromkeys(reached)) == list(points)
