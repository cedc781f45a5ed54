"""The Hugging Face families glassformer converts (GPT-2, GPT-NeoX, Llama, BERT, BART): configs both ways and
tensor names by :class:`~glassformer.interop.mapping.Rule`, without ``transformers``."""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..config import ModelConfig
from ..errors import GlassformerError
from ..io.checks import check_int, check_number, shown
from .mapping import Rule, linear_rules, rule

# Hugging Face activation names <-> ours.
ACT_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "silu": "silu", "swish": "silu"}
ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}

# The context an exported RoPE or position-free model declares (no position table limits it); GPT-NeoX's default.
OPEN_CONTEXT = 2048

Fill = dict[str, tuple[tuple[int, ...], float]]  # their tensor name -> (shape, the value of every element)


def _no_fill(config: ModelConfig) -> Fill:
    """Nothing to write as constants: the model has every tensor of the family."""
    return {}


@dataclass(frozen=True)
class Family:
    """One Hugging Face architecture family: our ``name``, their ``model_type`` and classes with and without head.

    ``prefix``: the base model's prefix inside ``head_class``; ``required``: {ModelConfig field: allowed values}
    to export; ``ignore``: regexes of their tensors dropped on import; ``fill``: {their name: (shape, value)},
    constants exported for tensors the model lacks (biases, feed-forward sub-layers, position table).
    """

    name: str
    model_type: str
    head_class: str
    base_class: str
    prefix: str
    config_from_hf: Callable[[dict[str, Any], bool], ModelConfig]
    config_to_hf: Callable[[ModelConfig], dict[str, Any]]
    required: Callable[[ModelConfig], dict[str, tuple]]
    rules: Callable[[ModelConfig, bool], list[Rule]]
    has_head: Callable[[ModelConfig], bool]
    ignore: tuple[str, ...] = ()
    fill: Callable[[ModelConfig], Fill] = _no_fill

    def check_exportable(self, config: ModelConfig) -> None:
        """Raise ValueError naming the first field this family cannot represent."""
        for name, allowed in self.required(config).items():
            value = getattr(config, name)
            if value not in allowed:
                raise GlassformerError(f"cannot export as {self.head_class}: ModelConfig.{name}={value!r}, "
                                       f"but {self.name} needs {' or '.join(map(repr, allowed))}")


def _need(family: str, hf: dict[str, Any], key: str, default: Any, allowed: tuple, why: str) -> Any:
    """hf[key] (or its default), which must be one of ``allowed``."""
    value = hf.get(key, default)
    if value not in allowed:
        raise GlassformerError(f"{family} config field {key}={shown(value)} cannot be honoured by glassformer: {why}")
    return value


def _int(family: str, hf: dict[str, Any], key: str, default: Any = None) -> int:
    """hf[key] (or a non-None ``default``) as an int >= 1; else an error naming the key."""
    value = hf.get(key, default)
    if value is None:
        raise GlassformerError(f"{family} config.json has no {key!r} (it is required)")
    return check_int(f"{family} config field {key}", value, low=1)


def _float(family: str, hf: dict[str, Any], key: str, default: Any) -> float:
    return check_number(f"{family} config field {key}", hf.get(key, default))


def _act(family: str, hf: dict[str, Any], key: str, default: str) -> str:
    return ACT_FROM_HF[_need(family, hf, key, default, tuple(ACT_FROM_HF),
                             f"supported activations are {sorted(ACT_FROM_HF)}")]


def _rope(family: str, hf: dict[str, Any]) -> dict[str, Any]:
    """The RoPE settings: ``rope_parameters`` (transformers 5) or ``rope_scaling``, {} when neither."""
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        raise GlassformerError(f"{family} config field rope_parameters must be a mapping, got {shown(rope)}")
    return rope


def _qkv(ours: str, q: str, k: str, v: str, sizes: tuple[int, int, int], bias: bool = True) -> list[Rule]:
    params = ("weight", "bias") if bias else ("weight",)
    return [rule(f"{ours}.{p}", f"{q}.{p}", f"{k}.{p}", f"{v}.{p}", sizes=sizes) for p in params]


