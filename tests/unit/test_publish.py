"""jobs.engine.publish.publisher on real staged shard files: the published tables carry the
workers' own scores, which agree with their verdicts, and the `duplicate_of` marks; a worker
score its verdicts do not imply is published as is, and the Polars scores name it.

The staged rows are built by the worker's own row builders and written as the worker writes
them (pyarrow, `jobs.core.schema.STAGED_*`), into a local output store.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pytest

from jobs.core.run_layout import RunLocation
from jobs.core.run_manifest import RunManifest
from jobs.core.schema import (
    PUBLISHED_SCORES,
    PUBLISHED_SUMMARY,
    PUBLISHED_VERDICTS,
    CarriedColumn,
    RunSchema,
    duplicate_error,
)
from jobs.core.storage import Store, open_store
from jobs.engine.publish.aggregate import SummarySpec
from jobs.engine.publish.publisher import Published, PublishSpec, publish_run
from jobs.engine.shards.shard_rows import error_row, item_row, verdict_rows
from jobs.inputs import ItemRecord, RowError
from jobs.tools.published_runs import summary_from_frame
from scorer_core.precision import context_precision
from scorer_core.types import ContextVerdict, ScoreResult, Usage
from tests.support.job import shard_files
from tests.support.polars_scores import score_mismatches

SOURCE = "/data/in.jsonl"
SCALE = 10
LOCATION = RunLocation("publish-test", dt.date(2026, 11, 30))


@dataclass
class Shard:
    """One staged shard being built: its items rows and verdicts rows, in input order."""

    number: int
    items: list[dict[str, object]]
    verdicts: list[dict[str, object]]
    tables: RunSchema = field(default_factory=RunSchema)

    def seq(self) -> int:
        return self.number << 32 | len(self.items)

    def judged(
        self,
        query_id: str,
        offset: int,
        flags: list[bool],
        *,
        score: float | None = None,
        carried: tuple[Any, ...] = (),
    ) -> None:
        """An ok item; `score` overrides the worker's score (a buggy worker)."""
        contexts = tuple(f"context {i} of {query_id}" for i in range(len(flags)))
        record = ItemRecord(
            query_id=query_id,
            input="q?",
            output="a.",
            expected_output="a",
            contexts=contexts,
            source=SOURCE,
            row=offset,
            where=where(offset),
            carried=carried,
        )
        verdicts = tuple(ContextVerdict(i, flag, f"r{i}") for i, flag in enumerate(flags))
        worker_score = context_precision(flags, SCALE) if score is None else score
        result = ScoreResult(
            score=worker_score,
            reason=f"why {query_id}",
            verdicts=verdicts,
            status="ok",
            error=None,
            usage=Usage(calls=1),
        )
        seq = self.seq()
        self.items.append(item_row(record, seq, result, "lexical", self.tables))
        self.verdicts.extend(verdict_rows(record, seq, result, tables=self.tables))

    def unscored(self, query_id: str, offset: int, contexts: int) -> None:
        texts = tuple(f"context {i}" for i in range(contexts))
        record = ItemRecord(
            query_id=query_id,
            input="q?",
            output="a.",
            expected_output="a",
            contexts=texts,
            source=SOURCE,
            row=offset,
            where=where(offset),
        )
        result = ScoreResult(
            score=None,
            reason="",
            verdicts=(),
            status="unscored",
            error="judge gave up",
            usage=Usage(calls=2),
        )
        seq = self.seq()
        self.items.append(item_row(record, seq, result, "lexical"))
        self.verdicts.extend(verdict_rows(record, seq, result))

    def error(self, error: RowError, first: str | None = None) -> None:
        self.items.append(error_row(error, self.seq(), "lexical", first, self.tables))

    def write(self, store: Store) -> None:
        verdicts_path, items_path = shard_files(store, LOCATION.staging, f"shard-{self.number:05d}")
        store.write_parquet_atomic(
            verdicts_path,
            pa.Table.from_pylist(self.verdicts, schema=self.tables.staged_verdicts.arrow),
        )
        store.write_parquet_atomic(
            items_path, pa.Table.from_pylist(self.items, schema=self.tables.staged_items.arrow)
        )


def where(offset: int) -> str:
    return f"{SOURCE} line at byte {offset}"


def stage_run(store: Store, *, tampered_score: float | None = None) -> None:
    """Two shards: `a` repeats across them, `b` within shard 0; shard 1's `a` has verdicts of
    its own that must not mix into the first `a`'s score."""
    first = Shard(number=0, items=[], verdicts=[])
    first.judged("a", 0, [True, False, True, False])
    first.judged("b", 100, [False, True, True], score=tampered_score)
    first.unscored("u", 200, 3)
    first.error(RowError(source=SOURCE, row=300, message=f"{where(300)}: invalid JSON"))
    first.error(
        RowError(source=SOURCE, row=400, message=duplicate_error("b", where(100)), query_id="b"),
        where(100),
    )
    second = Shard(number=1, items=[], verdicts=[])
    second.judged("a", 500, [True, True, True, True])
    second.judged("c", 600, [False, False, True])
    first.write(store)
    second.write(store)


