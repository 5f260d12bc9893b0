"""Batch mode end to end: real Ray (the session's), litellm's Files + Batches calls over real
HTTP to the fake Batches API on 127.0.0.1, Parquet read back with Polars.

The fake's batches move only when the test says so (or, with `steps_per_retrieve`, one state
per poll of the driver); the driver's waits go to an injected sleep, so nothing waits for real.
Inputs come from `generate(markers=True)`: every item's true score is known.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from jobs import cli
from jobs.core.config import JobConfig
from jobs.core.run_layout import RunLocation
from jobs.core.storage import open_store
from jobs.engine.batch_rounds import BatchesStillRunning
from jobs.engine.clock import RunClock
from jobs.engine.driver import RunOutcome
from jobs.engine.ray_runtime import RAY_ENV
from jobs.run.job import run_job
from jobs.tools.run_status import status_lines
from jobs.tools.sample_data import generate, write_jsonl
from tests.fake_judge import BatchPlan, FakeJudgeServer, FaultPlan
from tests.support.fakes import JudgeFactory, RecordingSleep
from tests.support.job import (
    KEY_ENV,
    KEY_VALUE,
    assert_complete,
    config_for,
    llm_judge,
    manifest,
    raw_config,
    sample_job,
    scores_frame,
    truth,
    verdicts_frame,
)
from tests.support.paths import REPO

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]

COMPARED = [
    "query_id",
    "score",
    "status",
    "error",
    "reason",
    "relevant_count",
    "context_count",
    "calls",
    "prompt_tokens",
    "completion_tokens",
]


def batch_judge(server: FakeJudgeServer, **batch: Any) -> dict[str, Any]:
    return llm_judge(
        server,
        mode="batch",
        batch={"poll_interval_s": 5, "max_poll_interval_s": 20, **batch},
    )


def batch_config(
    source: Path,
    out: Path,
    server: FakeJudgeServer,
    *,
    batch: dict[str, Any] | None = None,
    judge: dict[str, Any] | None = None,
    **sections: Any,
) -> JobConfig:
    sections.setdefault("ray", {"shard_size": 25, "workers": 2})
    return config_for(
        source, out, judge={**batch_judge(server, **(batch or {})), **(judge or {})}, **sections
    )


def run(config: JobConfig) -> RunOutcome:
    return run_job(config, clock=RunClock(sleep=RecordingSleep()))


def one_row_each(out: Path, rows: list[dict[str, Any]], outcome: RunOutcome) -> pl.DataFrame:
    """Every item exactly once; every ok item has its true score; every other says why."""
    scores = assert_complete(out, rows, outcome)
    expected = truth(rows)
    for row in scores.iter_rows(named=True):
        if row["status"] == "ok":
            assert row["score"] == round(expected[row["query_id"]], 2), row
        else:
            assert row["score"] is None and row["error"], row
    return scores


# -- the same scores as online ---------------------------------------------------------------


def test_batch_run_scores_exactly_like_the_online_run(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory, run_log: pytest.LogCaptureFixture
) -> None:
    """The same input both ways, carried columns, context ids and segments included."""
    source = tmp_path / "items.jsonl"
    rows = [
        {**row, "doc_ids": [f"doc-{n}-{k}" for k in range(len(row["contexts"]))]}
        for n, row in enumerate(generate(120, seed=11, markers=True, segments=3))
    ]
    write_jsonl(source, iter(rows))
    carried: dict[str, Any] = {
        "input": {
            "carry": ["retriever"],
            "carry_to_verdicts": ["retriever"],
            "columns": {"context_ids": "doc_ids"},
        },
        "summary": {"by": ["retriever"]},
    }
    server = fake_judge(batch_plan=BatchPlan(steps_per_retrieve=1))
    online_out = tmp_path / "online"
    online = run_job(
        config_for(source, online_out, judge=llm_judge(server), ray={"shard_size": 25}, **carried)
    )
    online_bodies = server.requests()
    assert server.batches.stats()["uploads"] == 0
    batch_out = tmp_path / "batch"
    run_log.clear()
    batched = run(
        batch_config(source, batch_out, server, batch={"max_requests_per_batch": 50}, **carried)
    )
    stats = server.batches.stats()
    chat_requests = server.stats()["total_requests"]
    one_row_each(online_out, rows, online)
    batch_scores = one_row_each(batch_out, rows, batched)
    online_scores = scores_frame(online_out)
    compared = [*COMPARED, "retriever"]
    assert (
        batch_scores.select(compared)
        .sort("query_id")
        .equals(online_scores.select(compared).sort("query_id"))
    )
    assert (batch_scores["status"] == "ok").all()
    assert batch_scores["retriever"].n_unique() == 3
    verdict_columns = [
        "query_id",
        "position",
        "context_id",
        "context_hash",
        "relevant",
        "judge_reason",
        "cached",
        "retriever",
    ]
    batch_verdicts = verdicts_frame(batch_out).select(verdict_columns).sort("query_id", "position")
    assert batch_verdicts.equals(
        verdicts_frame(online_out).select(verdict_columns).sort("query_id", "position")
    )
    assert batch_verdicts["context_id"].null_count() == 0
    # The summary by retriever is the online run's too.
    segments = manifest(batch_out, batched)["summary"]["segments"]
    assert [(s["by"], s["value"]) for s in segments] == [
        ("retriever", f"retriever-{n:03d}") for n in range(3)
    ]
    assert segments == manifest(online_out, online)["summary"]["segments"]
    # The very requests the online run sent, one line each, 120 of them in 3 batches.
    assert chat_requests == len(online_bodies) == 120
    lines = server.batches.uploaded_lines()
    assert sorted(json.dumps(line["body"], sort_keys=True) for line in lines) == sorted(
        json.dumps(body, sort_keys=True) for body in online_bodies
    )
    assert (stats["uploads"], stats["batches_created"], stats["downloads"]) == (3, 3, 3)
    text = run_log.text
    assert "120 request(s) from 5 shard(s) in 3 batch(es)" in text
    assert "split by the provider's limits: at most 50 requests per batch" in text
    facts = manifest(batch_out, batched)["judge"]
    assert facts["mode"] == "batch" and facts["transport"] == "batch"
    assert (facts["rounds"], facts["batches"], facts["requests"]) == (1, 3, 120)
    assert facts["batch_statuses"] == {"completed": 3}
    assert facts["response_format"]["in_use"] == "json_schema"
    assert "unknown: litellm has no price" in facts["price"]


# -- every failure kind ends as rows that say why ----------------------------------------------


@pytest.mark.parametrize(
    ("plan", "words"),
    [
        (BatchPlan(steps_per_retrieve=1, error_rate=0.25, missing_rate=0.15, seed=5), None),
        (BatchPlan(steps_per_retrieve=1, outcome="expired", answered_share=0.5), "expired"),
        (BatchPlan(steps_per_retrieve=1, outcome="cancelled", answered_share=0.5), "cancelled"),
        (BatchPlan(steps_per_retrieve=1, outcome="failed"), "failed validation: model_not_found"),
    ],
    ids=["request-errors-and-missing-lines", "expired", "cancelled", "failed-validation"],
)
def test_every_failure_kind_ends_with_every_item_one_row_that_says_why(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory, plan: BatchPlan, words: str | None
) -> None:
    """With judge.batch.max_rounds 1 nothing is asked again (tests/integration/
    test_batch_retries.py asks again): every failure is the item's error, saying why."""
    source, rows, out = sample_job(tmp_path, 60, seed=12)
    server = fake_judge(batch_plan=plan)
    outcome = run(
        batch_config(source, out, server, batch={"max_requests_per_batch": 30, "max_rounds": 1})
    )
    stats = server.batches.stats()
    scores = one_row_each(out, rows, outcome)
    errors = scores.filter(pl.col("status") == "error")["error"].to_list()
    assert set(scores["status"]) <= {"ok", "error"}
    assert all("judge.batch.max_rounds 1)" in e for e in errors)
    if words is None:
        assert errors and all(
            "HTTP 500" in e or "ended completed without a line for this request" in e
            for e in errors
        )
        assert any("HTTP 500" in e for e in errors) and any("without a line" in e for e in errors)
        assert 0 < len(errors) < 60
    else:
        assert errors and all(words in e for e in errors), errors[:3]
    if plan.outcome in ("expired", "cancelled"):
        assert (scores["status"] == "ok").sum() == 30  # half of each 30-request batch
    if plan.outcome == "failed":
        assert errors and len(errors) == 60
    assert (stats["uploads"], stats["batches_created"]) == (2, 2)
    assert manifest(out, outcome)["judge"]["batch_statuses"] == {plan.outcome: 2}