def _sizes(c: ModelConfig) -> tuple[int, int, int]:
    return (c.n_heads * c.head_dim, c.kv_heads * c.head_dim, c.kv_heads * c.head_dim)


def _context(c: ModelConfig) -> int:
    """The positions an export declares: the learned table's rows, else at least :data:`OPEN_CONTEXT`."""
    return c.max_len if c.pos == "learned" else max(c.max_len, OPEN_CONTEXT)


def _d_ff(c: ModelConfig) -> int:
    """The exported feed-forward width: 1 (all zeros) for an attention-only model."""
    return 1 if c.attn_only else c.d_ff


# A fused-qkv pre-norm block's sub-layers: (attention norm, qkv, attention output, feed-forward norm, up, down).
_GPT2_NAMES = ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj")
_NEOX_NAMES = ("input_layernorm", "attention.query_key_value", "attention.dense", "post_attention_layernorm",
              "mlp.dense_h_to_4h", "mlp.dense_4h_to_h")


def _fused_block_rules(c: ModelConfig, layers: str, names: tuple[str, ...], layout: str,
                       qkv_layout: str) -> list[Rule]:
    """Rules for every pre-norm block with a fused qkv (GPT-2, GPT-NeoX); ``layers``: their prefix ("...h.")."""
    attn_norm, qkv, o_proj, ffn_norm, up, down = names
    heads, out = c.n_heads if qkv_layout == "heads_qkv" else 0, []
    for i in range(c.n_layers):
        ours, theirs = f"blocks.{i}.", f"{layers}{i}."
        out += linear_rules(f"{ours}attn_norm", f"{theirs}{attn_norm}", c.bias)
        out += linear_rules(f"{ours}self_attn.qkv", f"{theirs}{qkv}", c.bias, qkv_layout, heads)
        out += linear_rules(f"{ours}self_attn.o_proj", f"{theirs}{o_proj}", c.bias, layout)
        if not c.attn_only:
            out += linear_rules(f"{ours}ffn_norm", f"{theirs}{ffn_norm}", c.bias)
            out += linear_rules(f"{ours}ffn.up", f"{theirs}{up}", c.bias, layout)
            out += linear_rules(f"{ours}ffn.down", f"{theirs}{down}", c.bias, layout)
    return out


def _fused_block_fill(c: ModelConfig, layers: str, names: tuple[str, ...], final_norm: str,
                      transposed: bool) -> Fill:
    """Zero biases (bias=False) and a zero feed-forward sub-layer (attn_only: it adds exactly 0)."""
    attn_norm, qkv, o_proj, ffn_norm, up, down = names
    d, out = c.d_model, {}
    up_shape, down_shape = ((d, 1), (1, d)) if transposed else ((1, d), (d, 1))
    for i in range(c.n_layers):
        h = f"{layers}{i}."
        if c.attn_only:
            out.update({f"{h}{ffn_norm}.weight": ((d,), 1.0), f"{h}{up}.weight": (up_shape, 0.0),
                        f"{h}{down}.weight": (down_shape, 0.0)})
        if c.attn_only or not c.bias:
            out.update({f"{h}{ffn_norm}.bias": ((d,), 0.0), f"{h}{up}.bias": ((_d_ff(c),), 0.0),
                        f"{h}{down}.bias": ((d,), 0.0)})
        if not c.bias:
            out.update({f"{h}{attn_norm}.bias": ((d,), 0.0), f"{h}{qkv}.bias": ((3 * d,), 0.0),
                        f"{h}{o_proj}.bias": ((d,), 0.0)})
    return out | ({f"{final_norm}.bias": ((d,), 0.0)} if not c.bias else {})


