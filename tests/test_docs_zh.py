"""docs/learn/zh-CN/ follows docs/learn/: every lesson page has a Chinese twin with the same sections, the
same fenced blocks (byte for byte, in order), the same figures and links that resolve; both READMEs and
both lesson indexes link the Chinese pages; the prose is Chinese.

The twins' blocks run in tests/test_docs.py (its PAGES ends with docs/learn/zh-CN/). Being byte-identical
to the English blocks, which run earlier in the same session, they are not run a second time there (RAN):
identity (checked here) plus the English run is what proves them. ``pytest tests/test_docs.py -k zh-CN``
runs them alone, for real.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from test_docs import PAGES, SKIPPED, blocks

ROOT = Path(__file__).resolve().parents[1]
LEARN = ROOT / "docs" / "learn"
ZH = LEARN / "zh-CN"
ENGLISH = sorted(p.name for p in LEARN.glob("*.md"))
# A fenced block, also one indented inside a list item (test_docs.blocks finds those at column 0 only).
FENCE = re.compile(r"^( *)```([^\n]*)\n(.*?)^\1```[ \t]*$", re.S | re.M)
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
HAN = re.compile(r"[\u4e00-\u9fff]")


def fenced(text: str) -> list[str]:
    """Every fenced block of a page, fences and indentation included, in order."""
    return [m.group(0) for m in FENCE.finditer(text)]


def prose(text: str) -> str:
    """The page without its fenced blocks, inline code and link targets."""
    text = FENCE.sub("", text)
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.sub(lambda m: m.group(2), text)


def headings(text: str) -> list[str]:
    """The heading levels of a page in order (``#``, ``##``...), fenced blocks left out."""
    return re.findall(r"^(#{1,6}) ", FENCE.sub("", text), flags=re.M)


def links(page: Path) -> list[tuple[bool, Path, str]]:
    """(is an image, resolved target file, anchor) of every relative link of ``page``."""
    found = []
    for image, _, target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        found.append((bool(image), (page.parent / unquote(path)).resolve() if path else page.resolve(), anchor))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (CJK kept), spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = "".join(c for c in text if c.isalnum() or c in " -" or HAN.match(c))
    return text.replace(" ", "-")


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_every_lesson_page_has_a_chinese_twin_and_nothing_else():
    assert ENGLISH, "docs/learn/ has no page"
    assert sorted(p.name for p in ZH.glob("*.md")) == ENGLISH


@pytest.mark.parametrize("name", ENGLISH)
def test_twin_has_the_same_blocks_in_order(name):
    english, chinese = fenced(_read(LEARN / name)), fenced(_read(ZH / name))
    for n, (a, b) in enumerate(zip(english, chinese, strict=False)):
        assert a == b, f"docs/learn/zh-CN/{name}: block {n + 1} differs from the English one:\n{b}\n--- English:\n{a}"
    assert len(english) == len(chinese), f"docs/learn/zh-CN/{name}: {len(chinese)} blocks, English {len(english)}"


@pytest.mark.parametrize("name", ENGLISH)
def test_twin_has_the_same_sections_and_figures(name):
    english, chinese = LEARN / name, ZH / name
    assert headings(_read(chinese)) == headings(_read(english)), f"zh-CN/{name}: not the same sections"
    figures = [[target for image, target, _ in links(page) if image] for page in (english, chinese)]
    assert figures[0] == figures[1], f"zh-CN/{name}: not the same figures (paths resolved from each page)"
    assert all(target.is_file() for target in figures[1])


@pytest.mark.parametrize("name", ENGLISH)
def test_twin_links_resolve(name):
    """Every relative link of a Chinese page names a file that exists, and an anchor into a Chinese page
    names one of its headings."""
    page = ZH / name
    for _, target, anchor in links(page):
        assert target.exists(), f"zh-CN/{name}: link to missing {target}"
        if anchor and target.parent == ZH:
            anchors = {slug(h) for h in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", _read(target)), flags=re.M)}
            assert anchor in anchors, f"zh-CN/{name}: no heading #{anchor} in {target.name} ({sorted(anchors)})"
    same_folder = {t.name for _, t, _ in links(LEARN / name) if t.parent == LEARN and t.suffix == ".md"}
    chinese_same = {t.name for _, t, _ in links(page) if t.parent == ZH and t.suffix == ".md"}
    assert same_folder - {name} <= chinese_same, f"zh-CN/{name} should link the Chinese twins of the same pages"


@pytest.mark.parametrize("name", ENGLISH)
def test_twin_prose_is_chinese(name):
    """Outside code, most letters are Han characters: the page was written in Chinese, not pasted."""
    text = prose(_read(ZH / name))
    han = len(HAN.findall(text))
    latin = len(re.findall(r"[A-Za-z]", text))
    assert han > 0.5 * (han + latin), f"zh-CN/{name}: {han} Han characters, {latin} Latin letters"


def test_the_chinese_pages_are_linked_both_ways():
    index, zh_index = LEARN / "README.md", ZH / "README.md"
    assert zh_index.resolve() in {t for _, t, _ in links(index)}, "docs/learn/README.md must link zh-CN/README.md"
    assert index.resolve() in {t for _, t, _ in links(zh_index)}, "zh-CN/README.md must link docs/learn/README.md"
    listed = {t.name for _, t, _ in links(zh_index) if t.parent == ZH}
    assert set(ENGLISH) - {"README.md"} <= listed, "the Chinese index lists every Chinese page"
    for readme in ("README.md", "README.zh-CN.md"):
        targets = {t for _, t, _ in links(ROOT / readme)}
        assert zh_index.resolve() in targets, f"{readme} must link docs/learn/zh-CN/README.md"


def test_the_docs_test_runs_the_chinese_pages():
    """tests/test_docs.py takes every Chinese page, after the English ones, and knows its skipped blocks."""
    chinese = [p for p in PAGES if p.startswith("docs/learn/zh-CN/")]
    assert sorted(chinese) == sorted(f"docs/learn/zh-CN/{n}" for n in ENGLISH)
    assert PAGES.index(chinese[0]) > max(PAGES.index(f"docs/learn/{n}") for n in ENGLISH)
    for name in ENGLISH:
        reasons = [b.skip_reason for b in blocks(f"docs/learn/{name}") if b.skip_reason]
        listed = [fragment for page, fragment in SKIPPED if page == f"docs/learn/zh-CN/{name}"]
        assert len(reasons) == len(listed), f"SKIPPED needs the twin of each skipped block of {name}"
