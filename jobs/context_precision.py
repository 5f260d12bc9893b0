"""The job's documented entrypoint: `python -m jobs.context_precision --config FILE`.

The same as `ctxprec run --config FILE`: this module only hands its arguments to the CLI.
"""

from __future__ import annotations

import sys

from jobs.engine.driver import main

if __name__ == "__main__":
    sys.exit(main())
