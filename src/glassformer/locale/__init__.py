"""The message catalogues: every translated text (and the report's English labels) as JSON data.

``cli.json`` holds the command line's Chinese (argparse's frame, each verb's description, options, epilogs);
``report.en.json`` / ``report.zh.json`` the demo's steps and the reports' labels, the same keys in each.
Catalogues are data, as gettext's are: a translator edits them without touching code. Standard library only.
"""

import json
from functools import cache
from pathlib import Path
from typing import Any


@cache
def catalogue(name: str) -> Any:
    """The parsed catalogue ``<name>.json`` of this folder (read once per process)."""
    return json.loads((Path(__file__).parent / f"{name}.json").read_text(encoding="utf-8"))
