"""Training: objectives, AdamW and schedules, the Trainer loop, checkpoints and torch.distributed."""

from .checkpoint import Checkpoint, load, load_checkpoint, load_state_file, save_checkpoint, unwrap
from .config import TrainConfig, parse_overrides
from .distributed import DistInfo, init_distributed
from .loop import Trainer, TrainingDiverged, evaluate, plot_losses
from .objectives import LossParts, batch_loss, check_model_for, forward_logits, token_loss
from .optim import SCHEDULES, lr_at, make_optimizer, param_groups
from .setup import Run, prepare

__all__ = [
    "Checkpoint", "load", "load_checkpoint", "load_state_file", "save_checkpoint", "unwrap", "TrainConfig",
    "parse_overrides", "DistInfo", "init_distributed", "Trainer", "TrainingDiverged", "evaluate", "plot_losses",
    "LossParts", "batch_loss", "check_model_for", "forward_logits", "token_loss", "SCHEDULES", "lr_at",
    "make_optimizer", "param_groups", "Run", "prepare",
]
