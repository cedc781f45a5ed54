"""Preparing a corpus into tokens: ``glassformer prepare`` beside raw Hugging Face ``tokenizers`` streamed and
nanoGPT's ``prepare.py`` approach, wall time and peak resident memory, on corpora of the sizes asked.

The corpora are built from the text at hand (``--text``, default ../shared/data: tinyshakespeare's
input.txt and Multi30k's English and German captions, plus the ``fortunes`` files when installed): the
files' lines, shuffled by a seeded generator for each copy, are written out until the corpus reaches its
size (``--sizes`` in MB); one plain UTF-8 file per size, kept in ``--work`` for the next run. Each contender
runs in its own process, which reports its own wall time and CPU time (from after its imports; on a shared
machine CPU seconds are the steadier figure) and peak RSS (``getrusage``); contenders alternate within a
round, ``--rounds`` rounds, medians reported:

* ``glassformer``: ``glassformer.data.prepare.prepare(corpus, out, "bpe", vocab_size=V)``: the BPE trained
  streamed over the whole corpus, encoded in 1 MiB batches on every core into modded-nanogpt shards.
* ``tokenizers``: the same BPE (ByteLevel, ``train_from_iterator`` over 1 MB chunks), then each 1 MB chunk
  encoded (``encode_batch`` of its lines) and appended to a uint16 file: the floor any wrapper pays.
* ``nanogpt``: nanoGPT's ``data/shakespeare/prepare.py`` approach: the same BPE, then the whole file read
  into memory, cut 90/10 by characters and each part encoded in one call, written with ``tofile``.

    python benchmarks/bench_data.py --sizes 20 --rounds 2          # a quick check
    nice -n 10 python benchmarks/bench_data.py --sizes 300,900      # the issue's figures

Prints a Markdown table (the CPU named) and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

CONTENDERS = ("glassformer", "tokenizers", "nanogpt")

COMMON = """
import json, resource, sys, time
import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
corpus, out, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])

def chunks():
    with open(corpus, encoding="utf-8") as handle:
        while piece := handle.read(1 << 20):
            yield piece

