"""ModelConfig: every architectural choice of a model in one dataclass, checked when made (the models
trust it), round-tripped through JSON (a checkpoint's ``config.json``), with named presets."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ArgumentTypeError, BadFileError, GlassformerError
from .io.loaders import MAX_CONFIG_BYTES, load_json, parse_json
from .validate import DictConfig, check_choice, check_fields, option

# The choices of the string fields (nn/ reads ACTIVATIONS and NORMS from here).
ARCHS = ("lm", "encoder-decoder")
ATTN_TYPES = ("causal", "bidirectional", "prefix")
POS_TYPES = ("sinusoidal", "learned", "rope", "alibi", "none")
NORMS = ("layernorm", "rmsnorm")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu")


# The rules between fields: (is the config ``c`` broken, the message that says how; str.format reads ``c``).
CROSS_FIELD_RULES: tuple[tuple[Callable[[Any], bool], str], ...] = (
    (lambda c: c.d_model % c.n_heads != 0, "d_model={c.d_model} must be divisible by n_heads={c.n_heads}"),
    (lambda c: c.n_heads % c.kv_heads != 0, "n_heads={c.n_heads} must be divisible by n_kv_heads={c.kv_heads}"),
    (lambda c: c.pos == "sinusoidal" and c.d_model % 2 != 0,  # sinusoids and RoPE pair up dimensions
     "pos='sinusoidal' needs an even d_model, got d_model={c.d_model}"),
    (lambda c: c.pos == "rope" and c.head_dim % 2 != 0, "pos='rope' needs an even head_dim, got head_dim={c.head_dim}"),
    (lambda c: c.arch == "encoder-decoder" and c.attn != "causal",
     "attn={c.attn!r} does not apply to arch='encoder-decoder' (its encoder is bidirectional and its decoder "
     "causal); leave attn='causal'"),
    (lambda c: c.pos_offset < 0 or (c.pos_offset and c.pos != "learned"),
     "pos_offset={c.pos_offset} must be >= 0 and needs pos='learned', got pos={c.pos!r}"),
    (lambda c: c.split_positions and (c.arch != "encoder-decoder" or c.pos != "learned"),
     "split_positions=True needs arch='encoder-decoder' and pos='learned', got arch={c.arch!r}, pos={c.pos!r}"),
    (lambda c: c.head_transform and (c.arch != "lm" or c.activation in ("swiglu", "geglu")),
     "head_transform needs arch='lm' and a plain activation, got arch={c.arch!r}, activation={c.activation!r}"),
    (lambda c: c.arch == "lm" and c.n_layers < 1, "n_layers must be >= 1 for arch='lm', got {c.n_layers}"),
)


@dataclass(frozen=True)
class ModelConfig(DictConfig):
    """The architecture of a :class:`TransformerLM` or :class:`EncoderDecoder`, immutable; defaults are the
    lesson-2 model. Change fields with :meth:`replace` (a checked copy)."""

    vocab_size: int = option(ge=1)
    arch: str = option("lm", choices=ARCHS)  # "lm": TransformerLM; "encoder-decoder": EncoderDecoder (Vaswani 2017, T5)
    d_model: int = option(64, ge=1)  # width d of every position's vector
    n_heads: int = option(4, ge=1)  # attention heads h; d_model must be divisible by it
    n_layers: int = option(2, ge=0)  # blocks of a TransformerLM
    n_enc: int = option(2, ge=0)  # encoder blocks of an EncoderDecoder
    n_dec: int = option(2, ge=0)  # decoder blocks of an EncoderDecoder
    d_ff: int = option(256, ge=1)  # feed-forward hidden width (4d in the 2017 paper)
    max_len: int = option(512, ge=1)  # longest sequence; a hard limit only for pos="learned"
    attn: str = option("causal", choices=ATTN_TYPES)  # causal (GPT), bidirectional (BERT), prefix (prefix-LM, T5)
    pos: str = option("sinusoidal", choices=POS_TYPES)  # sinusoidal 2017, learned GPT-2/BERT, rope Llama, alibi BLOOM
    tie: bool = True  # output projection shares the token embedding matrix (Press & Wolf 2017)
    norm_first: bool = True  # pre-norm (GPT-2 on) or post-norm (2017, BERT)
    activation: str = option("gelu", choices=ACTIVATIONS)  # relu 2017, gelu BERT, gelu_tanh GPT-2, swiglu Llama
    norm: str = option("layernorm", choices=NORMS)  # "layernorm" or "rmsnorm" (Llama)
    norm_eps: float = option(1e-5, gt=0.0)  # epsilon of every norm (BERT: 1e-12, Llama: 1e-6)
    n_kv_heads: int | None = option(None, ge=1)  # key/value heads for GQA (1 = MQA); None = n_heads (plain MHA)
    bias: bool = True  # biases in linear layers and LayerNorms (Llama and nanoGPT-style: False)
    head_bias: bool = False  # a bias on the output logits (BERT's MLM decoder, the tiny char LM lesson)
    dropout: float = option(0.0, ge=0.0, lt=1.0)  # on embeddings, attention weights and each sub-layer's output
    scale_embeddings: bool = True  # multiply token embeddings by √d (2017 paper, the lessons)
    rope_theta: float = option(10000.0, gt=0.0)  # RoPE frequency base
    n_token_types: int = option(0, ge=0)  # BERT's segment (token type) embeddings; 0 = none
    embed_norm: bool = False  # a norm right after the embeddings (BERT)
    pos_offset: int = 0  # learned position p reads row p + pos_offset of its table (BART: 2, fairseq legacy)
    split_positions: bool = False  # encoder-decoder: decoder's own position table and embedding norm (BART)
    head_transform: bool = False  # dense + activation + norm before the output layer (BERT's MLM head)
    init_std: float | None = option(None, gt=0.0)  # None: the lessons' init; std: GPT-2's N(0, std), residuals / √(2L)
    attn_only: bool = False  # no feed-forward sub-layers (Elhage et al. 2021; configs/induction_heads.yaml)
    qk_norm: bool = False  # self-attention RMS-normalises queries and keys per head (Dehghani et al. 2023)

    def __post_init__(self) -> None:
        check_fields(self)  # each field's type and range; NaN and inf are refused
        for broken, message in CROSS_FIELD_RULES:  # in order: head_dim exists once d_model divides by n_heads
            if broken(self):
                raise GlassformerError(message.format(c=self))

    @property
    def head_dim(self) -> int:
        """Width of one attention head, hd = d_model / n_heads."""
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """Key/value heads actually used: ``n_kv_heads``, or ``n_heads`` when it is None."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    def to_json(self, path: str | Path | None = None) -> str:
        """The config as JSON text; also written to ``path`` when given (:func:`glassformer.io.fileio.atomic_write`:
        a link, a FIFO or a file glassformer did not write there is refused)."""
        from .io.fileio import atomic_write

        text = json.dumps(self.to_dict(), indent=2) + "\n"
        if path is not None:
            atomic_write(path, text, what="model config")
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> ModelConfig:
        """A config from JSON text or a JSON file; a bad file is a BadFileError, a bad field an error naming it."""
        text = str(text_or_path)
        # JSON text starts with "{" (a Path, or a file named "{...}", is a file)
        if not isinstance(text_or_path, str) or not text.lstrip().startswith("{") or os.path.isfile(text):
            data = load_json(text_or_path, "config file", MAX_CONFIG_BYTES)
            try:
                return cls.from_dict(data)
            except GlassformerError as error:
                raise type(error)(f"{text}: {error}") from None
        try:
            data = parse_json(text, "config")
        except BadFileError as error:  # "config is not valid JSON (...)": say it is no file either
            raise BadFileError(f"{error}; nor is {text!r:.120} an existing file") from None
        return cls.from_dict(data)

    def replace(self, **changes: Any) -> ModelConfig:
        """A validated copy with some fields changed (an unknown field is an error naming it)."""
        return type(self).from_dict({**self.to_dict(), **changes})

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """A named configuration (see ``PRESETS``), optionally with fields overridden."""
        return cls.from_dict({**PRESETS[check_choice("preset", name, sorted(PRESETS))], **overrides})

    @classmethod
    def presets(cls) -> list[str]:
        """The names :meth:`preset` accepts, sorted."""
        return sorted(PRESETS)


