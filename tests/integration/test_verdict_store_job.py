"""The verdict store in whole runs: a pair is found wherever it moves, and a run killed half-way
(its driver, or one of its worker processes) is resumed per item from the workers' journals.

Real parts only: the session's local Ray (the driver test: the driver's own Ray in a
subprocess, as tests/integration/test_faults_process.py runs it), the fake judge over real
HTTP on 127.0.0.1, real Parquet. Each item is one verdict request (its contexts fit in one
call), so the judge's request count is the items judged.
"""

from __future__ import annotations

import os
import random
import re
import signal
from pathlib import Path
from typing import Any

import polars as pl
import psutil  # type: ignore[import-untyped]
import pytest
import yaml

from jobs.core.config import load_config, parse_config
from jobs.core.storage import open_store
from jobs.run.job import run_job
from jobs.tools.estimation import estimate
from jobs.tools.sample_data import write_jsonl
from tests.fake_judge import FakeJudgeServer
from tests.support.fakes import JudgeFactory
from tests.support.hooks import HoldRequests
from tests.support.job import (
    assert_all_true,
    config_for,
    llm_judge,
    raw_config,
    sample_job,
    verdict_requests,
    wait_journaled,
)
from tests.support.processes import (
    driver_command,
    kill_group_and_ray,
    kill_sender,
    lean_judge,
    run_in_thread,
    start_driver,
)

pytestmark = [pytest.mark.timeout(300)]


# -- items that move -------------------------------------------------------------------------


@pytest.mark.usefixtures("ray_local")
def test_moved_items_are_found_in_the_store_wherever_they_are(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str, run_log: pytest.LogCaptureFixture
) -> None:
    """2,000 items judged once; the same items shuffled and split into two files (a new
    night's export): the rerun asks the judge nothing, and `ctxprec estimate` saw that
    coming (0 calls, no cost, no time)."""
    source, rows, out = sample_job(tmp_path, 2000, seed=53)
    contexts = sum(len(row["contexts"]) for row in rows)
    sections: dict[str, Any] = {
        "judge": llm_judge(server),
        "ray": {"shard_size": 250, "workers": 2},
    }
    first = run_job(config_for(source, out, run={"id": "night-1"}, **sections))
    calls_first = verdict_requests(server)
    assert calls_first == 2000 and first.published.summary.items == 2000

    moved = tmp_path / "moved"
    moved.mkdir()
    shuffled = list(rows)
    random.Random(5).shuffle(shuffled)
    write_jsonl(moved / "a.jsonl", iter(shuffled[:1100]))
    write_jsonl(moved / "b.jsonl", iter(shuffled[1100:]))
    config = config_for(moved, out, run={"id": "night-2"}, **sections)
    planned = estimate(config)
    assert planned.cache.share == 1.0 and planned.cache.calls_after_cache == 0
    assert planned.cost_usd == 0.0 and planned.prompt_tokens.after_cache == 0
    assert planned.wall_time.seconds == 0.0

    run_log.clear()
    second = run_job(config)
    calls_second = verdict_requests(server) - calls_first
    assert calls_second <= 0.01 * calls_first
    assert calls_second == 0
    assert second.published.summary.cache_hits == contexts
    # every pair the run's shards hold was found (the same pair twice in a shard counts once)
    assert re.search(r"verdict store: ([\d,]+) of \1 pair\(s\) already judged", run_log.text)
    assert_all_true(out, shuffled, second)


# -- answers regenerated every night ------------------------------------------------------------