def train_bpe():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, show_progress=False, special_tokens=["<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(chunks(), trainer=trainer)
    return tok

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

def start():
    return time.perf_counter(), cpu()  # after the imports: their share is left out

def report(started, tokens):
    print(json.dumps({"wall_s": time.perf_counter() - started[0], "cpu_s": cpu() - started[1], "tokens": int(tokens),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

SCRIPTS = {
    "glassformer": COMMON + """
from glassformer.data.prepare import prepare
started = start()
manifest = prepare([corpus], out, "bpe", vocab_size=vocab, val_fraction=0.0)
report(started, manifest["tokens"]["train"])
""",
    "tokenizers": COMMON + """
started = start()
tok = train_bpe()
count = 0
with open(out + ".bin", "wb") as target:
    for piece in chunks():
        ids = np.concatenate([np.array(e.ids, dtype=np.uint16) for e in tok.encode_batch(piece.splitlines(True))])
        target.write(ids.tobytes())
        count += len(ids)
report(started, count)
""",
    "nanogpt": COMMON + """
started = start()
tok = train_bpe()
with open(corpus, encoding="utf-8") as handle:
    data = handle.read()
n = len(data)
count = 0
for name, part in (("train", data[:int(n * 0.9)]), ("val", data[int(n * 0.9):])):
    ids = np.array(tok.encode(part).ids, dtype=np.uint16)
    ids.tofile(out + f".{name}.bin")
    count += len(ids)
report(started, count)
""",
}


def base_lines(text_dir: Path) -> list[str]:
    """The lines of the text at hand (non-empty, with their newline)."""
    lines: list[str] = []
    shakespeare = text_dir / "tinyshakespeare" / "input.txt"
    if shakespeare.is_file():
        lines += shakespeare.read_text(encoding="utf-8").splitlines(keepends=True)
    for path in sorted((text_dir / "multi30k").glob("*.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            lines += handle.readlines()
    fortunes = Path("/usr/share/games/fortunes")
    for path in sorted(fortunes.glob("*")) if fortunes.is_dir() else []:
        if path.is_file() and path.suffix not in (".dat", ".u8"):
            lines += path.read_bytes().decode("utf-8", "ignore").splitlines(keepends=True)
    lines = [line if line.endswith("\n") else line + "\n" for line in lines if line.strip()]
    if not lines:
        raise SystemExit(f"no text found under {text_dir}: give --text")
    return lines


def build_corpus(lines: list[str], megabytes: float, work: Path) -> Path:
    """A corpus file of about ``megabytes`` MB: the lines shuffled anew (seeded) for each copy."""
    path = work / f"corpus-{megabytes:g}MB.txt"
    target = int(megabytes * 1e6)
    if path.is_file() and path.stat().st_size >= target:
        return path
    work.mkdir(parents=True, exist_ok=True)
    rng, written = random.Random(0), 0
    with open(path, "w", encoding="utf-8") as handle:
        while written < target:
            copy = lines[:]
            rng.shuffle(copy)
            for line in copy:
                handle.write(line)
                written += len(line.encode("utf-8"))
                if written >= target:
                    break
    return path


def run_one(name: str, corpus: Path, vocab: int, work: Path, cap_gb: float = 0.0) -> dict:
    """One contender in its own process: {"wall_s", "tokens", "peak_rss_mb"}; with ``cap_gb``, its address space
    is limited to that many GB (so an approach that holds the whole corpus fails with MemoryError, not the machine)."""
    import resource
    import shutil

    def limit() -> None:
        if cap_gb > 0:
            cap = int(cap_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    out = work / f"out-{name}"
    shutil.rmtree(out, ignore_errors=True)
    for stale in work.glob(f"out-{name}*.bin"):
        stale.unlink()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", SCRIPTS[name], str(corpus), str(out), str(vocab)],
                          capture_output=True, text=True, env=env, preexec_fn=limit)
    if done.returncode != 0:
        error = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
        return {"error": f"{error} (address space capped at {cap_gb:g} GB)" if cap_gb > 0 else error}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="300,900", help="corpus sizes in MB, comma-separated")
    parser.add_argument("--vocab", type=int, default=4096, help="BPE vocabulary size (the issue's 4,096)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the contenders, alternated")
    parser.add_argument("--only", default=",".join(CONTENDERS), help="contenders to run")
    parser.add_argument("--text", type=Path, default=ROOT.parent / "shared" / "data", help="text to build from")
    parser.add_argument("--work", type=Path, default=Path("/tmp/glassformer-bench-data"), help="corpora, outputs")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-output" / "bench_data.json")
    parser.add_argument("--cap_gb", type=float, default=16.0,
                        help="address-space cap per contender in GB (0: none); keeps the machine alive")
    args = parser.parse_args()
    from glassformer.runtime.kernel_choice import cpu_name

    names = [n for n in args.only.split(",") if n]
    lines = base_lines(args.text)
    results = {"cpu": cpu_name(), "cpu_count": os.cpu_count(), "vocab_size": args.vocab, "rounds": args.rounds,
               "corpus": f"lines of {args.text} (tinyshakespeare, multi30k) and the fortunes files, shuffled per copy",
               "sizes": {}}
    for size in [float(s) for s in args.sizes.split(",") if s]:
        corpus = build_corpus(lines, size, args.work)
        runs: dict[str, list[dict]] = {n: [] for n in names}
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else names[::-1]:
                runs[name].append(run_one(name, corpus, args.vocab, args.work, args.cap_gb))
                print(f"{size:g} MB {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
        summary = {}
        for name, found in runs.items():
            good = [r for r in found if "error" not in r]
            summary[name] = {"runs": found} if not good else {
                "wall_s": statistics.median(r["wall_s"] for r in good),
                "cpu_s": statistics.median(r["cpu_s"] for r in good),
                "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in good),
                "tokens": good[0]["tokens"], "runs": found}
        results["sizes"][f"{size:g}"] = {"bytes": corpus.stat().st_size, **summary}
    print(f"\nPreparing a corpus (BPE {args.vocab:,}): {results['cpu']}, {os.cpu_count()} CPUs, median of "
          f"{args.rounds} round(s)\n")
    print("| corpus | contender | wall s | CPU s | peak RSS MB | tokens | wall / tokenizers | CPU / tokenizers | "
          "RSS / tokenizers |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size, entry in results["sizes"].items():
        base = entry.get("tokenizers", {})
        for name in names:
            row = entry[name]
            if "wall_s" not in row:
                print(f"| {size} MB | {name} | failed: {row['runs'][-1].get('error', '?')} | | | | | | |")
                continue
            ratio = [f"{row[key] / base[key]:.2f}x" if "wall_s" in base else "" for key in
                     ("wall_s", "cpu_s", "peak_rss_mb")]
            print(f"| {size} MB | {name} | {row['wall_s']:,.1f} | {row['cpu_s']:,.1f} | {row['peak_rss_mb']:,.0f} | "
                  f"{row['tokens']:,} | {' | '.join(ratio)} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
