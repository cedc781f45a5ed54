"""Training an SAE on a model's activations: the config, the loop, dead features, resumable state.
Losses: "relu" ‖x − x̂‖² + λ·Σᵢ fᵢ‖W_dec[i]‖ with dead features resampled; "topk" ‖x − x̂‖² + α·AuxK (docs/sae.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...config import ModelConfig
from ...errors import BadFileError, GlassformerError
from ...io.budget import check_fits, forward_bytes, model_bytes, sae_bytes
from ...validate import option
from .activations import geometric_median
from .loop import STATE_FILE, ActivationTrainConfig, ActivationTrainer
from .model import KINDS, SAE_FILES, SparseAutoencoder, _write, estimate_input_scale, load_sae


@dataclass
class SAETrainConfig(ActivationTrainConfig):
    """An SAE training run (``glassformer sae`` reads it from YAML plus ``--key value`` overrides); its keys
    beside :class:`~glassformer.interpret.sae.loop.ActivationTrainConfig`'s (out_dir None:
    ``CHECKPOINT/../sae-HOOK``)."""

    WHAT = "SAE config"

    hook: str = ""  # the hook point, e.g. "blocks.2.hook_resid_post" (required)
    kind: str = option("topk", choices=KINDS)  # "topk" (Gao et al. 2024) or "relu" (L1, Towards Monosemanticity)
    d_sae: int | None = option(None, ge=1)  # features; None: expansion x d_in
    k: int = option(32, ge=1)  # topk: features per token
    l1_coefficient: float = option(2.0, ge=0.0)  # relu: λ
    l1_warmup_steps: int = option(0, ge=0)  # relu: λ ramps from 0 over these steps
    resample_every: int = option(500, ge=0)  # relu: resample dead features this often (0: never)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.hook:
            raise GlassformerError("hook is required: the hook point to read, e.g. --hook blocks.2.hook_resid_post")


def _check_sae_fits(config: SAETrainConfig, model: nn.Module | None, d_in: int, d_sae: int) -> None:
    """Refuse, before allocating, an SAE whose training cannot fit beside the model's forward passes."""
    need, held, rows = sae_bytes(d_in, d_sae, config.batch_size, config.buffer_size), 0, ""
    if isinstance(getattr(model, "config", None), ModelConfig):
        context = config.context or model.config.max_len
        # the final metrics encode a model batch's positions at once, the feature pages up to 4,096 at a time
        encoded = max(config.model_batch * context, min(4096, config.feature_windows * context))
        need = sae_bytes(d_in, d_sae, config.batch_size, config.buffer_size, encoded)
        need, held = need + forward_bytes(model.config, config.model_batch, context), model_bytes(model.config)
        rows = f", {encoded:,} positions encoded at once for the metrics and feature pages"
    width = f"d_sae={d_sae}" if config.d_sae else f"d_sae={d_sae} (expansion={config.expansion} x d_in)"
    check_fits(need, f"an SAE with {width} on d_in={d_in} (batch_size={config.batch_size}, "
                     f"buffer_size={config.buffer_size}{rows})", held=held)