PRESETS: dict[str, dict[str, Any]] = {
    # Lesson 2: the small model of the course's lesson 2 (TransformerLM(vocab_size=100, ...)).
    "lesson2": dict(vocab_size=100, d_model=64, n_heads=4, n_layers=2, d_ff=256),
    "lesson2-encdec": dict(vocab_size=100, arch="encoder-decoder", d_model=64, n_heads=4, n_enc=2, n_dec=2, d_ff=256),
    # The tiny character LM lesson: learned positions, untied head with bias, no embedding scale.
    "tiny-char": dict(vocab_size=16, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=16, pos="learned",
                      tie=False, head_bias=True, scale_embeddings=False),
    # nanoGPT's CPU recipe for shakespeare_char (4 layers, 128 wide, no bias).
    "shakespeare-char": dict(vocab_size=65, d_model=128, n_heads=4, n_layers=4, d_ff=512, max_len=64, pos="learned",
                             bias=False, scale_embeddings=False, init_std=0.02),
    # GPT-2 124M (Radford et al. 2019): learned positions, pre-norm, tanh GELU, biases, tied output.
    "gpt2-small": dict(vocab_size=50257, d_model=768, n_heads=12, n_layers=12, d_ff=3072, max_len=1024,
                       pos="learned", activation="gelu_tanh", scale_embeddings=False, dropout=0.1, init_std=0.02),
    # BERT-base (Devlin et al. 2019): post-norm bidirectional encoder, token types, embedding LayerNorm.
    "bert-base": dict(vocab_size=30522, d_model=768, n_heads=12, n_layers=12, d_ff=3072, max_len=512,
                      attn="bidirectional", pos="learned", norm_first=False, norm_eps=1e-12, head_bias=True,
                      scale_embeddings=False, n_token_types=2, embed_norm=True, dropout=0.1, init_std=0.02),
    # The 2017 base model (Vaswani et al.): 6+6 post-norm layers, ReLU, shared 37k vocabulary.
    "vaswani-base": dict(vocab_size=37000, arch="encoder-decoder", d_model=512, n_heads=8, n_enc=6, n_dec=6,
                         d_ff=2048, max_len=512, norm_first=False, activation="relu", dropout=0.1),
    # A small Llama-style decoder: RoPE, RMSNorm, SwiGLU, GQA (8 query / 2 kv heads), no biases, untied.
    "llama-tiny": dict(vocab_size=32000, d_model=256, n_heads=8, n_kv_heads=2, n_layers=4, d_ff=688, max_len=1024,
                       pos="rope", norm="rmsnorm", norm_eps=1e-6, activation="swiglu", bias=False, tie=False,
                       scale_embeddings=False, init_std=0.02),
}


def config_from_args(first: Any, args: tuple, kwargs: dict[str, Any], names: tuple[str, ...],
                     arch: str) -> ModelConfig:
    """The config of ``Model(config)`` or of the lessons' ``Model(vocab_size, *args, **kwargs)`` (``args`` in
    the order ``names``), checked to be of ``arch``."""
    if isinstance(first, ModelConfig):
        if args or kwargs:
            raise ArgumentTypeError("pass either a ModelConfig or keyword arguments, not both "
                                    "(use config.replace(...) to change fields)")
        config = first
    else:  # the lessons' Model(vocab_size, ...): the config's own check names a vocab_size that is no int
        if len(args) > len(names):
            raise ArgumentTypeError(f"too many positional arguments: at most {len(names) + 1} "
                                    f"(vocab_size, {', '.join(names)})")
        positional = dict(zip(names, args))
        clash = sorted(set(positional) & set(kwargs))
        if clash:
            raise ArgumentTypeError(f"argument(s) {clash} given both by position and by keyword")
        config = ModelConfig.from_dict({"vocab_size": first, "arch": arch, **positional, **kwargs})
    if config.arch != arch:
        raise GlassformerError(f"config.arch={config.arch!r} but this model is arch={arch!r}")
    return config
