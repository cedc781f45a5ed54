"""JSON-lines records (``metrics.jsonl``, ``microscope.jsonl``), read back by ``loaders.read_records``."""

import json
import math
from typing import Any


def record_line(record: dict[str, Any], compact: bool = False) -> str:
    """``record`` as one line of strict JSON, any NaN or infinity (nested too) as null; ``compact``: no spaces."""
    def clean(value: Any) -> Any:
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value
    return json.dumps(clean(record), allow_nan=False, separators=(",", ":") if compact else None) + "\n"

