"""Every state file is checked before a kernel sees a tensor (issue 22, "never trust a file's shapes").

A resume state whose optimizer moments, step counts or RNG states have another shape or dtype, a
safetensors header whose dtype was changed, a changed tokenizer or objective on --resume, missing keys,
wrong types and zero-length files: each is one GlassformerError naming the file. hypothesis then
mutates a real state at random: a resume either works or is one such error, never a crash.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glassformer.errors import BadFileError, GlassformerError
from glassformer.training import load_checkpoint
from glassformer.training.run_dir import STATE, find_resumable
from training_helpers import config, train


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A finished 2-step run (one checkpoint at step 2) to copy and damage."""
    root = tmp_path_factory.mktemp("state")
    train(config(root, "run", max_steps=2, eval_every=2))
    return root


def copy_run(run: Path, tmp_path: Path) -> Path:
    shutil.copytree(run, tmp_path, dirs_exist_ok=True, symlinks=True)
    return tmp_path


def state_file(root: Path) -> Path:
    return find_resumable(root / "run") / STATE


def resume(root: Path, **changes):
    return train(config(root, "run", max_steps=3, eval_every=2, resume=True, **changes))


def rewrite_state(root: Path, change) -> None:
    file = state_file(root)
    state = torch.load(file, weights_only=True)
    change(state)
    torch.save(state, file)


# ---------------------------------------------------------------------- the quoted cases
def test_an_optimizer_moment_of_the_wrong_shape_is_refused_before_the_fused_kernel(run, tmp_path):
    root = copy_run(run, tmp_path)

    def grow(state):
        entry = state["optimizer"]["state"][0]
        entry["exp_avg"] = torch.zeros(entry["exp_avg"].shape[0] * 4, 3)  # once: heap corruption in fused AdamW

    rewrite_state(root, grow)
    with pytest.raises(BadFileError, match=r"train_state\.pt: optimizer\.state\[0\]\.exp_avg holds a tensor of shape"):
        resume(root)


@pytest.mark.parametrize("change,match", [
    (lambda s: s["optimizer"]["state"][0].update(exp_avg_sq=s["optimizer"]["state"][0]["exp_avg_sq"].double()),
     "exp_avg_sq holds a tensor .* dtype torch.float64"),
    (lambda s: s["optimizer"]["state"][0].update(step=torch.tensor([1.0, 2.0])), r"step holds"),
    (lambda s: s["optimizer"]["state"][0].update(step=torch.tensor(float("nan"))), "NaN or infinity"),
    (lambda s: s["optimizer"]["state"][0].update(exp_avg=s["optimizer"]["state"][0]["exp_avg"] * float("inf")),
     "NaN or infinity"),
    (lambda s: s["optimizer"]["state"].update({999: {}}), "names no parameter"),
    (lambda s: s["optimizer"]["param_groups"].pop(), "parameter groups"),
    (lambda s: s["optimizer"]["param_groups"][0].update(betas="fast"), "betas holds 'fast'"),
    (lambda s: s["optimizer"]["param_groups"][-1].update(amsgrad=None), "amsgrad holds None"),  # found by the fuzz
    (lambda s: s["optimizer"]["param_groups"][0].update(params=[0]), "does not hold this model's parameters"),
    (lambda s: s.update(rng_cpu=torch.zeros(7, dtype=torch.uint8)), "rng_cpu holds a tensor of shape"),
    (lambda s: s.update(rng_cpu=torch.get_rng_state().float()), "rng_cpu"),
    (lambda s: s.update(step="2"), "step holds '2'"),
    (lambda s: s.update(step=-3), "step holds -3"),
    (lambda s: s.update(tokens_seen=2**70), "tokens_seen holds"),
    (lambda s: s.update(best_val=float("nan")), "best_val"),
    (lambda s: s.pop("rng_cpu"), r"lacks \['rng_cpu'\]"),
    (lambda s: s.pop("optimizer"), r"lacks \['optimizer'\]"),
    (lambda s: s.update(optimizer=[1, 2]), "optimizer holds"),
    (lambda s: s.update(format=99), "format 99"),
])
def test_a_state_that_does_not_fit_the_run_is_one_line(run, tmp_path, change, match):
    root = copy_run(run, tmp_path)
    rewrite_state(root, change)
    with pytest.raises(BadFileError, match=match) as error:
        resume(root)
    assert "\n" not in str(error.value) and "train_state.pt" in str(error.value)


def _groups(key, value):
    """Set ``key`` in every saved parameter group."""
    return lambda s: [group.update({key: value}) for group in s["optimizer"]["param_groups"]]


