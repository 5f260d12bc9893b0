"""Bad input at job level: real Ray, the fake judge over real HTTP, Parquet read back with Polars.

A whole-run problem (a missing column, an unreadable Parquet file, a config mistake) fails at
start-up, before any judge request, naming the file or the key. A problem with one row
becomes that row's `status: error` with an `error` naming the file, the position ("line at
byte N" in JSONL, "row N" in Parquet) and the field; the other rows are scored as usual.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from jobs.context_precision import main
from jobs.core.config import JobConfig
from jobs.engine.driver import RunFailed
from jobs.run.job import run_job
from jobs.tools.sample_data import generate
from scorer_core import context_precision
from scorer_core.errors import InputError
from tests.fake_judge import FakeJudgeServer
from tests.support.job import (
    by_id,
    config_for,
    llm_judge,
    raw_config,
    scores_frame,
    truth,
    verdict_requests,
    verdicts_frame,
)

pytestmark = [pytest.mark.timeout(240)]

CONTEXT = "context (column 'contexts')"
INPUT = "input (column 'question')"


def judge(server: FakeJudgeServer, **options: Any) -> dict[str, Any]:
    return llm_judge(server, transport="http", **options)


def parquet_job(
    source: Path, out: Path, server: FakeJudgeServer, **input_options: Any
) -> JobConfig:
    """The job on the Parquet file `source`, 4 rows a shard, judged by `server`."""
    return config_for(
        source,
        out,
        input={"format": "parquet", **input_options},
        judge=judge(server),
        ray={"shard_size": 4, "workers": 2},
    )


def items(count: int, seed: int) -> list[dict[str, Any]]:
    return list(generate(count, seed=seed, markers=True))


def line(row: dict[str, Any]) -> bytes:
    return json.dumps(row, ensure_ascii=False).encode() + b"\n"


def write_lines(path: Path, lines: list[bytes]) -> list[int]:
    """Write raw lines; return the byte offset of each."""
    offsets = []
    position = 0
    for raw in lines:
        offsets.append(position)
        position += len(raw)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(lines))
    return offsets


def write_parquet(path: Path, rows: list[dict[str, Any]], row_group_size: int = 4) -> None:
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("question", pa.string()),
            ("answer", pa.string()),
            ("ground_truth", pa.string()),
            ("contexts", pa.list_(pa.string())),
            ("relevance", pa.list_(pa.int64())),
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, path, row_group_size=row_group_size)


def assert_good_rows_scored(scores: pl.DataFrame, good: list[dict[str, Any]]) -> None:
    rows = by_id(scores)
    expected = truth(good)
    for row in good:
        record = rows[row["id"]]
        assert record["status"] == "ok", record
        assert record["error"] is None
        assert record["score"] == expected[row["id"]]


# -- whole-run problems: fail fast ---------------------------------------------------------------


def test_missing_column_fails_before_any_judge_request(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    # JSONL: the first rows spell no `answer` column (the check samples the first rows).
    source = tmp_path / "items.jsonl"
    rows = items(6, seed=71)
    for row in rows:
        row["reply"] = row.pop("answer")
    write_lines(source, [line(row) for row in rows])
    config = config_for(source, tmp_path / "out", judge=judge(server))
    with pytest.raises(InputError) as caught:
        run_job(config)
    message = str(caught.value)
    assert f"input column(s) 'answer' (output) missing in {source}" in message
    assert "'reply'" in message  # the available columns are listed

    # Parquet: the schema (footer) alone shows it.
    parquet = tmp_path / "pq" / "items.parquet"
    good = items(6, seed=73)
    write_parquet(parquet, good)
    table = pq.read_table(parquet).drop_columns(["question"])
    pq.write_table(table, parquet)
    config = config_for(parquet, tmp_path / "out", input={"format": "parquet"}, judge=judge(server))
    with pytest.raises(InputError, match=re.escape(f"'question' (input) missing in {parquet}")):
        run_job(config)

    assert server.stats()["total_requests"] == 0
    assert not (tmp_path / "out" / "scores").exists()
    assert not (tmp_path / "out" / "_staging").exists()


def test_a_corrupt_parquet_file_among_good_ones_fails_fast_naming_it(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    folder = tmp_path / "in"
    write_parquet(folder / "part-0.parquet", items(8, seed=79))
    write_parquet(folder / "part-1.parquet", items(8, seed=83))
    write_parquet(folder / "part-2.parquet", items(8, seed=89))
    # An upload cut short: the footer never made it.
    broken = folder / "part-1.parquet"
    data = broken.read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    config = config_for(folder, tmp_path / "out", input={"format": None}, judge=judge(server))
    with pytest.raises(InputError) as caught:
        run_job(config)
    assert f"{broken} is not a readable Parquet file" in str(caught.value)
    assert server.stats()["total_requests"] == 0
    assert not (tmp_path / "out" / "_staging").exists()


@pytest.mark.usefixtures("ray_local")
def test_a_parquet_file_with_a_corrupt_page_fails_the_run_naming_it(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    """Footer fine, a data page damaged: only reading the rows finds it (on a worker). The run
    fails naming the file and publishes nothing; the good shards stay staged."""
    folder = tmp_path / "in"
    write_parquet(folder / "part-0.parquet", items(8, seed=97))
    damaged = folder / "part-1.parquet"
    write_parquet(damaged, items(8, seed=101), row_group_size=8)
    meta = pq.read_metadata(damaged)
    column = meta.row_group(0).column(4)  # contexts
    data = bytearray(damaged.read_bytes())
    start = column.data_page_offset
    for index in range(start, start + 16):  # the page header
        data[index] ^= 0xFF
    damaged.write_bytes(bytes(data))
    config = config_for(
        folder,
        tmp_path / "out",
        input={"format": None},
        judge=judge(server),
        ray={"shard_size": 8, "workers": 1, "max_task_retries": 1},
        run={"id": "bad-page", "date": "2026-11-30"},
    )
    with pytest.raises(RunFailed) as caught:
        run_job(config)
    message = str(caught.value)
    assert f"{damaged} (shard 00001-" in message and "is corrupt" in message
    assert "--set run.id=bad-page" in message
    assert not (tmp_path / "out" / "scores").exists()
    # The damaged shard judged nothing: its rows are read before any judging.
    assert verdict_requests(server) == 8  # part-0's items only


# -- one bad row among good ones: that row is an error, the rest are scored -------------------


@pytest.mark.usefixtures("ray_local")
def test_bad_jsonl_rows_are_errors_naming_byte_offset_and_field(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    source = tmp_path / "items.jsonl"
    good = items(8, seed=103)
    template = items(1, seed=107)[0]

    def bad(query_id: str, **fields: Any) -> bytes:
        return line({**template, "id": query_id, **fields})

    bad_lines: list[tuple[bytes, str | None, str]] = [
        (bad("ctx-str", contexts="RELEVANT passage"), "ctx-str",
         f"{CONTEXT} is a string, expected a list of strings"),
        (bad("ctx-json-str", contexts='["a", "b"]'), "ctx-json-str",
         f"{CONTEXT} is a string, expected a list of strings; it looks like a JSON-encoded "
         "list: decode it with a context_extractor"),
        (bad("ctx-null", contexts=None), "ctx-null",
         f"{CONTEXT} is null, expected a list of strings"),
        (bad("ctx-empty", contexts=[]), "ctx-empty", f"{CONTEXT} is an empty list"),
        (bad("ctx-number", contexts=["ok", 7]), "ctx-number",
         f"{CONTEXT} element 1 is a int, expected a string"),
        (bad("q-null", question=None), "q-null", f"{INPUT} is null"),
        (bad("q-empty", question=""), "q-empty", f"{INPUT} is empty"),
        (bad("q-blank", question="  \t "), "q-blank", f"{INPUT} is empty"),
        (b'{"id": "not-utf8", "question": "caf\xe9?", "answer": "x", "contexts": ["y"]}\n',
         None, "not valid UTF-8 (byte 0xe9 at position 35 of the line; is the file Latin-1 or "
         "another encoding? The input must be UTF-8)"),
        (b'{"id": "broken-json", "question": "Where?", "contexts": ["a"\n', None,
         "invalid JSON: Expecting ',' delimiter at column 61"),
        (b"[1, 2, 3]\n", None, "a JSON array, expected an object"),
    ]  # fmt: skip
    lines: list[bytes] = []
    expected_errors: list[tuple[int, str | None, str]] = []  # (line index, query_id, message)
    for n, row in enumerate(good):  # good and bad lines alternate, the rest of the bad at the end
        lines.append(line(row))
        if n < len(bad_lines):
            raw, query_id, message = bad_lines[n]
            expected_errors.append((len(lines), query_id, message))
            lines.append(raw)
    for raw, query_id, message in bad_lines[len(good) :]:
        expected_errors.append((len(lines), query_id, message))
        lines.append(raw)
    lines.append(b"\n   \n")  # blank lines are skipped, not errors
    offsets = write_lines(source, lines)

    out = tmp_path / "out"
    config = config_for(source, out, judge=judge(server), ray={"shard_size": 4, "workers": 2})
    outcome = run_job(config)

    scores = scores_frame(out)
    assert scores.height == len(good) + len(expected_errors)
    assert_good_rows_scored(scores, good)
    for index, query_id, message in expected_errors:
        offset = offsets[index]
        key = query_id if query_id is not None else f"{source}#{offset}"
        record = by_id(scores)[key]
        assert record["status"] == "error", record
        assert record["error"] == f"{source} line at byte {offset}: {message}"
        assert record["score"] is None
        assert (record["source"], record["row"]) == (str(source), offset)
    # Bad rows never reached the judge; every good row made exactly one request.
    assert verdict_requests(server) == len(good)
    summary = outcome.published.summary
    assert (summary.items, summary.scored, summary.errors) == (
        len(good) + len(expected_errors),
        len(good),
        len(expected_errors),
    )


@pytest.mark.usefixtures("ray_local")
def test_bad_parquet_rows_are_errors_naming_row_number_and_field(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    source = tmp_path / "items.parquet"
    rows = items(12, seed=109)
    problems: dict[int, tuple[dict[str, Any], str]] = {
        2: ({"contexts": None}, f"{CONTEXT} is null, expected a list of strings"),
        5: ({"contexts": []}, f"{CONTEXT} is an empty list"),
        6: ({"question": None}, f"{INPUT} is null"),
        9: ({"question": "   "}, f"{INPUT} is empty"),
        10: ({"id": None}, "query_id (column 'id') is null"),
    }
    for number, (fields, _) in problems.items():
        rows[number].update(fields)
    write_parquet(source, rows)
    out = tmp_path / "out"
    config = parquet_job(source, out, server)
    run_job(config)

    scores = scores_frame(out)
    assert scores.height == 12
    good = [row for n, row in enumerate(rows) if n not in problems]
    assert_good_rows_scored(scores, good)
    records = by_id(scores)
    for number, (_, message) in problems.items():
        key = rows[number]["id"] or f"{source}#{number}"
        record = records[key]
        assert record["status"] == "error", record
        assert record["error"] == f"{source} row {number}: {message}"
        assert record["row"] == number and record["score"] is None
    assert verdict_requests(server) == len(good)


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("find_first", [True, False], ids=["found-first", "found-at-publication"])
def test_duplicate_query_ids_first_scored_later_ones_name_it(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str, find_first: bool
) -> None:
    # `input.find_duplicates_first` (auto: on for an LLM judge) changes which rows are judged,
    # not what is published.
    source = tmp_path / "items.parquet"
    rows = items(12, seed=113)
    first = rows[1]
    for number in (6, 10):  # other shards (4 rows each) than the first occurrence
        rows[number]["id"] = first["id"]
    write_parquet(source, rows)
    out = tmp_path / "out"
    config = parquet_job(source, out, server, find_duplicates_first=find_first)
    outcome = run_job(config)

    scores = scores_frame(out)
    assert scores.height == 12
    group = scores.filter(pl.col("query_id") == first["id"]).sort("row")
    assert group["row"].to_list() == [1, 6, 10]
    head, *later = group.iter_rows(named=True)
    assert head["status"] == "ok" and head["error"] is None
    assert head["score"] == context_precision(first["relevance"])  # its own verdicts only
    for record in later:
        assert record["status"] == "error" and record["score"] is None
        assert record["error"] == (
            f"duplicate query_id {first['id']}: only its first occurrence "
            f"({source} row 1) is scored"
        )
    verdicts = verdicts_frame(out).filter(pl.col("query_id") == first["id"])
    assert sorted(verdicts["position"].to_list()) == list(range(len(first["contexts"])))
    assert outcome.published.duplicates == 2
    others = [row for n, row in enumerate(rows) if n not in (1, 6, 10)]
    assert_good_rows_scored(scores, others)
    # One verdict request per judged row (each has at most 16 contexts): found first, the two
    # later occurrences were never sent; otherwise they were, and then dropped.
    assert all(len(row["contexts"]) <= 16 for row in rows)
    assert verdict_requests(server) == (10 if find_first else 12)


# -- size: huge contexts, thousands of contexts ----------------------------------------------------


@pytest.mark.usefixtures("ray_local")
def test_huge_context_and_thousands_of_contexts_are_truncated_and_judged_in_slices(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    max_chars, max_contexts, per_call = 1000, 40, 16
    source = tmp_path / "items.jsonl"
    normal = items(2, seed=127)
    huge_text = "RELEVANT " + "x" * (6 * 1024 * 1024)  # 6 MiB in one context
    huge = {
        "id": "huge-context",
        "question": "Which passage is it?",
        "answer": "This one.",
        "ground_truth": "This one.",
        "contexts": ["IRRELEVANT aside", huge_text, "RELEVANT short"],
    }
    pattern = [int(i % 7 == 3) for i in range(5000)]
    many = {
        "id": "many-contexts",
        "question": "Which passages are relevant?",
        "answer": "Some.",
        "ground_truth": "Some.",
        "contexts": [f"doc {i} {'RELEVANT' if r else 'IRRELEVANT'}" for i, r in enumerate(pattern)],
    }
    write_lines(source, [line(normal[0]), line(huge), line(many), line(normal[1])])
    assert source.stat().st_size > 6 * 1024 * 1024
    out = tmp_path / "out"
    config = config_for(
        source,
        out,
        input={"max_context_chars": max_chars, "max_contexts": max_contexts},
        judge=judge(server, contexts_per_call=per_call),
        ray={"shard_size": 2, "workers": 2},
    )
    run_job(config)

    scores = by_id(scores_frame(out))
    assert scores["huge-context"]["truncated"] is True
    assert scores["huge-context"]["context_count"] == 3
    assert scores["huge-context"]["score"] == context_precision([0, 1, 1])
    assert scores["huge-context"]["calls"] == 1
    kept = pattern[:max_contexts]
    assert scores["many-contexts"]["truncated"] is True
    assert scores["many-contexts"]["context_count"] == max_contexts
    assert scores["many-contexts"]["score"] == context_precision(kept)
    assert scores["many-contexts"]["calls"] == math.ceil(max_contexts / per_call)  # 3 slices
    for row in normal:
        assert scores[row["id"]]["truncated"] is False
        assert scores[row["id"]]["score"] == context_precision(row["relevance"])
    verdicts = verdicts_frame(out)
    many_verdicts = verdicts.filter(pl.col("query_id") == "many-contexts").sort("position")
    assert many_verdicts["position"].to_list() == list(range(max_contexts))
    assert many_verdicts["relevant"].to_list() == [bool(r) for r in kept]

    # What reached the judge is bounded: no request carried more than the cut context, and
    # the slices of the long list carried at most `contexts_per_call` contexts each.
    requests = server.requests()
    assert len(requests) == 2 + 1 + math.ceil(max_contexts / per_call)
    assert max(len(json.dumps(body)) for body in requests) < 16 * 1024
    assert (
        server.stats()["contexts_judged"]
        == sum(len(row["contexts"]) for row in normal) + 3 + max_contexts
    )
    slices = [
        len(re.findall(r"^\[\d+\] ", body["messages"][-1]["content"], re.MULTILINE))
        for body in requests
        if "Which passages are relevant?" in body["messages"][-1]["content"]
    ]
    assert sorted(slices) == [max_contexts - 2 * per_call, per_call, per_call]


# -- every field round-trips exactly -------------------------------------------------------------

NASTY = 'ü "quoted" {braces} {0} {{x}} back\\slash \\n <tag>&amp; tab\t new\nline 😀 \u2028 naïve'


@pytest.mark.usefixtures("ray_local")
def test_unicode_quotes_braces_backslashes_round_trip_exactly(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    source = tmp_path / "ïn {x}" / "items.jsonl"
    rows: list[dict[str, Any]] = []
    for n in range(6):
        relevance = [int(k == n % 3) for k in range(3)]
        rows.append(
            {
                "id": f"{NASTY} #{n}",
                "question": f"{NASTY} question {n}?",
                "answer": f"{NASTY} answer",
                "ground_truth": f"{NASTY} truth",
                "contexts": [
                    f"{NASTY} [{k}] {'RELEVANT' if r else 'IRRELEVANT'} \\ {{}}"
                    for k, r in enumerate(relevance)
                ],
                "relevance": relevance,
            }
        )
    write_lines(source, [line(row) for row in rows])
    out = tmp_path / "out"
    config = config_for(source, out, judge=judge(server), ray={"shard_size": 3, "workers": 2})
    run_job(config)

    scores = scores_frame(out)
    assert sorted(scores["query_id"].to_list()) == sorted(row["id"] for row in rows)
    assert_good_rows_scored(scores, rows)
    assert set(scores["source"]) == {str(source)}
    verdicts = verdicts_frame(out)
    assert sorted(set(verdicts["query_id"])) == sorted(row["id"] for row in rows)
    # The judge saw every text exactly, each quoted on its own line.
    seen_queries = set()
    seen_contexts = set()
    for body in server.requests():
        content = body["messages"][-1]["content"]
        query = re.search(r"^<query>\n(\".*\")\n</query>$", content, re.MULTILINE)
        assert query is not None
        seen_queries.add(json.loads(query.group(1)))
        for match in re.finditer(r'^\[\d+\] (".*")$', content, re.MULTILINE):
            seen_contexts.add(json.loads(match.group(1)))
    assert seen_queries == {row["question"] for row in rows}
    assert seen_contexts == {text for row in rows for text in row["contexts"]}
    # judge.against auto: each item is judged against its reference alone, sent exactly
    references = {json.loads(m) for b in server.requests() for m in _section(b, "reference_answer")}
    assert references == {rows[0]["ground_truth"]}
    assert not any(_section(body, "output") for body in server.requests())


def _section(body: dict[str, Any], tag: str) -> list[str]:
    content = body["messages"][-1]["content"]
    return re.findall(rf"^<{tag}>\n(\".*\")\n</{tag}>$", content, re.MULTILINE)


# -- config mistakes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("ray.shard_size=-5", "ray.shard_size: Input should be greater than or equal to 1"),
        ("ray.workers=0", "ray.workers: Input should be greater than or equal to 1"),
        (
            "rate_limit.requests_per_minute=-1",
            "rate_limit.requests_per_minute: Input should be greater than or equal to 0",
        ),
        (
            "input.max_context_chars=10",
            "input.max_context_chars: Input should be greater than or equal to 100",
        ),
        ("judge.timeout_s=0", "judge.timeout_s: Input should be greater than 0"),
        ("judge.contexts_per_cal=4", "judge.contexts_per_cal: unknown key"),
        ("ray.shard_size=lots", "ray.shard_size: Input should be a valid integer"),
    ],
)
def test_config_mistakes_fail_at_start_up_naming_the_key(
    tmp_path: Path,
    server: FakeJudgeServer,
    capsys: pytest.CaptureFixture[str],
    override: str,
    expected: str,
) -> None:
    source = tmp_path / "items.jsonl"
    write_lines(source, [line(row) for row in items(3, seed=131)])
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(raw_config(source, tmp_path / "out", judge=judge(server))))
    assert main(["--config", str(path), "--set", override]) == 2  # bad configuration
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: invalid configuration")
    assert expected in err
    assert server.stats()["total_requests"] == 0
    assert not (tmp_path / "out").exists()
