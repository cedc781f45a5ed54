"""JSON-lines records (``metrics.jsonl``, ``microscope.jsonl``), read back by ``loaders.read_records``."""

import json
import math
from typing import Any


def finite_or_null(value: Any) -> Any:
    """``value`` with every NaN or infinity (nested in lists, tuples and dicts too) as None: strict JSON's null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    return value


def record_line(record: dict[str, Any], compact: bool = False) -> str:
    """``record`` as one line of strict JSON, any NaN or infinity (nested too) as null; ``compact``: no spaces."""
    return json.dumps(finite_or_null(record), allow_nan=False, separators=(",", ":") if compact else None) + "\n"

