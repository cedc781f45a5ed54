"""Lenses: what the residual stream predicts after each layer (logit lens), and how much each head and
MLP writes into one token's logit (direct logit attribution). Both read the stream through the model's own
final norm and output layer, so the last layer's lens is the logits and the attributions add up to the logit.
"""

from typing import Any, NamedTuple

import torch
from torch import nn

from ..errors import ArgumentTypeError, GlassformerError
from ..io.checks import check_int, check_token_id, shown
from ..models import EncoderDecoder, TransformerLM
from ..models.inputs import check_token_ids
from ..nn.norms import RMSNorm
from .hooks import ActivationCache, run_with_cache
from .points import act_name


def _output_stack(model: nn.Module) -> tuple[str, nn.Module, nn.ModuleList]:
    """(stack name, final norm, blocks) of the stack that feeds the output layer."""
    if isinstance(model, TransformerLM):
        return "blocks", model.norm_f, model.blocks
    if isinstance(model, EncoderDecoder):
        return "decoder_blocks", model.dec_norm, model.dec
    raise ArgumentTypeError(f"model must be a glassformer TransformerLM or EncoderDecoder, got {type(model).__name__}")


def residual_names(model: nn.Module) -> list[str]:
    """The residual stream's hook names, bottom to top: each block's ``hook_resid_pre``, then the last
    block's ``hook_resid_post`` (the decoder's, in an EncoderDecoder)."""
    stack, _, blocks = _output_stack(model)
    return [act_name("resid_pre", i, stack) for i in range(len(blocks))] + \
        [act_name("resid_post", len(blocks) - 1, stack)]


def _cached(model: nn.Module, inputs: tuple, cache: ActivationCache | None, names: list[str],
            kwargs: dict[str, Any]) -> ActivationCache:
    """``cache`` when it holds ``names``; else a fresh run of ``inputs`` caching them."""
    if cache is None:
        if not inputs:
            raise ArgumentTypeError("give the model's inputs, or cache= from run_with_cache")
        _, cache = run_with_cache(model, *inputs, names=names, **kwargs)
    missing = [name for name in names if name not in cache]
    if missing:
        raise GlassformerError(f"the cache lacks {', '.join(missing[:3])}{' ...' * (len(missing) > 3)}: "
                               "run_with_cache(model, ...) without names= keeps every point")
    return cache


class TopTokens(NamedTuple):
    """The ``k`` most likely tokens at each layer and position: probs and ids, (L + 1, B, T, k) each."""

    probs: torch.Tensor
    ids: torch.Tensor


@torch.no_grad()
def logit_lens(model: nn.Module, *inputs: torch.Tensor, cache: ActivationCache | None = None,
               top_k: int | None = None, **kwargs: Any) -> torch.Tensor | TopTokens:
    """Read the residual stream entering each block, and leaving the last, through the final norm and the
    output layer (of an EncoderDecoder: its decoder): (L + 1, B, T, V) logits, the last the model's own; with
    ``top_k``, a :class:`TopTokens`. ``inputs``: the model's, when no ``cache`` is given."""
    names = residual_names(model)
    cache = _cached(model, inputs, cache, names, kwargs)
    _, norm, _ = _output_stack(model)
    if top_k is None:
        return torch.stack([model.logits(norm(cache[name])) for name in names])
    tops = [model.logits(norm(cache[name])).float().softmax(-1).topk(top_k, dim=-1) for name in names]
    return TopTokens(torch.stack([t.values for t in tops]), torch.stack([t.indices for t in tops]))


class LogitAttribution(NamedTuple):
    """Each part's direct share of one token's logit at one position; all parts add up to ``logit`` (B,).

    Attributes: embed (B,); heads (B, L, h); attn_bias (B, L) each output projection's bias; mlp (B, L)
    or None; cross_heads (B, L, h), cross_bias (B, L): a decoder's cross-attention, else None; bias (B,)
    the final norm's and the output layer's.
    """

    embed: torch.Tensor
    heads: torch.Tensor
    attn_bias: torch.Tensor
    mlp: torch.Tensor | None
    cross_heads: torch.Tensor | None
    cross_bias: torch.Tensor | None
    bias: torch.Tensor
    logit: torch.Tensor

    def total(self) -> torch.Tensor:
        """(B,) the sum of every part: ``logit`` up to float rounding."""
        parts = [self.embed, self.heads.sum((1, 2)), self.attn_bias.sum(1), self.bias]
        optional = (self.mlp, self.cross_heads, self.cross_bias)
        parts += [p.sum(tuple(range(1, p.dim()))) for p in optional if p is not None]
        return sum(parts)


