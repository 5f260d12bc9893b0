"""The nightly job end to end: real Ray (one local instance for the session), real HTTP to the
fake judge on 127.0.0.1, real Parquet read back with DuckDB and Polars.

Inputs come from `generate(markers=True)` (tests.support.job), so the exact score of every item
is known in advance: `context_precision(relevance)`.
"""

from __future__ import annotations

import copy
import io
import subprocess
from contextlib import redirect_stdout
from pathlib import Path

import duckdb
import polars as pl
import pytest

from jobs.context_precision import main
from jobs.core.config import load_config, parse_config
from jobs.core.run_layout import RunLocation
from jobs.core.storage import open_store
from jobs.engine.driver import RunOutcome
from jobs.inputs import list_input_files, plan_shards
from jobs.inputs.spec import input_spec_of
from jobs.run.job import run_job
from jobs.run.outcome import print_outcome
from jobs.tools.sample_data import generate, write_jsonl
from scorer_core import context_precision
from scorer_core.errors import ConfigError, InputError
from tests.fake_judge import VERDICTS_SCHEMA_NAME, FakeJudgeServer
from tests.support.fakes import JudgeFactory
from tests.support.job import (
    assert_complete,
    config_for,
    lexical_flags,
    line_offsets,
    llm_judge,
    manifest,
    raw_config,
    run_shard,
    sample_item,
    sample_job,
    scores_frame,
    shard_context,
    shard_files,
    shard_lines,
    truth,
    verdict_requests,
    verdicts_frame,
    write_items,
)
from tests.support.paths import VENV_BIN

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("ray_local")]

# -- lexical judge, end to end ---------------------------------------------------------------


