"""The ``glassformer`` process's entry: the command, then objects frozen for a quick exit (never in ``main``,
which library code and these tests call in their own process)."""

import gc
import os
import subprocess
import sys

import glassformer.cli as cli


def test_the_entry_runs_the_command_then_freezes_for_the_exit(monkeypatch):
    calls = []
    monkeypatch.setattr(cli, "main", lambda argv=None: calls.append("main") or 3)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    assert cli.entry() == 3 and calls == ["main", "freeze"]


def test_main_freezes_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gc, "freeze", lambda: (_ for _ in ()).throw(AssertionError("main froze")))
    assert cli.main(["generate", str(tmp_path / "missing"), "--prompt", "x"]) == 2
    assert "glassformer: error:" in capsys.readouterr().err


def test_python_m_glassformer_prints_everything_and_exits_with_the_commands_status(tmp_path):
    command = [sys.executable, "-m", "glassformer"]
    env = {**os.environ, "GLASSFORMER_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([*command, "bench", "--kernel_choices"], capture_output=True, text=True, cwd=tmp_path,
                          env=env)
    assert done.returncode == 0 and "none yet" in done.stdout  # printed before the frozen exit, and flushed
    done = subprocess.run([*command, "generate", str(tmp_path / "missing"), "--prompt", "x"], capture_output=True,
                          text=True, cwd=tmp_path, env=env)
    assert done.returncode == 2 and "glassformer: error:" in done.stderr
