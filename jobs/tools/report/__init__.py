"""`ctxprec report RUN [--baseline RUN]`: one self-contained HTML page about a run (inline CSS,
SVG charts, no script; docs/report.md). From data to page: `report_queries` (Polars -> plain
data), `charts` (the SVG kit), `page` (each section's view -> the `report.html.j2` template).
"""

from __future__ import annotations

import sys
from typing import TextIO

from jobs.tools.published_runs import load_run, write_file
from jobs.tools.report.page import render_report
from jobs.tools.tool_options import ReportOptions
from scorer_core.errors import ConfigError

__all__ = ["render_report", "run"]


def run(options: ReportOptions, out: TextIO | None = None) -> int:
    """`ctxprec report`: write the page and print where it is; returns 0."""
    out = out if out is not None else sys.stdout
    store = options.root.store()
    published = load_run(store, options.run)
    baseline = load_run(store, options.baseline) if options.baseline else None
    if baseline is not None and baseline.location == published.location:
        raise ConfigError(f"--baseline {options.baseline} is the run itself")
    page = render_report(published, baseline)
    default = f"reports/{published.run_id}.html"
    written = write_file(store, options.html, default, page.encode(), options.root.storage_options)
    out.write(f"report: {written}\n")
    return 0
