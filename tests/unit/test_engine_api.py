"""What importing `jobs.engine` loads (its public names: test_exports.py): a light module of the
package (what the coordinator actor imports) loads no Polars or pyarrow, and the driver and the
workers load neither litellm nor pandas."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import REPO


def test_the_coordinator_side_imports_nothing_heavy() -> None:
    code = (
        "import sys, jobs.engine.messages, jobs.engine.control.shard_board;"
        "import jobs.engine.ray_runtime;"
        "print(sorted(m for m in ('polars', 'pyarrow', 'fsspec', 'ray') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_driver_and_the_workers_import_neither_litellm_nor_pandas() -> None:
    # litellm costs seconds and pandas a few tenths in every process that imports it (issue 30):
    # the lean HTTP transport, the offline judge and the prices need neither
    code = (
        "import sys, jobs.engine.driver, jobs.engine.shards.worker, jobs.run.factory;"
        "print(sorted(m for m in ('litellm', 'pandas') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
