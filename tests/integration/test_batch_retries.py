"""Batch failures asked again, end to end: real Ray (the session's), litellm's Files + Batches
calls over real HTTP to the fake Batches API on 127.0.0.1, Parquet read back with Polars.

Lines that fail transiently (HTTP 500, an expired or cancelled batch) go into the next round
until every item has its exact score; a 400 stays final with the provider's reason; a line
failing in every round ends as a clear error after judge.batch.max_rounds; and with
judge.batch.deadline the driver, on a fake wall clock that its injected sleeps move, cancels
the batches still running and asks the rest online. Nothing waits for real.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from jobs.core.config import JobConfig
from jobs.core.storage import open_store
from jobs.engine.batch_rounds import BatchesStillRunning
from jobs.engine.clock import RunClock
from jobs.engine.driver import RunOutcome
from jobs.run.job import run_job
from jobs.tools.run_status import status_lines
from tests.fake_judge import BatchPlan, FakeJudgeServer
from tests.support.fakes import FakeClock, JudgeFactory, RecordingSleep
from tests.support.job import assert_complete, config_for, llm_judge, manifest, sample_job, truth

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]


def batch_config(
    source: Path, out: Path, server: FakeJudgeServer, run_id: str, **batch: Any
) -> JobConfig:
    settings = {"poll_interval_s": 5, "max_poll_interval_s": 20, "max_requests_per_batch": 30}
    return config_for(
        source,
        out,
        judge=llm_judge(server, mode="batch", batch={**settings, **batch}),
        ray={"shard_size": 25, "workers": 2},
        run={"id": run_id},
    )


def run(config: JobConfig, **clocks: Any) -> RunOutcome:
    return run_job(config, clock=RunClock(sleep=clocks.pop("sleep", RecordingSleep())))


def exact(out: Path, rows: list[dict[str, Any]], outcome: RunOutcome) -> pl.DataFrame:
    """Every item once; an ok item has its true score."""
    scores = assert_complete(out, rows, outcome)
    expected = truth(rows)
    for row in scores.filter(pl.col("status") == "ok").iter_rows(named=True):
        assert row["score"] == round(expected[row["query_id"]], 2), row
    return scores


def sent_per_request(server: FakeJudgeServer) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in server.batches.uploaded_lines():
        counts[line["custom_id"]] = counts.get(line["custom_id"], 0) + 1
    return counts


def test_failed_lines_and_a_half_answered_expired_batch_are_asked_again_until_all_are_ok(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory, run_log: pytest.LogCaptureFixture
) -> None:
    """The issue's acceptance: 5% of lines failing with 500, one batch expiring half answered."""
    source, rows, out = sample_job(tmp_path, 120, seed=31)
    plan = BatchPlan(steps_per_retrieve=1, error_rate=0.05, first_outcomes=("expired",), seed=3)
    server = fake_judge(batch_plan=plan)
    outcome = run(batch_config(source, out, server, "retry-1"))
    scores = exact(out, rows, outcome)
    assert (scores["status"] == "ok").all()
    facts = manifest(out, outcome)["judge"]
    first = facts["round_details"][0]
    assert first["retried"]["batch_expired"] == 15  # the unanswered half of a 30-line batch
    assert first["retried"]["HTTP 500"] > 0
    assert first["final_errors"] == 0
    assert facts["rounds"] >= 2 and facts["max_rounds"] == 4
    sent = sent_per_request(server)
    assert len(sent) == 120 and max(sent.values()) >= 2  # one request per item, some twice
    assert "failed transiently, asked again: batch_expired 15" in run_log.text
    status = "\n".join(status_lines(open_store(str(out)), "retry-1"))
    assert "round 0: 4 batch(es), 120 requests" in status
    assert "asked again: batch_expired 15, HTTP 500" in status
    assert server.stats()["total_requests"] == 0  # nothing went online


def test_a_cancelled_batch_is_asked_again(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, 60, seed=32)
    plan = BatchPlan(steps_per_retrieve=1, first_outcomes=("cancelled",), answered_share=0.5)
    server = fake_judge(batch_plan=plan)
    outcome = run(batch_config(source, out, server, "retry-2"))
    scores = exact(out, rows, outcome)
    assert (scores["status"] == "ok").all()
    facts = manifest(out, outcome)["judge"]
    assert [r["retried"] for r in facts["round_details"]] == [
        {"missing (batch cancelled)": 15},
        {},
    ]
    assert facts["batch_statuses"] == {"cancelled": 1, "completed": 2}


