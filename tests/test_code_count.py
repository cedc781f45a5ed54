"""tools/code_count.py counts code lines, raises and check code as its docstring defines them."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("code_count", ROOT / "tools" / "code_count.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SAMPLE = '''"""Module docstring,
two lines."""

# a comment


def check_width(width):
    """Docstring."""
    if width < 1:
        raise ValueError(width)


def forward(x, width):
    check_width(width)
    y = x * 2  # math
    if y > 3:
        y = y - 1
    return (y +
            1)
'''


def test_counts_a_known_file(tmp_path: Path) -> None:
    (tmp_path / "nn").mkdir()
    (tmp_path / "nn" / "m.py").write_text(SAMPLE, encoding="utf-8")
    (tmp_path / "root.py").write_text("raise SystemExit(0)\n", encoding="utf-8")
    counts = _tool().count_tree(tmp_path)
    nn = counts["packages"]["nn"]
    # code: def check_width, if, raise, def forward, check_width(...), y = ..., if y, y = y - 1, return (2 lines)
    assert nn["code_lines"] == 10
    assert nn["raises"] == 1
    assert nn["check_lines"] == 4  # the check function (3 code lines) and the call
    assert nn["math_lines"] == 6
    assert counts["total"] == {"code_lines": 11, "raises": 2, "check_lines": 5, "math_lines": 6,
                               "check_to_math": round(5 / 6, 2), "added_feature_lines": 0,
                               "old_feature_lines": 11}


def test_files_of_added_features_are_set_apart(tmp_path: Path) -> None:
    (tmp_path / "interpret" / "graph").mkdir(parents=True)
    (tmp_path / "interpret" / "graph" / "a.py").write_text("x = 1\ny = 2\n", encoding="utf-8")
    (tmp_path / "interpret" / "graphs.py").write_text("z = 3\n", encoding="utf-8")  # a prefix, not the folder
    total = _tool().count_tree(tmp_path)["total"]
    assert (total["added_feature_lines"], total["old_feature_lines"]) == (2, 1)
