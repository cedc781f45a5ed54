"""``glassformer inspect``: one self-contained HTML page of a model's attention, shapes and generation, or of
a training run's folder."""

import argparse
from pathlib import Path

from ...errors import UsageError
from ...io.fileio import Writes, claim_outputs
from .precision import add_precision, choose_precision

WRITES = (Writes(("inspect", "{ck}", "--text", "ab", "--out", "{out}/r.html"), ("{out}/r.html",)),
          Writes(("inspect", "{run}"), ("{run}/run.html",)),
          Writes(("inspect", "{run}", "--out", "{out}/p.html"), ("{out}/p.html",)))

EPILOG = """examples:
  glassformer inspect out/induction_heads/attn_only          (a run folder: writes its run.html)
  glassformer inspect runs/char-lm/last --text "ROMEO:" --out report.html
  glassformer inspect runs/translate --text "ein Hund läuft" --target "a dog runs"
  glassformer inspect --preset lesson2 --attn prefix --text "question? " --target "answer"
  glassformer inspect --preset lesson2 --attn bidirectional --text "short" --pad_to 10
  glassformer inspect path/to/all-MiniLM-L6-v2 --text "The cat sat."
  glassformer inspect out/induction_heads/attn_only/model --text "abcdefgabcdefg" --add_special_tokens \\
      --logit_lens --head_scores --ablation

CHECKPOINT is a training run's folder (its out_dir, with metrics.jsonl: the run page, no --text), or
a glassformer checkpoint folder or a Hugging Face model folder (GPT-2, Llama, BERT,
BART; read by glassformer.interop without transformers). Without one, --preset builds a model with
random weights and a byte-level tokenizer: its attention is meaningless, but its masks (causal,
prefix, padding) show exactly as they do in a trained model."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``inspect`` verb to the ``glassformer`` subparsers."""
    parser = sub.add_parser(
        "inspect", help="write an offline HTML report: attention, shapes, generation",
        description="Run a model once on --text (and --target) and write ONE self-contained HTML file "
                    "(no network needed to view it): head and model views of every attention layer "
                    "(encoder, decoder and cross-attention for encoder-decoders), the shape trace, "
                    "the config and parameter count, and a generation trace for models that generate.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", nargs="?", type=Path,
                        help="a glassformer checkpoint or Hugging Face model folder (or use --preset)")
    parser.add_argument("--text", help="the input (required but for a run folder); the source of an "
                                       "encoder-decoder, the prefix of a prefix-LM")
    parser.add_argument("--target", help="encoder-decoder: the target; prefix-LM: the continuation")
    parser.add_argument("--out", type=Path, help="the HTML file to write (default report.html; for a run "
                                                 "folder OUT_DIR/run.html)")
    parser.add_argument("--prefix_len", type=int, help="prefix-LM: prefix length in tokens (default: --text)")
    parser.add_argument("--pad_to", type=int, help="right-pad the input to this many tokens, to see padding")
    parser.add_argument("--generate", type=int, default=16, help="steps of the generation trace (0: none)")
    parser.add_argument("--top_k", type=int, default=5, help="candidates shown per generation step")
    add_precision(parser)
    parser.add_argument("--lang", metavar="LANG",
                        help="language of the report's labels: en or zh (default: the locale; LANG=zh_CN.UTF-8: zh)")
    parser.add_argument("--max_tokens", type=int, default=128,
                        help="longer inputs are cut to this many tokens (noted in the report)")
    specials = parser.add_mutually_exclusive_group()
    specials.add_argument("--add_special_tokens", action="store_const", const=True, default=None,
                          help="let the tokenizer add its bos/eos ([CLS]/[SEP]) around --text (the default for "
                               "a Hugging Face folder's tokenizer, as in transformers)")
    specials.add_argument("--no_special_tokens", dest="add_special_tokens", action="store_const", const=False,
                          help="encode --text without them (the default for glassformer's own tokenizers)")
    why = parser.add_argument_group("why, not only what (glassformer.interpret; single-stack models)")
    why.add_argument("--logit_lens", action="store_true",
                     help="add the logit lens: the top next token read before each block, at every position")
    why.add_argument("--head_scores", action="store_true",
                     help="add each head's previous-token and induction score (causal models)")
    why.add_argument("--ablation", action="store_true",
                     help="add each head's ablation effect on the model's own predictions (one forward per head)")
    source = parser.add_argument_group("model without a checkpoint")
    source.add_argument("--preset", help="a ModelConfig preset with random weights and a byte tokenizer")
    source.add_argument("--attn", choices=("causal", "bidirectional", "prefix"),
                        help="with --preset: override its attention type")
    source.add_argument("--seed", type=int, default=0, help="with --preset: the random seed of the weights")


