"""Draw docs/architecture.md's package map from the code: every package (a room) of src/glassformer, what it
imports from the other rooms, and each module with the first sentence of its docstring; and the layers the
import test enforces (``LAYERS`` in tests/test_import_layers.py).

    python tools/architecture_map.py          # rewrite the map between the markers in docs/architecture.md
    python tools/architecture_map.py --check  # exit 1 (and say so) when the file is stale

Only the parts between the ``BEGIN`` and ``END`` markers are written; the rest of the page stays by hand. The
imports are read from the source (every import, lazy ones inside functions too), as tests/test_import_layers.py
reads them. tests/test_architecture_map.py fails when the page and the code disagree.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "glassformer"
PAGE = ROOT / "docs" / "architecture.md"
LAYERS_TEST = ROOT / "tests" / "test_import_layers.py"
BEGIN = "<!-- BEGIN package map: written by tools/architecture_map.py from the code; do not edit by hand -->"
END = "<!-- END package map -->"
BEGIN_LAYERS = "<!-- BEGIN layers: written by tools/architecture_map.py from tests/test_import_layers.py -->"
END_LAYERS = "<!-- END layers -->"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """src/glassformer/io/fileio.py -> 'glassformer.io.fileio' (a package's __init__.py: the package)."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str) -> str:
    """The room of a module: its top-level package ('io', 'nn', ...) or, for a module at the root, '(root)'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and _is_package(parts[1])) else "(root)"


def _is_package(name: str, package: Path = PACKAGE) -> bool:
    return (package / name / "__init__.py").exists()


def imports(path: Path, package: Path = PACKAGE) -> set[str]:
    """The glassformer modules ``path`` imports, at any depth (``from . import x``: x when it is a module)."""
    name = module_name(path, package)
    here = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "glassformer"}
        elif isinstance(node, ast.ImportFrom):
            base = here.split(".")[:len(here.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target.split(".")[0] != "glassformer":
                continue
            for alias in node.names:
                sub = package.parent.joinpath(*f"{target}.{alias.name}".split("."))
                found.add(f"{target}.{alias.name}" if sub.with_suffix(".py").exists() or sub.is_dir() else target)
    return found


def first_sentence(path: Path) -> str:
    """The first sentence of a module's docstring, on one line ('(no docstring)' when it has none)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    match = re.match(r"(.+?(?<!\bal)(?<!\be\.g)(?<!\bi\.e)\.)(\s+[A-Z(`]|$)", paragraph)  # not "et al." nor "e.g."
    text = (match.group(1) if match else paragraph) or "(no docstring)"
    return text.replace("|", "\\|")


def package_map(package: Path = PACKAGE) -> str:
    """The generated part of the page (markdown): one section per room, its imports, its modules."""
    files = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    rooms: dict[str, list[Path]] = {}
    uses: dict[str, set[str]] = {}
    for path in files:
        name = module_name(path, package)
        here = room(name) if name != "glassformer" else "(root)"
        rooms.setdefault(here, []).append(path)
        targets = {room(m) if m != "glassformer" else "(root)" for m in imports(path, package)}
        uses.setdefault(here, set()).update(targets - {here})
    used_by = {r: sorted(o for o in rooms if r in uses.get(o, ())) for r in rooms}
    lines = [BEGIN, "", f"{len(files)} modules in {len(rooms)} rooms (the root's loose modules, then each package)."
             " Arrows are imports between rooms, read from the source.", ""]
    for name in sorted(rooms, key=lambda r: (r != "(root)", r)):
        title = "glassformer/ (the root)" if name == "(root)" else f"{name}/"
        lines += [f"#### `{title}`", ""]
        lines.append(f"imports: {', '.join(f'`{u}`' for u in sorted(uses[name])) or 'nothing of glassformer'}; "
                     f"imported by: {', '.join(f'`{u}`' for u in used_by[name]) or 'no other room'}")
        lines += ["", "| module | what it is |", "|---|---|"]
        for path in rooms[name]:
            lines.append(f"| `{path.relative_to(package).as_posix()}` | {first_sentence(path)} |")
        lines.append("")
    return "\n".join([*lines, END])


def layer_diagram(test: Path = LAYERS_TEST) -> str:
    """The layers, highest first, each with its rooms (``LAYERS`` of the import test; a module of io/ or cli/ is
    a room of its own), as a text block between the layer markers."""
    tree = ast.parse(test.read_text(encoding="utf-8"))
    value = next(n.value for n in tree.body if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "LAYERS")
    layers: dict[str, int] = ast.literal_eval(value)
    lines = [BEGIN_LAYERS, "```text"]
    for layer in sorted(set(layers.values()), reverse=True):
        rooms = sorted(r for r, n in layers.items() if n == layer)
        names = [_room_path(r, layers) for r in rooms]
        row = f"{layer:2d} "
        for name in names:  # wrapped at 100 columns, the continuation indented
            if len(row) + len(name) > 100:
                lines.append(row)
                row = "   "
            row += f" {name}"
        lines.append(row)
    return "\n".join([*lines, "```", END_LAYERS])


def _room_path(room: str, layers: dict[str, int]) -> str:
    """'nn' -> 'nn/', 'config' -> 'config.py', 'io.fileio' -> 'io/fileio.py', 'io' (split) -> 'io/__init__.py'."""
    path = PACKAGE.joinpath(*room.split("."))
    if room == "__init__":
        return "__init__.py"
    if any(r.startswith(f"{room}.") for r in layers):
        return f"{room}/__init__.py"
    return f"{room.replace('.', '/')}/" if path.is_dir() else f"{room.replace('.', '/')}.py"


def with_map(page: str, generated: str, begin: str = BEGIN, end: str = END) -> str:
    """``page`` with the text between the markers replaced by ``generated`` (which holds the markers)."""
    if begin not in page or end not in page:
        raise SystemExit(f"{PAGE}: the markers {begin!r} and {end!r} are missing")
    head, rest = page.split(begin, 1)
    return head + generated + rest.split(end, 1)[1]


def drawn(page: str) -> str:
    """``page`` with both generated parts as the code draws them now."""
    return with_map(with_map(page, package_map()), layer_diagram(), BEGIN_LAYERS, END_LAYERS)


def main(argv: list[str]) -> int:
    page = PAGE.read_text(encoding="utf-8")
    fresh = drawn(page)
    if "--check" in argv:
        if fresh != page:
            print(f"{PAGE} is stale: run python tools/architecture_map.py", file=sys.stderr)
            return 1
        return 0
    if fresh != page:
        PAGE.write_text(fresh, encoding="utf-8")
        print(f"wrote the package map into {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