def test_a_refused_request_stays_final_with_the_providers_reason(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, 60, seed=33)
    server = fake_judge(batch_plan=BatchPlan(steps_per_retrieve=1, bad_request_rate=0.2, seed=4))
    outcome = run(batch_config(source, out, server, "retry-3"))
    scores = exact(out, rows, outcome)
    errors = scores.filter(pl.col("status") == "error")["error"].to_list()
    assert 0 < len(errors) < 60
    assert all(
        "HTTP 400: content_policy_violation: fake batch: this request was refused" in e
        for e in errors
    )
    facts = manifest(out, outcome)["judge"]
    assert facts["rounds"] == 1  # nothing asked again
    assert facts["round_details"][0]["final_errors"] == len(errors)
    assert set(sent_per_request(server).values()) == {1}


def test_lines_failing_in_every_round_end_as_clear_errors_after_max_rounds(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, 40, seed=34)
    server = fake_judge(batch_plan=BatchPlan(steps_per_retrieve=1, error_rate=1.0))
    outcome = run(batch_config(source, out, server, "retry-4", max_rounds=2))
    scores = exact(out, rows, outcome)
    assert (scores["status"] == "error").all()
    assert all(
        "HTTP 500" in e and "failed transiently in 2 batch round(s), judge.batch.max_rounds 2" in e
        for e in scores["error"].to_list()
    )
    assert set(sent_per_request(server).values()) == {2}
    facts = manifest(out, outcome)["judge"]
    assert [r["retried"] for r in facts["round_details"]] == [{"HTTP 500": 40}] * 2


def test_near_the_deadline_running_batches_are_cancelled_and_the_rest_goes_online(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory, run_log: pytest.LogCaptureFixture
) -> None:
    """The batches never finish; the wall clock moves only with the driver's waits."""
    source, rows, out = sample_job(tmp_path, 60, seed=35)
    server = fake_judge(batch_plan=BatchPlan(steps_per_retrieve=0))
    wall = FakeClock(start=1_800_000_000.0)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        wall.advance(seconds)

    config = batch_config(
        source,
        out,
        server,
        "retry-5",
        deadline="2h",
        deadline_margin_s=1800,
        max_poll_interval_s=600,
    )
    outcome = run_job(config, clock=RunClock(sleep=sleep, wall=wall))
    scores = exact(out, rows, outcome)
    assert (scores["status"] == "ok").all()
    # Waited until the deadline's margin (1.5 h after the start), not a second more.
    assert sum(waits) == pytest.approx(5400.0)
    stats = server.batches.stats()
    assert stats["cancels"] == 2 and stats["downloads"] == 0
    assert server.stats()["total_requests"] == 60  # every item's request, online
    facts = manifest(out, outcome)["judge"]
    assert facts["deadline_at"] == "2027-01-15T10:00:00+00:00"
    rounds = facts["round_details"]
    assert rounds[0]["stopped_at_deadline"] == 2 and rounds[0]["retried"] == {"deadline": 60}
    assert rounds[1]["online"] is True
    assert "is near: whatever is still unanswered is asked online" in run_log.text
    status = "\n".join(status_lines(open_store(str(out)), "retry-5"))
    assert "2 cancelled at the deadline; asked again: deadline 60" in status
    assert "round 1: online (judge.batch.deadline neared)" in status
    assert json.loads(json.dumps(facts))  # plain JSON all the way


def test_a_morning_rerun_past_the_deadline_collects_the_batches_and_asks_the_rest_online(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    """Evening: submit and leave (max_wait_s 0). Morning, past the deadline: what the batches
    answered is used, the expired half is asked online, nothing is submitted again."""
    source, rows, out = sample_job(tmp_path, 60, seed=36)
    server = fake_judge(batch_plan=BatchPlan(steps_per_retrieve=0, first_outcomes=("expired",)))
    wall = FakeClock(start=1_800_000_000.0)
    evening = batch_config(source, out, server, "retry-6", deadline="8h", max_wait_s=0)
    with pytest.raises(BatchesStillRunning):
        run_job(evening, clock=RunClock(sleep=RecordingSleep(), wall=wall))
    server.batches.finish_all()
    wall.advance(9 * 3600)
    morning = batch_config(source, out, server, "retry-6", deadline="8h")
    outcome = run_job(morning, clock=RunClock(sleep=RecordingSleep(), wall=wall))
    scores = exact(out, rows, outcome)
    assert (scores["status"] == "ok").all()
    stats = server.batches.stats()
    assert (stats["uploads"], stats["batches_created"], stats["cancels"]) == (2, 2, 0)
    assert server.stats()["total_requests"] == 15  # the expired batch's unanswered half
    rounds = manifest(out, outcome)["judge"]["round_details"]
    assert rounds[0]["retried"] == {"batch_expired": 15} and rounds[1]["online"] is True