def publish(store: Store) -> Published:
    return publish_run(
        store,
        LOCATION,
        RunManifest(run_id=LOCATION.run_id, run_date=LOCATION.run_date.isoformat()),
        PublishSpec(summary=SummarySpec(model="lexical", scale=SCALE)),
    )


def published(out: Path, table: str) -> pl.DataFrame:
    return pl.read_parquet(out / LOCATION.table_file(table))


def test_published_tables_carry_the_workers_scores_and_duplicate_marks(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    stage_run(store)
    outcome = publish(store)

    scores = published(tmp_path, "scores")
    assert scores.schema == PUBLISHED_SCORES.polars
    assert published(tmp_path, "verdicts").schema == PUBLISHED_VERDICTS.polars
    assert published(tmp_path, "summary").schema == PUBLISHED_SUMMARY.polars
    rows = {(r["query_id"], r["row"]): r for r in scores.iter_rows(named=True)}
    assert {key: r["score"] for key, r in rows.items()} == {
        ("a", 0): 8.33,
        ("b", 100): 5.83,
        ("u", 200): None,
        (f"{SOURCE}#300", 300): None,
        ("b", 400): None,
        ("a", 500): None,
        ("c", 600): 3.33,
    }
    assert {key: r["status"] for key, r in rows.items()} == {
        ("a", 0): "ok",
        ("b", 100): "ok",
        ("u", 200): "unscored",
        (f"{SOURCE}#300", 300): "error",
        ("b", 400): "error",
        ("a", 500): "error",
        ("c", 600): "ok",
    }
    # Marked by the worker (within its shard) and by publishing (across shards) alike.
    marked = {key: r["duplicate_of"] for key, r in rows.items() if r["duplicate_of"]}
    assert marked == {("b", 400): where(100), ("a", 500): where(0)}
    assert rows[("a", 500)]["error"] == (
        f"duplicate query_id a: only its first occurrence ({SOURCE} line at byte 0) is scored"
    )
    assert rows[("b", 400)]["error"] == duplicate_error("b", where(100))
    assert rows[("u", 200)]["error"] == "judge gave up"
    assert rows[("a", 0)]["relevant_count"] == 2 and rows[("a", 0)]["reason"] == "why a"
    assert outcome.duplicates == 2

    # The later `a`'s verdicts are dropped; staged-only columns are not published.
    verdicts = published(tmp_path, "verdicts").filter(pl.col("query_id") == "a")
    assert verdicts.sort("position")["relevant"].to_list() == [True, False, True, False]

    summary = outcome.summary
    assert (summary.items, summary.scored, summary.unscored, summary.errors) == (7, 3, 1, 3)
    data = json.loads((tmp_path / LOCATION.manifest).read_text())
    assert data["duplicates"] == 2 and data["status"] == "complete"
    assert "score_mismatches" not in data
    assert not (tmp_path / LOCATION.staging).exists()

    # The published scores read back through DuckDB as a reader would.
    path = tmp_path / LOCATION.table_file("scores")
    relation = duckdb.sql(
        f"select query_id, score from read_parquet('{path}') where status = 'ok' order by 1"
    )
    assert relation.fetchall() == [("a", 8.33), ("b", 5.83), ("c", 3.33)]
    # Every ok item's score is the one its published verdicts imply.
    scores_table, verdicts_table = published(tmp_path, "scores"), published(tmp_path, "verdicts")
    assert score_mismatches(scores_table, verdicts_table, SCALE).collect().is_empty()


def test_a_shard_staged_before_a_column_existed_publishes_it_null(tmp_path: Path) -> None:
    """A run staged in part by an older version (resumed after an upgrade): the columns its
    shards lack are null in their rows, the other shards' values are kept."""
    store = open_store(str(tmp_path))
    stage_run(store)
    _, items_path = shard_files(store, LOCATION.staging, "shard-00000")
    newer = ["cached_prompt_tokens", "cache_creation_tokens"]
    old = pl.read_parquet(items_path)
    assert set(newer) <= set(old.columns)
    store.write_parquet_atomic(items_path, old.drop(newer).to_arrow())
    publish(store)

    scores = published(tmp_path, "scores")
    assert scores.schema == PUBLISHED_SCORES.polars
    by_row = {r["row"]: r for r in scores.iter_rows(named=True)}
    assert [by_row[row]["cached_prompt_tokens"] for row in (0, 100, 500, 600)] == [
        None,
        None,
        0,
        0,
    ]
    assert by_row[0]["score"] == 8.33 and by_row[600]["score"] == 3.33


def test_the_workers_score_is_published_as_is_and_polars_names_one_its_verdicts_deny(
    tmp_path: Path,
) -> None:
    store = open_store(str(tmp_path))
    stage_run(store, tampered_score=5.84)  # b's verdicts [no, yes, yes] imply 5.83
    publish(store)
    scores = published(tmp_path, "scores")
    assert scores.filter((pl.col("query_id") == "b") & (pl.col("status") == "ok"))[
        "score"
    ].to_list() == [5.84]
    found = score_mismatches(scores, published(tmp_path, "verdicts"), SCALE).collect()
    assert found.rows() == [("b", SOURCE, 100, 5.84, 5.83, 2, 2)]


CARRIED = RunSchema(
    [
        CarriedColumn("retriever", pa.string(), into_verdicts=True),
        CarriedColumn("day", pa.date32()),
    ]
)


def test_carried_columns_are_published_with_their_types_and_summarised_by(
    tmp_path: Path,
) -> None:
    store = open_store(str(tmp_path))
    day1, day2 = dt.date(2026, 11, 29), dt.date(2026, 11, 30)
    first = Shard(number=0, items=[], verdicts=[], tables=CARRIED)
    first.judged("a", 0, [True, False, True, False], carried=("bm25", day1))
    first.judged("b", 100, [False, True, True], carried=("dense", day1))
    first.judged("c", 200, [True, True], carried=("bm25", day2))
    first.error(
        RowError(
            source=SOURCE, row=300, message="context is null", query_id="d", carried=("dense", None)
        )
    )
    first.error(
        RowError(source=SOURCE, row=400, message=f"{where(400)}: invalid JSON")
    )  # nothing read
    second = Shard(number=1, items=[], verdicts=[], tables=CARRIED)
    second.judged("a", 500, [True, True, True, True], carried=("dense", day2))  # a repeat
    second.judged("e", 600, [False, False, True], carried=(None, day2))
    first.write(store)
    second.write(store)
    outcome = publish_run(
        store,
        LOCATION,
        RunManifest(run_id=LOCATION.run_id, run_date=LOCATION.run_date.isoformat()),
        PublishSpec(
            summary=SummarySpec(model="lexical", scale=SCALE, segment_by=["retriever", "day"]),
            tables=CARRIED,
        ),
    )

    scores = published(tmp_path, "scores")
    assert scores.schema == CARRIED.scores.polars
    assert scores.schema["day"] == pl.Date
    rows = {(r["query_id"], r["row"]): (r["retriever"], r["day"]) for r in scores.to_dicts()}
    assert rows[("a", 500)] == ("dense", day2)  # a repeat keeps its own values
    assert rows[(f"{SOURCE}#400", 400)] == (None, None)
    assert rows[("d", 300)] == ("dense", None)
    verdicts = published(tmp_path, "verdicts")
    assert verdicts.schema == CARRIED.verdicts.polars
    assert set(verdicts.filter(pl.col("query_id") == "b")["retriever"]) == {"dense"}

    summary = outcome.summary
    assert summary.segment_columns == ("retriever", "day")
    retrievers = {s.value: s.summary for s in summary.segments_by("retriever")}
    assert list(retrievers) == ["bm25", "dense", None]  # sorted as text, null last
    expected = (
        scores.group_by("retriever")
        .agg(
            items=pl.len(),
            errors=(pl.col("status") == "error").sum(),
            mean=pl.col("score").filter(pl.col("status") == "ok").mean(),
        )
        .to_dicts()
    )
    for row in expected:
        segment = retrievers[row["retriever"]]
        assert (segment.items, segment.errors, segment.mean) == (
            row["items"],
            row["errors"],
            row["mean"],
        )
    assert retrievers["bm25"].mean == pytest.approx((8.33 + 10.0) / 2)
    assert retrievers["dense"].bands == (
        ("none", 0),
        ("low", 0),
        ("moderate", 1),
        ("good", 0),
        ("excellent", 0),
    )
    # relevance by position per retriever (in the verdicts), not per day (not there)
    bm25_first = retrievers["bm25"].position_rates[0]
    assert (bm25_first.judged, bm25_first.relevant) == (2, 2)
    days = {s.value: s.summary for s in summary.segments_by("day")}
    assert list(days) == ["2026-11-29", "2026-11-30", None]
    assert days["2026-11-30"].items == 3 and days["2026-11-30"].position_rates == ()

    # the summary table holds every segment's metrics; it reads back to the same summary
    table = published(tmp_path, "summary")
    mean_rows = table.filter((pl.col("metric") == "mean") & (pl.col("segment_by") == "retriever"))
    assert dict(zip(mean_rows["segment"], mean_rows["value"], strict=True)) == {
        value: s.mean for value, s in retrievers.items()
    }
    assert summary_from_frame(table) == summary
    manifest = json.loads((tmp_path / LOCATION.manifest).read_text())
    assert manifest["summary"] == summary.to_dict()
