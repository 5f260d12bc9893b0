"""A job config run end to end: its parts built by `jobs.run.factory`, run by `jobs.engine`.

The one place the two meet: the engine is handed what a config's run is made of (input,
judge, cache) and never builds them itself; the factory knows configs, not Ray.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from jobs.core.config import JobConfig, load_config
from jobs.core.storage import open_store
from jobs.engine import RunOutcome, exit_code_of, print_outcome
from jobs.engine import run_job as run_parts_job
from jobs.run import factory


def run_job(config: JobConfig, **options: Any) -> RunOutcome:
    """Run (or resume) `config`'s scoring run end to end (`jobs.engine.driver.run_job`'s
    keyword options: `out`, `sleep`, `clock`, `wall_clock`)."""
    return run_parts_job(config, factory.run_parts(config), **options)


def run_command(args: argparse.Namespace) -> int:
    """`ctxprec run --config FILE [--set KEY=VALUE ...]`: load the config, run, print."""
    from jobs.engine import BatchesStillRunning

    config = load_config(args.config, args.set)
    try:
        outcome = run_job(config)
    except BatchesStillRunning as exc:
        # Not a failure: the evening half of a nightly batch run (docs/batch.md).
        print(f"batches submitted, not finished: {exc}", file=sys.stderr)
        return 0
    store = open_store(config.output.path, config.output.storage_options)
    print_outcome(outcome, store.url(store.root))
    return exit_code_of(outcome)
