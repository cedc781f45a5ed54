"""JSON-lines records (``metrics.jsonl``, ``microscope.jsonl``): one strict-JSON line per record (read
back by :func:`glassformer.loaders.read_records`, a torn last line dropped)."""

from __future__ import annotations

import json
import math
from typing import Any


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