class SAETrainer(ActivationTrainer):
    """Trains one SAE on one hook point of ``model``; :meth:`train` runs it, :meth:`resume` continues.
    ``source`` (default: ``config.data``) gives rows of width ``d_in`` from ``next_rows()``."""

    STATE_FORMAT = "glassformer-sae-state/1"
    STATE_NAMES = SAE_FILES | {STATE_FILE}
    SAME_ON_RESUME = (*ActivationTrainer.SAME_ON_RESUME, "hook", "d_sae")
    what, title, hint, error = "sae", "SAE", "lower lr (or l1_coefficient)", "sq_err"

    def __init__(self, config: SAETrainConfig, model: nn.Module | None = None, tokenizer: Any = None, *,
                 source: Any = None, d_in: int | None = None):
        super().__init__(config)
        if source is None:
            if model is None:
                raise GlassformerError("give a model (and tokenizer) or a source of activation rows")
            source = config.activation_source(model, tokenizer, config.hook, "train", config.seed)
            d_in = source.d_in
        if d_in is None:
            raise GlassformerError("d_in is needed with a source of rows")
        d_sae = config.d_sae or config.expansion * d_in
        _check_sae_fits(config, model, d_in, d_sae)
        self.sae = self._build(source, model, lambda: SparseAutoencoder(d_in=d_in, d_sae=d_sae, kind=config.kind,
                                                                        k=config.k, hook=config.hook))
        self.generator = torch.Generator().manual_seed(config.seed + 2)  # resampling's draws
        self.last_fired = torch.zeros(d_sae, dtype=torch.long)  # the step after which each feature last fired

    def initialize(self, rows: torch.Tensor) -> None:
        """Step 0: the input scale and the decoder bias (geometric median) from rows (N, d_in)."""
        with torch.no_grad():
            if self.config.normalize:
                self.sae.config.input_scale = estimate_input_scale(rows)
            self.sae.b_dec.copy_(geometric_median(rows[:8192] * self.sae.config.input_scale))

    def train_step(self, rows: torch.Tensor) -> dict[str, float]:
        """One optimiser step on (N, d_in) activation rows; returns the losses, L0 and dead fraction."""
        c, sae = self.config, self.sae
        x = rows * sae.config.input_scale  # (N, d_in), normalised units
        pre = sae.pre_activations(rows)  # (N, d_sae)
        f = sae.activate(pre)
        recon = f @ sae.W_dec + sae.b_dec
        # per token, summed over d_in, in normalised units: mse ≈ sq_err / (d_in · input_scale²)
        sq_err = (recon - x).pow(2).sum(-1).mean()
        loss, parts = sq_err, {"sq_err": float(sq_err.detach())}
        if c.kind == "relu":
            ramp = min(1.0, (self.step + 1) / c.l1_warmup_steps) if c.l1_warmup_steps else 1.0
            l1 = (f * sae.W_dec.norm(dim=1)).sum(-1).mean()
            loss = loss + c.l1_coefficient * ramp * l1
            parts["l1"] = float(l1.detach())
        else:
            dead = self.dead().to(pre.device)
            n_dead = int(dead.sum())
            if n_dead and c.aux_coefficient > 0:
                k_aux = min(c.aux_k or max(1, sae.config.d_in // 2), n_dead)
                values, indices = pre.masked_fill(~dead, float("-inf")).topk(k_aux, dim=-1)  # (N, k_aux)
                f_aux = torch.zeros_like(pre).scatter(-1, indices, torch.relu(values))
                error = (x - recon).detach()
                aux = (f_aux @ sae.W_dec - error).pow(2).sum(-1).mean()
                loss = loss + c.aux_coefficient * aux
                parts["aux"] = float(aux.detach())
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.step)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        sae.remove_parallel_gradient()
        self.optimizer.step()
        sae.normalize_decoder()
        self.step += 1
        self.last_fired[(f > 0).any(0).cpu()] = self.step
        if (c.kind == "relu" and c.resample_every and self.step % c.resample_every == 0
                and self.step <= 0.75 * c.steps):
            parts["resampled"] = float(self.resample())
        parts.update(loss=float(loss.detach()), l0=float((f > 0).float().sum(-1).mean()),
                     dead=float(self.dead().float().mean()))
        return parts

    @torch.no_grad()
    def resample(self) -> int:
        """Give every dead feature a new direction ("Towards Monosemanticity"'s resampling); returns how many."""
        dead = self.dead().nonzero().flatten().to(self.device)
        if len(dead) == 0:
            return 0
        sae = self.sae
        rows = self.buffer.peek()[:8192]
        x = rows * sae.config.input_scale
        error = (sae.activate(sae.pre_activations(rows)) @ sae.W_dec + sae.b_dec - x).pow(2).sum(-1)  # (N,)
        weights = (error.pow(2) if float(error.sum()) > 0 else torch.ones_like(error)).cpu()
        picked = torch.multinomial(weights, len(dead), replacement=len(dead) > len(rows), generator=self.generator)
        picked = picked.to(self.device)
        directions = x[picked] - sae.b_dec
        directions /= directions.norm(dim=1, keepdim=True).clamp_min(1e-8)
        alive = ~self.dead().to(self.device)
        enc_norm = float(sae.W_enc[:, alive].norm(dim=0).mean()) if alive.any() else 1.0
        sae.W_dec[dead] = directions
        sae.W_enc[:, dead] = directions.t() * enc_norm * 0.2
        sae.b_enc[dead] = 0.0
        for param, index in ((sae.W_dec, (dead,)), (sae.W_enc, (slice(None), dead)), (sae.b_enc, (dead,))):
            state = self.optimizer.state.get(param, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key][index] = 0.0
        self.last_fired[dead.cpu()] = self.step
        return len(dead)

    def module_state(self, folder: Path) -> dict[str, Any]:
        """The SAE as sae.safetensors + sae.json in ``folder``; the resampling generator."""
        _write(folder, self.sae, {"step": self.step})
        return {"generator": self.generator.get_state()}

    def load_module_state(self, folder: Path, state: dict[str, Any], file: Path) -> None:
        """The SAE and generator a state saved."""
        if "generator" not in state:
            raise BadFileError(f"{file}: the key 'generator' is missing")
        saved = load_sae(folder)
        if saved.config.d_sae != self.sae.config.d_sae or saved.config.d_in != self.sae.config.d_in:
            raise BadFileError(f"{str(folder)!r} holds an SAE of another size")
        self.sae.config.input_scale = saved.config.input_scale
        self.sae.load_state_dict(saved.state_dict())
        try:
            self.generator.set_state(state["generator"])
        except (RuntimeError, TypeError) as error:
            raise BadFileError(f"{file}: the generator state is not one glassformer saved ({error})") from None
