"""A finished run told to its user: the summary table, where the results are and a query to
read them (stdout, the command's output), and the exit code its errors call for."""

from __future__ import annotations

import sys

from jobs.core.run_layout import published_glob
from jobs.engine import RunOutcome, format_summary_table


def print_outcome(outcome: RunOutcome, store_root: str) -> None:
    """Print (stdout: the command's output) the summary table, where the results are, and a
    DuckDB query to read them."""
    published = outcome.published
    print(format_summary_table(published.summary, published.scores_url, published.judge))
    lines = [
        f"run {outcome.run_id} ({outcome.run_date}) done in {outcome.seconds:.1f}s; "
        f"{outcome.shards_skipped} of {outcome.shards_total} shard(s) reused; "
        f"duplicates {published.duplicates}"
    ]
    errors = published.error_rate
    if errors and errors.errors:
        lines.append(f"errors: {errors.describe()}")
    if published.truncated:
        lines.append(
            f"truncated: {published.truncated:,} item(s) had contexts cut "
            "(input.max_context_chars or input.max_contexts; column truncated)"
        )
    scores = published_glob("scores", outcome.run_id, outcome.run_date.isoformat())
    where = f"{store_root.rstrip('/')}/{scores}"
    lines.append(
        'query it: .venv/bin/duckdb -c "select count(*), avg(score) from '
        f"read_parquet('{where}', hive_partitioning=true)\""
    )
    print("\n".join(lines), flush=True)


def exit_code_of(outcome: RunOutcome) -> int:
    """0, or 1 (saying why on stderr) when the run's errors exceed run.max_error_rate: the
    run is published all the same (docs/exit-codes.md)."""
    errors = outcome.published.error_rate
    if errors is None or not errors.exceeded:
        return 0
    print(f"error: run {outcome.run_id} published, but {errors.describe()}", file=sys.stderr)
    return 1
