"""How a run ends without being published, as branches of the one exception tree
(`scorer_core.errors.CtxPrecError`): each says what was kept and how the same run id goes on.

    CtxPrecError
    ├── RunFailed             the run could not finish: exit 1, staged shards kept
    ├── RunLocked             another driver runs this run id now: exit 1
    ├── RunInterrupted        SIGINT or SIGTERM: exit 128 + the signal (130, 143)
    └── BatchesStillRunning   judge.batch.max_wait_s passed: exit 0, batches left running
"""

from __future__ import annotations

import signal

from scorer_core.errors import CtxPrecError


def rerun_hint(run_id: str, purpose: str) -> str:
    """How to go on with a run that stopped: "rerun with --set run.id=<id> to <purpose>"."""
    return f"rerun with --set run.id={run_id} to {purpose}"


class RunFailed(CtxPrecError):
    """The run could not finish; staged shards are kept so the same run id resumes."""


class RunLocked(CtxPrecError):
    """Another driver is running this run id right now."""


class RunInterrupted(CtxPrecError):
    """A run stopped by SIGINT (Ctrl-C) or SIGTERM: Ray is shut down, the staged shards are
    kept and the same run id resumes; `exit_code` is the shell's, 128 + the signal."""

    def __init__(self, run_id: str, signum: int) -> None:
        super().__init__(
            f"run {run_id} stopped by {signal.Signals(signum).name}; the shards staged so far "
            f"are kept: {rerun_hint(run_id, 'resume')}"
        )
        self.exit_code = 128 + signum


class BatchesStillRunning(CtxPrecError):
    """`judge.batch.max_wait_s` passed while batches run; the same run id collects them later."""
