"""Training transcoders on a model's MLP inputs and outputs: the config, the loop, dead features, resumable
state (the SAE trainer's loop, :class:`~glassformer.interpret.sae.loop.ActivationTrainer`).

Loss: the normalised MSE of every layer's predicted MLP output, ‖y − ŷ‖² / Var(y), averaged over layers, plus
"relu": λ·Σ f·‖W_dec‖ (L1 weighted by what each feature writes); "jumprelu": λ·L0 with straight-through
gradients to the thresholds (Rajamanoharan et al. 2024); "topk": α·AuxK on dead features (Gao et al. 2024).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...config import ModelConfig
from ...errors import BadFileError, GlassformerError
from ...io.budget import FLOAT, check_fits, forward_bytes, model_bytes
from ...models import TransformerLM
from ...validate import option
from ..sae.loop import ActivationTrainConfig, ActivationTrainer, check_tensor
from .model import ACTIVATIONS, INPUT_HOOK, KINDS, OUTPUT_HOOK, TrainableTranscoders, TranscoderConfig, check_kind, step


@dataclass
class TranscoderTrainConfig(ActivationTrainConfig):
    """A transcoder training run (``glassformer transcoders`` reads it from YAML plus ``--key value`` overrides);
    its keys beside :class:`~glassformer.interpret.sae.loop.ActivationTrainConfig`'s (out_dir None:
    ``CHECKPOINT/../transcoders-KIND``; a row: a token with every layer's MLP input and output)."""

    WHAT = "transcoder config"

    kind: str = option("plt", choices=KINDS)  # "plt": one transcoder per MLP; "clt": cross-layer
    activation: str = option("jumprelu", choices=ACTIVATIONS)  # "jumprelu" (L0), "relu" (L1), "topk" (plt only)
    d_transcoder: int | None = option(None, ge=1)  # features per layer; None: expansion x d_model
    k: int = option(16, ge=1)  # topk: features per layer and token
    skip: bool = False  # plt: a learned linear skip connection W_skip (Paulo et al. 2025)
    sparsity_coefficient: float = option(2e-3, ge=0.0)  # λ of jumprelu's L0 or relu's L1 penalty
    sparsity_warmup_steps: int = option(0, ge=0)  # λ ramps from 0 over these steps
    bandwidth: float = option(0.05, gt=0.0)  # jumprelu: ε of the straight-through estimators
    threshold: float = option(1.0, ge=0.0)  # jumprelu: every threshold's start (pre-activations start ~N(0, 1))
    buffer_size: int = 16384  # tokens mixed in the shuffling buffer
    feature_windows: int = option(64, ge=0)  # windows read for each layer's feature page (0: no pages)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_kind(self.kind, self.activation, self.skip)


def mlp_hooks(model: nn.Module) -> tuple[list[str], list[str]]:
    """The hook points transcoders of ``model`` read and predict: (every block's MLP input
    ``blocks.i.ln2.hook_normalized``, every block's ``blocks.i.hook_mlp_out``). A GlassformerError for a model
    without MLPs, a post-norm one, or an EncoderDecoder."""
    if not isinstance(model, TransformerLM):
        raise GlassformerError(f"transcoders are trained on a glassformer TransformerLM, got {type(model).__name__}")
    c = model.config
    if c.attn_only or c.n_layers == 0:
        raise GlassformerError("this model has no MLPs (attn_only or no blocks): there is nothing for "
                               "transcoders to replace")
    if not c.norm_first:
        raise GlassformerError("transcoders read the normed input of each MLP (ln2.hook_normalized) of a pre-norm "
                               "block; this model is post-norm (norm_first: false)")
    return ([f"blocks.{i}.{INPUT_HOOK}" for i in range(c.n_layers)],
            [f"blocks.{i}.{OUTPUT_HOOK}" for i in range(c.n_layers)])


def transcoder_bytes(config: TranscoderTrainConfig, n_layers: int, d_model: int, d_transcoder: int) -> int:
    """At least what training the transcoders takes: weights with gradients and Adam's two moments, the
    buffer of (MLP input, MLP output) rows, and a step's features, pre-activations and their gradients."""
    spans = n_layers * (n_layers + 1) // 2 if config.kind == "clt" else n_layers
    weights = n_layers * d_transcoder * d_model + spans * d_transcoder * d_model + n_layers * (2 * d_transcoder
                                                                                                + d_model)
    if config.skip:
        weights += n_layers * d_model * d_model
    rows = (config.buffer_size + 2 * config.batch_size) * 2 * n_layers * d_model
    step_ = 6 * config.batch_size * n_layers * d_transcoder
    return (4 * weights + rows + step_) * FLOAT