def _gpt2_config(hf: dict[str, Any], has_head: bool) -> ModelConfig:
    req = partial(_int, "gpt2", hf)
    why = "glassformer's attention is plain scaled dot-product"
    _need("gpt2", hf, "scale_attn_weights", True, (True,), why)
    _need("gpt2", hf, "scale_attn_by_inverse_layer_idx", False, (False,), why)
    _need("gpt2", hf, "add_cross_attention", False, (False,), "GPT-2 with cross-attention is not supported")
    d = req("n_embd")
    return ModelConfig(
        vocab_size=req("vocab_size"), d_model=d, n_heads=req("n_head"), n_layers=req("n_layer"),
        d_ff=req("n_inner") if hf.get("n_inner") is not None else 4 * d, max_len=req("n_positions"), pos="learned",
        activation=_act("gpt2", hf, "activation_function", "gelu_new"), norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        scale_embeddings=False, dropout=hf.get("resid_pdrop", 0.1), init_std=hf.get("initializer_range", 0.02),
    )


def _gpt2_to_hf(c: ModelConfig) -> dict[str, Any]:
    return dict(model_type="gpt2", vocab_size=c.vocab_size, n_embd=c.d_model, n_head=c.n_heads, n_layer=c.n_layers,
                n_inner=_d_ff(c), n_positions=_context(c), activation_function=ACT_TO_HF[c.activation],
                layer_norm_epsilon=c.norm_eps, resid_pdrop=c.dropout, embd_pdrop=c.dropout, attn_pdrop=c.dropout,
                initializer_range=c.init_std or 0.02, tie_word_embeddings=True)


def _gpt2_required(c: ModelConfig) -> dict[str, tuple]:
    return dict(arch=("lm",), attn=("causal",), pos=("learned", "none"), norm=("layernorm",), norm_first=(True,),
                tie=(True,), head_bias=(False,), n_kv_heads=(None, c.n_heads),
                scale_embeddings=(False,), n_token_types=(0,), embed_norm=(False,), pos_offset=(0,),
                head_transform=(False,), activation=tuple(ACT_TO_HF), qk_norm=(False,))


def _gpt2_rules(c: ModelConfig, has_head: bool) -> list[Rule]:
    t = "transformer."
    out = [rule("embeddings.tok.weight", f"{t}wte.weight", aliases=["lm_head.weight"])]
    if c.pos == "learned":
        out.append(rule("embeddings.pos.weight", f"{t}wpe.weight"))
    out += _fused_block_rules(c, f"{t}h.", _GPT2_NAMES, "transposed", "transposed")
    return out + linear_rules("norm_f", f"{t}ln_f", c.bias)


def _gpt2_fill(c: ModelConfig) -> Fill:
    """As :func:`_fused_block_fill`, and a zero position table (pos="none")."""
    table = {"transformer.wpe.weight": ((_context(c), c.d_model), 0.0)} if c.pos == "none" else {}
    return table | _fused_block_fill(c, "transformer.h.", _GPT2_NAMES, "transformer.ln_f", transposed=True)


GPT2 = Family("gpt2", "gpt2", "GPT2LMHeadModel", "GPT2Model", "transformer.", _gpt2_config, _gpt2_to_hf,
              _gpt2_required, _gpt2_rules, has_head=lambda c: True,
              ignore=(r"transformer\.h\.\d+\.attn\.(masked_)?bias",), fill=_gpt2_fill)


