"""`ctxprec report <run> [--baseline <run>]`: one self-contained HTML page about a run.

    ctxprec report 20261130-1a2b3c4d --baseline 20261129-9f8e7d6c --output s3://evals/cp/

The page has no external resources (inline CSS, SVG charts drawn here, no script): it can be
mailed, attached to a ticket or opened offline. Sections: header (run, date, judge, counts,
mean/median); with --baseline, the comparison against that run (mean shift, shift per
segment, regressions, relevance rate by position of both); score distribution (10 bins and the
summary bands); the summary per segment (`summary.by`: a table and a chart per column);
relevance rate by position; cost and throughput; the worst queries with their per-position
verdicts and reasons; unscored/failed items.

Written to `<output>/reports/<run>.html` unless --html says otherwise.

The package, from data to page:

    queries.py       Polars over a published run / a comparison -> plain typed data
    charts.py        the SVG chart kit (its text escaped with markupsafe)
    page.py          each section's data and charts -> the template, rendered with autoescape
    report.html.j2   the page's layout (jinja2)
    report.css       the stylesheet, inlined into the page

This module is the command: `run` (what `ctxprec report` calls; its options are defined in
jobs.cli) and `main` (`python -m jobs.tools.report`).
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from jobs.tools.published_runs import (
    load_run,
    open_output,
    parse_storage_options,
    write_file,
)
from jobs.tools.report.page import render_report
from scorer_core.errors import ConfigError

__all__ = ["main", "render_report", "run"]


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The handler of `ctxprec report`: write the page, print where it is, return 0."""
    out = out if out is not None else sys.stdout
    store = open_output(args)
    published = load_run(store, args.run)
    baseline = load_run(store, args.baseline) if args.baseline else None
    if baseline is not None and baseline.location == published.location:
        raise ConfigError(f"--baseline {args.baseline} is the run itself")
    page = render_report(published, baseline)
    written = write_file(
        store,
        args.html,
        f"reports/{published.run_id}.html",
        page.encode("utf-8"),
        parse_storage_options(args.storage_option),
    )
    out.write(f"report: {written}\n")
    return 0
