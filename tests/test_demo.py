"""`make demo`'s command on a machine without CJK fonts: a clean terminal, and plots whose Chinese labels
have glyphs (the package ships a CJK font subset and registers it with matplotlib)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Run the demo as `make demo` does, after hiding every installed CJK font from matplotlib: what a bare
# machine (no fonts-noto-cjk) sees.
BARE_MACHINE_DEMO = """
import sys
from matplotlib import font_manager
font_manager.fontManager.ttflist = [f for f in font_manager.fontManager.ttflist
                                    if not any(k in f.name for k in ("CJK", "WenQuanYi", "Droid", "AR PL", "Han"))]
from glassformer.cli import main
sys.exit(main(["demo", "--out", sys.argv[1]]))
"""


def test_demo_is_clean_on_a_machine_without_cjk_fonts(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env["MPLCONFIGDIR"] = str(tmp_path / "mpl")  # a fresh font cache, as on a new machine
    done = subprocess.run([sys.executable, "-c", BARE_MACHINE_DEMO, str(tmp_path / "demo")], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    noise = [line for line in done.stderr.splitlines() if "Matplotlib is building the font cache" not in line]
    assert noise == [], "\n".join(noise)  # no "Glyph ... missing from font(s)", no other warnings
    assert "generated: '春天来了，花开了。\\n夏天来了，蝉叫'" in done.stdout
    results = json.loads((tmp_path / "demo" / "results.json").read_text(encoding="utf-8"))
    assert results["generation"]["text"].startswith("春天来了，花开了。")
    for name in ("attention_layer1.png", "attention_layer2.png", "loss_curve.png"):
        assert (tmp_path / "demo" / name).read_bytes()[:4] == b"\x89PNG"


def test_shipped_font_has_every_character_the_lessons_draw():
    from fontTools.ttLib import TTFont

    from glassformer.lessons import tiny_char
    from glassformer.viz.plots import BUNDLED_CJK_FONT

    covered = TTFont(BUNDLED_CJK_FONT).getBestCmap()
    drawn = set("".join(tiny_char.LINES)) | set("，。")
    assert {c for c in drawn if ord(c) not in covered} == set()
    assert BUNDLED_CJK_FONT.stat().st_size < 2_000_000 and len(covered) > 3500
    licence = (Path(BUNDLED_CJK_FONT).parent / "OFL.txt").read_text(encoding="utf-8")
    assert "SIL OPEN FONT LICENSE Version 1.1" in licence
