"""Starting is light and changes nothing (issues 31 and 34).

- ``glassformer --help``, ``VERB --help``, ``--version`` and a usage mistake are answered without
  importing torch (they took 4-7 s idle when torch came first; no time is asserted here: the modules
  loaded are counted instead).
- ``import glassformer`` (and its subpackages) sets no environment variable, thread count or signal
  handler, even on a machine the thread policy would call busy; the command applies the policy
  (tests/test_threads.py).
- ``from glassformer import TransformerLM`` and the seed's names still work (loaded on first use).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from glassformer.cli import VERBS

SRC = Path(__file__).resolve().parents[1] / "src"

ANSWERED_WITHOUT_TORCH = [["--help"], ["--version"], *([verb, "--help"] for verb in VERBS),
                          ["generate"], ["train", "--config"], ["no-such-verb"]]  # then three usage mistakes

CLI_PROBE = """
import contextlib, io, json, sys
from glassformer.cli import main
codes = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            codes.append(main(argv))
        except SystemExit as stop:
            codes.append(stop.code)
heavy = sorted(name for name in ("torch", "numpy", "tokenizers", "safetensors", "matplotlib") if name in sys.modules)
print(json.dumps({"codes": codes, "heavy": heavy}))
"""


def _python(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run ``code`` in a fresh interpreter (this checkout's src first) and return its last line as JSON."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_help_version_and_usage_errors_import_no_torch():
    seen = _python(CLI_PROBE, json.dumps(ANSWERED_WITHOUT_TORCH))
    assert seen["codes"] == [0, 0, *([0] * len(VERBS)), 2, 2, 2]  # helps exit 0, usage mistakes 2
    assert seen["heavy"] == []


IMPORT_PROBE = """
import importlib.util, json, os, signal, sys
spec = importlib.util.spec_from_file_location("glassformer.runtime.threads", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
module.others_running = lambda samples=5, gap_s=0.0: 1.0  # a busy core: the policy would act
module.usable_cpus = lambda: 2
if sys.argv[2] == "torch first":
    import torch
    threads = torch.get_num_threads()
env, handler = dict(os.environ), signal.getsignal(signal.SIGINT)
sys.argv[0] = "glassformer"  # as the command's own interpreter sees it
import glassformer
light = "torch" not in sys.modules or sys.argv[2] == "torch first"
import torch
if sys.argv[2] != "torch first":
    threads = torch.get_num_threads()
from glassformer import TransformerLM, causal_mask, count_params
import glassformer.cli, glassformer.data, glassformer.generation, glassformer.interpret, glassformer.training
model = TransformerLM(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=16, attn="causal")
print(json.dumps({"light": light, "env_changed": sorted(set(os.environ.items()) ^ set(env.items())),
                  "threads": [threads, torch.get_num_threads()],
                  "handler_kept": signal.getsignal(signal.SIGINT) is handler,
                  "params": count_params(model), "mask": causal_mask(2).tolist()}))
"""


@pytest.mark.parametrize("order", ["glassformer first", "torch first"])
def test_import_glassformer_changes_nothing(order):
    """On a machine the policy calls busy (scripted), with none of the user's thread variables set:
    importing glassformer and its subpackages leaves the environment, torch's thread count and the
    SIGINT handler as they were (the old import set OMP_WAIT_POLICY before torch, one thread, and
    under the command's name a SIGINT handler)."""
    user_vars = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "GLASSFORMER_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in user_vars}
    file = SRC / "glassformer" / "runtime" / "threads.py"
    seen = _python(IMPORT_PROBE, str(file), order, env=env)
    assert seen["light"] is True  # `import glassformer` alone loads no torch
    assert seen["env_changed"] == []
    assert seen["threads"][0] == seen["threads"][1]
    assert seen["handler_kept"] is True
    assert seen["params"] > 0 and seen["mask"] == [[True, False], [True, True]]


def test_public_names_are_listed_and_unknown_ones_refused():
    import glassformer

    for name in glassformer.__all__:
        assert getattr(glassformer, name) is not None and name in dir(glassformer)
    try:
        glassformer.no_such_name  # noqa: B018
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
