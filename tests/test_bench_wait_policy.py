"""benchmarks/bench_wait_policy.py: the wait policies it compares, and its bad options as one line each."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_wait_policy.py"
spec = importlib.util.spec_from_file_location("bench_wait_policy", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_each_policy_is_its_variables():
    assert bench.policy_env("spin") == {}
    assert bench.policy_env("passive") == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert bench.policy_env("spin:1000") == {"GOMP_SPINCOUNT": "1000"}
    for bad in ("sleep", "spin:", "spin:-5", "spin:1e3"):
        with pytest.raises(argparse.ArgumentTypeError, match="spin, passive or spin:N"):
            bench.policy_env(bad)


def test_no_thread_setting_of_the_caller_reaches_a_run(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.setenv("GLASSFORMER_THREADS", "fixed")
    env = bench.clean_env()
    assert not set(bench.POLICY_VARS) & set(env) and str(SCRIPT.parents[1] / "src") in env["PYTHONPATH"]


BAD_OPTIONS = [
    (["--policies", "spin,sleep"], "got 'sleep'"),
    (["--loads", "none,heavy"], "--loads: expected some of none, half, one, two"),
    (["--fluctuate", "10"], "--fluctuate: expected ON,OFF seconds"),
    (["--fluctuate", "nan,10"], "--fluctuate: expected ON,OFF seconds"),
    (["--busy-start", "inf"], "--busy-start: expected seconds in [0, 3600), got inf"),
    (["--rounds", "0"], "--rounds and --threads must be at least 1"),
]


@pytest.mark.parametrize(("words", "message"), BAD_OPTIONS)
def test_bad_options_are_one_line(words, message, monkeypatch, capsys):
    """The script's own argument checks, run in this process (its module is loaded above): status 2 and the
    message, before any run starts."""
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *words])
    with pytest.raises(SystemExit) as exit_:
        bench.main()
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_bad_option_is_one_line_from_the_command_line():
    """The same as a user meets it: a fresh process, status 2, the message and no traceback."""
    words, message = BAD_OPTIONS[0]
    done = subprocess.run([sys.executable, str(SCRIPT), *words], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
