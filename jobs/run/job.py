"""A job config run end to end: its parts built by `jobs.run.factory` (the canary by
`jobs.run.canary`), run by `jobs.engine`, which never builds them itself."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from jobs.core.config import JobConfig, load_config
from jobs.core.storage import open_store
from jobs.engine import BatchesStillRunning, RunClock, RunInterrupted, RunOutcome, locate_run
from jobs.engine import run_job as run_parts_job
from jobs.run import factory
from jobs.run.canary import CanaryCheck
from jobs.run.outcome import exit_code_of, print_outcome

After = Callable[[JobConfig, RunOutcome], int] | None  # run once published: the export


def run_job(config: JobConfig, clock: RunClock | None = None) -> RunOutcome:
    """Run (or resume) `config`'s scoring run end to end; `clock`: the run's clocks (tests
    inject them)."""
    clock = clock or RunClock()
    location = locate_run(config, clock)
    canary = CanaryCheck(config) if config.canary.labels is not None else None
    parts = factory.run_parts(config, location, canary)
    return run_parts_job(config, parts, location, clock=clock)


def run_command(config_path: str, overrides: Sequence[str] = (), after: After = None) -> int:
    """`ctxprec run`: load the config, run it, print where the results are.

    Args:
        config_path: the YAML job config.
        overrides: `--set dotted.key=value` assignments.

    Returns:
        The exit code: 0, 1 when the published run's errors exceed `run.max_error_rate`, or
        130 / 143 when SIGINT / SIGTERM stopped it (the same run id resumes).
    """
    try:
        config = load_config(config_path, list(overrides))
        outcome = run_job(config)
    except KeyboardInterrupt:  # before the run's own handler: nothing is staged yet
        print("stopped: by SIGINT before the run began; nothing was staged", file=sys.stderr)
        return 130
    except BatchesStillRunning as exc:
        # Not a failure: the evening half of a nightly batch run (docs/batch.md).
        print(f"batches submitted, not finished: {exc}", file=sys.stderr)
        return 0
    except RunInterrupted as exc:
        print(f"stopped: {exc}", file=sys.stderr)
        return exc.exit_code
    store = open_store(config.output.path, config.output.storage_options)
    print_outcome(outcome, store.url(store.root))
    return max(exit_code_of(outcome), after(config, outcome) if after else 0)
