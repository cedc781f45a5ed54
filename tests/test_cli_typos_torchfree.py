"""A ``train``/``recipe`` key typo is an argument error: answered with "did you mean" before torch loads."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import sys
from glassformer.cli import main
code = main({argv!r})
print("torch loaded:", "torch" in sys.modules)
sys.exit(code)
"""


@pytest.mark.parametrize("argv, message", [
    (["train", "--data", "x.txt", "--max_stpes", "5"], "unknown option --max_stpes (did you mean --max_steps?)"),
    (["train", "--data", "x.txt", "--model.n_layrs", "2"], "did you mean --model.n_layers?"),
    (["recipe", "shakespeare_char", "--lrr", "1"], "unknown option --lrr (did you mean --lr?)"),
])
def test_key_typo_refused_without_torch(argv: list[str], message: str) -> None:
    """The error names the key and the closest known one, exit status 2, and torch was never imported."""
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(argv=argv)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "torch loaded: False" in done.stdout


def test_config_file_typo_refused_without_torch(tmp_path) -> None:
    """A misspelled key in the --config YAML file is refused the same way, before torch loads."""
    config = tmp_path / "c.yaml"
    config.write_text("data: x.txt\nmax_stpes: 5\n", encoding="utf-8")
    argv = ["train", "--config", str(config)]
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(argv=argv)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 2, done.stderr
    assert "unknown key max_stpes" in done.stderr and "did you mean max_steps?" in done.stderr
    assert "torch loaded: False" in done.stdout
