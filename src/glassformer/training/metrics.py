"""``metrics.jsonl``: one strict-JSON record per log line and per evaluation of a training run."""

import math
from pathlib import Path
from typing import Any

from ..io.loaders import read_records
from ..io.records import record_line as metrics_line  # noqa: F401 (a record as one line of strict JSON, NaN: null)

METRICS = "metrics.jsonl"


def read_metrics(file: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (null read back as NaN; a torn last line dropped); else BadFileError."""
    return [{k: math.nan if v is None else v for k, v in record.items()} for record in read_records(file, numbers=True)]