# -- re-asks, reasons, the cache -------------------------------------------------------------


def test_broken_replies_are_reasked_in_follow_up_batches(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, 60, seed=13)
    broken = FaultPlan(malformed_json=0.3, wrong_count=0.2, unknown_verdict_word=0.1, seed=4)
    server = fake_judge(fault_plan=broken, batch_plan=BatchPlan(steps_per_retrieve=1))
    outcome = run(batch_config(source, out, server, judge={"max_reasks": 1}))
    lines = server.batches.uploaded_lines()
    chat = server.stats()["total_requests"]
    scores = one_row_each(out, rows, outcome)
    facts = manifest(out, outcome)["judge"]
    assert facts["rounds"] == 2  # the first asks, then one round of re-asks
    # custom_id: <shard>-<item>-<slice>-<attempt>-<judge tag>
    reasks = [line for line in lines if line["custom_id"].split("-")[3] == "1"]
    assert reasks and len(lines) == 60 + len(reasks)
    assert all(
        "Your previous reply could not be used" in line["body"]["messages"][1]["content"]
        for line in reasks
    )
    unscored = scores.filter(pl.col("status") == "unscored")
    assert all("unusable after 2 attempt(s)" in e for e in unscored["error"].to_list())
    assert set(scores["status"]) == {"ok", "unscored"}
    assert chat == 0  # nothing went online


