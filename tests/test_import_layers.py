"""Dependencies flow one way: a module imports only from its own room or from lower layers.

Every import is read from the source (lazy ones inside functions too), so an arrow that runs back
up fails here even when it would only show at run time. docs/architecture.md draws the same layers.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "glassformer"

# Each room (a top-level module or sub-package of glassformer) and its layer; lower layers never
# import higher ones. Above the library: the package's face (__init__.py), the verbs, the CLI that
# dispatches to them, and the entry points (__main__.py).
LAYERS: dict[str, int] = {
    "errors": 0, "io": 0, "io.fileio": 0, "io.records": 0, "io.loaders": 0, "_version": 0, "io.textwidth": 0,
    "validate": 0, "io.progress": 0, "io.checks": 0, "io.signals": 0,
    "locale": 0,  # the message catalogues (JSON data and their reader)
    "config": 1, "tokenizers": 1, "io.safetensors_header": 1,
    "nn": 2, "data": 2, "io.budget": 2, "io.state_check": 2,
    "models": 3,
    "training": 4, "generation": 4, "runtime": 4,
    "checks": 4, "interpret": 4,
    "viz": 5, "interop": 5, "bench": 5, "recipes": 5, "lessons": 5,
    "__init__": 6,
    "cli.commands": 7, "cli.zh": 7, "cli.help_zh": 7, "cli": 8, "__main__": 9,
}
# The two packages of the periphery hold modules of several layers: each of their modules is a room of its own.
SPLIT = ("io", "cli")
# Rooms on the same layer that may use each other, one way only (the other way is then an error).
SIDEWAYS: set[tuple[str, str]] = {
    ("data", "nn"),          # none today; allowed: data may build masks
    ("io.checks", "errors"),    # the argument checks raise glassformer's errors
    ("io.loaders", "io.checks"),  # a reader names a bad value with the argument checks' words
    ("io.progress", "io.checks"),  # a heartbeat checks its interval
    ("validate", "io.checks"),  # the config validator builds on the argument checks
    ("io.fileio", "errors"),    # the ownership rule refuses with glassformer's own error
    ("io.records", "errors"),   # a bad line of a JSON-lines record file is a BadFileError
    ("io.textwidth", "errors"),  # a bad alignment is a GlassformerError
    ("validate", "errors"),  # the config validator builds on the argument checks
    ("validate", "io.loaders"),  # a command-line list or mapping is read by the bounded YAML reader
    ("io.progress", "errors"),  # a heartbeat checks its interval
    ("io.loaders", "errors"),   # every way a file can be unusable is a BadFileError
    ("recipes", "viz"),      # a recipe draws its loss curve and samples
    ("lessons", "viz"),      # a lesson draws its attention maps
    ("lessons", "interop"),  # lesson 2 gives torch.nn's attention weights to ours through the converter
    ("recipes", "interop"),
    ("bench", "interop"),
    ("training", "runtime"),    # precision and device choices
    ("generation", "runtime"),  # the few-row decoding route
    ("training", "interpret"),  # the training microscope (config.watch) records interpret's measurements
    ("cli.commands", "cli.zh"),     # an option error carries the CLI's text (locale/cli.json) in English and Chinese
}
# Imports up the layers (and so round a circle) allowed inside a function only, never at import time: (file,
# module). The one: TransformerLens's habit, model.run_with_hooks/run_with_cache calling interpret's verbs.
DEFERRED: set[tuple[str, str]] = {
    ("models/common.py", "glassformer.interpret.hooks"),
}
# Stricter than the layers: the core's own rules (docs/architecture.md, "Layers"): the math imports no speed policy.
ONLY: dict[str, set[str]] = {
    "nn": {"nn", "errors"},  # the blocks trust the validated config: no check module, no config rule
    "models": {"models", "nn", "config", "errors", "validate", "io.checks"},
}


def _room(module: str) -> str:
    """'glassformer.nn.attention' -> 'nn'; 'glassformer.io.fileio' -> 'io.fileio'; 'glassformer' -> '__init__'."""
    parts = module.split(".")
    if parts[-1] == "__main__":
        return "__main__"
    if len(parts) > 2 and parts[1] in SPLIT:
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every glassformer import in ``path``, at any depth; a pair of
    :data:`DEFERRED` is left out where it is inside a function."""
    return _imports_under(path, PACKAGE)


def _nodes(tree: ast.AST):
    """(node, whether it lies inside a function) for every node of ``tree``, in one walk."""
    stack = [(tree, False)]
    while stack:
        node, inside = stack.pop()
        yield node, inside
        inside = inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        stack.extend((child, inside) for child in ast.iter_child_nodes(node))