def test_lexical_run_end_to_end_every_item_exactly_once(
    tmp_path: Path, run_log: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "in" / "items.jsonl"
    rows = write_items(source, 300)
    out = tmp_path / "out"
    config = config_for(source, out, ray={"shard_size": 60, "workers": 2})
    outcome = run_job(config)

    spec = input_spec_of(config)
    assert outcome.shards_total == len(plan_shards(spec, list_input_files(spec), 60))
    assert outcome.shards_total >= 4
    assert outcome.shards_skipped == 0
    assert outcome.published.duplicates == 0
    summary = outcome.published.summary
    assert (summary.items, summary.scored, summary.unscored, summary.errors) == (300, 300, 0, 0)
    assert summary.judge_calls == 0

    # DuckDB reads the hive-partitioned table through the documented glob.
    con = duckdb.connect()
    glob = f"{out}/scores/**/*.parquet"
    found = con.execute(
        f"select count(*), count(distinct query_id), list(distinct run_id), any_value(run_date) "
        f"from read_parquet('{glob}', hive_partitioning=true)"
    ).fetchone()
    assert found is not None
    count, distinct, run_ids, run_date = found
    assert (count, distinct, run_ids) == (300, 300, [outcome.run_id])
    assert str(run_date) == outcome.run_date.isoformat()
    statuses = dict(
        con.execute(
            f"select status, count(*) from read_parquet('{glob}', hive_partitioning=true) "
            "group by status"
        ).fetchall()
    )
    assert statuses == {"ok": 300}
    # ... and so does the `duckdb` command of the README, as a user would type it.
    cli = subprocess.run(
        [
            str(VENV_BIN / "duckdb"),
            "-csv",
            "-c",
            f"select count(*), avg(score) from read_parquet('{glob}', hive_partitioning=true)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.splitlines()[1].split(",")[0] == "300"

    # Polars: every score is the lexical judge's own verdicts through the precision formula.
    scores = assert_complete(out, rows, outcome)
    by_id = {row["id"]: row for row in rows}
    for record in scores.iter_rows(named=True):
        row = by_id[record["query_id"]]
        flags = lexical_flags(sample_item(row))
        assert record["score"] == context_precision(flags), record["query_id"]
        assert record["relevant_count"] == sum(flags)
        assert record["context_count"] == len(row["contexts"])
        assert record["status"] == "ok" and record["error"] is None
    verdicts = verdicts_frame(out)
    assert verdicts.height == sum(len(row["contexts"]) for row in rows)
    assert verdicts.select("query_id", "position").n_unique() == verdicts.height

    # The manifest says the run is complete and carries the summary, without secrets.
    data = manifest(out, outcome)
    assert data["status"] == "complete"
    assert data["run_id"] == outcome.run_id
    assert data["summary"]["items"] == 300
    assert data["shards"] == outcome.shards_total
    assert "score_mismatches" not in data  # the published scores are the workers' own
    assert data["duplicates"] == 0
    assert set(data["tables"]) == {"scores", "verdicts", "summary"}
    summary_table = pl.read_parquet(f"{out}/summary/**/*.parquet", hive_partitioning=True)
    assert summary_table.filter(pl.col("metric") == "items")["value"].to_list() == [300.0]
    # Nothing but the published tables, the manifest and an empty staging root remain.
    tables = {"scores", "verdicts", "summary", "manifests"}
    assert tables <= {p.name for p in out.iterdir()} <= tables | {"_staging", "_cache"}
    if (out / "_staging").exists():
        assert list((out / "_staging").iterdir()) == []
    assert f"run {outcome.run_id}" in run_log.text


# -- LLM judge through litellm against the fake server ---------------------------------------


def test_llm_judge_scores_equal_the_truth(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    source, rows, out = sample_job(tmp_path, 60, seed=11)
    config = config_for(source, out, judge=llm_judge(server))
    outcome = run_job(config)

    scores = assert_complete(out, rows, outcome)
    expected = truth(rows)
    for record in scores.iter_rows(named=True):
        assert record["status"] == "ok", record["error"]
        assert record["score"] == expected[record["query_id"]], record["query_id"]
        assert record["judge_model"] == "openai/fake-judge"
        assert record["calls"] == 1  # at most 9 contexts: one verdict request per item
    summary = outcome.published.summary
    assert (summary.items, summary.scored, summary.unscored, summary.errors) == (60, 60, 0, 0)
    stats = server.stats()
    assert stats["by_schema"] == {VERDICTS_SCHEMA_NAME: 60}  # template reasons: no reason calls
    assert stats["by_status"] == {"200": 60}
    assert summary.judge_calls == 60 == int(scores["calls"].sum())
    assert stats["contexts_judged"] == sum(len(row["contexts"]) for row in rows)
    assert summary.prompt_tokens > 0 and summary.completion_tokens > 0
    # The key came from the named environment variable, not a placeholder.
    assert stats["authorization_headers"] == [f"Bearer {judge_key}"]
    # Verdicts table agrees with the ground truth position by position.
    verdicts = verdicts_frame(out).sort("query_id", "position")
    by_id = {row["id"]: row for row in rows}
    for query_id, group in verdicts.group_by("query_id", maintain_order=True):
        assert group["relevant"].to_list() == [bool(r) for r in by_id[query_id[0]]["relevance"]]


def test_llm_reasons_come_from_the_judge_when_asked(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    source, rows, out = sample_job(tmp_path, 12, seed=5)
    config = config_for(source, out, judge=llm_judge(server), scorer={"reason": "llm"})
    outcome = run_job(config)
    scores = assert_complete(out, rows, outcome)
    assert server.stats()["by_schema"] == {
        VERDICTS_SCHEMA_NAME: 12,
        "context_precision_reason": 12,
    }
    assert scores["calls"].to_list() == [2] * 12
    assert all(reason for reason in scores["reason"])


# -- a provider with a rate limit -------------------------------------------------------------

LIMIT, WINDOW_S = 20, 2.0


def test_a_rate_limited_provider_gets_every_item_scored(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    """The server enforces 20 requests per 2 s (429 beyond); the run, limited to that rate,
    scores every item with its true score. How close to the limit the run gets, and how few
    429s it meets, are real rates: `python -m bench.job_bench ratelimit` measures them. That
    every worker goes through one pace is tests/integration/test_limiter_actor.py's."""
    source, rows, out = sample_job(tmp_path, 48, seed=3)
    server = fake_judge(rpm=LIMIT, window_s=WINDOW_S)
    config = config_for(
        source,
        out,
        judge=llm_judge(server),
        rate_limit={"requests_per_minute": LIMIT * 60 / WINDOW_S, "headroom": 0.8},
        ray={"shard_size": 8, "workers": 3},
    )
    outcome = run_job(config)
    stats = server.stats()
    assert stats["accepted"] == 48
    assert server.max_in_any_window() <= LIMIT
    scores = assert_complete(out, rows, outcome)
    expected = truth(rows)
    assert scores["status"].to_list() == ["ok"] * 48
    assert all(r["score"] == expected[r["query_id"]] for r in scores.iter_rows(named=True))


# -- resume ----------------------------------------------------------------------------------


def test_resume_judges_only_the_shards_a_killed_run_left_unfinished(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str, run_log: pytest.LogCaptureFixture
) -> None:
    source, rows, out = sample_job(tmp_path, 60, seed=17)
    config = config_for(
        source,
        out,
        judge=llm_judge(server),
        run={"id": "resume-1", "date": "2026-11-30"},
        cache={"enabled": False},  # resume alone, no help from the verdict cache
        ray={"shard_size": 15, "workers": 2},
    )
    spec = input_spec_of(config)
    shards = plan_shards(spec, list_input_files(spec), config.ray.shard_size)
    assert len(shards) == 4
    location = RunLocation("resume-1", config.run.date)  # type: ignore[arg-type]
    store = open_store(config.output.path)
    context = shard_context(config, location.staging)
    items_per_shard = []
    for shard in shards:
        items_per_shard.append(sum(1 for _ in shard_lines(source, shard.start, shard.end)))
    assert sum(items_per_shard) == 60

    # "The killed run": shards 0, 1 and 2 finished; then shard 1's commit marker (its items
    # file) is lost, as if the driver died between writing its verdicts and its items.
    for number in (0, 1, 2):
        report = run_shard(shards[number], number, context)
        assert not report.skipped and report.items == items_per_shard[number]
    _, lost_items = shard_files(store, location.staging, shards[1].shard_id)
    Path(lost_items).unlink()
    before = verdict_requests(server)
    assert before == sum(items_per_shard[:3])

    outcome = run_job(config)
    after = verdict_requests(server)
    assert after - before == items_per_shard[1] + items_per_shard[3]
    assert outcome.shards_skipped == 2
    assert outcome.shards_total == 4
    assert "2 already done (resuming)" in run_log.text

    scores = assert_complete(out, rows, outcome)
    expected = truth(rows)
    assert all(r["score"] == expected[r["query_id"]] for r in scores.iter_rows(named=True))
    assert scores["status"].to_list() == ["ok"] * 60
    # Shard 1's verdicts were rewritten, not duplicated.
    verdicts = verdicts_frame(out)
    assert verdicts.height == sum(len(row["contexts"]) for row in rows)
    assert manifest(out, outcome)["status"] == "complete"
    # A published run id cannot be run again.
    with pytest.raises(Exception, match="already published"):
        run_job(config)
    assert verdict_requests(server) == after


# -- verdict cache ---------------------------------------------------------------------------


def test_cache_second_run_makes_no_requests_and_a_changed_context_is_rejudged(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    source, rows, out = sample_job(tmp_path, 40, seed=19)
    contexts_total = sum(len(row["contexts"]) for row in rows)

    def run(run_id: str) -> RunOutcome:
        config = config_for(
            source, out, judge=llm_judge(server), run={"id": run_id}, ray={"shard_size": 10}
        )
        return run_job(config)

    first = run("cache-1")
    assert verdict_requests(server) == 40
    assert first.published.summary.cache_hits == 0
    assert server.stats()["contexts_judged"] == contexts_total

    second = run("cache-2")
    assert verdict_requests(server) == 40  # not one request more
    assert second.published.summary.cache_hits == contexts_total
    assert second.published.summary.judge_calls == 0
    scores = assert_complete(out, rows, second)
    expected = truth(rows)
    assert all(r["score"] == expected[r["query_id"]] for r in scores.iter_rows(named=True))
    assert scores["cache_hits"].sum() == contexts_total
    cached = verdicts_frame(out).filter(pl.col("run_id") == "cache-2")
    assert cached["cached"].all() and cached.height == contexts_total

    # Change one context of one item: it flips from irrelevant to relevant.
    target = next(n for n, row in enumerate(rows) if n > 20 and row["relevance"][0] == 0)
    changed = copy.deepcopy(rows)
    changed[target]["contexts"][0] = "A rewritten passage that is RELEVANT now."
    changed[target]["relevance"][0] = 1
    write_jsonl(source, iter(changed))
    judged_before = server.stats()["contexts_judged"]

    third = run("cache-3")
    assert verdict_requests(server) == 41  # exactly one more request...
    assert server.stats()["contexts_judged"] - judged_before == 1  # ...for the one new pair
    assert third.published.summary.cache_hits == contexts_total - 1
    scores3 = assert_complete(out, changed, third)
    expected3 = truth(changed)
    assert expected3[changed[target]["id"]] != expected[changed[target]["id"]]
    assert all(r["score"] == expected3[r["query_id"]] for r in scores3.iter_rows(named=True))
    rejudged = verdicts_frame(out).filter((pl.col("run_id") == "cache-3") & ~pl.col("cached"))
    assert rejudged.select("query_id", "position").rows() == [(changed[target]["id"], 0)]


def test_cache_is_not_shared_by_the_same_model_name_at_another_endpoint(
    tmp_path: Path, fake_judge: JudgeFactory, judge_key: str
) -> None:
    source, rows, out = sample_job(tmp_path, 20, seed=23)
    first, second = fake_judge(), fake_judge()

    def run(run_id: str, server: FakeJudgeServer) -> RunOutcome:
        config = config_for(
            source, out, judge=llm_judge(server), run={"id": run_id}, ray={"shard_size": 10}
        )
        return run_job(config)

    run("endpoint-1", first)
    assert verdict_requests(first) == 20
    other = run("endpoint-2", second)  # the same "openai/fake-judge", another server
    assert verdict_requests(second) == 20 and verdict_requests(first) == 20
    assert other.published.summary.cache_hits == 0
    again = run("endpoint-3", first)  # the first server's verdicts are still its own
    assert again.published.summary.cache_hits == sum(len(row["contexts"]) for row in rows)
    assert verdict_requests(first) == 20


# -- fail fast on configuration errors ---------------------------------------------------------


def test_unknown_config_key_fails_naming_the_key(
    tmp_path: Path, server: FakeJudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "items.jsonl"
    write_items(source, 5)
    raw = raw_config(source, tmp_path / "out", judge=llm_judge(server))
    raw["rate_limit"] = {"request_per_minute": 600}  # typo: requests_per_minute
    with pytest.raises(ConfigError, match=r"rate_limit\.request_per_minute: unknown key"):
        parse_config(raw)
    path = tmp_path / "job.yaml"
    import yaml

    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"rate_limit\.request_per_minute: unknown key"):
        load_config(path)
    assert main(["--config", str(path)]) == 2  # bad configuration (jobs.cli exit codes)
    assert "rate_limit.request_per_minute: unknown key" in capsys.readouterr().err
    assert server.stats()["total_requests"] == 0
    assert not (tmp_path / "out").exists()


def test_duplicate_policies_the_job_does_not_implement_are_rejected(tmp_path: Path) -> None:
    raw = raw_config(tmp_path / "items.jsonl", tmp_path / "out")
    raw["input"]["duplicate_query_ids"] = "fail"
    with pytest.raises(ConfigError, match=r"input\.duplicate_query_ids"):
        parse_config(raw)
    raw["input"]["duplicate_query_ids"] = "keep_first"
    assert parse_config(raw).input.duplicate_query_ids == "keep_first"


def test_missing_column_fails_naming_column_and_file(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    source = tmp_path / "items.jsonl"
    write_items(source, 5)
    config = config_for(
        source, tmp_path / "out", judge=llm_judge(server), input={"columns": {"context": "ctxs"}}
    )
    with pytest.raises(InputError) as caught:
        run_job(config)
    message = str(caught.value)
    assert "'ctxs' (context)" in message
    assert str(source) in message
    assert server.stats()["total_requests"] == 0


def test_missing_api_key_variable_fails_naming_it(
    tmp_path: Path, server: FakeJudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "items.jsonl"
    write_items(source, 5)
    monkeypatch.delenv("CTXPREC_TEST_NO_SUCH_KEY", raising=False)
    # A hosted model: the variable is needed.
    hosted = config_for(
        source,
        tmp_path / "out",
        judge={"model": "openai/gpt-4o-mini", "api_key_env": "CTXPREC_TEST_NO_SUCH_KEY"},
    )
    with pytest.raises(ConfigError, match="CTXPREC_TEST_NO_SUCH_KEY is not set"):
        run_job(hosted)
    # A server with api_base, and a variable explicitly named for it: needed too.
    named = config_for(
        source,
        tmp_path / "out",
        judge=llm_judge(server, api_key_env="CTXPREC_TEST_NO_SUCH_KEY"),
    )
    with pytest.raises(ConfigError, match="CTXPREC_TEST_NO_SUCH_KEY is not set"):
        run_job(named)
    assert server.stats()["total_requests"] == 0


# -- duplicate query ids ---------------------------------------------------------------------


def test_duplicate_query_ids_first_scored_later_ones_name_it(tmp_path: Path) -> None:
    source = tmp_path / "items.jsonl"
    rows = list(generate(30, seed=23, markers=True))
    rows[14]["id"] = rows[3]["id"]  # other shards (shard_size 10) than the first occurrence
    rows[25]["id"] = rows[3]["id"]
    write_jsonl(source, iter(rows))
    offsets = line_offsets(source)
    out = tmp_path / "out"
    outcome = run_job(config_for(source, out, ray={"shard_size": 10}))

    scores = scores_frame(out)
    assert scores.height == 30
    dup_id = rows[3]["id"]
    group = scores.filter(pl.col("query_id") == dup_id).sort("row")
    assert group["row"].to_list() == [offsets[3], offsets[14], offsets[25]]
    first, *later = group.iter_rows(named=True)
    assert first["status"] == "ok" and first["score"] is not None and first["error"] is None
    assert first["duplicate_of"] is None
    for row in later:
        assert row["status"] == "error"
        assert row["score"] is None
        assert f"duplicate query_id {dup_id}" in row["error"]
        assert f"{source} line at byte {offsets[3]}" in row["error"]  # the first occurrence
        assert row["duplicate_of"] == f"{source} line at byte {offsets[3]}"
    assert scores.filter(pl.col("duplicate_of").is_not_null()).height == 2
    # The first occurrence's score is its own, not mixed with the duplicates' verdicts.
    assert first["score"] == context_precision(lexical_flags(sample_item(rows[3])))
    verdicts = verdicts_frame(out).filter(pl.col("query_id") == dup_id)
    assert sorted(verdicts["position"].to_list()) == list(range(len(rows[3]["contexts"])))
    assert outcome.published.duplicates == 2
    summary = outcome.published.summary
    assert (summary.items, summary.scored, summary.errors) == (30, 28, 2)
    assert manifest(out, outcome)["duplicates"] == 2


# -- real servers: retrieval-only items, structured-output negotiation ------------------------


def test_retrieval_only_items_are_judged_against_the_query(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    # Queries and passages only (TREC-style): no answer column, no reference column.
    generated = list(generate(12, seed=31, markers=True))
    rows = [
        {"id": row["id"], "question": row["question"], "contexts": row["contexts"]}
        for row in generated
    ]
    source = tmp_path / "retrieval.jsonl"
    write_jsonl(source, iter(rows))
    out = tmp_path / "out"
    config = config_for(
        source,
        out,
        judge=llm_judge(server, transport="http"),
        input={"columns": {"output": None, "expected_output": None}},
        ray={"shard_size": 6, "workers": 2},
    )
    outcome = run_job(config)

    scores = assert_complete(out, rows, outcome)
    expected = truth(generated)
    for record in scores.iter_rows(named=True):
        assert record["status"] == "ok", record["error"]
        assert record["score"] == expected[record["query_id"]], record["query_id"]
    # Every verdict request said there is no answer and carried the query, no output.
    prompts = [request["messages"][-1]["content"] for request in server.requests()]
    assert len(prompts) == 12
    assert all("retrieval-only" in prompt for prompt in prompts)
    assert not any("<output>" in prompt or "<reference_answer>" in prompt for prompt in prompts)
    queries = {row["question"] for row in rows}
    assert all(any(query in prompt for query in queries) for prompt in prompts)


def test_the_run_records_the_form_a_server_without_json_schema_took(
    tmp_path: Path, fake_judge: JudgeFactory, judge_key: str
) -> None:
    # llama.cpp's server rejects json_schema (HTTP 500, a validation error): each worker
    # process steps down to json_object once; no item is lost to the rejection.
    source = tmp_path / "items.jsonl"
    rows = write_items(source, 24, seed=17)
    out = tmp_path / "out"
    llama_like = fake_judge(accepted_response_formats={"json_object", "text"})
    config = config_for(source, out, judge=llm_judge(llama_like), ray={"shard_size": 6})
    outcome = run_job(config)
    stats = llama_like.stats()
    scores = assert_complete(out, rows, outcome)
    assert scores["status"].to_list() == ["ok"] * 24
    expected = truth(rows)
    assert all(r["score"] == expected[r["query_id"]] for r in scores.iter_rows(named=True))
    # At most one refused probe per worker process, each for json_schema only.
    (refused,) = stats["response_format_rejections"].values()
    assert list(stats["response_format_rejections"]) == ["json_schema"]
    assert 1 <= refused <= outcome.shards_total
    assert stats["by_response_format"]["json_object"] == 24

    recorded = manifest(out, outcome)["judge"]["response_format"]
    assert recorded["endpoint"] == llama_like.url
    assert (recorded["setting"], recorded["in_use"], recorded["confirmed"]) == (
        "auto",
        "json_object",
        True,
    )
    assert recorded["shards"] == outcome.shards_total
    (dropped,) = recorded["dropped"]
    assert dropped["form"] == "json_schema"
    assert "validation error" in dropped["reason"] and "response_format" in dropped["reason"]
    # The printed summary says it too.
    printed = io.StringIO()
    with redirect_stdout(printed):
        print_outcome(outcome, str(out))
    text = printed.getvalue()
    assert "structured output" in text and "json_object" in text
    assert "json_schema rejected: " in text


# -- the exit code a scheduler reads ------------------------------------------------------------


def test_a_run_where_nothing_reached_the_judge_is_published_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    import yaml

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    source, rows, out = sample_job(tmp_path, 12)
    raw = raw_config(
        source,
        out,
        judge={
            "model": "openai/judge",
            "api_base": f"http://127.0.0.1:{closed}/v1",
            "transport": "http",
            "max_retries": 0,
            "timeout_s": 5,
        },
        run={"id": "unreachable"},
        cache={"enabled": False},
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["--config", str(path)]) == 1
    captured = capsys.readouterr()
    assert "12 of 12 items are errors (100.0%), over run.max_error_rate 0.5" in captured.err
    assert "commonest error (12 items):" in captured.err and "onnect" in captured.err
    scores = scores_frame(out)  # published all the same
    assert scores.height == len(rows) and (scores["status"] == "error").all()
    # within the limit (1: never), the same run exits 0
    assert (
        main(["--config", str(path), "--set", "run.id=tolerant", "--set", "run.max_error_rate=1"])
        == 0
    )
