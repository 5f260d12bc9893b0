"""Run only by tests/integration/test_runner_survives.py, in a pytest of its own: a test whose
session Ray loses its GCS, as a machine under load or a stray kill can make it lose it."""

from __future__ import annotations

import os
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("CTXPREC_LOSE_GCS") != "1", reason="run by test_runner_survives.py"
)


def test_the_session_ray_loses_its_gcs(ray_local: Any) -> None:
    gcs = [p for p in psutil.Process().children(recursive=True) if p.name() == "gcs_server"]
    assert gcs, "the session Ray's GCS runs under this process"
    for process in gcs:
        process.kill()

    @ray_local.remote
    def one() -> int:
        return 1

    # Ray ends this process once it gives up on the GCS (RAY_gcs_rpc_server_reconnect_timeout_s)
    ray_local.get(one.remote(), timeout=120)


def test_a_test_after_it_still_runs() -> None:
    assert True