def test_reasks_go_online_when_configured(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, 50, seed=14)
    server = fake_judge(
        fault_plan=FaultPlan(malformed_json=0.4, seed=6),
        batch_plan=BatchPlan(steps_per_retrieve=1),
    )
    config = batch_config(source, out, server, batch={"reask": "online"})
    outcome = run(config)
    online_bodies = server.requests()
    batch_lines = server.batches.uploaded_lines()
    scores = one_row_each(out, rows, outcome)
    assert manifest(out, outcome)["judge"]["rounds"] == 1
    assert len(batch_lines) == 50 and online_bodies
    assert all(
        "Your previous reply could not be used" in body["messages"][1]["content"]
        for body in online_bodies
    )
    assert set(scores["status"]) <= {"ok", "unscored"} and (scores["status"] == "ok").any()
    unscored = scores.filter(pl.col("status") == "unscored")["error"].to_list()
    assert all("unusable after 3 attempt(s)" in e for e in unscored)


def test_llm_reasons_come_in_a_second_round(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, 40, seed=15)
    server = fake_judge(batch_plan=BatchPlan(steps_per_retrieve=1))
    outcome = run(batch_config(source, out, server, scorer={"scale": 1, "reason": "llm"}))
    stats = server.batches.stats()
    scores = one_row_each(out, rows, outcome)
    assert (scores["status"] == "ok").all()
    assert all(
        reason.startswith(f"The score is {score:g} because of where the relevant")
        for reason, score in scores.select("reason", "score").iter_rows()
    )
    assert manifest(out, outcome)["judge"]["rounds"] == 2
    assert stats["batches_created"] == 2