def _neox_config(hf: dict[str, Any], has_head: bool) -> ModelConfig:
    req = partial(_int, "gpt_neox", hf)
    _need("gpt_neox", hf, "use_parallel_residual", True, (False,), "glassformer's blocks add attention, then the "
          "feed-forward sub-layer (sequential residual); Pythia's parallel residual is not implemented")
    rope = _rope("gpt_neox", hf)
    _need("gpt_neox", rope, "rope_type", rope.get("type", "default"), ("default",), "only plain RoPE is implemented")
    _need("gpt_neox", rope, "partial_rotary_factor", hf.get("rotary_pct", 0.25), (1, 1.0),
          "glassformer rotates the whole head (rotary_pct 1.0)")
    _need("gpt_neox", hf, "attention_bias", True, (True,), "glassformer has one `bias` flag and GPT-NeoX's "
          "feed-forward layers always have biases")
    return ModelConfig(
        vocab_size=req("vocab_size"), d_model=req("hidden_size"), n_heads=req("num_attention_heads"),
        n_layers=req("num_hidden_layers"), d_ff=req("intermediate_size"), max_len=req("max_position_embeddings", 2048),
        pos="rope", rope_theta=_float("gpt_neox", rope, "rope_theta", hf.get("rotary_emb_base", 10000.0)),
        activation=_act("gpt_neox", hf, "hidden_act", "gelu"), norm_eps=hf.get("layer_norm_eps", 1e-5),
        tie=hf.get("tie_word_embeddings", False) or not has_head, scale_embeddings=False,
        dropout=hf.get("hidden_dropout", 0.0), init_std=hf.get("initializer_range", 0.02),
    )


def _neox_to_hf(c: ModelConfig) -> dict[str, Any]:
    return dict(model_type="gpt_neox", vocab_size=c.vocab_size, hidden_size=c.d_model, num_attention_heads=c.n_heads,
                num_hidden_layers=c.n_layers, intermediate_size=_d_ff(c), max_position_embeddings=_context(c),
                hidden_act=ACT_TO_HF[c.activation], layer_norm_eps=c.norm_eps, use_parallel_residual=False,
                rotary_pct=1.0, rotary_emb_base=c.rope_theta,  # transformers 4.x names; 5.x reads rope_parameters
                rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta, "partial_rotary_factor": 1.0},
                attention_bias=True, tie_word_embeddings=c.tie, hidden_dropout=c.dropout, attention_dropout=c.dropout,
                initializer_range=c.init_std or 0.02)


def _neox_required(c: ModelConfig) -> dict[str, tuple]:
    return dict(arch=("lm",), attn=("causal",), pos=("rope",), norm=("layernorm",), norm_first=(True,),
                head_bias=(False,), n_kv_heads=(None, c.n_heads), scale_embeddings=(False,), n_token_types=(0,),
                embed_norm=(False,), head_transform=(False,), activation=tuple(ACT_TO_HF), qk_norm=(False,))


def _neox_rules(c: ModelConfig, has_head: bool) -> list[Rule]:
    m = "gpt_neox."
    out = [rule("embeddings.tok.weight", f"{m}embed_in.weight", aliases=["lm_head.weight"] if c.tie else [])]
    out += _fused_block_rules(c, f"{m}layers.", _NEOX_NAMES, "same", "heads_qkv")
    out += linear_rules("norm_f", f"{m}final_layer_norm", c.bias)
    return out if c.tie else out + [rule("head.weight", "lm_head.weight")]


NEOX = Family("gpt_neox", "gpt_neox", "GPTNeoXForCausalLM", "GPTNeoXModel", "gpt_neox.", _neox_config, _neox_to_hf,
              _neox_required, _neox_rules, has_head=lambda c: True,
              ignore=(r"gpt_neox\.layers\.\d+\.attention\.(masked_)?bias", r".*rotary_emb\.inv_freq"),
              fill=partial(_fused_block_fill, layers="gpt_neox.layers.", names=_NEOX_NAMES,
                           final_norm="gpt_neox.final_layer_norm", transposed=False))