def _load(args: argparse.Namespace):
    """(model, tokenizer) from CHECKPOINT (glassformer or Hugging Face folder) or --preset."""
    from . import load_model_folder

    if (args.checkpoint is None) == (args.preset is None):
        raise UsageError("give either CHECKPOINT or --preset (a random model), not "
                         + ("both" if args.preset else "neither"))
    if args.attn is not None and args.preset is None:
        raise UsageError("--attn only applies to --preset (a checkpoint's attention type is fixed)")
    if args.checkpoint is not None:
        return load_model_folder(args.checkpoint)
    import torch

    from ...config import ModelConfig
    from ...models import build_model
    from ...tokenizers.byte import ByteTokenizer

    tokenizer = ByteTokenizer(["pad", "bos", "eos", "mask"])
    attn = {} if args.attn is None else {"attn": args.attn}
    config = ModelConfig.preset(args.preset, vocab_size=tokenizer.vocab_size, dropout=0.0, **attn)
    torch.manual_seed(args.seed)
    return build_model(config).eval(), tokenizer


def run(args: argparse.Namespace) -> int:
    """Write the HTML report of ``args.text`` (and ``args.target``) to ``args.out``, or the run page of a
    run folder; returns 0."""
    import torch

    from ...io.checks import MAX_SEED, check_int
    from ...viz.i18n import resolve_lang
    from ...viz.i18n import text as ui_text
    from ...viz.report import check_report_options, write_report
    from ...viz.report_run import is_run_dir, write_run_page

    lang = resolve_lang(args.lang, "--lang")
    if args.checkpoint is not None and is_run_dir(args.checkpoint):
        path = write_run_page(args.checkpoint, args.out, lang=lang)
        print(ui_text("cli.run_page", lang, path=path, kib=path.stat().st_size / 1024))
        return 0
    if args.text is None:
        raise UsageError("--text is required (but for a run folder, which has metrics.jsonl)")
    args.out = args.out or Path("report.html")
    claim_outputs([args.out], [args.checkpoint] if args.checkpoint is not None else [], "--out")  # before loading
    check_report_options(max_tokens=args.max_tokens, generate=args.generate, top_k=args.top_k,
                         pad_to=args.pad_to, prefix="--")  # before loading: a typo fails at once
    check_int("--seed", args.seed, 0, MAX_SEED)
    model, tokenizer = _load(args)
    ids = torch.tensor([tokenizer.encode(args.text)[:args.max_tokens] or [0]])
    work = (lambda: model(ids, ids)) if model.config.arch == "encoder-decoder" else (lambda: model(ids))
    precision = choose_precision(args.precision, model, work, f"inspect | 1x{ids.shape[1]}")
    with precision.autocast(next(model.parameters()).device):
        path = write_report(model, tokenizer, args.text, args.target, args.out, prefix_len=args.prefix_len,
                            pad_to=args.pad_to, generate=args.generate, top_k=args.top_k,
                            max_tokens=args.max_tokens, add_special_tokens=args.add_special_tokens,
                            logit_lens=args.logit_lens, head_scores=args.head_scores, ablation=args.ablation,
                            lang=lang)
    print(ui_text("cli.report", lang, path=path, kib=path.stat().st_size / 1024))
    return 0
