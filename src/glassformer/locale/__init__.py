"""The message catalogues as JSON data, as gettext keeps them: ``cli.json`` (the command line's Chinese),
``report.{en,zh}.json`` (the demo's steps, the reports' labels), ``train.{en,zh}.json`` (the training report)."""

import json
from functools import cache
from pathlib import Path
from typing import Any


@cache
def catalogue(name: str) -> Any:
    """The parsed catalogue ``<name>.json`` of this folder (read once per process)."""
    return json.loads((Path(__file__).parent / f"{name}.json").read_text(encoding="utf-8"))
