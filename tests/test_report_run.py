"""The run page (``glassformer inspect OUT_DIR``): from a watched run's folder, in a real browser
(Debian's Chromium driven by Playwright, offline), readable with 1, 12 and 48 heads."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from glassformer.cli import main
from glassformer.errors import MissingFileError
from glassformer.training.microscope import META, RECORDS
from glassformer.viz.report_run import gather_run, write_run_page
from test_report_browser import open_report
from training_helpers import config, train


def fake_run(folder, layers: int, heads: int, steps: int = 12, tokens: int = 10):
    """A run folder with metrics and microscope records of the right shapes (random values)."""
    folder.mkdir(parents=True)
    rng = random.Random(0)
    (folder / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "train_loss": 4.0 - s / steps}) + "\n" for s in range(1, steps + 1)))
    watched = [[i, 0] for i in range(layers)]
    (folder / META).write_text(json.dumps({"tokens": [f"t{i}" for i in range(tokens)], "heads": watched}))

    def table():
        return [[round(rng.random(), 3) for _ in range(heads)] for _ in range(layers)]

    records = [{"step": s, "loss_first": 4.0, "loss_repeat": 4.0 - 3 * s / steps, "previous_token": table(),
                "induction": table(), "duplicate": table(), "entropy": table(),
                "lens_loss": [4.0 - i / layers for i in range(layers + 1)], "resid_norm": [1.0] * (layers + 1),
                "weight_norm": [2.0] * layers,
                "attention": {f"{i}.0": [[1.0 if k == q else 0.0 for k in range(tokens)] for q in range(tokens)]
                              for i in range(layers)}} for s in range(0, steps + 1, 2)]
    (folder / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_inspect_writes_the_page_of_a_watched_run(tmp_path, capsys):
    torch.set_num_threads(1)
    train(config(tmp_path, max_steps=4, watch={"every": 2, "probe_length": 3, "probe_batch": 2}))
    assert main(["inspect", str(tmp_path / "run")]) == 0
    page = (tmp_path / "run" / "run.html").read_text(encoding="utf-8")
    assert "run page written" in capsys.readouterr().out
    data = json.loads(page.split('id="gf-run-data">')[1].split("</script>")[0])
    assert [r["step"] for r in data["records"]] == [0, 2, 4]
    assert 'id="gf-chart-probe"' in page and 'data-kind="induction"' in page and "http" not in page.split(
        "<body>")[1].replace("http-equiv", "")


def test_inspect_of_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(MissingFileError, match="not a training run folder"):
        gather_run(tmp_path)
    assert main(["inspect", str(tmp_path)]) != 0  # no metrics.jsonl, no --text: a usage error, not a traceback


def test_a_crafted_record_key_cannot_reach_the_page(tmp_path):
    """A microscope.jsonl whose attention key is markup is refused in one line (it reached data-head
    unescaped), and the page's policy runs its own script only (no 'unsafe-inline')."""
    import base64
    import hashlib
    import re

    from glassformer.errors import BadFileError

    run = fake_run(tmp_path / "run", layers=1, heads=1)
    records = run / RECORDS
    evil = '0.0"><img src=x onerror=alert(1)>'
    records.write_text(records.read_text().replace('"0.0"', json.dumps(evil)))
    with pytest.raises(BadFileError, match="'attention' must be a mapping of 'layer.head'"):
        gather_run(run)
    assert main(["inspect", str(run)]) == 2 and not (run / "run.html").exists()
    page = write_run_page(fake_run(tmp_path / "good", layers=1, heads=1)).read_text(encoding="utf-8")
    policy = re.search(r'Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    code = page.rsplit("<script>", 1)[1].split("</script>")[0]
    digest = base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy


def test_attribution_beside_exact_patching(tmp_path):
    torch.manual_seed(0)
    from glassformer import TransformerLM
    from glassformer.interpret.attribution import ATTRIBUTION, induction_patching

    model = TransformerLM(vocab_size=30, d_model=16, n_heads=2, n_layers=2, max_len=24, attn_only=True).eval()
    found = induction_patching(model, length=6, batch=4, low=1, bos=0)
    assert torch.tensor(found["estimate"]).shape == torch.tensor(found["exact"]).shape == (2, 2)
    assert len(found["top_exact"]) == 3 and -1 <= found["correlation"] <= 1
    folder = fake_run(tmp_path / "run", 2, 2)
    (folder / ATTRIBUTION).write_text(json.dumps(found))
    page = write_run_page(folder).read_text(encoding="utf-8")
    assert 'class="gf-head-table gf-estimate"' in page and 'class="gf-head-table gf-exact"' in page
    assert f"Correlation over heads: {found['correlation']:.3f}" in page


def test_an_unwatched_run_says_how_to_watch_it(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text('{"step": 1, "train_loss": 3.0}\n')
    assert "add a <code>watch:</code> block" in write_run_page(folder).read_text(encoding="utf-8")


@pytest.mark.browser
@pytest.mark.parametrize("layers, heads", [(1, 1), (2, 12), (4, 48)])
def test_run_page_in_a_browser(browser, tmp_path, layers, heads):  # noqa: F811
    page_path = write_run_page(fake_run(tmp_path / f"run{heads}", layers, heads))
    page, problems = open_report(browser, page_path)
    assert problems == []
    slider = page.locator("#gf-step")
    assert slider.get_attribute("max") == "6" and page.get_attribute("body", "data-step") == "12"
    heatmap = page.locator('.gf-heatmap canvas[data-kind="induction"]')
    before = heatmap.evaluate("c => c.toDataURL()")
    size = heatmap.evaluate("c => [c.width, c.height]")
    cell = (size[0] - 30) / heads
    assert 10 <= cell <= 40 and (size[1] - 14) / layers >= 12  # cells big enough to see, 48 heads or 1
    heatmap.hover(position={"x": 30 + cell * min(1.5, heads - 0.5), "y": 14 + 6})  # layer 0, head 1 (or 0)
    assert heatmap.get_attribute("title").startswith(f"induction, step 12: layer 0, head {min(1, heads - 1)} = ")
    slider.fill("1")  # a range input: fill sets the value and fires "input"
    assert page.get_attribute("body", "data-step") == "2"
    assert heatmap.evaluate("c => c.toDataURL()") != before, "another step must show other scores"
    assert page.locator(".gf-snap canvas").count() == layers
    assert page.locator("#gf-norm-rows tr").count() == layers + 1
    marker = page.locator("#gf-chart-probe .gf-marker").get_attribute("x1")
    assert float(marker) == pytest.approx(48 + 492 * 2 / 12)  # the plot's left edge + 2/12 of its width
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, "the page must not scroll sideways (wide heatmaps scroll inside their box)"
    page.close()


def _edit_records(run, change) -> None:
    """Rewrite the run's microscope.jsonl with ``change(index, record)`` applied to each record."""
    records = [json.loads(line) for line in (run / RECORDS).read_text().splitlines()]
    for index, record in enumerate(records):
        change(index, record)
    (run / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in records))  # NaN written as Python does


def _not_finite(index, record) -> None:
    if index == 3:
        record["loss_repeat"], record["lens_loss"][0], record["resid_norm"][1] = math.nan, math.inf, None
        record["induction"][0][1], record["entropy"][1][0], record["duplicate"][0][0] = math.nan, None, 10**400


def test_a_non_finite_value_is_null_in_the_page_and_drawn_as_a_gap(tmp_path):
    """NaN, infinity, null and a 400-digit number in microscope.jsonl and metrics.jsonl: the page's data is
    strict JSON (JSON.parse refused the NaN token, so the page stayed blank), each such value null; the charts
    leave it out."""
    run = fake_run(tmp_path / "run", layers=2, heads=2)
    _edit_records(run, _not_finite)
    with open(run / "metrics.jsonl", "a") as metrics:
        metrics.write('{"step": 13, "train_loss": NaN}\n{"step": 14, "train_loss": 1' + "0" * 400 + "}\n")
    page = write_run_page(run).read_text(encoding="utf-8")
    text = page.split('id="gf-run-data">')[1].split("</script>")[0]
    data = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the page's data"))
    shown = data["records"][3]
    assert (shown["loss_repeat"], shown["lens_loss"][0], shown["resid_norm"][1], shown["induction"][0][1],
            shown["entropy"][1][0], shown["duplicate"][0][0]) == (None,) * 6
    assert data["records"][2]["loss_repeat"] == pytest.approx(4.0 - 3 * 4 / 12)


BROKEN_RUNS = {  # what a run folder may hold -> the one line inspect prints
    "a step of 1 and 400 zeros": (lambda run: (run / "metrics.jsonl").write_text(
        '{"step": 1' + "0" * 400 + ', "train_loss": 2.0}\n'), "integer 'step' in"),
    "a huge step in the records": (lambda run: _edit_records(
        run, lambda i, r: r.update(step=10**400) if i == 6 else None), "integer 'step' in"),
    "records without loss_first": (lambda run: _edit_records(run, lambda i, r: r.pop("loss_first")),
                                   "no 'loss_first'"),
    "a table that is not one": (lambda run: _edit_records(run, lambda i, r: r.update(induction=[1.0, 2.0])),
                                "'induction' must be a table"),
    "norms of the wrong length": (lambda run: _edit_records(run, lambda i, r: r.update(weight_norm=[1.0])),
                                  "'weight_norm' must be a list of 2"),
    "an icl score that is a list": (lambda run: _edit_records(run, lambda i, r: r.update(icl_score=[1.0])),
                                    "'icl_score' must be a number"),
    "attribution without estimate": (lambda run: (run / "attribution.json").write_text(
        '{"exact": [[0.1, 0.2]], "correlation": 0.5}'), "has no 'estimate'"),
    "attribution with text for numbers": (lambda run: (run / "attribution.json").write_text(json.dumps(
        {"estimate": [["x"]], "exact": [[0.1]], "correlation": 0.5, "top_estimate": [], "top_exact": [],
         "clean_metric": 1.0, "corrupted_metric": 0.0})), "'estimate' must be a table of numbers"),
    "settings whose probe_lengths is a number": (lambda run: (run / META).write_text(
        '{"watch": {"probe_lengths": 5}}'), "probe_lengths a list"),
    "attribution with a 400-digit head": (lambda run: (run / "attribution.json").write_text(json.dumps(
        {"estimate": [[0.5]], "exact": [[0.1]], "correlation": 0.5, "top_estimate": [[0, 10**400, 0.5]],
         "top_exact": [], "clean_metric": 1.0, "corrupted_metric": 0.0})), "'top_estimate' must be a list of"),
    "settings whose watch is a list": (lambda run: (run / META).write_text('{"watch": [1], "tokens": []}'),
                                       "'watch' must be an object"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_RUNS))
def test_inspect_of_a_damaged_run_folder_is_one_line(tmp_path, capsys, case):
    """``inspect RUN`` on a run folder someone edited: one line naming the file and what is wrong, no page."""
    run = fake_run(tmp_path / "run", layers=2, heads=2)
    damage, message = BROKEN_RUNS[case]
    damage(run)
    assert main(["inspect", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("glassformer: error: ") and err.count("\n") == 1 and message in err, err
    assert not (run / "run.html").exists()


@pytest.mark.browser
def test_a_run_page_with_non_finite_values_draws_in_a_browser(browser, tmp_path):  # noqa: F811
    """The page of a run whose records hold NaN, infinity and null draws (no script error) at every step."""
    run = fake_run(tmp_path / "run", layers=2, heads=2)
    _edit_records(run, _not_finite)
    page, problems = open_report(browser, write_run_page(run))
    for step in range(7):
        page.locator("#gf-step").fill(str(step))
        assert page.get_attribute("body", "data-step") == str(2 * step)  # each step shown, step 6 (NaN) too
    assert problems == [] and page.locator("#gf-norm-rows tr").count() == 3
    page.close()
