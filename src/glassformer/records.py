"""JSON-lines records (``metrics.jsonl``, ``microscope.jsonl``): one strict-JSON line per record, read
back with a torn last line (a process killed while writing it) dropped."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .errors import BadFileError


def record_line(record: dict[str, Any], compact: bool = False) -> str:
    """``record`` as one line of strict JSON: a NaN or infinite number, which JSON cannot hold, anywhere
    in it (nested lists and dicts too) is written as null. ``compact`` leaves out the spaces."""
    def clean(value: Any) -> Any:
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value
    return json.dumps(clean(record), allow_nan=False, separators=(",", ":") if compact else None) + "\n"


def read_records(file: str | Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file with an integer ``step`` in each ([] when there is no file).

    Raises:
        BadFileError naming the file and the line, for any bad line but a torn last one.
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
        records.append(record)
    return records