def _entries(key, make):
    """Set ``key`` in every parameter's saved state to ``make(entry)`` (None: remove it)."""
    def change(s):
        for entry in s["optimizer"]["state"].values():
            value = make(entry)
            entry.pop(key) if value is None else entry.update({key: value})
    return change


@pytest.mark.parametrize("change,match", [  # issue 47's held-out class: fields of the state torch reads
    (_groups("amsgrad", True), r"amsgrad holds True, expected False \(this run's optimizer\)"),  # KeyError
    (_groups("differentiable", True), "differentiable holds True, expected False"),  # RuntimeError (fused)
    (_groups("capturable", True), "capturable holds True, expected False"),  # a CUDA-graph flag on the CPU
    (_groups("maximize", True), "maximize holds True"),  # trained uphill, silently
    (_groups("decoupled_weight_decay", False), "decoupled_weight_decay holds False, expected True"),
    (_groups("lr", -1.0), r"lr holds -1.0, expected a number in \[0.0, inf\]"),
    (_groups("eps", -1e-8), "eps holds -1e-08"),
    (_groups("betas", (2.0, 0.99)), r"betas holds \(2.0, 0.99\), expected 2 finite numbers in \[0.0, 1.0\)"),
    (_groups("weight_decay", -0.1), "weight_decay holds -0.1"),
    (_entries("max_exp_avg_sq", lambda e: torch.zeros_like(e["exp_avg"])),
     r"holds \['max_exp_avg_sq'\], not kept by this optimizer"),
    (_entries("momentum_buffer", lambda e: torch.zeros_like(e["exp_avg"])), r"holds \['momentum_buffer'\]"),
    (_entries("step", lambda e: None), r"lacks \['step'\]"),  # a KeyError in Adam's step
])
def test_a_state_field_torch_would_read_wrongly_is_one_line(run, tmp_path, change, match):
    root = copy_run(run, tmp_path)
    rewrite_state(root, change)
    with pytest.raises(BadFileError, match=match) as error:
        resume(root)
    assert "\n" not in str(error.value) and "train_state.pt" in str(error.value)


def test_a_muon_state_with_too_many_newton_schulz_steps_is_refused(tmp_path):
    train(config(tmp_path, "run", max_steps=2, eval_every=2, optimizer="muon"))
    rewrite_state(tmp_path, lambda s: [g.update(ns_steps=10_000) for g in s["optimizer"]["muon"]["param_groups"]])
    with pytest.raises(BadFileError, match=r"optimizer\.muon\.param_groups\[0\]\.ns_steps holds 10000, expected a "
                                           r"number in \[1, 100\]"):
        resume(tmp_path, optimizer="muon")


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 truncated", b"\x80\x02]q\x00."])
def test_zero_length_truncated_and_wrong_typed_state_files_are_one_line(run, tmp_path, content):
    root = copy_run(run, tmp_path)
    state_file(root).write_bytes(content)
    with pytest.raises(GlassformerError, match="train_state.pt") as error:
        resume(root)
    assert "\n" not in str(error.value)


def test_a_safetensors_dtype_changed_in_the_header_is_refused(run, tmp_path):
    root = copy_run(run, tmp_path)
    file = find_resumable(root / "run") / "model.safetensors"
    data = file.read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    raw = data[8:8 + size]
    at = raw.index(b'"dtype":"F32"')  # the first tensor's entry: same byte size, so safetensors accepts it
    name = json.loads(raw)  # which tensor that is: the key before this entry
    name = max((k for k in name if k != "__metadata__"), key=lambda k: -abs(raw.index(json.dumps(k).encode()) - at)
               if raw.index(json.dumps(k).encode()) < at else -10**9)
    file.write_bytes(data[:8] + raw[:at] + b'"dtype":"I32"' + raw[at + 13:] + data[8 + size:])
    with pytest.raises(BadFileError, match=f"{name}: dtype I32 in the file, torch.float32 in the model"):
        load_checkpoint(file.parent)


def test_weights_that_are_not_finite_are_refused_at_load(run, tmp_path):
    from safetensors.torch import load_file, save_file

    root = copy_run(run, tmp_path)
    file = find_resumable(root / "run") / "model.safetensors"
    weights = load_file(file)
    name = next(iter(weights))
    weights[name][0] = float("nan")
    save_file(weights, file)
    with pytest.raises(BadFileError, match=f"{name}.* NaN or infinity"):
        load_checkpoint(file.parent)


