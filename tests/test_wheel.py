"""The package works outside the repository: `python -m build` gives a wheel and an sdist, and the
wheel, installed into a fresh virtual environment, runs `glassformer demo`, `glassformer inspect --preset
lesson2 ...` and finds its shipped recipes from an empty folder.

Offline, like the rest of the suite: the fresh environment sees this one's packages (torch and the
other dependencies) through a ``.pth`` file, and pip installs the wheel alone, from the file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

import glassformer

ROOT = Path(__file__).resolve().parents[1]
SKIP_COPY = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", "out", "runs",
                                   ".pytest_cache", ".ruff_cache", ".hypothesis", "demo-output", "bench-output",
                                   "multi30k")


def _source_copy(target: Path) -> Path:
    """The project's files (what a clone has, plus uncommitted work) copied to ``target``."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode != 0:  # not a git checkout (an unpacked sdist): copy the tree
        shutil.copytree(ROOT, target, symlinks=True, ignore=SKIP_COPY)
        return target
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and (source.is_file() or source.is_symlink()):
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            if source.is_symlink():
                os.symlink(os.readlink(source), target / name)
            else:
                shutil.copy2(source, target / name)
    return target


def _run(command: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MPLCONFIGDIR")}
    env["OMP_NUM_THREADS"] = "1"
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_wheel_installs_and_runs_outside_the_repository(tmp_path):
    source = _source_copy(tmp_path / "source")
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)], tmp_path)
    version = glassformer.__version__
    wheel = dist / f"glassformer-{version}-py3-none-any.whl"
    assert wheel.is_file() and (dist / f"glassformer-{version}.tar.gz").is_file(), sorted(os.listdir(dist))

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    python, command = venv / "bin" / "python", venv / "bin" / "glassformer"
    # The dependencies are this environment's (torch included, as it is), seen through a .pth file; the
    # venv's own site-packages come first, so the wheel's glassformer wins over an editable install here.
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     tmp_path).stdout.strip())
    ours = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "zz-test-dependencies.pth").write_text("\n".join(ours) + "\n", encoding="utf-8")
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check",
          "--no-index", "--no-deps", str(wheel)], tmp_path, timeout=900)
    needed = "import importlib.metadata as m, re; [m.distribution(re.split('[<>=~ ;]', r)[0]) " \
             "for r in m.requires('glassformer') if 'extra' not in r]"
    _run([str(python), "-c", needed], tmp_path)  # every dependency is installed (else PackageNotFoundError)
    assert torch.__version__ in _run([str(python), "-c", "import torch; print(torch.__version__)"], tmp_path).stdout

    elsewhere = tmp_path / "elsewhere"  # an empty folder: no repository files to lean on
    elsewhere.mkdir()
    shown = _run([str(python), "-c", "import glassformer, importlib.metadata as m; "
                  "print(glassformer.__version__, m.version('glassformer'), glassformer.__file__)"],
                 elsewhere).stdout.split()
    assert shown[:2] == [version, version] and str(venv) in shown[2]  # pyproject reads glassformer/_version.py
    demo = _run([str(command), "demo", "--out", "demo"], elsewhere)
    assert "generated: '春天来了，花开了。" in demo.stdout
    assert "Warning" not in demo.stderr, demo.stderr
    assert (elsewhere / "demo" / "attention_layer1.png").is_file()
    inspect = _run([str(command), "inspect", "--preset", "lesson2", "--text", "the cat sat", "--out", "r.html"],
                   elsewhere)
    assert "report written to r.html" in inspect.stdout
    page = (elsewhere / "r.html").read_text(encoding="utf-8")
    assert "gf-data" in page and "function" in page  # the data and the inline script (report assets)
    recipes = _run([str(command), "recipe", "--help"], elsewhere).stdout
    assert "shakespeare_char_fast" in recipes and "multi30k_de_en" in recipes  # configs shipped
    corpus = _run([str(python), "-c", "from glassformer.recipes import corpora; print(corpora.tinyshakespeare())"],
                  elsewhere).stdout.strip()
    assert Path(corpus).stat().st_size == 1_115_394 and str(venv) in corpus
