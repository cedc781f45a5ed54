"""The message catalogues as JSON data, as gettext keeps them: ``cli.json`` (the command line's Chinese),
``report.{en,zh}.json`` (the demo's steps, the reports' labels), ``train.{en,zh}.json`` (the training report);
and the locale's language. Torch-free: the command line reads it before torch loads."""

import json
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any


@cache
def catalogue(name: str) -> Any:
    """The parsed catalogue ``<name>.json`` of this folder (read once per process)."""
    return json.loads((Path(__file__).parent / f"{name}.json").read_text(encoding="utf-8"))


def locale_lang(environ: Mapping[str, str] | None = None) -> str:
    """``"zh"`` when the locale (``LC_ALL``, then ``LC_MESSAGES``, then ``LANG``: the first one set decides, as in
    POSIX) is Chinese, else ``"en"``."""
    env = os.environ if environ is None else environ
    value = next((env[name] for name in ("LC_ALL", "LC_MESSAGES", "LANG") if env.get(name)), "")
    return "zh" if value.lower().startswith("zh") else "en"
