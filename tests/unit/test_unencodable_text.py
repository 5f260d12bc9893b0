"""Text UTF-8 cannot encode (a lone surrogate, valid in JSON) is its item's error, never its
shard's: reading names the field, the judge never sees it, staging and publishing write
everything else (jobs.inputs.records.encodable_record, jobs.core.text_safety)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.core.config import JobConfig, parse_config
from jobs.core.run_layout import RunLocation
from jobs.core.schema import CarriedColumn, RunSchema
from jobs.core.storage import open_store
from jobs.core.text_safety import encodable, escaped, terminal_safe, unencodable
from jobs.engine.publish.aggregate import SummarySpec
from jobs.engine.publish.publisher import PublishSpec, publish_run
from jobs.inputs import ItemRecord, RowError, list_input_files, plan_shards
from jobs.inputs.records import ItemReader, read_query_ids
from jobs.inputs.spec import input_spec_of
from tests.fake_judge import FakeJudgeServer
from tests.support.job import llm_judge, manifest_of, run_shard, shard_context

COLUMNS = {
    "query_id": "id",
    "input": "q",
    "output": "a",
    "expected_output": "ref",
    "context": "ctx",
    "context_ids": "ids",
}
CARRIED = (CarriedColumn("tenant", pa.string(), into_verdicts=True),)


def row(n: int, **overrides: Any) -> dict[str, Any]:
    base = {
        "id": f"q{n}",
        "q": f"Which river flows through town {n}?",
        "a": "The Amber river.",
        "ref": "Amber",
        "ctx": ["The Amber river flows through the town.", "Other text."],
        "ids": ["d1", "d2"],
        "tenant": "acme",
    }
    return {**base, **overrides}


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    # json.dumps escapes a lone surrogate as \\udc00: valid JSON, as a user's file holds it
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def config_for(source: Path, out: Path, **judge: Any) -> JobConfig:
    return parse_config(
        {
            "input": {
                "path": str(source),
                "columns": COLUMNS,
                "carry": ["tenant"],
                "carry_to_verdicts": ["tenant"],
            },
            "output": {"path": str(out)},
            "judge": judge or {"model": "lexical"},
        }
    )


def read_all(config: JobConfig) -> list[ItemRecord | RowError]:
    spec = input_spec_of(config)
    (shard,) = plan_shards(spec, list_input_files(spec), 1000)
    return list(ItemReader(spec=spec).read(shard, CARRIED))


# -- the helpers -------------------------------------------------------------------------------


def test_escaped_is_lossless_and_encodable() -> None:
    assert escaped("plain \\ text é") == "plain \\ text é"  # encodable text unchanged
    text = "a\\b\udc00c"
    out = escaped(text)
    assert encodable(out) and out == "a\\\\b\\udc00c"
    assert out.encode().decode("unicode_escape") == text  # the escapes undo exactly


def test_unencodable_names_where() -> None:
    assert unencodable("ok") is None
    assert unencodable("ab\ud800") == "a lone surrogate U+D800 at character 2"
    assert unencodable(["x", {"k": ["\udfff"]}]) == (
        "element 1: key 'k': element 0: a lone surrogate U+DFFF at character 0"
    )


def test_terminal_safe_neutralises_controls() -> None:
    assert terminal_safe("bm25") == "bm25"
    assert terminal_safe("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m"
    assert terminal_safe("a\r\nb\tc\x7f\u202e\udc00") == "a\\r\\nb\\tc\\x7f\\u202e\\udc00"
    assert terminal_safe(3.5) == "3.5"


# -- reading: every field -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"id": "q\udc00"}, "query_id"),
        ({"q": "Which\udc00 river?"}, "input"),
        ({"a": "\ud83d"}, "output"),
        ({"ref": "Am\udc00ber"}, "expected_output"),
        ({"ctx": ["fine", "bad \udc00"]}, "context: element 1"),
        ({"ids": ["d1", "\udc00"]}, "context_ids: element 1"),
        ({"tenant": "ac\udc00me"}, "tenant (carried column)"),
    ],
)
def test_a_row_with_unencodable_text_is_its_own_error_naming_the_field(
    tmp_path: Path, overrides: dict[str, Any], field: str
) -> None:
    source = write(tmp_path / "in.jsonl", [row(0), row(1, **overrides), row(2)])
    records = read_all(config_for(source, tmp_path / "out"))
    assert [type(r) for r in records] == [ItemRecord, RowError, ItemRecord]
    error = records[1]
    assert isinstance(error, RowError)
    assert f"line at byte {len(json.dumps(row(0))) + 1}: {field}: a lone surrogate" in (
        error.message
    )
    assert encodable(error.message)
    assert error.query_id is not None and encodable(error.query_id)
    if field == "query_id":
        assert error.query_id == "q\\udc00"
    # unwritable carried values are null on the error row, the others kept
    assert error.carried == ((None,) if field.startswith("tenant") else ("acme",))
    # the duplicate look-ahead reads the same id the error row has
    spec = input_spec_of(config_for(source, tmp_path / "out"))
    (shard,) = plan_shards(spec, list_input_files(spec), 1000)
    assert [qid for qid, _, _ in read_query_ids(spec, shard)][1] == error.query_id


# -- one shard, every judge path: the rest is scored ------------------------------------------


BAD_ROWS = [
    row(1, id="q1\udc00"),
    row(2, q="q\udc00?"),
    row(3, ctx=["x", "\udc00"]),
    row(4, tenant="\udc00"),
]


def check_shard(config: JobConfig, tmp_path: Path) -> pl.DataFrame:
    spec = input_spec_of(config)
    (shard,) = plan_shards(spec, list_input_files(spec), 1000)
    tables = RunSchema(CARRIED)
    report = run_shard(shard, 0, shard_context(config, "_staging/run_id=u", tables=tables))
    assert report.fatal is None
    assert report.statuses == {"ok": 3, "error": len(BAD_ROWS)}
    store = open_store(config.output.path)
    location = RunLocation("u", dt.date(2026, 11, 30))
    published = publish_run(
        store,
        location,
        manifest_of(location),
        PublishSpec(summary=SummarySpec(model=config.judge.model, scale=1.0), tables=tables),
    )
    assert published.summary.errors == len(BAD_ROWS)
    return pl.read_parquet(Path(config.output.path) / location.table_file("scores"))


def shard_input(tmp_path: Path) -> Path:
    return write(tmp_path / "in.jsonl", [row(0), *BAD_ROWS, row(5), row(6)])


def test_the_lexical_judge_scores_the_rest_of_the_shard(tmp_path: Path) -> None:
    scores = check_shard(config_for(shard_input(tmp_path), tmp_path / "out"), tmp_path)
    by_id = dict(zip(scores["query_id"], scores["status"], strict=True))
    assert by_id == {
        "q0": "ok",
        "q1\\udc00": "error",
        "q2": "error",
        "q3": "error",
        "q4": "error",
        "q5": "ok",
        "q6": "ok",
    }


@pytest.mark.parametrize("transport", ["http", "litellm"])
def test_an_llm_judge_scores_the_rest_of_the_shard(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str, transport: str
) -> None:
    judge = llm_judge(server, transport=transport)
    scores = check_shard(config_for(shard_input(tmp_path), tmp_path / "out", **judge), tmp_path)
    assert sorted(scores.filter(pl.col("status") == "ok")["query_id"]) == ["q0", "q5", "q6"]
    assert server.stats()["total_requests"] >= 3


# -- the property: arbitrary Unicode, end to end ----------------------------------------------

ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
ANY_TEXT = st.text(ANY_CHAR, max_size=12)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "id": ANY_TEXT,
                "q": ANY_TEXT,
                "a": ANY_TEXT,
                "ref": ANY_TEXT,
                "ctx": st.lists(ANY_TEXT, min_size=1, max_size=3),
                "tenant": ANY_TEXT,
            }
        ),
        min_size=1,
        max_size=6,
    )
)
def test_arbitrary_unicode_reads_judges_stages_and_publishes(
    tmp_path_factory: pytest.TempPathFactory, rows: list[dict[str, Any]]
) -> None:
    tmp_path = tmp_path_factory.mktemp("unicode")
    rows = [{**r, "id": f"{n}:{r['id']}", "ids": None} for n, r in enumerate(rows)]
    source = write(tmp_path / "in.jsonl", rows)
    config = config_for(source, tmp_path / "out")
    spec = input_spec_of(config)
    (shard,) = plan_shards(spec, list_input_files(spec), 1000)
    tables = RunSchema(CARRIED)
    report = run_shard(shard, 0, shard_context(config, "_staging/run_id=p", tables=tables))
    assert report.fatal is None and report.items == len(rows)
    location = RunLocation("p", dt.date(2026, 11, 30))
    publish_run(
        open_store(str(tmp_path / "out")),
        location,
        manifest_of(location),
        PublishSpec(summary=SummarySpec(model="lexical", scale=1.0), tables=tables),
    )
    scores = pl.read_parquet(tmp_path / "out" / location.table_file("scores"))
    assert scores.height == len(rows)
    published = {r["row"]: r for r in scores.iter_rows(named=True)}
    for data, raw in zip(rows, (r for r in read_all(config)), strict=True):
        out = published[raw.row]
        bad = next(
            (name for name in ("id", "q", "a", "ref", "ctx", "tenant") if unencodable(data[name])),
            None,
        )
        assert out["query_id"] == escaped(data["id"])
        if not data["q"].strip():
            assert out["status"] == "error" and "is empty" in out["error"]
        elif bad is not None:
            assert out["status"] == "error" and "a lone surrogate" in out["error"]
        else:
            assert out["status"] == "ok", out["error"]
            assert out["tenant"] == data["tenant"]
