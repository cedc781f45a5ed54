"""Screenshot a run page (``glassformer inspect OUT_DIR``) in Debian's Chromium, offline: the figures of
docs/learn/06-induction-heads.md and docs/interpret.md come from here.

    python tools/screenshot_run_page.py out/induction_heads/attn_only/run.html docs/images/run-page.png \
        [--selector "#gf-losses" | --height 1500] [--step 300]

``--step`` moves the page's slider to the record of that step first (the nearest one at or before it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--selector", help="screenshot this element only (default: the whole page)")
    parser.add_argument("--step", type=int, help="move the step slider to this training step first")
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--height", type=int, help="keep only the page's top HEIGHT pixels")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": args.width, "height": 900}, device_scale_factor=1)
        page.goto(args.page.resolve().as_uri())
        page.wait_for_selector("body[data-ready='true']")
        if args.step is not None:
            page.evaluate("""step => {
                const data = JSON.parse(document.getElementById("gf-run-data").textContent);
                const i = Math.max(0, data.records.filter(r => r.step <= step).length - 1);
                const s = document.getElementById("gf-step"); s.value = i;
                s.dispatchEvent(new Event("input"));
            }""", args.step)
        args.png.parent.mkdir(parents=True, exist_ok=True)
        if args.selector:
            page.locator(args.selector).screenshot(path=str(args.png))
        else:
            clip = {"x": 0, "y": 0, "width": args.width, "height": args.height} if args.height else None
            page.screenshot(path=str(args.png), full_page=True, clip=clip)
        browser.close()
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
