"""Every provider fault at once, through both transports, with an outage mid-run.

The fake judge injects each fault kind it knows (429 with and without Retry-After, 500/502/503,
replies slower than the timeout, malformed and truncated JSON, code fences, prose around the
JSON, a wrong number of verdicts, unknown verdict words, duplicated and out-of-range indices,
shuffled order, odd case and spacing), 20% of requests in all, and stops accepting connections
for two seconds from its 40th request on (a server hook, so the outage lands mid-run). Retries
are bounded; the run finishes; every item has one row; every `ok` score equals what the
server's verdicts imply; the others say why, and have no verdict counted for them.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from jobs.run.job import run_job
from tests.fake_judge import FAULT_KINDS, FaultPlan
from tests.support.fakes import JudgeFactory
from tests.support.hooks import OutageAt
from tests.support.job import (
    assert_complete,
    config_for,
    llm_judge,
    sample_job,
    truth,
    verdicts_frame,
)

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]

ITEMS, RETRIES, REASKS = 120, 6, 2


@pytest.mark.parametrize("transport", ["litellm", "http"])
def test_every_fault_kind_and_an_outage(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory, transport: str
) -> None:
    source, rows, out = sample_job(tmp_path, ITEMS, seed=29)
    plan = FaultPlan.mixed(0.2, seed=7, slow_s=3.0, retry_after_s=1)
    assert set(plan.rates()) == set(FAULT_KINDS)
    outage = OutageAt(40, 2.0)
    server = outage.server = fake_judge(fault_plan=plan, on_request=outage)
    config = config_for(
        source,
        out,
        judge=llm_judge(
            server, timeout_s=1.0, max_retries=RETRIES, max_reasks=REASKS, transport=transport
        ),
        ray={"shard_size": 30, "workers": 2},
    )
    outcome = run_job(config)
    stats = server.stats()

    scores = assert_complete(out, rows, outcome)
    expected = truth(rows)
    assert stats["refusals"] == 1, "the outage did not happen"
    assert len(stats["faults"]) >= 8, stats["faults"]  # most kinds really occurred
    assert stats["rate_limited_429"] >= 1
    counts = dict(scores["status"].value_counts().iter_rows())
    assert set(counts) <= {"ok", "unscored", "error"}
    summary = outcome.published.summary
    assert (summary.scored, summary.unscored, summary.errors) == (
        counts.get("ok", 0),
        counts.get("unscored", 0),
        counts.get("error", 0),
    )
    assert counts.get("ok", 0) >= 110  # six retries and two re-asks rescue nearly everything
    for record in scores.iter_rows(named=True):
        if record["status"] == "ok":
            assert record["score"] == expected[record["query_id"]], record
            assert record["error"] is None
        else:
            assert record["score"] is None
            assert isinstance(record["error"], str) and record["error"].strip(), record
            if record["status"] == "unscored":
                assert "judge reply unusable" in record["error"]
            else:
                assert f"gave up after {1 + RETRIES} attempts" in record["error"]
    # Retries and re-asks cost calls, bounded: no item used more than 1 + max_retries attempts
    # for each of its 1 + max_reasks asks.
    assert int(scores["calls"].sum()) > ITEMS
    assert int(scores["calls"].max()) <= (1 + RETRIES) * (1 + REASKS)
    # Unscored and failed items have no verdict counted for them.
    verdicts = verdicts_frame(out)
    failed = verdicts.filter(
        pl.col("query_id").is_in(scores.filter(pl.col("status") != "ok")["query_id"])
    )
    assert failed["relevant"].null_count() == failed.height
