"""One validator for every config class: constraints are declared with the fields and checked when a config
is made (issue 31, point 3).

The cases are generated from the field declarations themselves (type annotation + ``validate.option``), so a
field added to any config class is covered without new test code.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from glassformer import ModelConfig, TransformerLM
from glassformer.errors import ArgumentTypeError, GlassformerError
from glassformer.generation import GenerationConfig
from glassformer.interpret.sae import SAEConfig, SAETrainConfig
from glassformer.training import TrainConfig
from glassformer.training.microscope import WatchConfig
from glassformer.validate import MAX_INT_FIELD, check_fields, option

VALID = {  # each config class with the fields of one valid config (the rest at their defaults)
    ModelConfig: {"vocab_size": 10},
    TrainConfig: {},
    SAEConfig: {"d_in": 4, "d_sae": 8, "k": 2},
    SAETrainConfig: {"hook": "blocks.0.hook_resid_post"},
    WatchConfig: {},
    GenerationConfig: {},
}
# Numeric fields without a declared range: each is checked by its class, with a message of its own (across
# fields, or an id or a list of ids).
CROSS_CHECKED = {(ModelConfig, "pos_offset"), (SAETrainConfig, "buffer_size"), (GenerationConfig, "max_new_tokens"),
                 (GenerationConfig, "eos_token_id")}


def _kind(f: dataclasses.Field) -> str:
    return f.type.split("|")[0].strip()


def bad_values(f: dataclasses.Field) -> list:
    """Values the declaration of ``f`` refuses: NaN/inf for a float, a bool for an int, each side of a
    bound, a string outside the choices."""
    kind, spec, bad = _kind(f), f.metadata, []
    if kind == "float":
        bad += [math.nan, math.inf, -math.inf]
    if kind == "int":
        bad.append(True)
    if kind in ("int", "float"):
        bad += [spec["ge"] - 1] if "ge" in spec else []
        bad += [spec["gt"]] if "gt" in spec else []
        bad += [spec["le"] + 1] if "le" in spec else []
        bad += [spec["lt"]] if "lt" in spec else []
    if kind == "int" and not {"le", "lt"} & set(spec):  # issue 47: an int past any count a run reaches (a raw
        bad.append(MAX_INT_FIELD + 1)  # islice ValueError for eval_batches=10**20, after folders were made)
    if "choices" in spec:
        bad.append("no-such-choice")
    return bad


CASES = [pytest.param(cls, f.name, value, id=f"{cls.__name__}.{f.name}={value!r}")
         for cls in VALID for f in dataclasses.fields(cls) for value in bad_values(f)]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # TrainConfig checks that its out_dir can be made


@pytest.mark.parametrize("cls", list(VALID))
def test_the_valid_configs_are_valid(cls):
    cls(**VALID[cls])


@pytest.mark.parametrize("cls, name, value", CASES)
def test_every_constrained_field_refuses_a_bad_value_at_construction(cls, name, value):
    with pytest.raises(GlassformerError, match=name) as error:
        cls(**{**VALID[cls], name: value})
    assert "\n" not in str(error.value)


def test_the_cases_cover_every_numeric_field_and_every_bound():
    """Every int and float field of every config class declares a range (or is checked across fields)."""
    assert len(CASES) > 150
    for cls in VALID:
        for f in dataclasses.fields(cls):
            if _kind(f) in ("int", "float") and (cls, f.name) not in CROSS_CHECKED:
                assert {"ge", "gt"} & set(f.metadata), f"{cls.__name__}.{f.name} declares no lower bound"


def test_a_model_config_is_valid_from_construction_and_frozen():
    with pytest.raises(GlassformerError, match="norm_eps must be a finite number > 0.0, got nan"):
        ModelConfig(vocab_size=10, norm_eps=float("nan"))
    config = ModelConfig(vocab_size=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.norm_eps = float("nan")
    with pytest.raises(GlassformerError, match="d_model=30 must be divisible by n_heads=4"):
        config.replace(d_model=30)  # a changed copy is a new config, checked when made


def test_the_model_trusts_its_config(monkeypatch):
    """A config is checked once, when made: building a model from it checks nothing again."""
    config, made = ModelConfig(vocab_size=10), []
    original = ModelConfig.__post_init__
    monkeypatch.setattr(ModelConfig, "__post_init__", lambda self: made.append(1) or original(self))
    TransformerLM(config)
    assert made == []
    TransformerLM(10, d_model=16, n_heads=2)  # the lessons' keywords: one config made, checked once
    assert made == [1]


def test_a_training_config_is_a_pure_value(tmp_path):
    """Making a TrainConfig reads no disk and asks for no package; the run's check (training.setup.check_run)
    refuses what the disk or the environment cannot give, naming the key."""
    from glassformer.training.setup import check_run

    a_file = tmp_path / "a.txt"
    a_file.write_text("x")
    config = TrainConfig(data=[str(a_file)], out_dir=str(a_file / "run"), cache_dir=str(tmp_path))
    with pytest.raises(GlassformerError, match=r"out_dir .* is inside .*a.txt', which is a file; it must be a folder"):
        check_run(config)
    with pytest.raises(GlassformerError, match="objective 'clm' needs data"):
        check_run(TrainConfig(out_dir=str(tmp_path)))
    check_run(TrainConfig(data=[str(a_file)], out_dir=str(tmp_path / "run")))


def test_a_changed_training_config_is_checked_again():
    config = TrainConfig(lr="3e-4")  # the command line's string becomes the field's type
    assert config.lr == 3e-4
    config.lr = float("nan")
    with pytest.raises(GlassformerError, match="lr must be a finite number > 0.0, got nan"):
        config.validate()


@dataclasses.dataclass
class Toy:
    share: float = option(0.5, ge=0.0, lt=1.0)
    count: int | None = option(None, gt=0, le=10)
    mode: str = option("a", choices=("a", "b"))
    on: bool = True


@pytest.mark.parametrize("fields, error, message", [
    ({"share": 1.0}, GlassformerError, "share must be a finite number >= 0.0 and < 1.0, got 1.0"),
    ({"share": "0.5"}, ArgumentTypeError, "share must be a float, got '0.5'"),
    ({"count": 0}, GlassformerError, "count must be an int in [1, 10], got 0"),
    ({"count": 2.0}, ArgumentTypeError, "count must be an int, got 2.0"),
    ({"mode": "c"}, GlassformerError, "mode must be one of ['a', 'b'], got 'c'"),
    ({"on": 1}, ArgumentTypeError, "on must be True or False, got 1"),
])
def test_one_validator_serves_any_dataclass(fields, error, message):
    check_fields(Toy())
    check_fields(Toy(count=None, share=0))
    with pytest.raises(error) as raised:
        check_fields(Toy(**fields), "toy.")
    assert str(raised.value) == "toy." + message
