"""Every provider fault at once, through both transports, with an outage mid-run.

The fake judge injects each fault kind it knows (429 with and without Retry-After, 500/502/503,
replies slower than the timeout, malformed and truncated JSON, code fences, prose around the
JSON, a wrong number of verdicts, unknown verdict words, duplicated and out-of-range indices,
shuffled order, odd case and spacing), 20% of requests in all, and stops accepting connections
for two seconds while the run is going. Retries are bounded; the run finishes; every item has
one row; every `ok` score equals what the server's verdicts imply; the others say why.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path

import polars as pl
import pytest

from jobs.engine.driver import run_job
from scorer_core.testing import FAULT_KINDS, FakeJudgeServer, FaultPlan
from tests.test_job import assert_complete, config_for, judge_key, llm_judge, truth, write_items

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]
__all__ = ["judge_key"]  # the fixture, imported for use here


@pytest.mark.parametrize("transport", ["litellm", "http"])
def test_every_fault_kind_and_an_outage(tmp_path: Path, judge_key: str, transport: str) -> None:
    source = tmp_path / "items.jsonl"
    rows = write_items(source, 120, seed=29)
    out = tmp_path / "out"
    plan = FaultPlan.mixed(0.2, seed=7, slow_s=3.0, retry_after_s=1)
    assert set(plan.rates()) == set(FAULT_KINDS)
    with FakeJudgeServer(fault_plan=plan) as server:
        config = config_for(
            source,
            out,
            judge=llm_judge(
                server, timeout_s=1.0, max_retries=6, max_reasks=2, transport=transport
            ),
            ray={"shard_size": 30, "workers": 2},
        )

        # The outage starts once requests flow, so it lands mid-run.
        def outage() -> None:
            while server.stats()["total_requests"] < 40:
                threading.Event().wait(0.05)
            server.refuse_connections(2.0)

        cutter = threading.Thread(target=outage, daemon=True)
        cutter.start()
        outcome = run_job(config, out=io.StringIO())
        cutter.join(timeout=30)
        stats = server.stats()

    scores = assert_complete(out, rows, outcome)
    expected = truth(rows)
    assert stats["refusals"] >= 1, "the outage did not happen"
    assert len(stats["faults"]) >= 8, stats["faults"]  # most kinds really occurred
    ok = scores.filter(pl.col("status") == "ok")
    assert ok.height >= 110  # six retries and two re-asks rescue nearly everything
    for record in scores.iter_rows(named=True):
        if record["status"] == "ok":
            assert record["score"] == expected[record["query_id"]], record
        else:
            assert record["score"] is None
            assert record["error"] and record["error"].strip(), record
    # Bounded: no item used more than 1 + max_retries attempts for each of its 1 + max_reasks asks.
    assert int(scores["calls"].max()) <= (1 + 6) * (1 + 2)