@functools.cache
def _imports_under(path: Path, package_dir: Path) -> list[tuple[int, str]]:
    """:func:`_imports` of ``path`` in the package at ``package_dir`` (read once: both scans below use it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    deferred = {m for f, m in DEFERRED if package_dir / f == path}
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node, inside in _nodes(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "glassformer"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "glassformer":
                continue
            if target in deferred and inside:
                continue  # allowed inside a function: DEFERRED
            for alias in node.names:  # `from ..io import progress`: x may be a submodule or a name of the package
                sub = f"{target}.{alias.name}"
                is_module = (package_dir.parent / Path(*sub.split("."))).with_suffix(".py").exists() or \
                    (package_dir.parent / Path(*sub.split("."))).is_dir()
                found.append((node.lineno, sub if is_module else target))
    return found


def _violations() -> list[str]:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _room(_module_name(path) if path.name != "__main__.py" else "glassformer.__main__")
        if source not in LAYERS:
            problems.append(f"{path.relative_to(PACKAGE)}: room {source!r} has no layer in LAYERS")
            continue
        for line, module in _imports(path):
            target = _room(module)
            where = f"{path.relative_to(PACKAGE)}:{line} imports {module}"
            if target not in LAYERS:
                problems.append(f"{where}: room {target!r} has no layer")
            elif source in ONLY and target not in ONLY[source]:
                problems.append(f"{where}: {source}/ may import only {sorted(ONLY[source])}")
            elif target == source:
                continue
            elif LAYERS[target] > LAYERS[source]:
                problems.append(f"{where}: layer {LAYERS[source]} ({source}) imports layer "
                                f"{LAYERS[target]} ({target})")
            elif LAYERS[target] == LAYERS[source] and (source, target) not in SIDEWAYS:
                problems.append(f"{where}: sideways import {source} -> {target} not in SIDEWAYS")
    return problems


def test_every_import_runs_down_the_layers():
    assert _violations() == []


def test_sideways_pairs_run_one_way():
    assert not {(a, b) for a, b in SIDEWAYS if (b, a) in SIDEWAYS}


def test_the_checker_catches_an_upward_arrow(tmp_path):
    """Planted imports up the layers are reported (so the test above can fail)."""
    global PACKAGE
    fake = tmp_path / "glassformer"
    for room in ("nn", "data", "training"):
        (fake / room).mkdir(parents=True)
    (fake / "nn" / "bad.py").write_text("def f():\n    from ..training import loop\n", encoding="utf-8")
    (fake / "data" / "bad.py").write_text("import glassformer.models.lm\n", encoding="utf-8")
    (fake / "training" / "loop.py").write_text("", encoding="utf-8")
    PACKAGE, saved = fake, PACKAGE
    try:
        problems = _violations()
    finally:
        PACKAGE = saved
    assert any(p.startswith("nn/bad.py:2 imports glassformer.training") for p in problems), problems
    assert any(p.startswith("data/bad.py:1 imports glassformer.models.lm: layer 2") for p in problems), problems


@pytest.mark.parametrize("room", sorted({p.name if p.is_dir() else p.stem for p in PACKAGE.iterdir()
                                         if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"}))
def test_every_room_has_a_layer(room):
    assert room in LAYERS


def _cycles() -> list[list[str]]:
    """Import circles between glassformer's modules (every import, lazy or TYPE_CHECKING ones too, except a
    :data:`DEFERRED` pair inside a function): each a list of modules, the first one again at its end."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py") if p.name != "__main__.py"}
    graph = {name: sorted({m for _, m in _imports(path) if m in modules and m != name})
             for name, path in modules.items()}
    found, done = [], set()
    for start in sorted(graph):  # depth first from each module; a module on the current path seen again: a circle
        path, stack = [start], [iter(graph[start])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                done.add(path.pop())
                stack.pop()
            elif nxt in path:
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in done:
                path.append(nxt)
                stack.append(iter(graph[nxt]))
    return found


def test_no_import_circle():
    """No module imports itself back through others (models/common <-> models/families was one)."""
    assert _cycles() == []


def test_the_circle_check_catches_a_circle(tmp_path):
    global PACKAGE
    fake = tmp_path / "glassformer"
    (fake / "models").mkdir(parents=True)
    (fake / "models" / "a.py").write_text("from .b import x\n", encoding="utf-8")
    (fake / "models" / "b.py").write_text("def f():\n    from glassformer.models import a\n", encoding="utf-8")
    PACKAGE, saved = fake, PACKAGE
    try:
        cycles = _cycles()
    finally:
        PACKAGE = saved
    assert ["glassformer.models.a", "glassformer.models.b", "glassformer.models.a"] in cycles, cycles


def test_viz_modules_share_only_public_names():
    """What viz/'s pages share is public (viz/page.py: the frame of every page), never another module's
    ``_private`` name."""
    private = [f"{path.name}:{node.lineno} {alias.name}" for path in sorted((PACKAGE / "viz").glob("*.py"))
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.ImportFrom)
               for alias in node.names if alias.name.startswith("_")]
    assert private == []


def test_a_deferred_import_is_allowed_only_inside_a_function(tmp_path):
    global PACKAGE
    fake = tmp_path / "glassformer"
    for room in ("models", "interpret"):
        (fake / room).mkdir(parents=True)
    (fake / "interpret" / "hooks.py").write_text("", encoding="utf-8")
    (fake / "models" / "common.py").write_text("from ..interpret import hooks\n\n\ndef f():\n"
                                               "    from ..interpret.hooks import run\n", encoding="utf-8")
    PACKAGE, saved = fake, PACKAGE
    try:
        problems = _violations()
    finally:
        PACKAGE = saved
    in_models = [p for p in problems if p.startswith("models/common.py")]
    assert len(in_models) == 1 and in_models[0].startswith("models/common.py:1 imports glassformer.interpret"), problems
