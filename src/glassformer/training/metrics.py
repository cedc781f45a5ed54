"""``metrics.jsonl``: one strict-JSON record per log line and per evaluation of a training run, written
as it goes and read back by a resumed run and by the run report."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import BadFileError

METRICS = "metrics.jsonl"


def metrics_line(record: dict[str, Any]) -> str:
    """``record`` as one line of strict JSON: a NaN or infinite number (which JSON cannot hold) is
    written as null."""
    clean = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}
    return json.dumps(clean, allow_nan=False) + "\n"


def read_metrics(file: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (null read back as NaN). A torn last line, what a process
    killed while writing it leaves, is dropped; any other line that is not a JSON record is an error.

    Raises:
        BadFileError naming the file and the line.
    """
    file = Path(file)
    if not file.is_file():
        return []
    lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):
                break  # torn last line: the record was never complete
            raise BadFileError(f"{str(file)!r} line {number} is not valid JSON ({error.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise BadFileError(f"{str(file)!r} line {number} is not a record with an integer 'step'")
        records.append({k: math.nan if v is None else v for k, v in record.items()})
    return records
