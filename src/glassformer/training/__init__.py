"""Training: objectives, optimizers and schedules, the Trainer loop, checkpoints and torch.distributed."""

from .checkpoint import Checkpoint, load, load_checkpoint, load_state_file, save_checkpoint, unwrap
from .config import TrainConfig, apply_overrides
from .distributed import DistInfo, init_distributed
from .loop import Trainer, TrainingDiverged, evaluate
from .objectives import LossParts, batch_loss, check_model_for, forward_logits, token_loss
from .optim import SCHEDULES, lr_at, make_optimizer, param_groups
from .setup import Run, prepare_run

__all__ = [
    "Checkpoint", "load", "load_checkpoint", "load_state_file", "save_checkpoint", "unwrap", "TrainConfig",
    "apply_overrides", "DistInfo", "init_distributed", "Trainer", "TrainingDiverged", "evaluate",
    "LossParts", "batch_loss", "check_model_for", "forward_logits", "token_loss", "SCHEDULES", "lr_at",
    "make_optimizer", "param_groups", "Run", "prepare_run",
]