@torch.no_grad()
def direct_logit_attribution(model: nn.Module, *inputs: torch.Tensor, token: int | torch.Tensor,
                             position: int = -1, cache: ActivationCache | None = None,
                             **kwargs: Any) -> LogitAttribution:
    """Split the logit of ``token`` (an id, or (B,) ids) at ``position`` into what each head, MLP and the
    embeddings wrote into a pre-norm model's stream (the final norm's scale frozen, so each share is exact):
    a float32 :class:`LogitAttribution`. ``inputs``: the model's, when no ``cache`` is given."""
    stack, norm, blocks = _output_stack(model)
    if not model.config.norm_first:
        raise GlassformerError("direct logit attribution needs a pre-norm model (norm_first=True): a post-norm "
                               "block normalises the residual stream itself, so no part's share is linear")
    if getattr(model.head, "transform", None) is not None:  # BERT's MLM head (models.families)
        raise GlassformerError("direct logit attribution cannot pass through the MLM head's transform "
                               "(dense + activation + norm is not linear)")
    L = len(blocks)
    cross, mlp = blocks[0].cross_attn is not None, blocks[0].ffn is not None
    names = [act_name("resid_pre", 0, stack), act_name("resid_post", L - 1, stack)]
    names += [act_name(short, i, stack) for i in range(L) for short in
              ("z", *(("cross_z",) if cross else ()), *(("mlp_out",) if mlp else ()))]
    cache = _cached(model, inputs, cache, names, kwargs)
    B, T = cache[names[1]].shape[:2]
    check_int("position", position, -T, T - 1)
    if isinstance(token, torch.Tensor):
        if token.dim() > 1 or token.dim() == 1 and len(token) not in (1, B) or token.is_floating_point():
            raise ArgumentTypeError(f"token must be an int id or a (B={B},) integer tensor, got {shown(token)}")
        check_token_ids(token.reshape(1, -1).long(), model.config.vocab_size, "token")
    else:
        check_token_id("token", token, model.config.vocab_size)
    final = cache[names[1]][:, position].double()  # (B, d)
    tokens = torch.as_tensor(token, device=final.device).long().expand(B)  # (B,)
    w_u = (model.emb.weight if model.head.weight is None else model.head.weight)[tokens].double()  # (B, d)
    direction = w_u * norm.weight.double()  # (B, d): the token's row of the output layer, seen before the gain
    if isinstance(norm, RMSNorm):
        direction = direction / final.pow(2).mean(-1, keepdim=True).add(norm.eps).sqrt()
    else:  # a pre-norm model's final LayerNorm
        direction = direction / final.var(-1, unbiased=False, keepdim=True).add(norm.eps).sqrt()
        direction = direction - direction.mean(-1, keepdim=True)  # (c - mean c)·u = c·(u - mean u)

    def share(c: torch.Tensor) -> torch.Tensor:
        """(B, ..., d) parts of the stream -> (B, ...) their shares of the logit."""
        u = direction.view(B, *([1] * (c.dim() - 2)), -1)
        return (c.double() * u).sum(-1)

    def attention_parts(short: str, attr: str) -> tuple[torch.Tensor, torch.Tensor]:
        heads, biases = [], []
        for i, block in enumerate(blocks):
            attention = getattr(block, attr)
            z = cache[act_name(short, i, stack)][:, position].double()  # (B, h, hd)
            heads.append(share(attention.per_head_output(z)))  # each head's write (B, h, d), its share
            biases.append(share(attention.head_bias("o").expand(B, -1)))  # zeros without a bias
        return torch.stack(heads, 1), torch.stack(biases, 1)  # (B, L, h), (B, L)

    heads, attn_bias = attention_parts("z", "self_attn")
    cross_heads, cross_bias = attention_parts("cross_z", "cross_attn") if cross else (None, None)
    mlps = torch.stack([share(cache[act_name("mlp_out", i, stack)][:, position]) for i in range(L)], 1) if mlp \
        else None
    bias = final.new_zeros(B)
    if getattr(norm, "bias", None) is not None:
        bias = bias + (norm.bias.double() * w_u).sum(-1)
    if model.head.bias is not None:
        bias = bias + model.head.bias[tokens].double()
    logit = model.logits(norm(cache[names[1]][:, position]))[torch.arange(B), tokens]  # the forward's own numbers
    parts = (share(cache[names[0]][:, position]), heads, attn_bias, mlps, cross_heads, cross_bias, bias, logit)
    return LogitAttribution(*(None if t is None else t.float() for t in parts))
