"""TrainConfig: every training choice in one validated dataclass, read from YAML plus (key, value) overrides."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..config import ModelConfig
from ..data.batches import OBJECTIVES
from ..errors import ArgumentTypeError, GlassformerError
from ..io.budget import parse_size
from ..io.checks import MAX_SEED, check_device_name, check_known_keys, is_number, shown
from ..io.loaders import expand_home
from ..io.loaders import load_yaml as read_yaml  # the YAML document of a file ({} when empty), safe and bounded
from ..runtime.precision import PRECISIONS
from ..tokenizers import KINDS, check_specials
from ..validate import CheckedConfig, check_fields, coerced, option
from .objectives import OBJECTIVE_ATTN
from .optim import OPTIMIZERS, SCHEDULES
from .series import parse_keep
from .trackers import parse_log

PARALLEL = ("ddp", "fsdp")  # how a torchrun run spreads the model over processes
Overrides = Mapping[str, Any] | Iterable[tuple[str, Any]]  # {"lr": 3e-4} or [("model.n_layers", 2), ...]
# the keys that name files or folders (a leading ``~`` is the home folder)
PATH_FIELDS = ("data", "val_data", "src", "tgt", "pairs", "val_src", "val_tgt", "val_pairs", "out_dir", "cache_dir")


@dataclass
class TrainConfig(CheckedConfig):
    """A training run, checked when made (:meth:`validate` checks again after a change; :meth:`to_dict`: what
    ``training.json`` of a checkpoint holds): a pure value, it reads
    no disk and asks for no package (:func:`~glassformer.training.setup.check_run` does). ``model`` holds
    ModelConfig fields and optionally a ``preset``; vocab_size, max_len and attn/arch are filled in."""

    objective: str = option("clm", choices=OBJECTIVES)  # "clm" (GPT), "mlm" (BERT), "prefix", "seq2seq"
    data: list[str] = option(factory=list)  # clm/mlm/prefix: text files, folders, JSON lines, parquet or SHARDS
    val_data: list[str] = option(factory=list)  # validation text; empty: the last val_fraction of data
    val_fraction: float = option(0.1, ge=0.0, lt=1.0)  # nanoGPT: first 90% train, last 10% val
    src: str | None = None  # seq2seq: source file (one sentence a line; plain or .gz)
    tgt: str | None = None  # seq2seq: target file, parallel to src
    pairs: str | None = None  # seq2seq: a .tsv or .jsonl file of pairs instead of src/tgt
    val_src: str | None = None
    val_tgt: str | None = None
    val_pairs: str | None = None
    tokenizer: str = option("char", choices=KINDS)  # "char", "byte" or "bpe"
    tokenizer_vocab_size: int | None = option(None, ge=1)  # bpe's vocabulary size
    specials: list[str] | None = None  # special tokens; None: those the objective needs
    model: dict = option(factory=dict)  # ModelConfig fields (and "preset")
    block_size: int = option(64, ge=1)  # tokens per training window (seq2seq: longest source/target)
    batch_size: int = option(12, ge=1)  # sequences per optimiser step, over all processes and accumulation steps
    grad_accum: int = option(1, ge=1)  # micro-batches per optimiser step (per process)
    max_steps: int = option(2000, ge=1)
    lr: float = option(1e-3, gt=0.0)  # peak learning rate
    min_lr: float = option(1e-4, ge=0.0)  # cosine schedule's floor
    warmup_steps: int = option(100, ge=0)
    lr_schedule: str = option("cosine", choices=SCHEDULES)  # "cosine", "noam", "constant" or "wsd"
    lr_decay_steps: int | None = option(None, ge=0)  # end of the cosine or wsd decay; None: max_steps
    cooldown: float = option(0.2, gt=0.0, le=1.0)  # wsd: the fraction of the steps after warmup spent decaying
    optimizer: str = option("adamw", choices=OPTIMIZERS)  # "muon": Muon on hidden matrices, AdamW on the rest
    weight_decay: float = option(0.1, ge=0.0)  # on weight matrices only
    beta1: float = option(0.9, ge=0.0, lt=1.0)
    beta2: float = option(0.99, ge=0.0, lt=1.0)
    eps: float = option(1e-8, gt=0.0)
    grad_clip: float = option(1.0, ge=0.0)  # max global gradient norm; 0 = off
    label_smoothing: float = option(0.0, ge=0.0, lt=1.0)
    mask_prob: float = option(0.15, gt=0.0, le=1.0)  # mlm: fraction of tokens chosen
    eval_every: int = option(250, ge=0)  # steps between evaluations (and checkpoints); 0 = only at the end
    eval_batches: int | None = option(None, ge=0)  # None: the whole validation split
    eval_batch_size: int = option(64, ge=1)
    log_every: int = option(10, ge=1)
    seed: int = option(1337, ge=0, le=MAX_SEED)
    device: str = "auto"  # "auto", "cpu", "cuda", "cuda:1", ...
    precision: str = option("float32", choices=PRECISIONS)  # "auto", "float32", "bfloat16", "float16"
    compile: bool = False  # torch.compile the model
    parallel: str = option("ddp", choices=PARALLEL)  # under torchrun: "ddp" or "fsdp" (FSDP2's fully_shard)
    fused_adamw: bool | None = None  # None: the fused AdamW kernel where available
    # torch CPU threads, set by the Trainer when given (>= 1: asked for, process-wide as torch.set_num_threads);
    # None or 0: the Trainer leaves threads alone (glassformer.runtime.tune or the command decides: docs/training.md)
    num_threads: int | None = option(None, ge=0, le=4096)
    out_dir: str = "out"
    resume: bool = False  # continue from out_dir/last when it exists
    cache_dir: str | None = None  # memory-mapped token cache; None: out_dir/cache
    progress: bool = True  # a progress bar on a terminal, else a line per log_every on stderr; false: quiet
    log: str = "none"  # trackers: "tensorboard", "wandb" (offline), "none"; both: "tensorboard,wandb"
    max_memory: str | None = None  # memory the run may use ("8GB", "512MiB", bytes); None: what the machine has free
    watch: dict = option(factory=dict)  # the training microscope (training/microscope.py); {}: off
    keep_checkpoints: str = "none"  # a series kept beside last and best, for replay: "log" or N (every N steps)

    def __post_init__(self) -> None:
        for name in ("max_memory", "keep_checkpoints"):  # YAML reads 8000000000 and 100 as numbers: their text
            if is_number(getattr(self, name)):
                setattr(self, name, str(getattr(self, name)))
        check_fields(self, coerce=True)  # "3e-4" from the command line becomes 3e-4
        for name in PATH_FIELDS:  # out_dir: ~/x is the home folder's x, not a folder named "~"
            setattr(self, name, expand_home(getattr(self, name)))
        if self.max_memory is not None:
            parse_size(self.max_memory, "max_memory")
        self.keep_checkpoints = parse_keep(self.keep_checkpoints)
        if self.batch_size % self.grad_accum:
            raise GlassformerError(f"batch_size={self.batch_size} must be divisible by grad_accum={self.grad_accum}")
        if self.objective == "prefix" and self.block_size < 2:  # a prefix of >= 1 token, then >= 1 target
            raise GlassformerError(f"block_size must be >= 2 for objective 'prefix', got {self.block_size}")
        if self.tokenizer == "bpe" and self.tokenizer_vocab_size is None:
            raise GlassformerError("tokenizer 'bpe' needs tokenizer_vocab_size (e.g. 1024)")
        if self.specials is not None:
            check_specials(self.specials)
        if "vocab_size" in self.model:
            raise GlassformerError("model.vocab_size is set by the tokenizer; remove it from the config")
        types = {f.name: f.type for f in fields(ModelConfig) if f.name != "vocab_size"}
        check_known_keys(self.model, {*types, "preset"}, "model config")  # "--model.norm_eps 1e-6": a string
        self.model = {k: v if k == "preset" else coerced(f"model.{k}", types[k], v) for k, v in self.model.items()}
        try:  # every model field now, not after the data is read and the tokenizer trained
            self.model_config(vocab_size=1)
        except GlassformerError as error:
            raise type(error)(f"model: {error}") from None
        if self.watch:
            from .microscope import WatchConfig
            watch = WatchConfig.from_dict(self.watch)
            self.watch = {key: getattr(watch, key) for key in self.watch}  # typed: training.json holds numbers
        check_device_name(self.device)
        parse_log(self.log, installed=False)  # known names; their libraries: training.setup.check_run

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Build and check; an unknown key is a ValueError naming it."""
        if isinstance(data, dict) and "recipe" in data:
            raise GlassformerError("this is a recipe config (it has a 'recipe:' section): run it with "
                                   "`glassformer recipe FILE`")
        return super().from_dict(data)

    @classmethod
    def from_yaml(cls, path: str | Path | None = None, overrides: Overrides = ()) -> TrainConfig:
        """Read a YAML file (None: the defaults), apply ``overrides`` (:func:`apply_overrides`) and validate."""
        data = read_yaml(path, "config file") if path is not None else {}
        if not isinstance(data, dict):
            raise GlassformerError(f"config file {str(path)!r} must hold a mapping of keys to values")
        return cls.from_dict(apply_overrides(data, overrides))

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The ModelConfig this run trains, given the tokenizer's vocabulary size."""
        fields_ = dict(self.model)
        preset = fields_.pop("preset", None)
        base: dict[str, Any] = {"max_len": self.block_size}
        if self.objective == "seq2seq":
            base["arch"] = "encoder-decoder"
        else:
            base["attn"] = OBJECTIVE_ATTN[self.objective]
        if self.objective == "clm" and not preset:
            base.update(CLM_DEFAULTS)  # the default causal LM is GPT-2's shape: it converts to Hugging Face
        merged = {**base, **fields_, "vocab_size": vocab_size}
        return ModelConfig.preset(preset, **merged) if preset else ModelConfig.from_dict(merged)

    def needed_specials(self) -> list[str]:
        """The special tokens of the tokenizer: ``specials`` if given, else what the objective needs."""
        if self.specials is not None:
            return list(self.specials)
        return {"mlm": ["pad", "mask"], "seq2seq": ["pad", "bos", "eos"]}.get(self.objective, [])


# A causal LM's model fields without a preset: GPT-2's, so `glassformer convert` exports it as GPT-2.
CLM_DEFAULTS: dict[str, Any] = {"pos": "learned", "scale_embeddings": False, "init_std": 0.02}


def apply_overrides(data: dict[str, Any], overrides: Overrides,
                    sections: tuple[str, ...] = ("model", "watch")) -> dict[str, Any]:
    """A copy of ``data`` with each (key, value) of ``overrides`` set, in order; ``SECTION.name`` with
    SECTION in ``sections`` sets a nested key (``model.n_layers``)."""
    for name in sections:
        if not isinstance(data.get(name) or {}, Mapping):
            raise ArgumentTypeError(f"{name} must be a mapping of its keys to values, got {shown(data[name])}")
    out = {**data, **{name: dict(data.get(name) or {}) for name in sections}}
    items = overrides.items() if isinstance(overrides, Mapping) else overrides
    for key, value in items:
        head, dot, rest = key.partition(".")
        if dot and head in sections:
            out[head][rest] = value
        else:
            out[key] = value
    return out