@pytest.mark.parametrize("content,match", [("[1, 2]", "must hold a JSON object"), ("", "not valid JSON")])
def test_training_json_that_is_not_an_object_is_one_line(run, tmp_path, content, match):
    root = copy_run(run, tmp_path)
    (find_resumable(root / "run") / "training.json").write_text(content)
    with pytest.raises(BadFileError, match=match):
        load_checkpoint(find_resumable(root / "run"))


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "model.safetensors"])
def test_zero_length_checkpoint_files_are_one_line(run, tmp_path, name):
    root = copy_run(run, tmp_path)
    (find_resumable(root / "run") / name).write_bytes(b"")
    with pytest.raises(BadFileError, match=f"{name}' is empty"):
        load_checkpoint(find_resumable(root / "run"))


@pytest.mark.parametrize("changes,match", [
    ({"tokenizer": "byte"}, "its tokenizer is 'char', this run asks for 'byte'"),
    ({"objective": "prefix"}, "objective='clm', this run asks for objective='prefix'"),
    ({"model": {"d_model": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32, "dropout": 0.1}},
     "n_layers=1 in the checkpoint, 2 in this run"),
])
def test_resume_refuses_a_changed_tokenizer_objective_or_model(run, tmp_path, changes, match):
    root = copy_run(run, tmp_path)
    before = (root / "run" / "last" / "training.json").read_text()
    with pytest.raises(GlassformerError, match=match):
        resume(root, **changes)
    assert (root / "run" / "last" / "training.json").read_text() == before


def test_resume_with_the_same_config_still_works(run, tmp_path):
    root = copy_run(run, tmp_path)
    _, result = resume(root)
    assert result["step"] == 3


# ---------------------------------------------------------------------- disk full
@pytest.mark.parametrize("where", ["weights", "state"])
def test_disk_full_while_saving_keeps_the_previous_checkpoint_and_leaves_no_temp_files(run, tmp_path, monkeypatch,
                                                                                       where):
    import glassformer.training.checkpoint as ck

    root = copy_run(run, tmp_path)
    before = sorted(os.listdir(root / "run"))
    last = os.readlink(root / "run" / "last")

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    if where == "weights":
        monkeypatch.setattr(ck, "save_file", full)
    else:
        monkeypatch.setattr(ck.torch, "save", full)
    with pytest.raises(GlassformerError, match="disk is full") as error:
        resume(root)
    assert "\n" not in str(error.value) and "ckpt-000003" in str(error.value)
    assert sorted(os.listdir(root / "run")) == before  # no .ckpt-*.tmp-* left, nothing new
    assert os.readlink(root / "run" / "last") == last
    load_checkpoint(root / "run" / "last", with_state=True)


# ---------------------------------------------------------------------- fuzzed states
MUTATIONS = st.sampled_from(["drop", "shape", "dtype", "type", "nan", "huge", "list", "none"])


def mutate(value, how: str, draw_int: int):
    if how == "drop":
        return None
    if how == "type":
        return ["x", draw_int]
    if how == "none":
        return None
    if how == "huge":
        return 2**80 + draw_int
    if how == "list":
        return [value]
    if torch.is_tensor(value):
        if how == "shape":
            return value.reshape(-1)[: max(value.numel() - 1, 0)] if value.numel() > 1 else torch.zeros(2, 2)
        if how == "dtype":
            return value.to(torch.float16) if value.is_floating_point() else value.to(torch.int32)
        if how == "nan" and value.is_floating_point():
            return value * float("nan")
    return value


def paths(state, prefix=()):
    """Every (path, value) of the nested state."""
    out = [(prefix, state)]
    if isinstance(state, dict):
        for key, value in state.items():
            out += paths(value, (*prefix, key))
    elif isinstance(state, list):
        for index, value in enumerate(state):
            out += paths(value, (*prefix, index))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_states_resume_or_fail_with_one_line(run, tmp_path_factory, data):
    root = copy_run(run, tmp_path_factory.mktemp("fuzz"))
    file = state_file(root)
    state = torch.load(file, weights_only=True)
    targets = [p for p, _ in paths(state) if p]
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(targets))
        how = data.draw(MUTATIONS)
        parent = state
        for key in where[:-1]:
            try:
                parent = parent[key]
            except (KeyError, IndexError, TypeError):
                break
        else:
            # an earlier mutation may have turned this path's dict into a list (or back): the key must fit
            key = where[-1]
            if (isinstance(parent, dict) and key in parent) or \
                    (isinstance(parent, list) and isinstance(key, int) and key < len(parent)):
                if how == "drop" and isinstance(parent, dict):
                    del parent[where[-1]]
                else:
                    parent[where[-1]] = mutate(parent[where[-1]], how, data.draw(st.integers(0, 9)))
    torch.save(state, file)
    try:
        _, result = resume(root)
    except GlassformerError as error:
        assert "\n" not in str(error)
    else:
        assert result["step"] >= 2
