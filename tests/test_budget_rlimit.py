"""Under a real ``ulimit -v`` (RLIMIT_AS 3 GB, set in a subprocess), what cannot fit is refused before allocating
with one line naming the limit (issue 47): a 2.4 GB training (AdamW keeps two moments), ``--batch_size 2048``
(each head's attention rows are kept for the backward pass) and a 2^20-feature SAE (Adam's temporaries).
Before, each passed the check and ended in an allocator traceback."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

LIMIT = 3 * 10**9


def _available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc: Linux"),
              pytest.mark.skipif(_available() < 2 * LIMIT, reason="the machine's free memory would bind first")]


_RUN = """
import contextlib, io, json, sys, traceback
from glassformer.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except BaseException:  # an allocator's traceback: this command failed, the next ones still run
            code = traceback.print_exc() or 1
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


def _refused(result: list, what: str) -> None:
    code, err = result
    assert code == 2 and err.count("\n") == 1 and err.startswith("glassformer: error: "), err
    assert what in err and "needs at least" in err, err
    assert "left under ulimit -v (RLIMIT_AS 3 GB" in err and "refused before allocating" in err, err


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, list]:
    """The three commands, run by one process (one start of torch) under RLIMIT_AS 3 GB: [code, stderr] each."""
    from glassformer import ModelConfig, build_model
    from glassformer.tokenizers import CharTokenizer
    from glassformer.training import save_checkpoint

    root = tmp_path_factory.mktemp("rlimit")
    corpus = root / "corpus.txt"
    corpus.write_text("hello world, a small text\n" * 4000)
    tok = CharTokenizer.from_text(corpus.read_text()[:200], specials=["pad", "bos", "eos"])
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, d_model=64, n_heads=2, n_layers=1, d_ff=64, max_len=16))
    save_checkpoint(root / "run" / "best", model, tok)
    train = ["train", "--data", str(corpus), "--max_steps", "1", "--progress", "false", "--device", "cpu"]
    commands = [
        # 151M weights: weights, gradients and two moments are 2.4 GB (one moment was counted: 1.8 GB passed)
        [*train, "--out_dir", str(root / "big"), "--model.d_model", "1024", "--model.n_heads", "8", "--model.d_ff",
         "4096", "--model.n_layers", "12", "--block_size", "8", "--batch_size", "2"],
        # 262,144 positions x (kept activations + each head's attention row of 128) per block
        [*train, "--out_dir", str(root / "batch"), "--batch_size", "2048", "--block_size", "128",
         "--model.max_len", "128"],
        # d_sae 2^20 on d_in 64: 2.15 GB of weights, gradients and moments, then Adam's step temporaries
        ["sae", str(root / "run" / "best"), "--hook", "blocks.0.hook_resid_post", "--data", str(corpus), "--d_sae",
         "1048576", "--steps", "2", "--batch_size", "4", "--buffer_size", "128", "--model_batch", "1", "--context",
         "8", "--feature_windows", "1", "--progress", "false"]]

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, resource.getrlimit(resource.RLIMIT_AS)[1]))

    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _RUN, json.dumps(commands)], capture_output=True, text=True,
                          env=env, preexec_fn=limit, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return root, json.loads(done.stdout.splitlines()[-1])


def test_a_training_whose_adam_state_cannot_fit_is_refused(runs):
    root, results = runs
    _refused(results[0], "training n_layers=12, d_model=1024, d_ff=4096")
    assert not (root / "big" / "last").exists()


def test_a_batch_whose_attention_rows_cannot_fit_is_refused(runs):
    _refused(runs[1][1], "with batch_size=2048, block_size=128")


def test_a_wide_sae_is_refused(runs):
    root, results = runs
    _refused(results[2], "an SAE with d_sae=1048576 on d_in=64")
    assert not (root / "run" / "sae-blocks.0.hook_resid_post").exists()
