"""``glassformer bench``: the benchmark suite, per precision, against Hugging Face GPT-2 and nanoGPT."""

import argparse
import json
import sys
from pathlib import Path

from ...io.fileio import Writes, atomic_write, claim_outputs

WRITES = (Writes(("bench", "--quick", "--out", "{out}/bench.json"), ("{out}/bench.json",)),)  # test_outputs_guard

EPILOG = """\
precision:
  every training, generation and return_attn row runs in each precision of --precision: float32, or
  the forward pass under torch.autocast to bfloat16/float16 with float32 weights and AdamW (mixed
  precision, the way people train). The tables' precision column says which; a training row's MFU
  is against the header's matmul peak of that precision. compile and scaling use the first one.
  auto stands for what precision: auto can pick here (float32, and bfloat16 where the CPU or GPU has
  bfloat16 instructions).

nanoGPT:
  not shipped with glassformer: point --nanogpt at a checkout's model.py; its GPT is built at each
  size (the same biases as glassformer's, dropout 0), trained with the same step and AdamW in the
  same rounds, and the training table gains a 'vs nanogpt' column.

examples:
  glassformer bench --quick
  glassformer bench --only train --nanogpt ~/nanoGPT/model.py
  glassformer bench --only train,gen --precision float32 --no_hf
  glassformer bench --device cuda --precision bfloat16

See docs/benchmarks.md.
"""


def _names(text: str) -> tuple[str, ...]:
    """``"train, gen"`` -> ("train", "gen"): a comma-separated option as a tuple, blanks dropped."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench`` verb to the ``glassformer`` subparsers."""
    parser = sub.add_parser(
        "bench", help="benchmark training and generation against Hugging Face GPT-2 and nanoGPT",
        description="Time training (tokens/s, peak memory, MFU), greedy generation, return_attn=True and "
                    "torch.compile, side by side with Hugging Face GPT-2 (and nanoGPT's model, given its "
                    "model.py) in paired interleaved rounds, in float32 and in bfloat16 autocast; print "
                    "Markdown tables under a header naming the machine (CPU, its features, the measured "
                    "matmul peak of each precision) and write the numbers as JSON.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", type=_names, default=None, metavar="PARTS",
                        help="comma-separated parts: train, gen, attn, compile, scaling "
                             "(default: train, gen, attn, compile; --quick drops compile)")
    parser.add_argument("--sizes", type=_names, default=("small", "baby"), metavar="SIZES",
                        help="comma-separated model sizes: small, baby (default: both)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer rounds, batch-1 generation only, no compile (a minute or two on an idle CPU)")
    parser.add_argument("--rounds", type=int, default=None, help="paired rounds per measurement")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--precision", dest="precision", type=_names, default=("auto",),
                        metavar="PRECISIONS",
                        help="comma-separated: auto, float32, bfloat16, float16 (16-bit = torch.autocast, float32 "
                             "weights; auto = what precision auto can pick here: float32, plus bfloat16 where the "
                             "device has bfloat16 instructions; default: auto)")
    parser.add_argument("--nanogpt", type=Path, default=None, metavar="PATH",
                        help="nanoGPT's model.py (or the folder holding it): adds nanoGPT's model as a training "
                             "contender and a 'vs nanogpt' column")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--no_hf", action="store_true", help="skip the Hugging Face contenders")
    parser.add_argument("--out", type=Path, default=Path("bench-output/bench.json"), help="where to write the JSON")
    parser.add_argument("--kernel_choices", action="store_true",
                        help="print the kernel choices measured on this machine (and where they are kept), then stop")
    parser.add_argument("--reset_kernel_choices", action="store_true",
                        help="forget this machine's kernel choices (measured again when next needed), then stop")
    parser.add_argument("--defaults", action="store_true",
                        help="time each default choice (Newton-Schulz precision, precision auto, bfloat16 attention, "
                             "the decode route, threads, compile) against its plain alternative here; exit 1 when one "
                             "loses (with --quick: under a minute, no compile; --only picks checks: newton_schulz, "
                             "precision, bf16_attention, decode_route, threads, compile)")
    parser.add_argument("--tolerance", type=float, default=0.10,
                        help="with --defaults: how much slower than its alternative a default may be (default 0.10)")
    parser.set_defaults(keeps_kernel_choices=True)  # the one verb that writes the kernel-choice cache


