"""The test runner ends with its summary whatever a test's Ray does to its process.

A Ray driver whose GCS stops answering is ended by Ray itself ("Failed to connect to GCS within
N seconds ... The program will terminate", exit 1, no Python cleanup): a pytest that is itself
the driver dies without its summary. The suite runs under xdist (pyproject.toml's addopts), so
the driver is a worker: its death is one failed test in the summary, and the run goes on.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import REPO

CHILD = "tests/integration/test_gcs_loss_child.py"


def test_a_test_whose_ray_ends_its_process_fails_and_the_summary_follows() -> None:
    env = {**os.environ, "CTXPREC_LOSE_GCS": "1", "RAY_gcs_rpc_server_reconnect_timeout_s": "5"}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_CURRENT_TEST", None)
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", CHILD],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = child.stdout + child.stderr
    assert child.returncode == 1, out[-3000:]
    last = [line for line in child.stdout.splitlines() if line.strip()][-1]
    assert "1 failed, 1 passed" in last, out[-3000:]
    assert "test_the_session_ray_loses_its_gcs" in out
