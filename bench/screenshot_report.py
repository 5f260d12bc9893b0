"""Render the HTML report of a published run to PNG with headless Chromium.

    python -m bench.screenshot_report RUN [--baseline RUN] --output results/ --png docs/report.png

Writes the report with `ctxprec report` (to a temp file unless --html is given), then asks
Chromium for a screenshot of it: headless, sandbox off, no GPU, no network-facing features, a
fresh profile directory. The report has no external resources, so nothing is fetched.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from jobs.cli import main as ctxprec

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "chromium")
DEFAULT_SIZE = "1280,2400"


def find_chromium(explicit: str | None) -> str:
    for candidate in ([explicit] if explicit else []) + list(CHROMIUM_CANDIDATES):
        path = shutil.which(candidate) if candidate else None
        if path:
            return path
    raise SystemExit("chromium not found: apt-get install -y chromium (or pass --chromium PATH)")


def screenshot(chromium: str, page: Path, png: Path, window_size: str) -> None:
    """Headless Chromium screenshot of `page` (a local HTML file) into `png`."""
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ctxprec-chromium-") as profile:
        command = [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--screenshot={png.resolve()}",
            f"--window-size={window_size}",
            page.resolve().as_uri(),
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if result.returncode != 0 or not png.exists():
        raise SystemExit(f"chromium failed ({result.returncode}): {result.stderr[-2000:]}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.screenshot_report")
    parser.add_argument("run")
    parser.add_argument("--baseline", default=None)
    parser.add_argument("--output", default="results/", help="output root of the runs")
    parser.add_argument("--png", default="docs/report.png")
    parser.add_argument("--html", default=None, help="keep the HTML here (default: temp file)")
    parser.add_argument("--window-size", default=DEFAULT_SIZE, help="WIDTH,HEIGHT in pixels")
    parser.add_argument("--chromium", default=None)
    args = parser.parse_args(argv)
    chromium = find_chromium(args.chromium)
    with tempfile.TemporaryDirectory(prefix="ctxprec-report-") as tmp:
        page = Path(args.html) if args.html else Path(tmp) / f"{args.run}.html"
        report_args = [args.run, "--output", args.output, "--html", os.fspath(page)]
        if args.baseline:
            report_args += ["--baseline", args.baseline]
        code = ctxprec(["report", *report_args])
        if code != 0:
            return code
        screenshot(chromium, page, Path(args.png), args.window_size)
    print(f"screenshot: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
