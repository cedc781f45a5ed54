"""The learner's language: the en/zh catalogue (glassformer.viz.i18n), ``--lang`` / the locale on
``glassformer demo`` and ``glassformer inspect``, the report's labels in Chinese (also in a browser)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from glassformer import EncoderDecoder, TransformerLM
from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.interpret.attribution import ATTRIBUTION
from glassformer.lessons import lesson2, tiny_char
from glassformer.tokenizers.char import CharTokenizer
from glassformer.viz import i18n
from glassformer.viz.report import report_html
from glassformer.viz.report_run import write_run_page
from glassformer.viz.report_sae import feature_pages_html, write_feature_pages
from test_report_browser import open_report as browser_open
from test_report_run import fake_run

ROOT = Path(__file__).resolve().parents[1]
TOK = CharTokenizer.from_text("abcdefghijklmnopqrstuvwxyz .?春天来了花开", specials=["pad", "bos", "eos"])
SMALL = dict(d_model=16, n_heads=2, d_ff=32)
HAN = re.compile(r"[\u4e00-\u9fff]")


def _data(page: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="gf-data">(.*?)</script>', page, re.S).group(1))


def _headings(page: str) -> list[str]:
    return re.findall(r"<h[23]>([^<]*)</h[23]>", page)


# ------------------------------------------------------------------------------------------ the catalogue
def test_both_tables_have_the_same_messages_with_the_same_fields():
    assert set(i18n.EN) == set(i18n.ZH)
    different = {k: (i18n.fields(i18n.EN[k]), i18n.fields(i18n.ZH[k])) for k in i18n.EN
                 if i18n.fields(i18n.EN[k]) != i18n.fields(i18n.ZH[k])}
    assert different == {}
    untranslated = [k for k in i18n.EN if i18n.EN[k] == i18n.ZH[k] and HAN.search(i18n.EN[k]) is None
                    and re.search(r"[a-z]{4,}", re.sub(r"\{[^}]*\}", "", i18n.EN[k]))]
    # the words that stay as they are in the course (encoder-decoder, query/key, shapes in ASCII)
    assert set(untranslated) <= {"structure.encoder-decoder", "js.query", "js.key", "lesson2.permutation"}, \
        untranslated


def test_every_label_the_page_script_reads_is_in_the_catalogue():
    script = (ROOT / "src" / "glassformer" / "viz" / "report_assets" / "report.js").read_text(encoding="utf-8")
    used = set(re.findall(r"\bT\.(\w+)", script))
    assert used and used <= set(i18n.js_labels("en")), used - set(i18n.js_labels("en"))
    assert set(i18n.js_labels("zh")) == set(i18n.js_labels("en"))


@pytest.mark.parametrize("environ, lang", [
    ({"LANG": "zh_CN.UTF-8"}, "zh"), ({"LANG": "zh_TW.UTF-8"}, "zh"), ({"LANG": "C.UTF-8"}, "en"),
    ({}, "en"), ({"LANG": "zh_CN.UTF-8", "LC_ALL": "en_US.UTF-8"}, "en"),
    ({"LANG": "en_US.UTF-8", "LC_MESSAGES": "zh_CN.UTF-8"}, "zh"), ({"LC_ALL": "", "LANG": "zh_CN"}, "zh")])
def test_the_locale_chooses_the_language(environ, lang):
    assert i18n.resolve_lang(None, environ=environ) == lang
    assert i18n.resolve_lang("en", environ=environ) == "en"  # an explicit choice wins


@pytest.mark.parametrize("bad", ["fr", "ZH", "", "zh-CN", 1])
def test_an_unknown_language_is_a_one_line_error_naming_option_value_and_choices(bad):
    with pytest.raises(GlassformerError) as error:
        i18n.resolve_lang(bad, "--lang")
    assert str(error.value) == f"--lang must be one of en, zh, got {bad!r}"


def test_text_fills_fields_and_refuses_unknown_languages():
    assert i18n.text("table.layer", "zh", layer=3) == "第 3 层"
    assert i18n.text("table.layer", "en", layer=3) == "layer 3"
    with pytest.raises(GlassformerError, match="lang must be one of en, zh"):
        i18n.text("table.layer", "de", layer=3)


# ------------------------------------------------------------------------------------------ the report
def test_a_chinese_report_has_chinese_labels_notes_and_captions():
    model = TransformerLM(vocab_size=TOK.vocab_size, n_layers=2, attn="prefix", **SMALL)
    zh = report_html(model, TOK, "春天来了", generate=3, top_k=2, max_tokens=3, lang="zh",
                     logit_lens=True, head_scores=True, ablation=True)
    en = report_html(model, TOK, "春天来了", generate=3, top_k=2, max_tokens=3,
                     logit_lens=True, head_scores=True, ablation=True)
    assert '<html lang="zh-CN">' in zh and '<html lang="en">' in en
    assert _headings(zh) == ["注意力", "生成轨迹", "Logit lens（逐层读出）", "消融效果", "前向传播的形状", "模型"]
    assert _headings(en) == ["Attention", "Generation trace", "Logit lens", "Ablation effects",
                             "Shapes of the forward pass", "Model"]
    data = _data(zh)
    assert data["title"] == "glassformer 报告：前缀 LM" and data["structure"] == "prefix-LM"  # the key stays
    assert data["views"][0]["title"] == "自注意力"
    assert data["views"][0]["caption"] == "前 3 个 token（前缀）互相双向可见；前缀之后是因果的。"
    assert data["labels"]["head_view"] == "头视图（head view）" and _data(en)["labels"]["head_view"] == "Head view"
    assert data["notes"][0] == "输入共有 4 个 token；报告只保留前 3 个（max_tokens=3），模型也只在这些 token 上运行。"
    assert data["notes"][-1] == "头评分（前一个 token、归纳头）只在因果模型上测量。"
    assert "<th>第 0 层</th>" in zh and "<th>头 1</th>" in zh and "第 1 块之前" in zh
    assert "续写：" in zh and "合计" in zh and "由 glassformer 生成" in zh
    for english in ("Generation trace", "Shapes of the forward pass", "trainable parameters", "Continuation",
                    "before block", "Written by glassformer"):
        assert english not in zh, english
    # the numbers are the same in both languages: only the words change
    assert data["views"][0]["weights"] == _data(en)["views"][0]["weights"]


def test_the_catalogue_holds_the_trace_notes_as_the_report_writes_them():
    """The generation trace's notes (report.py writes them in English for now) are in the catalogue word for
    word, so that the report can take them from there."""
    model = TransformerLM(vocab_size=TOK.vocab_size, n_layers=1, attn="prefix", **SMALL)
    notes = _data(report_html(model, TOK, "abc", target="de", generate=4))["notes"]
    assert i18n.text("note.trace_target", "en", n=2) in notes
    same = i18n.text("note.trace_same", "en", token=repr("a"))
    assert same.startswith("The greedy choice is 'a' at every step") and "--preset" in same


def test_a_chinese_encoder_decoder_report_names_its_three_views_in_chinese():
    model = EncoderDecoder(vocab_size=TOK.vocab_size, n_enc=1, n_dec=1, **SMALL)
    data = _data(report_html(model, TOK, "abc", generate=2, pad_to=6, lang="zh"))
    assert [v["title"] for v in data["views"]] == ["编码器自注意力", "解码器自注意力", "交叉注意力"]
    assert data["views"][0]["caption"] == "每个源 token 都看所有源 token（双向）。补齐的源位置作为 key 被掩掉。"
    assert data["notes"] == ["没有给出目标：解码器读入起始 token，然后是模型自己贪心生成的输出。"]
    assert "编码器 1 层 + 解码器 1 层" in report_html(model, TOK, "abc", generate=0, lang="zh")


def test_inspect_follows_lang_and_the_locale(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    for name in ("LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(name, raising=False)
    base = ["inspect", "--preset", "lesson2", "--text", "hi", "--generate", "0", "--out"]
    assert main([*base, str(tmp_path / "locale.html")]) == 0
    assert main([*base, str(tmp_path / "en.html"), "--lang", "en"]) == 0
    assert "<h2>注意力</h2>" in (tmp_path / "locale.html").read_text(encoding="utf-8")
    assert "<h2>Attention</h2>" in (tmp_path / "en.html").read_text(encoding="utf-8")
    capsys.readouterr()
    assert main([*base, str(tmp_path / "no.html"), "--lang", "fr"]) == 2
    assert capsys.readouterr().err == "glassformer: error: --lang must be one of en, zh, got 'fr'\n"
    assert not (tmp_path / "no.html").exists()


# ------------------------------------------------------------------------------------------ the run page
def test_a_chinese_run_page_has_chinese_words_and_the_same_numbers(tmp_path):
    folder = fake_run(tmp_path / "run", 2, 3)
    (folder / ATTRIBUTION).write_text(json.dumps({
        "estimate": [[0.1, -0.2, 0.3], [0.5, 0.4, 0.0]], "exact": [[0.1, -0.1, 0.2], [0.6, 0.3, 0.1]],
        "corrupted_metric": -4.1, "clean_metric": -0.3, "correlation": 0.93,
        "top_estimate": [[1, 0, 0.5]], "top_exact": [[1, 0, 0.6]]}))
    zh = write_run_page(folder, tmp_path / "zh.html", lang="zh").read_text(encoding="utf-8")
    en = write_run_page(folder, tmp_path / "en.html").read_text(encoding="utf-8")
    assert '<html lang="zh-CN">' in zh and '<html lang="en">' in en
    assert _headings(zh) == ["损失", "注意力头", "注意力快照", "Logit lens（逐层读出）",
                             "归因修补（attribution patching）"]
    assert _headings(en) == ["Loss", "Heads", "Attention snapshots", "Logit lens", "Attribution patching"]
    assert "<h1>训练运行：run</h1>" in zh and "共 12 步。" in zh and "重复那一遍上的损失" in zh
    assert "归纳头评分——2 层（行）× 3 个头（列）" in zh and "第 1 层，头 0" in zh and "<th>第 0 层</th>" in zh
    assert "各头之间的相关系数：0.930" in zh and "由 glassformer（glassformer inspect）生成" in zh
    for english in ("Training run", "training loss", "repeated copy", "induction score", "Correlation over heads",
                    "Written by glassformer", ">step<", "residual norm"):
        assert english not in zh, english
    data = json.loads(zh.split('id="gf-run-data">')[1].split("</script>")[0])
    assert data["labels"]["step_of"] == "第 {step} 步（第 {n} 个记录，共 {total} 个）"
    assert data["labels"]["kinds"]["induction"] == "归纳"
    assert data["records"] == json.loads(en.split('id="gf-run-data">')[1].split("</script>")[0])["records"]
    with pytest.raises(GlassformerError, match="lang must be one of en, zh"):
        write_run_page(folder, tmp_path / "fr.html", lang="fr")


def test_an_unwatched_run_says_how_to_watch_it_in_chinese(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "metrics.jsonl").write_text('{"step": 1, "train_loss": 3.0}\n')
    page = write_run_page(tmp_path / "plain", lang="zh").read_text(encoding="utf-8")
    assert "在它的配置里加一个 <code>watch:</code> 块（例如 <code>watch: {every: 0}</code>）" in page


# ------------------------------------------------------------------------------------------ the SAE pages
def test_chinese_sae_feature_pages_have_chinese_headings_table_and_controls(tmp_path):
    summary = {"hook": "blocks.1.hook_resid_post", "kind": "topk", "d_sae": 1536, "tokens": 4096,
               "features": [], "dead": [3, 7]}
    metrics = {"explained_variance": 0.81, "l0": 12.0, "dead": 2, "ce_recovered": 0.93}
    zh = feature_pages_html(summary, metrics=metrics, lang="zh")
    en = feature_pages_html(summary, metrics=metrics)
    assert '<html lang="zh-CN">' in zh and '<html lang="en">' in en
    assert _headings(zh) == ["在留出文本上的质量", "特征"] and _headings(en) == ["Quality on held-out text", "Features"]
    assert "<h1>SAE 特征：blocks.1.hook_resid_post</h1>" in zh
    assert "共 1,536 个特征，其中 0 个在本页样本的 4,096 个留出 token 上激活过，2 个从未激活" in zh
    assert "（在本页样本中为死特征）" in zh
    # the two dead counts name their samples: the page's feature list, the quality measurement's tokens
    assert "<td>dead features (none fired on the quality sample's ? tokens)</td><td>2</td>" in en
    assert '<tr data-metric="explained_variance"><td>解释的方差比例</td><td>0.810</td></tr>' in zh
    assert '<tr data-metric="explained_variance"><td>variance explained</td><td>0.810</td></tr>' in en
    assert 'placeholder="特征编号或 token，例如 12 或 ROMEO"' in zh and "最常激活的在前" in zh
    for english in ("Quality on held-out", "variance explained", "most frequent first", "Written by glassformer"):
        assert english not in zh, english
    with pytest.raises(GlassformerError, match="lang must be one of en, zh"):
        write_feature_pages(summary, tmp_path / "no" / "features.html", lang="fr")
    assert not (tmp_path / "no").exists()


# ------------------------------------------------------------------------------------------ the demo
@pytest.fixture(scope="module")
def lesson(tmp_path_factory) -> dict:
    """The tiny char LM lesson, 2 training steps (the summary's wording is what is tested, not the model)."""
    return tiny_char.run(tmp_path_factory.mktemp("demo"), steps=2, progress=False)


def test_the_demo_prints_its_steps_in_chinese(lesson):
    en, zh = tiny_char.summary(lesson), tiny_char.summary(lesson, "zh")
    assert en.splitlines()[0].startswith("Tiny character LM (lesson 12)")
    assert zh.splitlines()[0] == "小字符语言模型（第 12 讲）：四行文本，一个 decoder-only Transformer"
    assert len(en.splitlines()) == len(zh.splitlines())
    for word in ("语料：40 个字符，18 种", "错开一位", "因果性", "训练（所有窗口上的损失）",
                 "从 '春天来了，' 开始贪心生成", "前 4 个候选", "生成结果", "重新加载后 logits 相差 0.0"):
        assert word in zh, word
    assert "corpus" not in zh and "greedy" not in zh
    number = re.compile(r"\d+\.\d+")
    assert number.findall(en.split("greedy")[1]) == number.findall(zh.split("贪心生成")[1])  # the same trace


@pytest.mark.parametrize("lang, first", [
    ("zh", "正在四行文本上训练课程里的小字符语言模型（320 步，大约 15 秒）……"),
    ("en", "Training the lessons' tiny character LM on four lines (320 steps, about 15 seconds) ...")])
def test_the_demo_says_what_it_trains_first_in_its_language(lesson, lang, first, tmp_path, monkeypatch, capsys):
    """The line printed before training (off a terminal it is all there is for 15 seconds) follows --lang."""
    monkeypatch.setattr(tiny_char, "run", lambda out, progress: lesson)  # the lesson trained once, above
    main(["demo", "--lang", lang, "--out", str(tmp_path / "demo")])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == first
    assert out[1] == tiny_char.summary(lesson, lang).splitlines()[0]


def test_lesson2_summary_in_chinese():
    findings = {"attention_vs_torch": {"max_out_diff": 1e-7, "max_weight_diff": 2e-8},
                "why_scale": [{"d": 16, "max_weight_unscaled": 0.9, "max_weight_scaled": 0.4,
                               "grad_norm_unscaled": 0.01, "grad_norm_scaled": 0.2}],
                "permutation_equivariance": {"max_diff_pos_none": 1e-6, "max_diff_pos_sinusoidal": 1.7},
                "positions": [{"pos": "none", "accuracy": 0.208, "chance": 0.0625}]}
    zh = lesson2.summary(findings, "zh").splitlines()
    assert zh[0].startswith("1. 我们的注意力与 torch.nn.MultiheadAttention 结果相同")
    assert zh[-1] == "   none        0.208   （随机猜 0.062）"
    assert len(zh) == len(lesson2.summary(findings).splitlines())


def test_demo_refuses_an_unknown_language_before_training(tmp_path, capsys):
    assert main(["demo", "--lang", "klingon", "--out", str(tmp_path / "demo")]) == 2
    assert capsys.readouterr().err == "glassformer: error: --lang must be one of en, zh, got 'klingon'\n"
    assert not (tmp_path / "demo").exists()


# ------------------------------------------------------------------------------------------ in a browser
@pytest.mark.browser
def test_a_chinese_report_in_a_browser(tmp_path):
    """The page script's labels are Chinese in Chromium, with no console error; a screenshot for a look."""
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    import test_report_browser as browser_test

    if not browser_test.CHROMIUM.exists():
        pytest.skip(f"Debian's chromium is not installed at {browser_test.CHROMIUM} (run .ci/system-deps as root)")
    from playwright.sync_api import sync_playwright

    from glassformer.viz import write_report

    model = TransformerLM(vocab_size=TOK.vocab_size, n_layers=2, **SMALL)
    path = write_report(model, TOK, "春天来了花开", out=tmp_path / "zh.html", generate=3, lang="zh")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(browser_test.CHROMIUM), headless=True,
            args=browser_test.ARGS, viewport={"width": 1200, "height": 900})
        try:
            page, problems = browser_test.open_report(context, path)
            pane = page.locator(".gf-view").first
            assert pane.locator(".gf-headview h3").inner_text() == "头视图（head view）"
            assert pane.locator(".gf-modelview h3").inner_text() == "模型视图（model view）"
            assert pane.locator(".gf-grid th").nth(1).inner_text() == "头 0"
            pane.locator("canvas.gf-thumb").first.click()
            assert pane.locator(".gf-zoom h3").inner_text() == "层 0 · 头 0"
            page.screenshot(path=str(tmp_path / "zh.png"), full_page=True)
            assert problems == []
        finally:
            context.close()


@pytest.mark.browser
def test_a_chinese_run_page_in_a_browser(browser, tmp_path):
    """The run page's script writes its step label, norm rows and tooltips in Chinese."""
    page, problems = browser_open(browser, write_run_page(fake_run(tmp_path / "run", 2, 3), lang="zh"))
    assert page.locator("#gf-step-label").inner_text() == "第 12 步（第 7 个记录，共 7 个）"
    assert page.locator("#gf-norm-rows tr td").first.inner_text() == "第 0 块"
    assert page.locator("#gf-norm-rows tr").last.locator("td").first.inner_text() == "最后一块之后"
    heatmap = page.locator('.gf-heatmap canvas[data-kind="induction"]')
    heatmap.hover(position={"x": 30 + 40 * 1.5, "y": 14 + 6})  # layer 0, head 1
    assert heatmap.get_attribute("title").startswith("归纳，第 12 步：第 0 层，头 1 = ")
    assert problems == []
    page.close()