def _llama_config(hf: dict[str, Any], has_head: bool) -> ModelConfig:
    req = partial(_int, "llama", hf)
    d, heads = req("hidden_size"), req("num_attention_heads")
    rope = _rope("llama", hf)
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise GlassformerError(f"llama config field rope type={shown(kind)} cannot be honoured by glassformer: "
                               "only plain RoPE (rope_type 'default', no scaling) is implemented")
    _need("llama", hf, "head_dim", d // heads, (d // heads, None), "glassformer's head width is hidden_size / heads")
    bias = _need("llama", hf, "attention_bias", False, (True, False), "")
    _need("llama", hf, "mlp_bias", False, (bias,), "glassformer has one `bias` flag, so mlp_bias must equal "
          f"attention_bias={bias}")
    act = _need("llama", hf, "hidden_act", "silu", ("silu", "gelu"),
                "supported gated activations are silu (SwiGLU) and gelu (GEGLU)")
    return ModelConfig(
        vocab_size=req("vocab_size"), d_model=d, n_heads=heads, n_kv_heads=req("num_key_value_heads", heads),
        n_layers=req("num_hidden_layers"), d_ff=req("intermediate_size"), max_len=req("max_position_embeddings"),
        pos="rope", rope_theta=_float("llama", rope, "rope_theta", hf.get("rope_theta", 10000.0)), norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", 1e-6), activation="swiglu" if act == "silu" else "geglu", bias=bias,
        tie=hf.get("tie_word_embeddings", False) or not has_head, scale_embeddings=False,
        dropout=hf.get("attention_dropout", 0.0), init_std=hf.get("initializer_range", 0.02),
    )


def _llama_to_hf(c: ModelConfig) -> dict[str, Any]:
    return dict(model_type="llama", vocab_size=c.vocab_size, hidden_size=c.d_model, num_attention_heads=c.n_heads,
                num_key_value_heads=c.kv_heads, num_hidden_layers=c.n_layers, intermediate_size=c.d_ff,
                max_position_embeddings=_context(c), hidden_act="silu" if c.activation == "swiglu" else "gelu",
                rms_norm_eps=c.norm_eps, rope_theta=c.rope_theta,
                rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta}, attention_bias=c.bias,
                mlp_bias=c.bias, tie_word_embeddings=c.tie, attention_dropout=c.dropout,
                initializer_range=c.init_std or 0.02, head_dim=c.head_dim)


def _llama_required(c: ModelConfig) -> dict[str, tuple]:
    return dict(arch=("lm",), attn=("causal",), pos=("rope",), norm=("rmsnorm",), norm_first=(True,),
                attn_only=(False,), activation=("swiglu", "geglu"), head_bias=(False,), scale_embeddings=(False,),
                n_token_types=(0,), embed_norm=(False,), head_transform=(False,), qk_norm=(False,))


def _llama_rules(c: ModelConfig, has_head: bool) -> list[Rule]:
    m = "model."
    out = [rule("embeddings.tok.weight", f"{m}embed_tokens.weight", aliases=["lm_head.weight"] if c.tie else [])]
    for i in range(c.n_layers):
        ours, theirs = f"blocks.{i}.", f"{m}layers.{i}."
        out.append(rule(f"{ours}attn_norm.weight", f"{theirs}input_layernorm.weight"))
        a = f"{theirs}self_attn."
        out += _qkv(f"{ours}self_attn.qkv", f"{a}q_proj", f"{a}k_proj", f"{a}v_proj", _sizes(c), c.bias)
        out += linear_rules(f"{ours}self_attn.o_proj", f"{a}o_proj", c.bias)
        out.append(rule(f"{ours}ffn_norm.weight", f"{theirs}post_attention_layernorm.weight"))
        for ours_name, theirs_name in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
            out += linear_rules(f"{ours}ffn.{ours_name}", f"{theirs}mlp.{theirs_name}", c.bias)
    out.append(rule("norm_f.weight", f"{m}norm.weight"))
    return out if c.tie else out + [rule("head.weight", "lm_head.weight")]


LLAMA = Family("llama", "llama", "LlamaForCausalLM", "LlamaModel", "model.", _llama_config, _llama_to_hf,
               _llama_required, _llama_rules, has_head=lambda c: True, ignore=(r".*rotary_emb\.inv_freq",))