def test_later_occurrences_of_a_query_id_in_other_shards_are_never_in_a_batch(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    # input.find_duplicates_first (auto: on for an LLM judge) marks them before round 0.
    source = tmp_path / "items.jsonl"
    rows = list(generate(60, seed=20, markers=True))
    first = rows[5]
    for number in (45, 50):  # shards of 20 rows: not the first occurrence's shard
        rows[number] = {**rows[number], "id": first["id"]}
    write_jsonl(source, iter(rows))
    out = tmp_path / "out"
    server = fake_judge(batch_plan=BatchPlan(steps_per_retrieve=1))
    outcome = run(batch_config(source, out, server))
    lines = server.batches.uploaded_lines()
    scores = scores_frame(out)
    assert scores.height == 60
    group = scores.filter(pl.col("query_id") == first["id"]).sort("row")
    head, *later = group.iter_rows(named=True)
    assert head["status"] == "ok" and head["score"] == round(truth([first])[first["id"]], 2)
    assert len(later) == 2
    for record in later:
        assert record["status"] == "error" and record["score"] is None
        assert record["error"].startswith(f"duplicate query_id {first['id']}: only its first")
    assert outcome.published.duplicates == 2
    # One request per judged item (at most 16 contexts each): the two were never asked.
    assert all(len(row["contexts"]) <= 16 for row in rows)
    assert len({line["custom_id"].rsplit("-", 2)[0] for line in lines}) == len(lines) == 58


def test_a_second_night_over_the_same_input_asks_nothing(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, 40, seed=16)
    server = fake_judge(batch_plan=BatchPlan(steps_per_retrieve=1))
    first = run(batch_config(source, out, server, run={"id": "night-1"}))
    second = run(batch_config(source, out, server, run={"id": "night-2"}))
    stats = server.batches.stats()
    one_row_each(out, rows, first)
    scores = one_row_each(out, rows, second).filter(pl.col("run_id") == "night-2")
    assert (scores["calls"] == 0).all() and (scores["cache_hits"] == scores["context_count"]).all()
    assert stats["batches_created"] == 1
    assert manifest(out, second)["judge"]["batches"] == 0


# -- across days: submit in the evening, publish in the morning ---------------------------------


def test_evening_submit_then_morning_rerun_publishes_without_resubmitting(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    source, rows, out = sample_job(tmp_path, 60, seed=17)
    server = fake_judge()  # batches move only when this test says so
    raw = raw_config(
        source,
        out,
        judge=batch_judge(server, max_requests_per_batch=25, max_wait_s=0),
        ray={"shard_size": 20, "workers": 2},
        run={"id": "nightly-1", "date": "2026-11-30"},
    )
    config_path = tmp_path / "job.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    # Evening: submit and leave (exit code 0), the batches recorded in staging.
    assert cli.main(["run", "--config", str(config_path)]) == 0
    assert "batches submitted, not finished" in capsys.readouterr().err
    evening = server.batches.stats()
    assert (evening["uploads"], evening["batches_created"]) == (3, 3)
    store = open_store(str(out))
    status = "\n".join(status_lines(store, "nightly-1"))
    assert "shards: 3 planned, 0 staged, 3 waiting" in status
    assert status.count("validating") == 3 and "no driver holds the run" in status
    # A second evening run does not submit again: it finds the batches still running.
    config = batch_config(
        source,
        out,
        server,
        batch={"max_requests_per_batch": 25, "max_wait_s": 0},
        ray={"shard_size": 20, "workers": 2},
        run={"id": "nightly-1", "date": "2026-11-30"},
    )
    with pytest.raises(BatchesStillRunning, match=r"rerun with --set run\.id=nightly-1"):
        run(config)
    # Night: the provider works. Morning: the same run id collects and publishes.
    server.batches.finish_all()
    morning = run(
        config.model_copy(
            update={
                "judge": config.judge.model_copy(
                    update={"batch": config.judge.batch.model_copy(update={"max_wait_s": None})}
                )
            }
        )
    )
    after = server.batches.stats()
    assert (after["uploads"], after["batches_created"]) == (3, 3)
    assert after["downloads"] == 3
    scores = one_row_each(out, rows, morning)
    assert (scores["status"] == "ok").all()
    published = "\n".join(status_lines(open_store(str(out)), "nightly-1"))
    assert "published" in published and "batch mode" in published
    assert "3 batch(es) in 1 round(s), 60 requests" in published
    assert manifest(out, morning)["judge"]["batches_created_by_this_driver"] == 0


def driver_env() -> dict[str, str]:
    """A driver process joining the session's Ray (no second local Ray on a busy machine)."""
    import ray

    env = {**os.environ, **RAY_ENV, KEY_ENV: KEY_VALUE, "PYTHONPATH": str(REPO)}
    env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    return env


def test_driver_killed_mid_wait_resumes_the_same_batches(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, 40, seed=18)
    run_id = "killed-mid-wait"
    server = fake_judge()
    raw = raw_config(
        source,
        out,
        judge=batch_judge(server, max_requests_per_batch=20, poll_interval_s=0.05),
        ray={"shard_size": 20, "workers": 2},
        run={"id": run_id, "date": "2026-11-30"},
    )
    config_path = tmp_path / "job.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    log = tmp_path / "driver.log"
    with log.open("wb") as sink:
        driver = subprocess.Popen(
            [sys.executable, "-m", "jobs.context_precision", "--config", str(config_path)],
            cwd=REPO,
            env=driver_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        # The driver polls only after it recorded both batches' ids: kill it as it waits.
        polled = server.batches.wait_for(
            lambda s: s["batches_created"] == 2 and s["retrievals"] >= 4, timeout_s=240
        )
        assert polled, f"driver never waited:\n{log.read_text()[-3000:]}"
        assert driver.poll() is None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(30)
    assert driver.returncode == -signal.SIGKILL
    location = RunLocation(run_id, dt.date(2026, 11, 30))
    state = json.loads((out / location.staging / "batch/rounds/round=000.json").read_text())
    ids = [batch["batch_id"] for batch in state["batches"]]
    assert all(ids) and len(ids) == 2
    server.batches.finish_all()
    rerun = run(
        batch_config(
            source,
            out,
            server,
            batch={"max_requests_per_batch": 20, "poll_interval_s": 0.05},
            ray={"shard_size": 20, "workers": 2},
            run={"id": run_id, "date": "2026-11-30"},
        )
    )
    stats = server.batches.stats()
    assert (stats["uploads"], stats["batches_created"]) == (2, 2)  # nothing submitted twice
    scores = one_row_each(out, rows, rerun)
    assert (scores["status"] == "ok").all()
    assert manifest(out, rerun)["judge"]["batches_created_by_this_driver"] == 0


def test_a_night_after_some_contexts_changed_asks_only_for_those(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, 40, seed=19)
    server = fake_judge(batch_plan=BatchPlan(steps_per_retrieve=1))
    run(batch_config(source, out, server, run={"id": "night-1"}))
    first_lines = len(server.batches.uploaded_lines())
    changed = {row["id"] for row in rows[:10]}
    for row in rows[:10]:  # a new first passage, its relevance marker kept
        row["contexts"][0] = "Rewritten: " + row["contexts"][0]
    write_jsonl(source, iter(rows))
    second = run(batch_config(source, out, server, run={"id": "night-2"}))
    lines = server.batches.uploaded_lines()[first_lines:]
    assert first_lines == 40
    assert sorted(line["custom_id"].split("-")[2] for line in lines) == ["v0"] * 10
    assert all(
        "Give exactly 1 verdicts" in line["body"]["messages"][1]["content"] for line in lines
    )
    scores = one_row_each(out, rows, second).filter(pl.col("run_id") == "night-2")
    assert (scores["status"] == "ok").all()
    hits = dict(scores.select("query_id", pl.col("context_count") - pl.col("cache_hits")).rows())
    assert {query_id for query_id, asked in hits.items() if asked} == changed
    assert all(asked == 1 for query_id, asked in hits.items() if query_id in changed)


def test_unencodable_text_is_its_items_error_in_batch_mode(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    """A lone surrogate (valid JSON) in a query, an id and a context: those rows are errors
    naming the field; every other row of their shards is scored through the batches."""
    rows = list(generate(40, seed=29, markers=True))
    rows[3]["question"] += "\udc00"
    rows[12]["id"] += "\udc00"
    rows[30]["contexts"][0] += "\ud800"
    source = tmp_path / "items.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    server = fake_judge(batch_plan=BatchPlan(steps_per_retrieve=1))
    out = tmp_path / "out"
    outcome = run(batch_config(source, out, server))
    scores = scores_frame(out)
    assert scores.height == len(rows)
    errors = scores.filter(pl.col("status") == "error").sort("row")
    assert errors["error"].str.contains("a lone surrogate").all() and errors.height == 3
    assert errors["query_id"].to_list() == [
        rows[3]["id"],
        rows[12]["id"][:-1] + "\\udc00",
        rows[30]["id"],
    ]
    assert [e.split(": ")[1] for e in errors["error"]] == [
        "input",
        "query_id",
        "context",
    ]
    ok = scores.filter(pl.col("status") == "ok")
    expected = truth(rows)
    assert ok.height == len(rows) - 3
    assert all(r["score"] == round(expected[r["query_id"]], 2) for r in ok.iter_rows(named=True))
    assert outcome.published.summary.errors == 3