@pytest.mark.usefixtures("ray_local")
def test_a_regenerated_answer_costs_nothing_a_new_passage_one_call(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    """Issue 28's two nights: night 2 rewords every system answer and gives 10% of the items
    one new passage. Judged against the reference (`judge.against: auto`), the reworded
    answers cost nothing and a changed item costs one call, about its new passage alone."""
    source, rows, out = sample_job(tmp_path, 400, seed=28)
    sections: dict[str, Any] = {"judge": llm_judge(server), "ray": {"shard_size": 100}}
    run_job(config_for(source, out, run={"id": "night-1"}, **sections))
    assert verdict_requests(server) == 400

    rng = random.Random(28)
    changed = set(rng.sample(range(len(rows)), 40))
    night2 = []
    for number, row in enumerate(rows):
        row = {**row, "answer": f"Regenerated tonight: {row['answer']}"}
        if number in changed:
            at = rng.randint(0, len(row["contexts"]))
            relevant = rng.random() < 0.5
            passage = f"New passage {number} {'RELEVANT' if relevant else 'IRRELEVANT'}"
            row["contexts"] = [*row["contexts"][:at], passage, *row["contexts"][at:]]
            row["relevance"] = [*row["relevance"][:at], int(relevant), *row["relevance"][at:]]
        night2.append(row)
    source2 = tmp_path / "night2.jsonl"
    write_jsonl(source2, iter(night2))
    server.reset_stats()
    second = run_job(config_for(source2, out, run={"id": "night-2"}, **sections))
    assert verdict_requests(server) <= 1.2 * len(changed)
    asked = [body["messages"][-1]["content"] for body in server.requests()]
    assert all(content.count("\n[") == 1 for content in asked)  # the new passage alone
    scores = assert_all_true(out, night2, second)
    calls = dict(zip(scores["query_id"], scores["calls"], strict=True))
    assert {q for q, n in calls.items() if n} <= {night2[i]["id"] for i in changed}


# -- a pair repeated within a run ----------------------------------------------------------------


@pytest.mark.usefixtures("ray_local")
def test_a_pair_repeated_next_to_its_first_is_judged_once(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    """Every item twice, the copy under another id right after it (an export that repeats
    rows), in Parquet (shards are exact row ranges: a copy is in its first's shard): the
    copy is in flight with its first, or comes after its reply, in the same worker, and is
    never paid for (the judge asked about each distinct item once; 200 calls before)."""
    _, rows, out = sample_job(tmp_path, 100, seed=61)
    doubled = [copy for row in rows for copy in (row, {**row, "id": f"{row['id']}-again"})]
    source = tmp_path / "doubled.parquet"
    pl.DataFrame(doubled).write_parquet(source)
    raw = raw_config(source, out, judge=llm_judge(server), ray={"shard_size": 50, "workers": 2})
    raw["input"]["format"] = "parquet"
    config = parse_config(raw)
    outcome = run_job(config)
    assert verdict_requests(server) == len(rows)
    assert outcome.published.summary.cache_hits == sum(len(row["contexts"]) for row in rows)
    assert_all_true(out, doubled, outcome)


@pytest.mark.usefixtures("ray_local")
def test_items_exported_twice_in_two_files_are_judged_once(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str, run_log: pytest.LogCaptureFixture
) -> None:
    """The same 100 items in two Parquet files (the copies under other ids; shards are exact
    row ranges, so each shard of the second file holds the pairs of one shard of the first):
    the shards of the second file await the first file's, so whichever worker takes them,
    the judge is asked about each distinct item once. (Whether two workers would have met
    the same pairs at once here depends on Ray's start-up; the board's waiting is tested in
    tests/unit/test_dispatch.py. In JSONL, shards are byte ranges: a shard of the second file
    may hold a few pairs of a first-file shard, under the share worth waiting for.)"""
    _, rows, out = sample_job(tmp_path, 100, seed=67)
    copies = [{**row, "id": f"{row['id']}-again"} for row in rows]
    folder = tmp_path / "twice"
    folder.mkdir()
    pl.DataFrame(rows).write_parquet(folder / "a.parquet")
    pl.DataFrame(copies).write_parquet(folder / "b.parquet")
    raw = raw_config(folder, out, judge=llm_judge(server), ray={"shard_size": 50, "workers": 2})
    raw["input"]["format"] = "parquet"
    config = parse_config(raw)
    outcome = run_job(config)
    assert verdict_requests(server) == len(rows)
    assert "2 shard(s) await pairs an earlier shard judges" in run_log.text
    assert outcome.published.summary.cache_hits == sum(len(row["contexts"]) for row in rows)
    assert_all_true(out, rows + copies, outcome)


# -- a worker process killed half-way ------------------------------------------------------------


@pytest.mark.usefixtures("ray_local")
def test_a_worker_killed_half_way_costs_only_its_last_seconds(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    items, half = 200, 100
    source, rows, out = sample_job(tmp_path, items, seed=59)
    gate = HoldRequests(when=lambda arrival: arrival.number > half)
    server = fake_judge(on_request=gate)
    config = config_for(
        source,
        out,
        judge=lean_judge(server),
        rate_limit={"max_concurrency": 4},
        ray={"shard_size": 50, "workers": 2, "max_task_retries": 2},
        run={"id": "kill-a-worker", "date": "2026-12-01"},
    )
    run = run_in_thread(lambda: run_job(config))
    try:
        held = gate.wait_held(1)
        # every reply so far is in the journal
        wait_journaled(open_store(str(out)), config, rows, half)
        worker = kill_sender(held[0])  # the shards it held are not staged: Ray retries it
    finally:
        gate.release()
    outcome = run.result()
    calls = verdict_requests(server)
    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    assert items < calls <= 1.1 * items, calls
    assert_all_true(out, rows, outcome)


# -- the driver killed half-way ------------------------------------------------------------------


@pytest.mark.usefixtures("ray_local")
def test_a_driver_killed_half_way_is_resumed_per_item(
    tmp_path: Path,
    ray_tmp: str,
    judge_key: str,
    fake_judge: JudgeFactory,
) -> None:
    items, half = 200, 100
    source, rows, out = sample_job(tmp_path, items, seed=61)
    run_id = "kill-the-driver"
    gate = HoldRequests(when=lambda arrival: arrival.number > half)
    server = fake_judge(on_request=gate)
    raw = raw_config(
        source,
        out,
        judge=lean_judge(server),
        rate_limit={"max_concurrency": 4},
        ray={"shard_size": 100, "workers": 2},  # every shard in flight at the kill
        run={"date": "2026-12-01"},
    )
    config_path = tmp_path / "job.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    config = load_config(config_path, [f"run.id={run_id}"])
    command = driver_command(config_path, run_id)
    first = start_driver(command, tmp_path / "run1.log", ray_tmp, gate)
    try:
        gate.wait_held(1, timeout_s=150)
        assert first.poll() is None, (tmp_path / "run1.log").read_text()[-3000:]
        wait_journaled(open_store(str(out)), config, rows, half)
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        kill_group_and_ray(first, ray_tmp)
        gate.release()
    assert first.returncode == -signal.SIGKILL
    calls_first = verdict_requests(server)

    outcome = run_job(config)
    calls_second = verdict_requests(server) - calls_first
    assert calls_first + calls_second <= 1.1 * items, (calls_first, calls_second)
    assert calls_second <= items - half + 5
    assert_all_true(out, rows, outcome)
    assert outcome.published.summary.cache_hits > 0  # the journaled verdicts, from the store
