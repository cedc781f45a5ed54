"""Which device a run uses: the one owner of that choice (training, the bench and the commands ask here)."""

import torch

from ..errors import GlassformerError
from ..io.checks import check_device_name


def pick_device(device: str, local_rank: int = 0) -> torch.device:
    """The ``torch.device`` named by ``device``, checked against what torch sees (an error names it).

    ``device``: "auto" (this process's GPU if any, else the CPU), "cpu", "cuda" (``cuda:<local_rank>``,
    one GPU per torchrun process) or "cuda:N".
    """
    if check_device_name(device) == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise GlassformerError(f"device={device!r} but torch sees no CUDA device")
    chosen = torch.device(device)
    if chosen.type == "cuda" and chosen.index is None:
        chosen = torch.device("cuda", local_rank)
    if chosen.type == "cuda" and chosen.index >= torch.cuda.device_count():
        raise GlassformerError(f"device={device!r} but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return chosen
