"""The training microscope's recorder: interpretability probes recorded into the run folder while a model trains.

At step 0 and every ``every`` steps, :class:`Microscope` runs the model (eval mode, random state untouched)
on two fixed probes and appends one record (what interpret/measurements.py measures: head scores, losses, lens,
norms, attention snapshots; and the user's ``measurements``, imported by name) to ``out_dir/microscope.jsonl``,
its scalars to the run's trackers (docs/interpret.md). :func:`replay` records the same over saved models.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import ArgumentTypeError, BadFileError, GlassformerError, MeasurementError
from ..interpret.detectors import probe_lengths, repeated_tokens
from ..interpret.measurements import Measurement, Probe, head_score_record, text_probe_record
from ..io.budget import check_fits, describe, model_bytes, probe_bytes
from ..io.checks import check_int, first_line, shown
from ..io.fileio import atomic_write, fsync_file
from ..io.loaders import load_json, read_records
from ..io.records import record_line
from ..models import TransformerLM
from ..models.inputs import check_token_ids
from ..validate import CheckedConfig, CommandLineText, check_fields, option
from .trackers import finite_numbers

RECORDS, META = "microscope.jsonl", "microscope.json"
MAX_MEASURED_NUMBERS = 10_000  # one measurement's numbers in one record, at most (records stay small)


@dataclass
class WatchConfig(CheckedConfig):
    """The ``watch:`` block of a training config: what the microscope records, and how often (every key
    is described in docs/interpret.md; ``every`` 0: at each evaluation and at the end). A string value (every
    field is a number, list or mapping) is read as its field's type (:func:`glassformer.validate.typed_text`:
    YAML only for lists and mappings)."""

    WHAT = "watch"
    every: int = option(0, ge=0)
    probe_length: int | None = option(None, ge=2)
    probe_batch: int = option(16, ge=1)
    text_rows: int = option(4, ge=1)
    snapshot_tokens: int = option(24, ge=1)
    heads: list[list[int]] = option(factory=list)
    probe_lengths: list[int] = option(factory=list)
    measurements: dict[str, str] = option(factory=dict)

    def __post_init__(self) -> None:
        for f in fields(self):
            if isinstance(getattr(self, f.name), str):
                setattr(self, f.name, CommandLineText(getattr(self, f.name)))
        check_fields(self, "watch.", coerce=True)
        if not all(isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(i, int) for i in p)
                   for p in self.heads):
            raise ArgumentTypeError(f"watch.heads must be a list of [layer, head] pairs, got {self.heads!r:.80}")
        for n in self.probe_lengths:
            check_int("watch.probe_lengths[]", n, 2)
        if not all(isinstance(k, str) and isinstance(v, str) and ":" in v for k, v in self.measurements.items()):
            raise ArgumentTypeError("watch.measurements must map names to 'package.module:function' strings, "
                                    f"got {self.measurements!r:.80}")


def record_scalars(record: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of one microscope record as tracker scalars: ``microscope/L{l}H{h}/{score}``,
    ``microscope/{lens_loss|resid_norm}/{i}``, ``microscope/weight_norm/L{l}``,
    ``microscope/{loss_first|loss_repeat|icl_score}``, ``microscope/measurements/{name}[/{key}]``."""
    out: dict[str, Any] = {}
    for score in ("previous_token", "induction", "duplicate", "entropy"):
        for layer, row in enumerate(record.get(score) or []):
            out.update({f"L{layer}H{head}/{score}": value for head, value in enumerate(row)})
    for series, prefix in (("lens_loss", ""), ("resid_norm", ""), ("weight_norm", "L")):
        out.update({f"{series}/{prefix}{place}": value for place, value in enumerate(record.get(series) or [])})
    out.update({name: record.get(name) for name in ("loss_first", "loss_repeat", "icl_score")})
    for name, value in (record.get("measurements") or {}).items():
        if isinstance(value, dict):
            out.update({f"measurements/{name}/{key}": item for key, item in value.items()})
        else:
            out[f"measurements/{name}"] = value
    return {f"microscope/{name}": value for name, value in finite_numbers(out).items()}


