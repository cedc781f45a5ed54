"""Cut the CJK font subset that glassformer ships for its plots (src/glassformer/viz/fonts/).

Matplotlib draws attention-map labels with DejaVu Sans, which has no Chinese, Japanese or Korean
glyphs; without a CJK font the lesson's characters (春天来了，...) are empty boxes and every missing
glyph is a warning. glassformer therefore ships a subset of Noto Sans CJK SC (SIL Open Font License
1.1, which allows redistributing modified versions under the same licence) and registers it with
matplotlib when it draws.

The subset holds: the 3,755 level-1 characters of GB2312 (the common simplified Chinese
characters), CJK symbols and punctuation, hiragana and katakana, full-width forms, and every CJK
character that appears in the repository's text (lessons, docs, tests). Re-run after adding text in
a script the subset lacks:

    python tools/subset_cjk_font.py [--source /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc]

The source is Debian's fonts-noto-cjk (`apt-get install fonts-noto-cjk`); needs fontTools (a
matplotlib dependency).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fontTools import subset
from fontTools.ttLib import TTCollection

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "glassformer" / "viz" / "fonts" / "NotoSansCJKsc-Subset.otf"
FAMILY = "Noto Sans CJK SC Subset"  # not the original's name: a system install keeps its own
RANGES = [(0x3000, 0x303F), (0x3040, 0x30FF), (0xFF00, 0xFFEF)]  # punctuation, kana, full-width forms
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".json", ".txt", ".ipynb"}


def gb2312_level1() -> set[str]:
    """The 3,755 level-1 hanzi of GB2312 (rows 16-55; row 55 has 89 characters)."""
    chars = set()
    for row in range(16, 56):
        for cell in range(1, 95 if row < 55 else 90):
            chars.add(bytes([0xA0 + row, 0xA0 + cell]).decode("gb2312"))
    return chars


def repository_cjk() -> set[str]:
    """Every CJK character in the repository's text files (outside .git and virtual environments)."""
    chars = set()
    for path in ROOT.rglob("*"):
        if path.suffix in TEXT_SUFFIXES and path.is_file() and not {".git", ".venv"} & set(path.parts):
            text = path.read_text(encoding="utf-8", errors="ignore")
            chars.update(c for c in text if 0x2E80 <= ord(c) <= 0x9FFF or 0xF900 <= ord(c) <= 0xFFEF)
    return chars


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    collection = TTCollection(str(args.source))
    (font,) = [f for f in collection.fonts if f["name"].getDebugName(1) == "Noto Sans CJK SC"]
    chars = gb2312_level1() | repository_cjk()
    chars |= {chr(c) for lo, hi in RANGES for c in range(lo, hi + 1)}
    options = subset.Options()
    options.layout_features = []  # no OpenType features: matplotlib does not shape text
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6, 13, 14]  # keep copyright and licence records
    options.hinting = False
    options.notdef_outline = True
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=sorted(ord(c) for c in chars))
    subsetter.subset(font)
    names = font["name"]
    for record in names.names:
        if record.nameID in (1, 4):
            record.string = FAMILY
        elif record.nameID == 3:
            record.string = f"{FAMILY};glassformer"
        elif record.nameID == 6:
            record.string = FAMILY.replace(" ", "")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    font.save(str(args.out))
    covered = len(font.getBestCmap())
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB, {covered} characters)")


if __name__ == "__main__":
    main()