def _bert_config(hf: dict[str, Any], has_head: bool) -> ModelConfig:
    req = partial(_int, "bert", hf)
    _need("bert", hf, "position_embedding_type", "absolute", ("absolute",),
          "only absolute (learned) positions are implemented for BERT")
    _need("bert", hf, "is_decoder", False, (False,), "a causal BERT decoder is not supported")
    _need("bert", hf, "add_cross_attention", False, (False,), "BERT with cross-attention is not supported")
    return ModelConfig(
        vocab_size=req("vocab_size"), d_model=req("hidden_size"), n_heads=req("num_attention_heads"),
        n_layers=req("num_hidden_layers"), d_ff=req("intermediate_size"), max_len=req("max_position_embeddings"),
        attn="bidirectional", pos="learned", norm_first=False, activation=_act("bert", hf, "hidden_act", "gelu"),
        norm_eps=hf.get("layer_norm_eps", 1e-12), head_bias=has_head, head_transform=has_head,
        scale_embeddings=False, n_token_types=hf.get("type_vocab_size", 2), embed_norm=True,
        dropout=hf.get("hidden_dropout_prob", 0.1), init_std=hf.get("initializer_range", 0.02),
    )


def _bert_to_hf(c: ModelConfig) -> dict[str, Any]:
    return dict(model_type="bert", vocab_size=c.vocab_size, hidden_size=c.d_model, num_attention_heads=c.n_heads,
                num_hidden_layers=c.n_layers, intermediate_size=c.d_ff, max_position_embeddings=c.max_len,
                hidden_act=ACT_TO_HF[c.activation], layer_norm_eps=c.norm_eps, type_vocab_size=c.n_token_types,
                hidden_dropout_prob=c.dropout, attention_probs_dropout_prob=c.dropout,
                initializer_range=c.init_std or 0.02, tie_word_embeddings=True)


def _block_rules(c: ModelConfig, ours: str, attentions: list[tuple[str, ...]],
                 ffn: tuple[str, str, str]) -> list[Rule]:
    """Rules for one post-norm block (BERT, BART) at ``ours`` ("blocks.0."): per attention sub-layer (our attention,
    our norm, their q, k, v, output, norm), then ``ffn``: their (up, down, norm)."""
    out = []
    for mine, norm, q, k, v, o, their_norm in attentions:
        out += _qkv(f"{ours}{mine}.qkv", q, k, v, _sizes(c))
        out += linear_rules(f"{ours}{mine}.o_proj", o)
        out += linear_rules(f"{ours}{norm}", their_norm)
    up, down, their_norm = ffn
    out += linear_rules(f"{ours}ffn.up", up)
    out += linear_rules(f"{ours}ffn.down", down)
    return out + linear_rules(f"{ours}ffn_norm", their_norm)


def _bert_required(c: ModelConfig) -> dict[str, tuple]:
    return dict(arch=("lm",), attn=("bidirectional",), pos=("learned",), norm=("layernorm",), norm_first=(False,),
                bias=(True,), attn_only=(False,), tie=(True,), head_bias=(c.head_transform,),
                n_kv_heads=(None, c.n_heads), scale_embeddings=(False,), embed_norm=(True,), pos_offset=(0,),
                activation=tuple(ACT_TO_HF), n_token_types=(c.n_token_types,) if c.n_token_types >= 1 else (2,),
                qk_norm=(False,))


def _bert_rules(c: ModelConfig, has_head: bool) -> list[Rule]:
    b, e = "bert.", "bert.embeddings."
    out = [rule("embeddings.tok.weight", f"{e}word_embeddings.weight", aliases=["cls.predictions.decoder.weight"]),
           rule("embeddings.pos.weight", f"{e}position_embeddings.weight"),
           rule("embeddings.types.weight", f"{e}token_type_embeddings.weight")]
    out += linear_rules("embeddings.norm", f"{e}LayerNorm")
    for i in range(c.n_layers):
        ours, theirs = f"blocks.{i}.", f"{b}encoder.layer.{i}."
        a = f"{theirs}attention."
        attention = ("self_attn", "attn_norm", f"{a}self.query", f"{a}self.key", f"{a}self.value",
                     f"{a}output.dense", f"{a}output.LayerNorm")
        out += _block_rules(c, ours, [attention], (f"{theirs}intermediate.dense", f"{theirs}output.dense",
                                                   f"{theirs}output.LayerNorm"))
    if has_head:
        p = "cls.predictions."
        out += linear_rules("head.transform.dense", f"{p}transform.dense")
        out += linear_rules("head.transform.norm", f"{p}transform.LayerNorm")
        out.append(rule("head.bias", f"{p}bias", aliases=[f"{p}decoder.bias"]))
    return out