def _user_call(fn: Any, *args: Any, failed: str, end: str = "") -> Any:
    """``fn(*args)``: whatever the user's code raises (SystemExit included, Ctrl-C aside) is one MeasurementError
    line: ``failed``, the error's type and first line, ``end``."""
    try:
        return fn(*args)
    except (Exception, SystemExit) as error:  # the user's code: any error is one line naming it
        raise MeasurementError(f"{failed}{type(error).__name__}: {first_line(error)[:200]}{end}") from None


def _import_measurement(name: str, spec: str) -> Measurement:
    """The function ``spec`` ("package.module:function") names, taking (model, probe)."""
    module_name, _, attr = spec.partition(":")
    where = f"watch.measurements.{name}"
    fn = _user_call(lambda: getattr(importlib.import_module(module_name), attr),
                    failed=f"{where}: cannot import {spec!r} (", end=")")
    return _checked_function(where, spec, fn)


def _checked_function(where: str, spec: str, fn: Any) -> Measurement:
    """``fn`` when it can be called as ``fn(model, probe)``, else an error naming ``where``."""
    if not callable(fn):
        raise ArgumentTypeError(f"{where}: {spec!r} must be a function (model, probe) -> numbers, "
                                f"got {type(fn).__name__}")
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise ArgumentTypeError(f"{where}: {spec!r} must take two arguments (model, probe), its signature is "
                                f"{inspect.signature(fn)}") from None
    except ValueError:  # a builtin without a signature: called as it is
        pass
    return fn


def _spec(name: str, fn: Measurement, named: dict[str, str]) -> str:
    """How ``microscope.json`` names a measurement: its ``watch.measurements`` string, else module:qualname."""
    return named.get(name) or f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__name__)}"


MAX_MEASURED_DEPTH = 32  # lists and dicts inside one another in a measurement's result, at most


def _checked_value(name: str, value: Any) -> Any:
    """A measurement's result as JSON-able numbers (tensors as lists), its size checked before any conversion."""
    count = 0

    def counted(n: int) -> None:
        nonlocal count
        count += n
        if count > MAX_MEASURED_NUMBERS:
            raise MeasurementError(f"measurement {name!r} returned more than {MAX_MEASURED_NUMBERS:,} numbers; at "
                                   "most that many fit a record (return a summary)")

    def clean(v: Any, depth: int) -> Any:
        if depth > MAX_MEASURED_DEPTH:
            raise MeasurementError(f"measurement {name!r} returned lists or dicts nested more than "
                                   f"{MAX_MEASURED_DEPTH} deep (or holding themselves)")
        if isinstance(v, torch.Tensor):
            counted(v.numel())  # before any copy
            v = v.detach().double().cpu()
            return v.item() if v.dim() == 0 else v.tolist()
        counted(1)  # a number, a string, or one list or dict
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, (list, tuple)):
            return [clean(x, depth + 1) for x in v]
        if isinstance(v, dict):
            return {str(k): clean(x, depth + 1) for k, x in v.items()}
        raise MeasurementError(f"measurement {name!r} returned a {type(v).__name__}; expected numbers, "
                               "tensors, or lists and dicts of them")
    return clean(value, 0)


