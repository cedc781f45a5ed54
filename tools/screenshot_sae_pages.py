"""Screenshot of an SAE's feature pages for the docs (docs/images/sae-features.png).

    python tools/screenshot_sae_pages.py out/shakespeare_char_sae/sae-blocks.2.hook_resid_post/features.html \
        --feature 12 --search "" --out docs/images/sae-features.png

Opens the page in Debian's Chromium through Playwright (offline, as tests/test_sae_browser.py does),
optionally types a search and opens one feature (``#feature-N``), and saves a PNG of the viewport.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions"]


def main() -> None:
    parser = argparse.ArgumentParser(description="screenshot an SAE's feature pages")
    parser.add_argument("page", type=Path)
    parser.add_argument("--feature", type=int, default=None, help="the feature to open (#feature-N)")
    parser.add_argument("--search", default="", help="text typed into the search box")
    parser.add_argument("--out", type=Path, default=Path("docs/images/sae-features.png"))
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        context = p.chromium.launch_persistent_context(profile, executable_path="/usr/bin/chromium", headless=True,
                                                       args=ARGS, viewport={"width": args.width,
                                                                            "height": args.height})
        page = context.new_page()
        address = args.page.resolve().as_uri() + (f"#feature-{args.feature}" if args.feature is not None else "")
        page.goto(address)
        page.wait_for_selector("body[data-ready='true']", timeout=15_000)
        if args.search:
            page.locator("#gf-sae-search").fill(args.search)
        page.locator("#gf-sae").scroll_into_view_if_needed()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(args.out))
        context.close()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