def _check_transcoders_fit(config: TranscoderTrainConfig, model: nn.Module | None, n_layers: int, d_model: int,
                           d_transcoder: int) -> None:
    """Refuse, before allocating, transcoders whose training cannot fit beside the model's forward passes."""
    need, held = transcoder_bytes(config, n_layers, d_model, d_transcoder), 0
    if isinstance(getattr(model, "config", None), ModelConfig):
        context = config.context or model.config.max_len
        need, held = need + forward_bytes(model.config, config.model_batch, context), model_bytes(model.config)
    width = f"d_transcoder={d_transcoder}" if config.d_transcoder else \
        f"d_transcoder={d_transcoder} (expansion={config.expansion} x d_model)"
    check_fits(need, f"{config.kind} transcoders with {width} on {n_layers} layers of d_model={d_model} "
                     f"(batch_size={config.batch_size}, buffer_size={config.buffer_size})", held=held)


class TranscoderTrainer(ActivationTrainer):
    """Trains transcoders for every MLP of ``model``; :meth:`train` runs it, :meth:`resume` continues.
    ``source`` (default: ``config.data`` through the model) gives rows (N, 2·n_layers, d_model): every layer's
    MLP input, then every layer's MLP output."""

    STATE_FORMAT = "glassformer-transcoder-state/1"
    SAME_ON_RESUME = (*ActivationTrainer.SAME_ON_RESUME, "activation", "d_transcoder", "skip")
    what, title, hint, error = "transcoders", "transcoders", "lower lr (or sparsity_coefficient)", "nmse"

    def __init__(self, config: TranscoderTrainConfig, model: nn.Module | None = None, tokenizer: Any = None, *,
                 source: Any = None, n_layers: int | None = None, d_model: int | None = None):
        super().__init__(config)
        if source is None:
            if model is None:
                raise GlassformerError("give a model (and tokenizer) or a source of activation rows")
            inputs, outputs = mlp_hooks(model)
            source = config.activation_source(model, tokenizer, inputs + outputs, "train", config.seed)
            n_layers, d_model = len(inputs), source.d_in
        if n_layers is None or d_model is None:
            raise GlassformerError("n_layers and d_model are needed with a source of rows")
        d_transcoder = config.d_transcoder or config.expansion * d_model
        _check_transcoders_fit(config, model, n_layers, d_model, d_transcoder)
        shape = TranscoderConfig(n_layers=n_layers, d_model=d_model, d_transcoder=d_transcoder, kind=config.kind,
                                 activation=config.activation, k=min(config.k, d_transcoder), skip=config.skip)
        self.transcoders = tc = self._build(source, model, lambda: TrainableTranscoders(shape))
        tc.bandwidth = config.bandwidth
        if tc.threshold is not None:
            with torch.no_grad():
                tc.threshold.fill_(config.threshold)
        self.n_layers = n_layers
        self.variance = torch.ones(n_layers, device=self.device)  # Var(y) per layer in training units (step 0)
        self.last_fired = torch.zeros(n_layers, d_transcoder, dtype=torch.long)  # the step after which each fired

    def split(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows (N, 2L, d) -> (MLP inputs (N, L, d), MLP outputs (N, L, d))."""
        if rows.dim() != 3 or rows.shape[1] != 2 * self.n_layers:
            raise GlassformerError(f"transcoder rows must be (N, 2 x n_layers={2 * self.n_layers}, d_model), got "
                                   f"{tuple(rows.shape)}")
        return rows[:, :self.n_layers], rows[:, self.n_layers:]

    def initialize(self, rows: torch.Tensor) -> None:
        """Step 0: input and output scales (average norm √d), b_dec the outputs' mean, and each layer's
        output variance (the normalised MSE's denominator), from rows (N, 2L, d)."""
        x, y = self.split(rows[:8192].to(self.device))
        tc, d = self.transcoders, x.shape[-1]
        with torch.no_grad():
            if self.config.normalize:
                for scale, acts in ((tc.input_scale, x), (tc.output_scale, y)):
                    norms = acts.norm(dim=-1).mean(0)  # (L,)
                    scale.copy_(torch.where(norms > 0, d ** 0.5 / norms.clamp_min(1e-30), torch.ones_like(norms)))
            y = y * tc.output_scale[:, None]
            tc.b_dec.copy_(y.mean(0))
            variance = (y - y.mean(0)).pow(2).sum(-1).mean(0)  # (L,)
            self.variance = torch.where(variance > 0, variance, torch.ones_like(variance))

    def train_step(self, rows: torch.Tensor) -> dict[str, float]:
        """One optimiser step on rows (N, 2L, d); returns the losses, L0, dead fraction, worst layer's NMSE."""
        c, tc = self.config, self.transcoders
        x, y = self.split(rows.to(self.device))
        scale = tc.output_scale[:, None]
        pre = tc.pre_activations(x)  # (N, L, F)
        f = tc.activate(pre)
        error = (tc.decode(f, x) - y) * scale  # (N, L, d), training units
        nmse = error.pow(2).sum(-1).mean(0) / self.variance  # (L,)
        loss = nmse.mean()
        parts = {"nmse": float(loss.detach()), "nmse_max": float(nmse.detach().max())}
        ramp = min(1.0, (self.step + 1) / c.sparsity_warmup_steps) if c.sparsity_warmup_steps else 1.0
        if c.activation == "relu":
            sparsity = (f * tc.decoder_norms()).sum(-1).mean()
            loss = loss + c.sparsity_coefficient * ramp * sparsity
            parts["l1"] = float(sparsity.detach())
        elif c.activation == "jumprelu":
            sparsity = step(pre, tc.threshold, tc.bandwidth).sum(-1).mean()
            loss = loss + c.sparsity_coefficient * ramp * sparsity
        else:
            loss = loss + self._aux_loss(pre, error)
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.step)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if tc.threshold is not None:
            with torch.no_grad():
                tc.threshold.clamp_(min=0.0)  # a negative threshold would let negative pre-activations through
        self.step += 1
        active = f.detach() != 0
        self.last_fired[active.any(0).cpu()] = self.step
        parts.update(loss=float(loss.detach()), l0=float(active.float().sum(-1).mean()),
                     dead=float(self.dead().float().mean()))
        return parts

    def _aux_loss(self, pre: torch.Tensor, error: torch.Tensor) -> torch.Tensor:
        """TopK's AuxK: the dead features' top ``aux_k`` pre-activations predict what the live ones missed."""
        c, tc = self.config, self.transcoders
        dead = self.dead().to(pre.device)  # (L, F)
        n_dead = int(dead.sum(-1).max())  # a layer with fewer dead features gets -inf, so zeros, for the rest
        if n_dead == 0 or c.aux_coefficient == 0:
            return pre.new_zeros(())
        k_aux = min(c.aux_k or max(1, tc.config.d_model // 2), n_dead)
        values, index = pre.masked_fill(~dead, float("-inf")).topk(k_aux, dim=-1)  # (N, L, k_aux)
        f_aux = torch.zeros_like(pre).scatter(-1, index, torch.relu(values))
        written = tc.decode(f_aux, bias=False) * tc.output_scale[:, None]
        aux = (written + error.detach()).pow(2).sum(-1).mean(0) / self.variance  # the part error leaves, per layer
        return c.aux_coefficient * aux.mean()

    def module_state(self, folder: Path) -> dict[str, Any]:
        """The transcoders' tensors (unfolded: scales apart) and each layer's variance."""
        return {"transcoders": {k: v.detach().cpu() for k, v in self.transcoders.state_dict().items()},
                "variance": self.variance.cpu()}

    def load_module_state(self, folder: Path, state: dict[str, Any], file: Path) -> None:
        """The transcoders and variances a state saved, each checked against this run's shapes."""
        saved, ours = state.get("transcoders"), self.transcoders.state_dict()
        if not isinstance(saved, dict) or set(saved) != set(ours):
            raise BadFileError(f"{file}: 'transcoders' must hold the tensors {sorted(ours)}")
        for name, tensor in saved.items():
            check_tensor(tensor, ours[name].shape, ours[name].dtype, file,
                         f"transcoders tensor {name!r} must be {ours[name].dtype}")
        variance = check_tensor(state.get("variance"), (self.n_layers,), torch.float32, file,
                                "variance must be a float32 tensor")
        self.transcoders.load_state_dict(saved)
        self.variance = variance.to(self.device)