class Microscope:
    """Records the probes of one run on a causal TransformerLM (``probe_text`` (R, T) ids, ``tokens`` row 0's
    strings); made by the trainer from ``config.watch``. OutOfMemoryError for probes that cannot fit."""

    def __init__(self, watch: WatchConfig, model: nn.Module, probe_text: torch.Tensor, tokens: list[str],
                 eval_every: int, max_steps: int, bos: int | None = None, low: int = 0, max_memory: Any = None):
        if not isinstance(model, TransformerLM) or model.config.attn != "causal":
            raise GlassformerError("watch: the microscope reads causal TransformerLMs (objective clm); "
                                   f"this run trains a {type(model).__name__} with attn={model.config.attn!r}")
        c = model.config
        self.watch, self.eval_every, self.max_steps, self.bos, self.low = watch, eval_every, max_steps, bos, low
        self.probe_text, self.tokens = probe_text, tokens
        L, h = c.n_layers, c.n_heads
        for layer, head in watch.heads:
            if not (0 <= layer < L and 0 <= head < h):
                raise GlassformerError(f"watch.heads: [{layer}, {head}] is out of range for {L} layers x {h} heads")
        self.heads = [list(p) for p in watch.heads] or (
            [[i, j] for i in range(L) for j in range(h)] if L * h <= 16 else [[i, 0] for i in range(L)])
        self.probe_length, self.lengths = probe_plan(watch, c, 1 if bos is not None else 0, max_memory)
        (rows, length), held = probe_text.shape, model_bytes(c)
        check_fits(probe_bytes(c, rows, length, residuals=True),
                   f"the microscope's text probe (watch.text_rows={shown(watch.text_rows)}: {rows:,} rows of "
                   f"{length} tokens, {describe(c)})", max_memory, held)
        self.measurements: dict[str, Measurement] = {
            name: _import_measurement(name, spec) for name, spec in watch.measurements.items()}
        self.file: Path | None = None
        self.tracker: Any = None  # a training Tracker (attach): each record's scalars go to TensorBoard/W&B too

    def add(self, name: str, fn: Measurement) -> None:
        """Record ``fn(model, probe)`` under ``record["measurements"][name]`` (a new name) at every recording
        step: a number, a tensor, or a dict or list of them (at most ``MAX_MEASURED_NUMBERS``), computed in
        eval mode with gradients allowed."""
        if not isinstance(name, str) or not name or name in self.measurements:
            raise GlassformerError(f"measurement name {name!r} is empty or taken; taken: {sorted(self.measurements)}")
        self.measurements[name] = _checked_function(f"measurement {name!r}", getattr(fn, "__name__", "fn"), fn)

    def start(self, out_dir: str | Path, step: int, model: nn.Module) -> None:
        """Begin (or continue after ``step``) the series in ``out_dir``; record step 0 on a fresh run."""
        out = Path(out_dir)
        self.file = out / RECORDS
        kept = [r for r in read_records(self.file) if r["step"] <= step] if step > 0 else []
        atomic_write(self.file, "".join(record_line(r, compact=True) for r in kept))
        watch = {**asdict(self.watch), "probe_length": self.probe_length, "probe_lengths": self.lengths}
        meta = {"tokens": self.tokens, "heads": self.heads, "watch": watch,
                "n_layers": model.config.n_layers, "n_heads": model.config.n_heads,
                "measurements": {name: _spec(name, fn, self.watch.measurements)
                                 for name, fn in self.measurements.items()},
                "probe_text": self.probe_text.tolist()}  # what a replay reads (training.replay)
        atomic_write(out / META, json.dumps(meta, indent=1) + "\n")
        if step == 0:
            self.record(model, 0)

    def attach(self, tracker: Any, fresh: bool) -> None:
        """Send each record's scalars (:func:`record_scalars`) to ``tracker.log(step, values)`` from now on;
        when ``fresh``, also the records written before the trackers opened (step 0)."""
        self.tracker = tracker
        if fresh and self.file is not None:
            for record in read_records(self.file):
                tracker.log(record["step"], record_scalars(record))

    def due(self, step: int) -> bool:
        """Whether ``step`` (just finished) is a recording step."""
        every = self.watch.every or self.eval_every
        return step == self.max_steps or bool(every) and step % every == 0

    def record(self, model: nn.Module, step: int) -> dict[str, Any]:
        """Measure ``model`` now and append the record (flushed to disk); returns it."""
        record = self.measure(model, step)
        if self.file is not None:
            with open(self.file, "a", encoding="utf-8") as handle:
                handle.write(record_line(record, compact=True))
            fsync_file(self.file)
        if self.tracker is not None:
            self.tracker.log(step, record_scalars(record))
        return record

    def measure(self, model: TransformerLM, step: int) -> dict[str, Any]:
        """One record (see the module's text); the model is back in its mode afterwards."""
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                heads = head_score_record(model, self.lengths, self.probe_length, self.watch.probe_batch,
                                          low=self.low, bos=self.bos)
                text = text_probe_record(model, self.probe_text, self.heads, self.watch.snapshot_tokens)
                record = {"step": step, **heads, **text}
            if self.measurements:
                record["measurements"] = self._user_measurements(model, step)
            return record
        finally:
            model.train(was_training)

    def probe(self, model: TransformerLM, step: int) -> Probe:
        """The fixed :class:`Probe` the measurements read, on ``model``'s device."""
        device = model.emb.weight.device
        ids = repeated_tokens(model.config.vocab_size, self.probe_length, self.watch.probe_batch, low=self.low,
                              bos=self.bos).to(device)
        return Probe(self.probe_text.to(device), ids, self.probe_length, 0 if self.bos is None else 1, step,
                     self.low, self.bos)

    def _user_measurements(self, model: TransformerLM, step: int) -> dict[str, Any]:
        """Each registered measurement's value; their random numbers and the parameters' gradients are put back."""
        probe = self.probe(model, step)
        params = list(model.parameters())
        grads = [p.grad for p in params]
        devices = [model.emb.weight.device] if model.emb.weight.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices), torch.enable_grad():
                return {name: _checked_value(name, _user_call(fn, model, probe,
                                                              failed=f"measurement {name!r} failed: "))
                        for name, fn in self.measurements.items()}
        finally:
            for p, g in zip(params, grads):
                p.grad = g