WAYS = {  # a kernel choice's case prefix -> (its special way, its plain way), as --kernel_choices names them
    "precision": ("bfloat16", "float32"), "muon newton-schulz bfloat16": ("bfloat16", "float32"),
    "attention bfloat16 blocked": ("the blocked bfloat16 kernel", "torch's kernel"),
}


def run(args: argparse.Namespace) -> int:
    """Run the chosen benchmark parts (or ``--defaults``, ``--kernel_choices``), print the tables and write
    the JSON to ``args.out``; returns 0 (``--defaults``: 1 when a default loses)."""
    import torch

    from ...bench import format_table, run_suite
    from ...bench.defaults import CHECKS, check_defaults, format_defaults
    from ...bench.runner import DEFAULT_PARTS
    from ...errors import UsageError
    from ...io.checks import check_int, check_number
    from ...runtime import kernel_choice
    from ...runtime.device import pick_device

    if args.kernel_choices or args.reset_kernel_choices:
        if args.reset_kernel_choices:
            kernel_choice.reset_choices()
        print(f"kernel choices of {kernel_choice.machine()} ({kernel_choice.kept_in() or kernel_choice.cache_file()}):")
        for case, record in sorted(kernel_choice.records().items()):
            ways = next((w for prefix, w in WAYS.items() if case.startswith(prefix)), ("the route", "F.linear"))
            print(f"  {case}: {ways[0] if kernel_choice.effective(record) else ways[1]}\n"
                  f"      {kernel_choice.describe(record)}")
        if not kernel_choice.choices():
            print("  none yet (each is measured the first time it is needed)")
        if kernel_choice.ignored:
            print(f"  {len(kernel_choice.ignored)} more entr{'ies' if len(kernel_choice.ignored) > 1 else 'y'} in "
                  "a form glassformer does not write: ignored (measured again)")
        return 0
    out = args.out
    if args.defaults:
        check_number("--tolerance", args.tolerance, 0.0)  # the flag's name in the message, not the library's
        if out == Path("bench-output/bench.json"):
            out = Path("bench-output/defaults.json")
    elif args.rounds is not None:
        check_int("--rounds", args.rounds, 1)
    if args.threads is not None:
        torch.set_num_threads(check_int("--threads", args.threads, 1, 4096))
    if not args.defaults:
        if args.device != "cpu" and not args.device.startswith("cuda"):
            raise UsageError(f"--device must be cpu or cuda (cuda:N), got {args.device!r}")
        args.device = str(pick_device(args.device))  # the one owner of device checks (training asks it too)
    claim_outputs([out], what="--out")  # a user's file, a link, a FIFO: refused before the benchmark runs

    def done(part: str) -> None:
        print(f"bench: {part} done", file=sys.stderr, flush=True)

    if args.defaults:
        results = check_defaults(quick=args.quick, tolerance=args.tolerance, only=args.only or CHECKS, progress=done)
        table = format_defaults(results)
    else:
        parts = args.only or tuple(p for p in DEFAULT_PARTS if not (args.quick and p == "compile"))
        results = run_suite(parts, args.sizes, quick=args.quick, rounds=args.rounds, device=args.device,
                            precisions=args.precision, hf=not args.no_hf, nanogpt=args.nanogpt, progress=done)
        table = format_table(results)
    print(table)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, json.dumps(results, indent=2) + "\n", what="--out")
    print(f"results written to {out}")
    return 0 if results.get("ok", True) else 1
