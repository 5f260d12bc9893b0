"""The shard worker without Ray: its pure steps, then `run_shard` called directly on a JSONL
file with the offline lexical judge (good lines, broken lines, resume of a finished shard)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.core.config import JobConfig, parse_config
from jobs.core.schema import STAGED_ITEMS, STAGED_VERDICTS, CarriedColumn, RunSchema, context_hash
from jobs.core.storage import open_store
from jobs.engine.shards.shard_rows import ContextKeys, error_row, item_row, verdict_rows
from jobs.engine.shards.worker import ShardRunner
from jobs.inputs import ItemRecord, RowError, list_input_files, plan_shards
from jobs.inputs import validate_record as preprocess
from jobs.inputs.spec import input_spec_of
from jobs.run.factory import cache_fingerprint
from scorer_core.precision import context_precision
from scorer_core.reasons import template_reason
from scorer_core.types import ContextVerdict, ScoreResult, Usage
from tests.fake_judge import FakeJudgeServer
from tests.support.fakes import JudgeFactory
from tests.support.job import (
    COLUMNS,
    lexical_flags,
    llm_judge,
    run_shard,
    shard_context,
    shard_files,
)


def record(**overrides: Any) -> ItemRecord:
    values: dict[str, Any] = {
        "query_id": "q1",
        "input": "Which river flows through Kalo?",
        "output": "The Amber.",
        "expected_output": "Amber",
        "contexts": ("The Amber river flows through Kalo.", "Kalo has mild weather.", "Other."),
        "source": "/data/in.jsonl",
        "row": 120,
    }
    values.update(overrides)
    return ItemRecord(**values)


# -- pure steps ----------------------------------------------------------------------------


def test_preprocess_passes_valid_records_and_row_errors_through() -> None:
    good = record()
    assert preprocess(good) is good
    error = RowError(
        source="/data/in.jsonl", row=7, message="/data/in.jsonl line at byte 7: invalid JSON"
    )
    assert preprocess(error) is error


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"contexts": ()}, "context is empty"),
        ({"input": "   "}, "input (the query) is empty"),
    ],
)
def test_preprocess_rejects_unscorable_records_naming_the_position(
    overrides: dict[str, Any], words: str
) -> None:
    rejected = preprocess(record(**overrides))
    assert isinstance(rejected, RowError)
    assert rejected.source == "/data/in.jsonl"
    assert rejected.row == 120
    assert rejected.query_id == "q1"
    assert rejected.message.startswith("/data/in.jsonl row 120: ")
    assert words in rejected.message


def test_preprocess_keeps_retrieval_only_records() -> None:
    # No output and no reference: judged against the query (issue 10), not rejected.
    kept = record(output="", expected_output=None)
    assert preprocess(kept) is kept


def test_preprocess_uses_the_records_own_position_text() -> None:
    rejected = preprocess(record(contexts=(), where="/data/in.jsonl line at byte 120"))
    assert isinstance(rejected, RowError)
    assert rejected.message.startswith("/data/in.jsonl line at byte 120: context is empty")


def test_item_row_has_every_column_of_the_items_schema() -> None:
    verdicts = (ContextVerdict(0, True, "yes"), ContextVerdict(1, False), ContextVerdict(2, True))
    usage = Usage(calls=2, prompt_tokens=100, completion_tokens=20, retries=1, rate_limited=1)
    usage = usage + Usage(cached_prompt_tokens=64, cache_creation_tokens=8)
    result = ScoreResult(
        score=0.83, reason="why", verdicts=verdicts, status="ok", error=None, usage=usage
    )
    row = item_row(record(truncated=True), 5 << 32 | 3, result, "openai/x")
    assert list(row) == list(STAGED_ITEMS.names)
    assert row == {
        "query_id": "q1",
        "item_seq": 5 << 32 | 3,
        "status": "ok",
        "error": None,
        "score": 0.83,
        "reason": "why",
        "context_count": 3,
        "relevant_count": 2,
        "truncated": True,
        "judge_model": "openai/x",
        "calls": 2,
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "retries": 1,
        "rate_limited": 1,
        "reasks": 0,
        "cache_hits": 0,
        "cached_prompt_tokens": 64,
        "cache_creation_tokens": 8,
        "source": "/data/in.jsonl",
        "row": 120,
        "duplicate_of": None,
    }


def test_verdict_rows_one_per_position_with_keys_and_cache_flags() -> None:
    verdicts = (ContextVerdict(2, True, "r2"), ContextVerdict(0, False, "r0"))
    result = ScoreResult(
        score=None, reason="", verdicts=verdicts, status="ok", error=None, usage=Usage()
    )
    rows = verdict_rows(
        record(), 9, result, ContextKeys(keys=["k0", "k1", "k2"], cached=frozenset({2}))
    )
    assert [r["position"] for r in rows] == [0, 1, 2]
    assert all(list(r) == list(STAGED_VERDICTS.names) for r in rows)
    assert [r["relevant"] for r in rows] == [False, None, True]  # position 1 got no verdict
    assert [r["judge_reason"] for r in rows] == ["r0", None, "r2"]
    assert [r["pair_key"] for r in rows] == ["k0", "k1", "k2"]
    assert [r["cached"] for r in rows] == [False, False, True]
    assert {r["query_id"] for r in rows} == {"q1"}
    assert {r["item_seq"] for r in rows} == {9}


def test_verdict_rows_carry_context_ids_hashes_and_the_asked_columns() -> None:
    tables = RunSchema(
        [
            CarriedColumn("retriever", pa.string(), into_verdicts=True),
            CarriedColumn("tenant", pa.int64()),
        ]
    )
    result = ScoreResult(
        score=0.5,
        reason="",
        verdicts=(ContextVerdict(0, True), ContextVerdict(1, False)),
        status="ok",
    )
    carried = record(context_ids=("d0", None, "d2"), carried=("bm25", 7))
    rows = verdict_rows(carried, 3, result, tables=tables)
    assert all(list(r) == list(tables.staged_verdicts.names) for r in rows)
    assert [r["context_id"] for r in rows] == ["d0", None, "d2"]
    assert [r["context_hash"] for r in rows] == [context_hash(c) for c in carried.contexts]
    # what DuckDB gives for left(sha256('Kalo has mild weather.'), 32)
    assert rows[1]["context_hash"] == "35f972421ce6eba04baccceb1acce287"
    assert [r["retriever"] for r in rows] == ["bm25"] * 3
    assert "tenant" not in rows[0]
    item = item_row(carried, 3, result, "lexical", tables)
    assert list(item) == list(tables.staged_items.names)
    assert (item["retriever"], item["tenant"]) == ("bm25", 7)
    unread = error_row(
        RowError(source="/d/in.jsonl", row=9, message="invalid JSON"), 4, "lexical", None, tables
    )
    assert (unread["retriever"], unread["tenant"]) == (None, None)
    plain = verdict_rows(record(), 3, result)
    assert [r["context_id"] for r in plain] == [None, None, None]


@pytest.mark.parametrize("status", ["unscored", "error"])
def test_verdict_rows_of_a_failed_item_are_null_not_guessed(status: str) -> None:
    verdicts = (ContextVerdict(0, True), ContextVerdict(1, True), ContextVerdict(2, False))
    result = ScoreResult(
        score=None,
        reason="",
        verdicts=verdicts,
        status=status,  # type: ignore[arg-type]
        error="judge failed",
        usage=Usage(),
    )
    rows = verdict_rows(record(), 1, result)
    assert len(rows) == 3
    assert [r["relevant"] for r in rows] == [None, None, None]
    assert [r["pair_key"] for r in rows] == ["", "", ""]


def test_error_row_names_the_error_and_falls_back_to_source_and_row_as_id() -> None:
    anonymous = RowError(
        source="/d/in.jsonl", row=345, message="/d/in.jsonl line at byte 345: invalid JSON"
    )
    row = error_row(anonymous, 17, "lexical")
    assert list(row) == list(STAGED_ITEMS.names)
    assert row["query_id"] == "/d/in.jsonl#345"
    assert row["status"] == "error"
    assert row["error"] == "/d/in.jsonl line at byte 345: invalid JSON"
    assert row["score"] is None
    assert (row["source"], row["row"], row["item_seq"]) == ("/d/in.jsonl", 345, 17)
    assert row["context_count"] == row["calls"] == 0
    named = error_row(
        RowError(source="/d/in.jsonl", row=9, message="bad", query_id="q9"), 18, "lexical"
    )
    assert named["query_id"] == "q9"
    assert row["duplicate_of"] is None and named["duplicate_of"] is None
    repeat = error_row(
        RowError(source="/d/in.jsonl", row=9, message="dup", query_id="q9"),
        19,
        "lexical",
        "/d/in.jsonl row 2",
    )
    assert list(repeat) == list(STAGED_ITEMS.names)
    assert repeat["duplicate_of"] == "/d/in.jsonl row 2"


# -- run_shard on a real file, no Ray ------------------------------------------------------


def good_item(n: int) -> dict[str, Any]:
    entity = ["Kalo", "Venmar", "Drison", "Tusel"][n % 4]
    return {
        "id": f"q{n:03d}",
        "question": f"Which river flows through {entity} number {n}?",
        "answer": f"The Amber river flows through {entity}.",
        "ground_truth": "Amber",
        "contexts": [
            f"{entity} has mild weather in spring.",
            f"The Amber river flows through {entity}, dividing its old town.",
            "A page about something else entirely.",
        ][: 1 + n % 3],
    }


BROKEN_LINES = {
    5: '{"id": "q-bad-json", "question": ',  # invalid JSON
    11: '["an", "array"]',  # valid JSON, not an object
    17: json.dumps({"id": "q-no-ctx", "question": "Q?", "answer": "A.", "ground_truth": "A"}),
    23: json.dumps(
        {"id": "q-str-ctx", "question": "Q?", "answer": "A.", "ground_truth": "A", "contexts": "x"}
    ),
    29: json.dumps(
        {"id": "q-empty", "question": "Q?", "answer": "A.", "ground_truth": "A", "contexts": []}
    ),
}


def write_input(path: Path, lines_total: int) -> tuple[list[str], list[int]]:
    """Write `lines_total` lines (some broken); return the lines and their byte offsets."""
    lines: list[str] = []
    for n in range(lines_total):
        lines.append(BROKEN_LINES.get(n) or json.dumps(good_item(n)))
    offsets, offset = [], 0
    for line in lines:
        offsets.append(offset)
        offset += len(line.encode()) + 1
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return lines, offsets


def lexical_config(input_path: Path, out: Path, shard_size: int) -> JobConfig:
    return parse_config(
        {
            "input": {"path": str(input_path), "format": "jsonl", "columns": COLUMNS},
            "output": {"path": str(out)},
            "judge": {"model": "lexical"},
            "scorer": {"reason": "template"},
            "ray": {"shard_size": shard_size, "workers": 2},
        }
    )


@pytest.mark.parametrize("shard_size", [1000, 7])
def test_run_shard_writes_one_items_row_per_line_and_the_verdicts(
    tmp_path: Path, shard_size: int
) -> None:
    source = tmp_path / "in.jsonl"
    lines, offsets = write_input(source, 40)
    config = lexical_config(source, tmp_path / "out", shard_size)
    spec = input_spec_of(config)
    files = list_input_files(spec)
    shards = plan_shards(spec, files, shard_size)
    assert (len(shards) == 1) == (shard_size == 1000)
    store = open_store(config.output.path)
    context = shard_context(config, "_staging/run_id=t1")

    reports = [run_shard(shard, number, context) for number, shard in enumerate(shards)]
    assert not any(r.skipped or r.fatal for r in reports)
    # the offline judge negotiates nothing
    assert all(r.judge.response_format is None for r in reports)
    assert sum(r.items for r in reports) == len(lines)

    items_tables, verdict_tables = [], []
    for shard, report in zip(shards, reports, strict=True):
        verdicts_path, items_path = shard_files(store, context.staging, shard.shard_id)
        items = pq.read_table(items_path)
        verdicts = pq.read_table(verdicts_path)
        assert items.schema == STAGED_ITEMS.arrow
        assert verdicts.schema == STAGED_VERDICTS.arrow
        assert items.num_rows == report.items
        assert sum(report.statuses.values()) == report.items
        items_tables.append(items.to_pylist())
        verdict_tables.append(verdicts.to_pylist())
    items_rows = [row for table in items_tables for row in table]
    verdicts_all = [row for table in verdict_tables for row in table]

    # Exactly one row per input line, at its byte offset, in input order across shards.
    assert [r["row"] for r in items_rows] == offsets
    assert {r["source"] for r in items_rows} == {str(source)}
    seqs = [r["item_seq"] for r in items_rows]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)

    for n, row in enumerate(items_rows):
        if n in BROKEN_LINES:
            assert row["status"] == "error"
            assert row["score"] is None
            assert f"{source} line at byte {offsets[n]}" in row["error"]
            continue
        data = json.loads(lines[n])
        assert row["status"] == "ok", row["error"]
        assert row["query_id"] == data["id"]
        assert row["error"] is None
        assert row["context_count"] == len(data["contexts"])
        assert row["judge_model"] == "lexical"
        assert row["calls"] == 0  # the lexical judge makes no requests
        flags = lexical_flags(
            ItemRecord(
                query_id=data["id"],
                input=data["question"],
                output=data["answer"],
                expected_output=data["ground_truth"],
                contexts=tuple(data["contexts"]),
                source=str(source),
                row=offsets[n],
            ).to_scoring_item()
        )
        assert row["score"] == context_precision(flags)
        assert row["relevant_count"] == sum(flags)
        assert row["reason"] == template_reason(
            [ContextVerdict(i, f) for i, f in enumerate(flags)], row["score"]
        )
        mine = [v for v in verdicts_all if v["item_seq"] == row["item_seq"]]
        assert [v["position"] for v in mine] == list(range(len(flags)))
        assert [v["relevant"] for v in mine] == flags
        assert {v["query_id"] for v in mine} == {data["id"]}
        assert all(v["pair_key"] == "" and not v["cached"] for v in mine)  # no cache: lexical
    # Broken lines' messages say what was wrong; ids are kept where they could be read.
    errors = {n: items_rows[n] for n in BROKEN_LINES}
    assert "invalid JSON" in errors[5]["error"]
    assert errors[5]["query_id"] == f"{source}#{offsets[5]}"
    assert "a JSON array, expected an object" in errors[11]["error"]
    assert "context (column 'contexts') is missing" in errors[17]["error"]
    assert errors[17]["query_id"] == "q-no-ctx"
    assert "is a string, expected a list of strings" in errors[23]["error"]
    assert "is an empty list" in errors[29]["error"]
    # No verdict rows for lines that never became items.
    assert len(verdicts_all) == sum(
        len(json.loads(lines[n])["contexts"]) for n in range(len(lines)) if n not in BROKEN_LINES
    )
    statuses: dict[str, int] = {}
    for report in reports:
        for key, value in report.statuses.items():
            statuses[key] = statuses.get(key, 0) + value
    assert statuses == {"ok": len(lines) - len(BROKEN_LINES), "error": len(BROKEN_LINES)}

    # Rerunning a finished shard skips it and rewrites nothing.
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*.parquet")}
    again = [run_shard(shard, number, context) for number, shard in enumerate(shards)]
    assert all(r.skipped for r in again)
    assert all(r.items == 0 and r.statuses == {} for r in again)
    after = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*.parquet")}
    assert after == before


def test_run_shard_redoes_a_shard_whose_items_file_is_missing(tmp_path: Path) -> None:
    """The items file is the commit marker: verdicts alone do not count as done."""
    source = tmp_path / "in.jsonl"
    write_input(source, 12)
    config = lexical_config(source, tmp_path / "out", 1000)
    spec = input_spec_of(config)
    (shard,) = plan_shards(spec, list_input_files(spec), 1000)
    store = open_store(config.output.path)
    context = shard_context(config, "_staging/run_id=t2")
    first = run_shard(shard, 0, context)
    verdicts_path, items_path = shard_files(store, context.staging, shard.shard_id)
    expected = pq.read_table(items_path)
    Path(items_path).unlink()
    second = run_shard(shard, 0, context)
    assert not second.skipped
    assert second.items == first.items == 12
    assert pq.read_table(items_path).equals(expected)
    assert Path(verdicts_path).exists()


def http_judge_config(source: Path, out: Path, server: FakeJudgeServer, cache: bool) -> JobConfig:
    """A job reading `source` and judging with `server` over the http transport."""
    return parse_config(
        {
            "input": {"path": str(source), "columns": COLUMNS},
            "output": {"path": str(out)},
            "judge": llm_judge(server, transport="http"),
            "cache": {"enabled": cache},
        }
    )


def test_duplicates_within_a_shard_are_not_sent_to_the_judge(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    rows = [good_item(1), good_item(2), good_item(1)]  # the third repeats the first's id
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = http_judge_config(source, tmp_path / "out", server, cache=False)
    spec = input_spec_of(config)
    (shard,) = plan_shards(spec, list_input_files(spec), 100)
    report = run_shard(shard, 0, shard_context(config, "_staging/run_id=dup"))
    assert server.stats()["total_requests"] == 2
    assert report.items == 3 and report.statuses == {"ok": 2, "error": 1}
    store = open_store(str(tmp_path / "out"), {})
    _, items_path = shard_files(store, "_staging/run_id=dup", shard.shard_id)
    items = pq.read_table(items_path).to_pylist()
    duplicate = items[2]
    assert duplicate["status"] == "error" and duplicate["calls"] == 0
    assert duplicate["error"] == (
        f"duplicate query_id {rows[0]['id']}: only its first occurrence "
        f"({source} line at byte 0) is scored"
    )
    assert duplicate["duplicate_of"] == f"{source} line at byte 0"
    assert [row["duplicate_of"] for row in items[:2]] == [None, None]


def test_shards_of_one_process_share_one_negotiation_and_report_it(
    tmp_path: Path, fake_judge: JudgeFactory, judge_key: str
) -> None:
    # A server without json_schema (as llama.cpp's): the first shard's probe is refused and
    # the judge steps down to json_object; the second shard, in the same process, starts
    # there. The cache is on, so the judge the worker scores with is a CachingJudge: the
    # report still comes from the LLM judge inside it.
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(good_item(n)) + "\n" for n in range(6)))
    server = fake_judge(accepted_response_formats={"json_object", "text"})
    config = http_judge_config(source, tmp_path / "out", server, cache=True)
    spec = input_spec_of(config)
    shards = plan_shards(spec, list_input_files(spec), 3)
    assert len(shards) == 2
    context = shard_context(config, "_staging/run_id=forms")
    reports = [run_shard(shard, n, context) for n, shard in enumerate(shards)]
    stats = server.stats()
    assert [r.statuses for r in reports] == [{"ok": 3}, {"ok": 3}]
    assert stats["response_format_rejections"] == {"json_schema": 1}
    assert stats["by_response_format"] == {"json_schema": 1, "json_object": 6}
    for report in reports:
        assert report.judge.transport == "http"
        negotiated = report.judge.response_format
        assert negotiated["endpoint"] == server.url
        assert negotiated["in_use"] == "json_object"
        assert negotiated["confirmed"] is True
        (dropped,) = negotiated["dropped"]
        assert dropped["form"] == "json_schema" and "validation error" in dropped["reason"]


def test_run_shard_writes_the_carried_columns_with_their_types(tmp_path: Path) -> None:
    """Each shard file has the start-up types; in-shard duplicates keep their values."""
    rows = [
        {**good_item(n), "retriever": ["bm25", "dense"][n % 2], "shard": n, "docs": None}
        for n in range(6)
    ]
    rows[1]["docs"] = ["a"] * len(rows[1]["contexts"])
    rows[4]["shard"] = "four"  # not an integer: this row is an error, its other value kept
    rows.append({**rows[0], "retriever": "repeat"})  # a duplicate of q000
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = parse_config(
        {
            "input": {
                "path": str(source),
                "columns": {**COLUMNS, "context_ids": "docs"},
                "carry": ["retriever", "shard"],
                "carry_to_verdicts": ["retriever"],
            },
            "output": {"path": str(tmp_path / "out")},
            "judge": {"model": "lexical"},
        }
    )
    spec = input_spec_of(config)
    files = list_input_files(spec)
    tables = RunSchema(
        [
            CarriedColumn("retriever", pa.string(), into_verdicts=True),
            CarriedColumn("shard", pa.int64()),
        ]
    )
    (shard,) = plan_shards(spec, files, 100)
    context = shard_context(config, "_staging/run_id=carry", tables=tables)
    report = run_shard(shard, 0, context)
    assert report.statuses == {"ok": 5, "error": 2}
    store = open_store(str(tmp_path / "out"))
    verdicts_path, items_path = shard_files(store, context.staging, shard.shard_id)
    items = pq.read_table(items_path)
    assert items.schema == tables.staged_items.arrow
    assert items.schema.field("shard").type == pa.int64()
    by_row = items.to_pylist()
    assert [(r["retriever"], r["shard"]) for r in by_row] == [
        ("bm25", 0),
        ("dense", 1),
        ("bm25", 2),
        ("dense", 3),
        ("bm25", None),
        ("dense", 5),
        ("repeat", 0),
    ]
    assert "shard (carried column) is a str, expected int64" in by_row[4]["error"]
    assert by_row[6]["duplicate_of"] is not None
    verdicts = pq.read_table(verdicts_path)
    assert verdicts.schema == tables.staged_verdicts.arrow
    second = [v for v in verdicts.to_pylist() if v["query_id"] == "q001"]
    assert [v["context_id"] for v in second] == ["a", "a"]
    assert {v["retriever"] for v in second} == {"dense"}


def test_a_worker_flushes_its_journal_every_interval_and_when_it_stops(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    """The flush loop runs on the worker's injected sleep: a verdict is in the store's journal
    once an interval has passed after its reply, and the rest when the worker closes."""
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(good_item(n)) + "\n" for n in range(6)))
    config = http_judge_config(source, tmp_path / "out", server, cache=True)
    spec = input_spec_of(config)
    first, second = plan_shards(spec, list_input_files(spec), 3)
    context = shard_context(config, "_staging/run_id=journal", run_id="journal")
    journal = tmp_path / "out" / "_cache" / cache_fingerprint(config) / "journal"

    def journaled() -> list[str]:
        return sorted(
            key
            for path in journal.glob("journal.w0-*.parquet")
            for key in pq.read_table(path).column("pair_key").to_pylist()
        )

    async def night() -> tuple[list[str], list[str], list[str]]:
        entered: asyncio.Queue[None] = asyncio.Queue()
        ticks: asyncio.Queue[None] = asyncio.Queue()

        async def sleep(seconds: float) -> None:
            assert seconds == config.cache.journal_interval_s
            entered.put_nowait(None)
            await ticks.get()  # an interval passes when the test says so

        runner = ShardRunner(context, "w0", sleep=sleep)
        await runner.run_shard(first, 0)
        await entered.get()
        before_tick = journaled()  # replies in, no interval passed: nothing written yet
        ticks.put_nowait(None)
        await entered.get()  # the loop flushed and sleeps again
        after_tick = journaled()
        await runner.run_shard(second, 1)
        await runner.close()
        return before_tick, after_tick, journaled()

    before_tick, after_tick, closed = asyncio.run(night())
    contexts = [len(good_item(n)["contexts"]) for n in range(6)]
    assert before_tick == []
    assert len(after_tick) == sum(contexts[:3])
    assert len(closed) == sum(contexts) and len(set(closed)) == len(closed)
    assert len(list(journal.glob("*.parquet"))) == 2  # one file per flush
