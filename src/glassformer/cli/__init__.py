"""The ``glassformer VERB [options]`` command line (a verb: ``cli/commands/<verb>.py``). A GlassformerError or an
OSError prints one line (status 2); any other exception is a bug and keeps its traceback."""

import argparse
import contextlib
import difflib
import gc
import importlib
import os
import sys
from collections.abc import Iterator
from typing import NoReturn

from .._version import __version__
from ..errors import GlassformerError
from .help_zh import translate_help
from .zh import VERB_HELP_ZH, argparse_zh, cli_lang, cli_text, move_lang

# Verbs in the order --help lists them; each names a module in glassformer.cli.commands.
VERBS_WITH_LANG = ("demo", "inspect")  # verbs with their own --lang option (it is handed on to them)
VERBS = ("demo", "prepare", "train", "recipe", "eval", "generate", "translate", "inspect", "convert", "embed", "sae",
         "transcoders", "graph", "bench")


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (``glassformer VERB: error: ... (see --help)``), status 2."""

    lang = "en"  # "zh" while main parses a Chinese command line (cli/zh.py)

    def error(self, message: str) -> NoReturn:
        """Print ``message`` as one line on standard error and exit with status 2."""
        message = " ".join(str(message).split()) + cli_text("see_help", self.lang, prog=self.prog)
        self.exit(2, cli_text("error", self.lang, prog=self.prog, message=message) + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``glassformer`` parser with one subparser per verb of :data:`VERBS`, in English (main translates it)."""
    parser = OneLineParser(prog="glassformer", description=cli_text("description"), allow_abbrev=False,
                           epilog=cli_text("epilog"))
    parser.add_argument("--version", action="version", version=f"glassformer {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb in VERBS:  # each verb's module declares its options (register) and runs it (run)
        commands = importlib.import_module(f"glassformer.cli.commands.{verb}")
        commands.register(sub)
        sub.choices[verb].set_defaults(func=commands.run)
    for verb_parser in sub.choices.values():
        verb_parser.allow_abbrev = False  # --max_new_token is a typo, not --max_new_tokens
        accept_dashes(verb_parser)
    return parser


def accept_dashes(parser: argparse.ArgumentParser) -> None:
    """Let every ``--snake_case`` option of ``parser`` also be spelled ``--kebab-case`` (a hidden alias)."""
    for action in parser._actions:
        for option in action.option_strings:
            alias = option.replace("_", "-")
            if option.startswith("--") and alias not in parser._option_string_actions:
                parser._option_string_actions[alias] = action


def entry() -> int:
    """The ``glassformer`` command's process (the console script and ``python -m glassformer``): :func:`main` on
    the command line, then objects frozen for the exit. Python's last collection at exit walks every object the
    process made, some 350,000 once torch's compiler stack is imported (every torch optimizer imports it): 0.6 s
    of a 19 s recipe on a 2-core AMD EPYC. Frozen, they are freed by the operating system instead; files are
    closed and exit handlers run as before. Library calls and tests call :func:`main`, which freezes nothing."""
    code = main()
    gc.freeze()
    return code


def main(argv: list[str] | None = None) -> int:
    """Run ``glassformer VERB ...`` (default ``sys.argv[1:]``); returns the exit status. Verbs that declare
    ``overrides`` (train, recipe) receive the unknown ``--key value`` words there; others reject them."""
    words = sys.argv[1:] if argv is None else list(argv)
    lang = cli_lang(words)  # --lang anywhere on the line, else the locale
    words = move_lang(words, VERBS_WITH_LANG)
    with _frame_lang(lang):
        parser = build_parser()
        if lang != "en":  # every text of --help in lang: the frame, the verbs' summaries and their own help
            parser.description, parser.epilog = cli_text("description", lang), cli_text("epilog", lang)
            verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            for choice in verbs._choices_actions:  # the verbs' one-line summaries
                choice.help = VERB_HELP_ZH.get(choice.dest, choice.help)
            translate_help(verbs)
        verb = next((word for word in words if not word.startswith("-")), None)
        close = difflib.get_close_matches(verb, VERBS, n=1, cutoff=0.6) if verb not in (None, *VERBS) else []
        if close:  # a mistyped verb (trian): argparse's refusal, and the verb it is closest to
            choices = ", ".join(map(repr, VERBS))
            refusal = argparse._("invalid choice: %(value)r (choose from %(choices)s)") % {"value": verb,
                                                                                          "choices": choices}
            parser.error(argparse._("argument %(argument_name)s: %(message)s") % {
                "argument_name": "VERB", "message": refusal} + cli_text("did_you_mean_verb", lang, verb=close[0]))
        glued = next((word for word in words if word.startswith("--") and word.endswith("=--")), None)
        if glued is not None:  # argparse drops a value "--" and passes [] on as the option's value
            parser.error(f"{glued}: '--' is not a value; give the option a real one")
        args, extra = parser.parse_known_args(words)
        if extra and not hasattr(args, "overrides"):  # only verbs that declare `overrides` take --key value pairs
            unknown = argparse._("unrecognized arguments: %s") % " ".join(extra)
            parser.error(unknown + _did_you_mean(parser, args.verb, extra, lang))
    if extra:
        args.overrides = [*args.overrides, *extra]
    args.ui_lang = lang  # the language of what the verb prints for a person (training/report.use_language)
    for stream in (sys.stdout, sys.stderr):  # a path name that is not UTF-8 prints as \udcXX, not a traceback
        # best effort: not a TextIOWrapper, or one over a stream that cannot say where it stands ("Illegal seek")
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.reconfigure(errors="backslashreplace")
    try:
        precheck = getattr(args, "precheck", None)
        if precheck is not None:  # argument errors (a key typo) are answered before torch loads
            precheck(args)
        from ..runtime import tune  # the speed policy, asked for by the command (never by the import)

        # inside the try: Ctrl-C while torch loads is one line too. A verb whose thread count follows the load
        # (train and recipe without num_threads, eval) says so: its threads spin even on a busy machine
        tune(follows_load=getattr(args, "follows_load", False) is True)
        from ..runtime import kernel_choice  # after tune: it loads torch, which reads the wait policy tune set

        # every verb reads the kernel choices kept in the user's cache; only bench (keeps_kernel_choices) writes
        # what it measures there (the other verbs measure what is missing in their own process)
        kernel_choice.use_cache(True, write=getattr(args, "keeps_kernel_choices", False) is True)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("glassformer: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`glassformer generate ... | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that flushing stdout at exit does not fail again
        return 141  # 128 + SIGPIPE, what a shell reports for a program killed by a closed pipe
    except (GlassformerError, OSError) as error:  # anything else is a bug: its traceback shows
        text = getattr(error, "text", None)  # a usage error of the command line (an unknown option): its language
        if lang != "en" and text is not None:
            print(cli_text("error", lang, prog="glassformer", message=cli_text(text[0], lang, **text[1])),
                  file=sys.stderr)
        else:
            print(f"glassformer: error: {one_line(error)}", file=sys.stderr)
        return 2


@contextlib.contextmanager
def _frame_lang(lang: str) -> Iterator[None]:
    """While parsing: argparse's own strings and the one-line error frame in ``lang`` (restored after)."""
    saved = argparse._
    if lang == "zh":
        argparse._, OneLineParser.lang = argparse_zh, "zh"
    try:
        yield
    finally:
        argparse._, OneLineParser.lang = saved, "en"


def _did_you_mean(parser: argparse.ArgumentParser, verb: str, extra: list[str], lang: str = "en") -> str:
    """`` (options are never abbreviated: did you mean --x?)`` for the first unknown option close to a known one,
    or the option that replaced a removed one (``commands.overrides.RENAMED_KEYS``) where the verb has it."""
    from .commands.overrides import RENAMED_KEYS

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[verb]
    known = [o for a in sub._actions for o in a.option_strings if o.startswith("--")]
    for old in (word.split("=", 1)[0] for word in extra if word.startswith("--")):
        new = "--" + RENAMED_KEYS.get(old[2:], "")
        if new in known:
            return cli_text("renamed_option", lang, old=old, new=new)
        close = difflib.get_close_matches(old, known, n=1, cutoff=0.8)
        if close:
            return cli_text("did_you_mean", lang, option=close[0])
    return ""


def one_line(error: BaseException) -> str:
    """The message of ``error`` on one line (an OSError as "strerror: 'file'")."""
    if isinstance(error, OSError) and not isinstance(error, GlassformerError) and error.strerror:
        names = [repr(str(n)) for n in (error.filename, error.filename2) if n is not None]
        text = f"{error.strerror}: {' -> '.join(names)}" if names else error.strerror
    else:
        text = str(error)
    text = " ".join(text.split()).encode("utf-8", "backslashreplace").decode("utf-8")  # a path name not UTF-8
    return text or type(error).__name__

