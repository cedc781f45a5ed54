"""Weight-space circuits: each head's matrices, its QK (W_Q W_Kᵀ) and OV (W_V W_O) circuits, and how heads
compose (Elhage et al. 2021), with TransformerLens's names, shapes and numbers. The circuits are rank ≤ hd,
so :class:`FactoredMatrix` keeps them as factors. ``fold_ln=True`` folds each norm's gain and bias into the
weights that read its output, as TransformerLens's ``fold_ln`` does; its other processing is not applied.
"""

from functools import cached_property

import torch
from torch import nn

from ..errors import ArgumentTypeError, GlassformerError
from ..io.checks import shown
from ..nn.norms import LayerNorm, RMSNorm
from ..validate import check_choice


class FactoredMatrix:
    """The matrix M = A B, kept as its two factors: A (..., l, m), B (..., m, r), usually m << l, r.

    Products stay factored; :attr:`AB` forms M; SVD, eigenvalues and norms come from the factors.
    Leading dims (layers, heads) broadcast, as in torch.
    """

    def __init__(self, A: torch.Tensor, B: torch.Tensor):
        if not isinstance(A, torch.Tensor) or not isinstance(B, torch.Tensor) or A.dim() < 2 or B.dim() < 2:
            raise ArgumentTypeError("FactoredMatrix takes two tensors of at least 2 dims, A (..., l, m) and "
                                    f"B (..., m, r); got {shown(A)} and {shown(B)}")
        if A.shape[-1] != B.shape[-2]:
            raise GlassformerError(f"FactoredMatrix factors must share their inner size: A {tuple(A.shape)}, "
                                   f"B {tuple(B.shape)}")
        try:
            lead = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
        except RuntimeError as e:
            raise GlassformerError(f"FactoredMatrix factors' leading dims do not broadcast: A {tuple(A.shape)}, "
                                   f"B {tuple(B.shape)}") from e
        self.A = A.broadcast_to(*lead, *A.shape[-2:])
        self.B = B.broadcast_to(*lead, *B.shape[-2:])
        self.ldim, self.mdim, self.rdim = A.shape[-2], A.shape[-1], B.shape[-1]
        self.shape = torch.Size((*lead, self.ldim, self.rdim))

    @property
    def ndim(self) -> int:
        """The number of dims of M, leading ones included."""
        return len(self.shape)

    @property
    def AB(self) -> torch.Tensor:  # noqa: N802  (TransformerLens's name)
        """The full product M = A B, (..., l, r): the one costly step, formed only when asked."""
        return self.A @ self.B

    @property
    def BA(self) -> torch.Tensor:  # noqa: N802
        """The reverse product B A, (..., m, m); needs l == r."""
        if self.ldim != self.rdim:
            raise GlassformerError(f"BA needs a square matrix, this one is {self.ldim} x {self.rdim}")
        return self.B @ self.A

    @property
    def T(self) -> "FactoredMatrix":  # noqa: N802
        """The transpose, Bᵀ Aᵀ."""
        return FactoredMatrix(self.B.transpose(-2, -1), self.A.transpose(-2, -1))

    def __matmul__(self, other: "torch.Tensor | FactoredMatrix") -> "torch.Tensor | FactoredMatrix":
        """M @ other: a factored matrix for a matrix or a factored one, a tensor (..., l) for a vector (r,)."""
        if isinstance(other, FactoredMatrix):
            return (self @ other.A) @ other.B
        if not isinstance(other, torch.Tensor):
            return NotImplemented
        if other.dim() == 1:
            return (self.A @ (self.B @ other[:, None]))[..., 0]
        return FactoredMatrix(self.A, self.B @ other)

    def __rmatmul__(self, other: torch.Tensor) -> "torch.Tensor | FactoredMatrix":
        """other @ M: a factored matrix for a matrix, a tensor (..., r) for a vector (l,)."""
        if not isinstance(other, torch.Tensor):
            return NotImplemented
        if other.dim() == 1:
            return ((other[None] @ self.A) @ self.B)[..., 0, :]
        return FactoredMatrix(other @ self.A, self.B)

    def __mul__(self, scalar: float | torch.Tensor) -> "FactoredMatrix":
        """A scalar multiple (applied to A)."""
        if isinstance(scalar, torch.Tensor) and scalar.numel() != 1:
            raise GlassformerError(f"* takes a scalar (use @ for products), got a tensor of shape "
                                   f"{tuple(scalar.shape)}")
        return FactoredMatrix(self.A * scalar, self.B)

    __rmul__ = __mul__

    def __getitem__(self, index: int | slice | tuple) -> "FactoredMatrix":
        """Index the leading dims (layers, heads): ``QK[1, 3]`` is layer 1 head 3's (d, d) circuit."""
        index = index if isinstance(index, tuple) else (index,)
        if len(index) > self.ndim - 2:
            raise GlassformerError(f"index the leading dims only ({self.ndim - 2} here); index AB for entries")
        return FactoredMatrix(self.A[index], self.B[index])

    def unsqueeze(self, dim: int) -> "FactoredMatrix":
        """A new leading dim at ``dim`` (counted among the leading dims, as TransformerLens does)."""
        return FactoredMatrix(self.A.unsqueeze(dim), self.B.unsqueeze(dim))

    @cached_property
    def _svd(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # two thin SVDs and one m x m
        Ua, Sa, Vha = torch.linalg.svd(_linalg(self.A), full_matrices=False)  # A = Ua diag(Sa) Vha
        Ub, Sb, Vhb = torch.linalg.svd(_linalg(self.B), full_matrices=False)
        middle = Sa[..., :, None] * (Vha @ Ub) * Sb[..., None, :]  # (..., m, m): M = Ua middle Vhb
        Um, Sm, Vhm = torch.linalg.svd(middle, full_matrices=False)
        return Ua @ Um, Sm, Vhb.transpose(-2, -1) @ Vhm.transpose(-2, -1)

    def svd(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(U (..., l, m), S (..., m), V (..., r, m)) with M = U diag(S) Vᵀ, from the factors alone."""
        return self._svd

    @property
    def U(self) -> torch.Tensor:  # noqa: N802
        """Left singular vectors, (..., l, m)."""
        return self.svd()[0]

    @property
    def S(self) -> torch.Tensor:  # noqa: N802
        """Singular values, largest first, (..., m)."""
        return self.svd()[1]

    @property
    def V(self) -> torch.Tensor:  # noqa: N802
        """Right singular vectors, (..., r, m): M = U diag(S) Vᵀ."""
        return self.svd()[2]

    @property
    def eigenvalues(self) -> torch.Tensor:
        """The eigenvalues of M (complex, (..., m)): those of B A, which M shares apart from zeros."""
        return torch.linalg.eig(_linalg(self.BA)).eigenvalues

    def norm(self) -> torch.Tensor:
        """The Frobenius norm of M, (...,)."""
        return self.S.pow(2).sum(-1).sqrt()

    def collapse_l(self) -> torch.Tensor:
        """diag(S) Vᵀ, (..., m, r): M without its left orthogonal factor (same norms, same products on the right)."""
        return self.S[..., :, None] * self.V.transpose(-2, -1)

    def collapse_r(self) -> torch.Tensor:
        """U diag(S), (..., l, m): M without its right orthogonal factor."""
        return self.U * self.S[..., None, :]

    def __repr__(self) -> str:
        return f"FactoredMatrix(shape={tuple(self.shape)}, inner={self.mdim})"


def _linalg(x: torch.Tensor) -> torch.Tensor:
    """``x`` in a dtype torch.linalg has kernels for: 16-bit floats in float32, others as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def composition_scores(left: FactoredMatrix, right: FactoredMatrix, broadcast_dims: bool = True) -> torch.Tensor:
    """‖L R‖_F / (‖L‖_F ‖R‖_F) in [0, 1]: how much of what ``right`` (e.g. later heads' QK, QKᵀ or OV)
    reads ``left`` (e.g. earlier heads' OV) writes. ``broadcast_dims``: score every left/right pair (left's
    leading dims, then right's). Compare with random matrices' scores, not with 0."""
    if broadcast_dims:
        n_left, n_right = left.ndim - 2, right.ndim - 2
        for i in range(n_left):
            right = right.unsqueeze(i)
        for i in range(n_right):
            left = left.unsqueeze(i + n_left)
    if left.rdim != right.ldim:
        raise GlassformerError(f"composition needs left's columns to match right's rows: {tuple(left.shape)}, "
                               f"{tuple(right.shape)}")
    new_left, new_right = left.collapse_l(), right.collapse_r()
    products = (new_left @ new_right).norm(dim=(-2, -1))
    return products / new_left.norm(dim=(-2, -1)) / new_right.norm(dim=(-2, -1))


class Weights:
    """A TransformerLM's weights in TransformerLens's per-head layout; made by :func:`weights`.

    Attributes (L layers, h heads, kv key/value heads, d width, hd head width, f MLP width, V vocabulary):
        W_E (V, d); W_pos (n_ctx, d) (learned positions only); W_U (d, V); b_U (V,) (zeros without a bias);
        W_Q (L, h, d, hd); W_K, W_V (L, kv, d, hd); W_O (L, h, hd, d); b_Q (L, h, hd); b_K, b_V (L, kv, hd);
        b_O (L, d); W_in, W_gate (L, d, f) (W_gate: gated MLPs only, else None); W_out (L, f, d); b_in (L, f);
        b_out (L, d). Biases of a bias-free model are zeros (TransformerLens refuses them there).
    """

    W_in = b_in = W_out = b_out = W_gate = None  # stay None without the part (attention-only; W_gate: gated MLPs)

    def __init__(self, model: nn.Module, fold_ln: bool):
        from ..models import TransformerLM

        if not isinstance(model, TransformerLM):
            raise ArgumentTypeError(f"weights() reads a glassformer TransformerLM, got {type(model).__name__}")
        blocks = list(model.blocks)
        if fold_ln and not blocks[0].norm_first:
            raise GlassformerError("fold_ln=True needs a pre-norm model (a post-norm block's norm reads the "
                                   "sum after the residual, not the next weights' input)")
        attn = blocks[0].self_attn
        self.n_layers, self.n_heads, self.n_kv_heads = len(blocks), attn.n_heads, attn.n_kv_heads
        self.d_head = attn.head_dim
        layers = []  # every tensor below is detached: nothing here is part of a graph
        for block in blocks:
            attn = block.self_attn  # its per-head views: (heads, d, hd) for q, k, v; (h, hd, d) for o
            parts = {"W_O": attn.W_O.detach(), "b_O": attn.head_bias("o").detach()}
            for kind in "QKV":
                w, b = getattr(attn, f"W_{kind}").detach(), attn.head_bias(kind.lower()).detach()
                parts[f"W_{kind}"], parts[f"b_{kind}"] = _folded(block.attn_norm, w, b) if fold_ln else (w, b)
            ffn = block.ffn
            if ffn is not None:
                w_in, b_in = ffn.up.weight.detach().T, _bias(ffn.up)  # (d, f), (f,)
                w_gate = None if ffn.gate is None else ffn.gate.weight.detach().T
                if fold_ln:
                    w_in, b_in = _folded(block.ffn_norm, w_in, b_in)
                    if w_gate is not None:
                        w_gate = _folded(block.ffn_norm, w_gate, torch.zeros_like(b_in))[0]
                parts |= {"W_in": w_in, "b_in": b_in, "W_out": ffn.down.weight.detach().T, "b_out": _bias(ffn.down),
                          "W_gate": w_gate}
            layers.append(parts)
        for name, first in layers[0].items():
            if first is not None:
                setattr(self, name, torch.stack([parts[name] for parts in layers]))
        self.W_E = model.emb.weight.detach()
        pos = getattr(model.embeddings, "pos", None)
        self.W_pos = None if pos is None else pos.weight.detach()[getattr(pos, "offset", 0):]  # BART's reserved rows
        head = model.head
        w_u = (model.emb.weight if head.weight is None else head.weight).detach().T  # (d, V)
        b_u = head.bias.detach() if head.bias is not None else w_u.new_zeros(w_u.shape[1])
        self.W_U, self.b_U = _folded(model.norm_f, w_u, b_u) if fold_ln else (w_u, b_u)

    def _expanded(self, w: torch.Tensor) -> torch.Tensor:
        """kv heads repeated for the h query heads each serves (GQA), (L, kv, ...) -> (L, h, ...)."""
        return w.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)

    @property
    def QK(self) -> FactoredMatrix:  # noqa: N802
        """Each head's QK circuit W_Q W_Kᵀ, factored: (L, h, d, d); scores = x_q QK x_kᵀ (before 1/√hd). With
        ``qk_norm`` each score is also divided by its query's and key's RMS: the circuit up to those scales."""
        return FactoredMatrix(self.W_Q, self._expanded(self.W_K).transpose(-2, -1))

    @property
    def OV(self) -> FactoredMatrix:  # noqa: N802
        """Each head's OV circuit W_V W_O, factored: (L, h, d, d); a head writes (pattern-weighted) x OV."""
        return FactoredMatrix(self._expanded(self.W_V), self.W_O)

    def all_composition_scores(self, mode: str) -> torch.Tensor:
        """Composition scores of every earlier head's OV with every later head's input: ``mode`` "Q" (OV · QK),
        "K" (OV · QKᵀ) or "V" (OV · OV). Returns (L, h, L, h): [l1, h1, l2, h2], zero unless l1 < l2."""
        mode = check_choice("mode", mode, ("Q", "K", "V"))
        right = {"Q": self.QK, "K": self.QK.T, "V": self.OV}[mode]
        scores = composition_scores(self.OV, right)
        layers = torch.arange(self.n_layers)
        earlier = layers[:, None, None, None] < layers[None, None, :, None]
        return torch.where(earlier, scores, torch.zeros_like(scores))


def _bias(linear: nn.Linear) -> torch.Tensor:
    """A linear layer's bias, or zeros when it has none."""
    return linear.bias.detach() if linear.bias is not None else linear.weight.new_zeros(linear.out_features)


def _folded(norm: nn.Module, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A norm's gain and bias moved into the weights w (..., d, n) and bias b (..., n) reading its output."""
    if not isinstance(norm, (LayerNorm, RMSNorm)):
        return w, b
    if getattr(norm, "bias", None) is not None:
        b = b + (norm.bias.detach()[:, None] * w).sum(-2)
    w = norm.weight.detach()[:, None] * w
    if isinstance(norm, LayerNorm):
        w = w - w.mean(-2, keepdim=True)
    return w, b


def weights(model: nn.Module, *, fold_ln: bool = False) -> Weights:
    """A TransformerLM's weights per head, with QK/OV circuits and composition scores (:class:`Weights`);
    detached views of its parameters where possible. ``fold_ln``: fold the norms into the reading weights."""
    return Weights(model, fold_ln)
