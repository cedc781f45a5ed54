"""No file calls another file's private method (issue 31, point 5: rooms by responsibility).

The rule, kept simple: a call ``obj._name(...)`` where ``obj`` is not ``self``/``cls`` and ``_name``
(a single leading underscore, not a dunder) is defined (``def _name``) in some module of src/ but not in
the calling module is a private call across files. Such a call ties two files to each other's internals
(BART's embedding once called ``Embeddings._tap_positions``); the callee should take what it needs as an
argument or offer a public method instead. Calls on third-party objects (``torch``'s ``_foo``) are not
counted, since their ``_name`` is defined in no module of src/.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "glassformer"


def _private_defs(tree: ast.AST) -> set[str]:
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name.startswith("_") and not n.name.startswith("__")}


def _private_calls(tree: ast.AST) -> list[tuple[str, int]]:
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            name, obj = n.func.attr, n.func.value
            own = isinstance(obj, ast.Name) and obj.id in ("self", "cls")
            if name.startswith("_") and not name.startswith("__") and not own:
                out.append((name, n.lineno))
    return out


def cross_file_private_calls(root: Path = SRC) -> list[str]:
    """'file:line name' for each private call to a method defined only in other files of ``root``."""
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(root.rglob("*.py"))}
    defs = {p: _private_defs(t) for p, t in trees.items()}
    everywhere = set().union(*defs.values())
    return [f"{p.relative_to(root)}:{line} {name}" for p, t in trees.items()
            for name, line in _private_calls(t) if name in everywhere and name not in defs[p]]


def test_no_private_calls_across_files():
    assert cross_file_private_calls() == []


def test_the_scan_finds_a_private_call_across_files(tmp_path):
    (tmp_path / "a.py").write_text("class A:\n    def _secret(self):\n        return 1\n")
    (tmp_path / "b.py").write_text("def f(a):\n    return a._secret()\n")
    (tmp_path / "c.py").write_text("class C:\n    def _own(self):\n        return self._own()\n")
    assert cross_file_private_calls(tmp_path) == ["b.py:2 _secret"]