BERT = Family("bert", "bert", "BertForMaskedLM", "BertModel", "bert.", _bert_config, _bert_to_hf, _bert_required,
              _bert_rules, has_head=lambda c: c.head_transform,
              ignore=(r"bert\.embeddings\.position_ids", r"bert\.pooler\..*"))


def _bart_config(hf: dict[str, Any], has_head: bool) -> ModelConfig:
    req = partial(_int, "bart", hf)
    heads, ffn = req("encoder_attention_heads"), req("encoder_ffn_dim")
    _need("bart", hf, "decoder_attention_heads", heads, (heads,), "encoder and decoder must have the same heads")
    _need("bart", hf, "decoder_ffn_dim", ffn, (ffn,), "encoder and decoder must have the same d_ff")
    for key in ("normalize_before", "add_final_layer_norm"):  # mBART-style pre-norm variants
        _need("bart", hf, key, False, (False,), "only BART's post-norm layout is implemented")
    return ModelConfig(
        vocab_size=req("vocab_size"), arch="encoder-decoder", d_model=req("d_model"), n_heads=heads,
        n_enc=req("encoder_layers"), n_dec=req("decoder_layers"), d_ff=ffn, max_len=req("max_position_embeddings"),
        pos="learned", pos_offset=2, split_positions=True, embed_norm=True, norm_first=False,
        activation=_act("bart", hf, "activation_function", "gelu"), norm_eps=1e-5,
        tie=hf.get("tie_word_embeddings", True) or not has_head, head_bias=has_head,
        scale_embeddings=bool(hf.get("scale_embedding", False)), dropout=hf.get("dropout", 0.1),
        init_std=hf.get("init_std", 0.02),
    )


def _bart_to_hf(c: ModelConfig) -> dict[str, Any]:
    return dict(model_type="bart", vocab_size=c.vocab_size, d_model=c.d_model, encoder_attention_heads=c.n_heads,
                decoder_attention_heads=c.n_heads, encoder_layers=c.n_enc, decoder_layers=c.n_dec,
                encoder_ffn_dim=c.d_ff, decoder_ffn_dim=c.d_ff, max_position_embeddings=c.max_len,
                activation_function=ACT_TO_HF[c.activation], scale_embedding=c.scale_embeddings,
                tie_word_embeddings=c.tie, dropout=c.dropout, attention_dropout=c.dropout,
                activation_dropout=0.0, init_std=c.init_std or 0.02)


def _bart_required(c: ModelConfig) -> dict[str, tuple]:
    return dict(arch=("encoder-decoder",), pos=("learned",), pos_offset=(2,), split_positions=(True,),
                embed_norm=(True,), norm=("layernorm",), norm_first=(False,), bias=(True,), norm_eps=(1e-5,),
                attn_only=(False,), n_kv_heads=(None, c.n_heads), n_token_types=(0,), activation=tuple(ACT_TO_HF),
                qk_norm=(False,))


