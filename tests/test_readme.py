"""The README's Python examples run as written (English and Chinese quickstarts)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = [(name, i, code) for name in ("README.md", "README.zh-CN.md") if (ROOT / name).exists()
          for i, code in enumerate(re.findall(r"```python\n(.*?)```", (ROOT / name).read_text(encoding="utf-8"),
                                              re.S))]


@pytest.mark.parametrize(("name", "index", "code"), BLOCKS, ids=[f"{n}:{i}" for n, i, _ in BLOCKS])
def test_readme_python_block_runs(name, index, code, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # examples may write files (plots) into the current folder
    exec(compile(code, f"{name}[python block {index}]", "exec"), {"__name__": "__readme__"})
    if "check_causality(model, ids).max_leak" in code:
        assert "0.0" in capsys.readouterr().out.splitlines()


def test_readme_has_python_examples():
    assert any(name == "README.md" for name, _, _ in BLOCKS)
