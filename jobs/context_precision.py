"""The job's documented entrypoint: `python -m jobs.context_precision --config FILE`.

The same as `ctxprec run --config FILE [--set KEY=VALUE ...]`, exit codes included: this module
only hands its arguments to the CLI's `run` command.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from jobs import cli


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job, as `ctxprec run`.

    Args:
        argv: `--config FILE [--set KEY=VALUE ...]` (default: the process's arguments).

    Returns:
        The exit code (docs/exit-codes.md).
    """
    return cli.main(["run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
