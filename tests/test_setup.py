"""The set-up commands install what each needs, once (issue 34): read from ``make -n`` (a dry run: make
prints the commands it would run) against a scratch virtual-environment folder, so nothing is installed.

- ``make demo`` installs the package and the torch pin only: no dev extra, no pytest;
- ``make test`` adds the dev extra, and after ``make demo`` installs only that; neither reinstalls what
  its stamp says is there; a changed ``TORCH`` reinstalls;
- ``make notebook`` adds the notebook extra (Jupyter) and opens examples/notebook.ipynb.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PIN = "torch==2.13.0"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def dry_run(target: str, venv: Path, *variables: str) -> list[str]:
    """The commands ``make TARGET`` would run with ``VENV=venv`` (and ``variables``), one per line."""
    # a clean make: the suite itself runs under `make test`, whose MAKEFLAGS/MAKELEVEL would add lines
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")}
    done = subprocess.run(["make", "--no-print-directory", "-n", target, f"VENV={venv}", f"TORCH={PIN}", *variables],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def installs(lines: list[str]) -> list[str]:
    """The ``pip install`` commands among ``lines`` (pip's own upgrade left out)."""
    return [line for line in lines if " pip install " in line and "--upgrade pip" not in line]


def made(venv: Path, *stamps: str) -> None:
    """A scratch venv as a finished install leaves it: its python and the given stamps."""
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "bin" / "python").touch()
    for stamp in stamps:
        (venv / f".installed-{stamp}torch__2.13.0").touch()


def test_make_demo_installs_the_package_and_torch_only(tmp_path):
    lines = dry_run("demo", tmp_path / "venv")
    assert len(installs(lines)) == 1
    asked = installs(lines)[0].split(" pip install ", 1)[1]
    assert asked == f"--progress-bar on -e . '{PIN}'"  # no extra: no [dev], no pytest
    assert lines[-1].endswith("glassformer demo")


def test_the_package_itself_needs_no_test_tools():
    tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    needed = " ".join(project["dependencies"])
    for tool in ("pytest", "hypothesis", "ruff", "transformers", "playwright", "nbclient"):
        assert tool not in needed
    assert any(name.startswith("pytest") for name in project["optional-dependencies"]["dev"])
    assert any(name.startswith("notebook") for name in project["optional-dependencies"]["notebook"])


def test_make_test_after_make_demo_adds_the_dev_extra_only(tmp_path):
    venv = tmp_path / "venv"
    made(venv, "")  # `make demo` ran
    assert installs(dry_run("demo", venv)) == []
    dev = f"{venv}/bin/python -m pip install --progress-bar on -e '.[dev]' '{PIN}'"
    assert installs(dry_run("test", venv)) == [dev]
    made(venv, "dev-")  # `make test` ran
    assert installs(dry_run("test", venv)) == [] and installs(dry_run("demo", venv)) == []
    assert any(line.endswith("-m pytest -q") for line in dry_run("test", venv))


def test_a_fresh_make_test_installs_the_package_then_the_dev_extra(tmp_path):
    assert [line.split(" -e ", 1)[1] for line in installs(dry_run("test", tmp_path / "venv"))] == \
        [f". '{PIN}'", f"'.[dev]' '{PIN}'"]


def test_a_changed_torch_pin_reinstalls(tmp_path):
    venv = tmp_path / "venv"
    made(venv, "", "dev-")
    lines = installs(dry_run("test", venv, "TORCH=torch==2.14.1"))
    assert [line.split(" -e ", 1)[1] for line in lines] == [". 'torch==2.14.1'", "'.[dev]' 'torch==2.14.1'"]


def test_make_notebook_installs_jupyter_and_opens_the_notebook(tmp_path):
    venv = tmp_path / "venv"
    made(venv, "")
    lines = dry_run("notebook", venv)
    assert installs(lines) == [f"{venv}/bin/python -m pip install --progress-bar on -e '.[notebook]' '{PIN}'"]
    assert lines[-1].split() == [f"{venv}/bin/jupyter", "notebook", "examples/notebook.ipynb"]
    assert (ROOT / "examples" / "notebook.ipynb").is_file()