def _bart_layer(c: ModelConfig, ours: str, theirs: str, cross: bool) -> list[Rule]:
    def attention(mine: str, norm: str, their_attn: str, their_norm: str) -> tuple[str, ...]:
        a = f"{theirs}{their_attn}."
        return mine, norm, f"{a}q_proj", f"{a}k_proj", f"{a}v_proj", f"{a}out_proj", f"{theirs}{their_norm}"

    attentions = [attention("self_attn", "attn_norm", "self_attn", "self_attn_layer_norm")]
    if cross:
        attentions.append(attention("cross_attn", "cross_norm", "encoder_attn", "encoder_attn_layer_norm"))
    return _block_rules(c, ours, attentions, (f"{theirs}fc1", f"{theirs}fc2", f"{theirs}final_layer_norm"))


def _bart_rules(c: ModelConfig, has_head: bool) -> list[Rule]:
    m = "model."
    tied = [f"{m}encoder.embed_tokens.weight", f"{m}decoder.embed_tokens.weight"]
    out = [rule("embeddings.tok.weight", f"{m}shared.weight", aliases=tied + (["lm_head.weight"] if c.tie else [])),
           rule("embeddings.pos.weight", f"{m}encoder.embed_positions.weight"),
           rule("dec_embedding.pos.weight", f"{m}decoder.embed_positions.weight")]
    out += linear_rules("embeddings.norm", f"{m}encoder.layernorm_embedding")
    out += linear_rules("dec_embedding.norm", f"{m}decoder.layernorm_embedding")
    for i in range(c.n_enc):
        out += _bart_layer(c, f"enc.{i}.", f"{m}encoder.layers.{i}.", cross=False)
    for i in range(c.n_dec):
        out += _bart_layer(c, f"dec.{i}.", f"{m}decoder.layers.{i}.", cross=True)
    if has_head:
        out.append(rule("head.bias", "final_logits_bias", layout="row"))
    return out if c.tie else out + [rule("head.weight", "lm_head.weight")]


BART = Family("bart", "bart", "BartForConditionalGeneration", "BartModel", "model.", _bart_config, _bart_to_hf,
              _bart_required, _bart_rules, has_head=lambda c: c.head_bias)

FAMILIES = (GPT2, NEOX, LLAMA, BERT, BART)


def family_of_class(class_name: str) -> tuple[Family, bool]:
    """(family, has_head) for a transformers class name such as "BertForMaskedLM"."""
    for family in FAMILIES:
        if class_name in (family.head_class, family.base_class):
            return family, class_name == family.head_class
    supported = [name for f in FAMILIES for name in (f.head_class, f.base_class)]
    raise GlassformerError(f"unsupported architecture {class_name!r}; glassformer converts {', '.join(supported)}")


def family_of_config(config: ModelConfig) -> Family:
    """The family a glassformer config can be exported as; ValueError says why none fits."""
    reasons = []
    for family in FAMILIES:
        try:
            family.check_exportable(config)
            return family
        except ValueError as error:
            reasons.append(str(error))
    raise GlassformerError(f"no Hugging Face architecture matches this ModelConfig{_why_none(config)}: "
                           + "; ".join(reasons)
                           + " (a causal LM trained without a preset has GPT-2's shape and converts; docs/interop.md)")


def _why_none(config: ModelConfig) -> str:
    """Why a shape glassformer's recipes train has no family, in one clause (or "")."""
    if config.arch == "lm" and config.attn == "prefix":
        return (" (no transformers causal-LM class lets a prefix attend both ways, so a prefix-LM has no exact "
                "Hugging Face form)")
    if config.arch == "lm" and config.attn == "bidirectional" and config.norm_first:
        return (" (the encoder family, BERT, is post-norm with an embedding LayerNorm; a pre-norm encoder "
                "computes other numbers, so it has no exact Hugging Face form)")
    if config.arch == "encoder-decoder" and (config.norm_first or config.pos != "learned"):
        return (" (the encoder-decoder family, BART, is post-norm with learned positions and embedding norms; "
                "this encoder-decoder computes other numbers, so it has no exact Hugging Face form)")
    if config.qk_norm:
        return (" (qk_norm: no family here normalises queries and keys per head without a weight, so the model has "
                "no exact Hugging Face form; train with model.qk_norm false to convert)")
    return ""
