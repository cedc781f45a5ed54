"""docs/architecture.md's package map is drawn from the code (tools/architecture_map.py), never kept by hand."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("architecture_map", ROOT / "tools" / "architecture_map.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_holds_the_map_of_the_code_as_it_is():
    tool = _tool()
    page = tool.PAGE.read_text(encoding="utf-8")
    assert tool.drawn(page) == page, "stale: run python tools/architecture_map.py"


def test_the_map_follows_a_new_module_and_a_new_import(tmp_path):
    """A module added to a room, and an import between rooms, show in the map (so a stale page fails above)."""
    tool = _tool()
    package = tmp_path / "glassformer"
    for room in ("nn", "io"):
        (package / room).mkdir(parents=True)
        (package / room / "__init__.py").write_text(f'"""The {room} room."""\n', encoding="utf-8")
    (package / "__init__.py").write_text('"""glassformer."""\n', encoding="utf-8")
    before = tool.package_map(package)
    (package / "nn" / "tap.py").write_text('"""A tap: an identity on the path, e.g. a hook. More."""\n'
                                           "from ..io import readers\n", encoding="utf-8")
    after = tool.package_map(package)
    assert before != after
    assert "| `nn/tap.py` | A tap: an identity on the path, e.g. a hook. |" in after
    assert "imports: `io`; imported by: no other room" in after
    assert "imports: nothing of glassformer; imported by: `nn`" in after


def test_the_layers_are_the_import_tests_own():
    tool = _tool()
    diagram = tool.layer_diagram()
    assert " 0  " in diagram and "io/fileio.py" in diagram.split(" 0  ", 1)[1].split("\n", 1)[0]
    assert diagram.splitlines()[2] == " 9  __main__.py"
