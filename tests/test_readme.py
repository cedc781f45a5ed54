"""The README's promises (tests/test_docs.py runs every block of it; these check what the blocks claim)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_ten_lines_print_what_their_comments_say(tmp_path, monkeypatch, capsys):
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", README, re.S) if "check_causality" in c]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md[ten lines]", "exec"), {"__name__": "__readme__"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == "0.0"  # check_causality(...).max_leak: no position sees the future
    assert printed[0].startswith("{'ids': [2, 10], 'embeddings': [2, 10, 64]")
    assert len(code.strip().splitlines()) <= 12


def test_readme_starts_with_the_set_up_and_says_how_to_reach_the_commands():
    sections = re.findall(r"^## (.+)$", README, re.M)
    assert sections[:2] == ["Set-up: two commands", "Ten lines"]
    set_up = README.split("## Ten lines")[0]
    assert "make demo" in set_up and "make test" in set_up and "source .venv/bin/activate" in set_up