def probe_plan(watch: WatchConfig, c: Any, extra: int, max_memory: Any = None) -> tuple[int, list[int]]:
    """The repeated-tokens probe's length and every length recorded (longest first) for a model of config ``c``
    (``extra``: 1 when a <bos> starts each probe row); a GlassformerError when the longest does not fit
    ``c.max_len`` or its forward (all layers' attention patterns kept) does not fit in memory."""
    probe_length = watch.probe_length or max(2, min(20, (c.max_len - extra) // 2))
    lengths = sorted(set(watch.probe_lengths or probe_lengths(probe_length)) | {probe_length}, reverse=True)
    longest = 2 * lengths[0] + extra
    if longest > c.max_len:
        raise GlassformerError(f"watch.probe_length(s) up to {lengths[0]} need max_len >= {longest}, the model "
                               f"has {c.max_len}")
    check_fits(probe_bytes(c, watch.probe_batch, longest),
               f"the microscope's repeated-tokens probe (watch.probe_batch={shown(watch.probe_batch)} rows of "
               f"{longest} tokens, {describe(c)})", max_memory, model_bytes(c))
    return probe_length, lengths


def microscope_for_run(watch: dict[str, Any], model: nn.Module, tokenizer: Any, batches: Any, eval_every: int,
                       max_steps: int, block_size: int, max_memory: Any = None) -> Microscope:
    """The :class:`Microscope` of a training run, its probe text the first validation (or training) rows."""
    config = WatchConfig.from_dict(watch)
    rows = next(iter(batches.eval_batches(config.text_rows, 1)), None) or batches.global_batch(0, config.text_rows)
    return _microscope(config, model, tokenizer, rows["ids"][:config.text_rows, :block_size].cpu(), eval_every,
                       max_steps, max_memory)


def _microscope(config: WatchConfig, model: nn.Module, tokenizer: Any, text: torch.Tensor, eval_every: int,
                max_steps: int, max_memory: Any = None) -> Microscope:
    """A :class:`Microscope` on the probe ``text`` (R, T) ids, its tokens, <bos> and lowest random id from
    ``tokenizer`` (the repeated-tokens probe starts with <bos>, as the model's rows do)."""
    tokens = tokenizer.tokens(text[0, :config.snapshot_tokens].tolist())
    return Microscope(config, model, text, tokens, eval_every, max_steps, bos=tokenizer.bos_id,
                      low=_probe_low(tokenizer), max_memory=max_memory)


def _probe_low(tokenizer: Any) -> int:
    """The lowest id of the probes' random tokens: above every special token (0 when they take half the ids)."""
    low = max(tokenizer.special_tokens.values(), default=-1) + 1
    return low if low < tokenizer.vocab_size // 2 else 0


def recorded_probe(run_dir: str | Path) -> tuple[torch.Tensor, dict[str, Any]] | None:
    """(probe text (R, T) ids, watch settings) a training run's microscope recorded in ``run_dir/microscope.json``
    (None without that file, or for one written before it held the probe text); a BadFileError for a crafted one."""
    file = Path(run_dir) / META
    if not file.is_file():
        return None
    meta = load_json(file, "microscope settings")  # bounded in bytes (a crafted file too)
    text = meta.get("probe_text") if isinstance(meta, dict) else None
    if text is None:
        return None
    watch = meta.get("watch")
    rows = text if isinstance(text, list) and text and isinstance(text[0], list) else [[]]
    if not isinstance(watch, dict) or not all(
            isinstance(r, list) and 2 <= len(r) == len(rows[0]) and all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in r) for r in rows):
        raise BadFileError(f"microscope settings {str(file)!r}: probe_text must be rows of token ids (two or more "
                           "each, all rows of one length) and watch an object")
    watch = {k: v for k, v in watch.items() if k != "measurements"}  # functions are passed to replay, not imported
    return torch.tensor(rows, dtype=torch.long), watch


def replay(series: Iterable[tuple[int, nn.Module, Any]], out_dir: str | Path | None = None, *,
           measurements: dict[str, Measurement] | None = None, watch: dict[str, Any] | None = None,
           probe_text: torch.Tensor | None = None) -> list[dict[str, Any]]:
    """Record the microscope (and ``measurements``, as :meth:`Microscope.add` takes them) over a series of
    (step, model, tokenizer) triples of one shape into ``out_dir`` (None: nowhere); returns the records.
    ``probe_text``: (R, T) ids, default random tokens (seed 1), ``text_rows`` x min(64, max_len) (a training
    run's replay reads its run's: :func:`recorded_probe`)."""
    config = WatchConfig.from_dict(dict(watch or {}))
    records: list[dict[str, Any]] = []
    scope: Microscope | None = None
    first: dict[str, Any] | None = None
    for step, model, tokenizer in series:
        check_int("step", step, 0)
        if scope is None:
            if probe_text is not None:
                check_token_ids(probe_text, tokenizer.vocab_size, "probe_text")
                if probe_text.shape[0] < 1 or not 2 <= probe_text.shape[1] <= model.config.max_len:
                    raise GlassformerError(f"probe_text must be (R >= 1, T) ids with 2 <= T <= max_len="
                                           f"{model.config.max_len}, got shape {tuple(probe_text.shape)}")
            else:
                probe_text = torch.randint(_probe_low(tokenizer), tokenizer.vocab_size,
                                           (config.text_rows, min(64, model.config.max_len)),
                                           generator=torch.Generator().manual_seed(1))
            scope = _microscope(config, model, tokenizer, probe_text[:config.text_rows].cpu(), 0, 0)
            for name, fn in (measurements or {}).items():
                scope.add(name, fn)
            first = model.config.to_dict()
            if out_dir is not None:
                Path(out_dir).mkdir(parents=True, exist_ok=True)
                scope.start(out_dir, -1, model)  # a new series: nothing kept, no step-0 record made here
        elif model.config.to_dict() != first:
            raise GlassformerError(f"the model of step {step} has another shape than the series' first")
        records.append(scope.record(model, step))
    if scope is None:
        raise GlassformerError("replay needs at least one (step, model, tokenizer) in series, got none")
    return records
