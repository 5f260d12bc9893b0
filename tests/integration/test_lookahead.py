"""jobs.engine.pairs.lookahead: the ids read before judging are the ones the workers stage, row
for row (bad rows, ids of every kind, JSONL and Parquet alike, whether the pass reads a Parquet
file's id column alone or whole items); a shard's worker writes the later occurrences it is
given as duplicates without judging them; the pass runs as Ray tasks for a large run, and a
resumed run reuses what the first attempt found instead of reading the input again."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.core.config import JobConfig, parse_config
from jobs.core.run_layout import RunLocation
from jobs.core.schema import RunSchema, duplicate_error
from jobs.core.storage import open_store
from jobs.engine.messages import StagedNeeds
from jobs.engine.pairs import lookahead
from jobs.engine.pairs.lookahead import KeyReading, look_ahead, needs_path, read_needs, shard_keys
from jobs.engine.pairs.repeats import KEYS, SEQ_SHIFT
from jobs.engine.plan import RunPlan
from jobs.engine.ray_runtime import ray_map
from jobs.inputs import list_input_files, plan_shards
from jobs.inputs.records import ItemReader
from jobs.inputs.shard_read import RunRows
from jobs.inputs.spec import input_spec_of
from jobs.run.factory import run_parts
from tests.support.job import run_shard, shard_context, shard_files

COLUMNS = {"query_id": "id", "input": "q", "output": "a", "context": "ctx"}
STAGING = "_staging/run_id=look"


def good(query_id: Any, n: int) -> dict[str, Any]:
    return {"id": query_id, "q": f"question {n}?", "a": f"answer {n}", "ctx": [f"c{n}", "d"]}


# Rows of every kind: ids as strings and integers, ids that are not usable (missing, null,
# empty, a bool, a float), a row whose id is fine but whose contexts are not, and repeats.
ROWS: list[dict[str, Any]] = [
    good("a", 0),
    good(7, 1),
    {"q": "no id?", "a": "x", "ctx": ["c"]},
    good(None, 3),
    good("  ", 4),
    good(True, 5),
    good(1.5, 6),
    {"id": "bad-ctx", "q": "q?", "a": "x", "ctx": "not a list"},
    good("a", 8),
    good("7", 9),
    good("bad-ctx", 10),
    good("b", 11),
]


def config(source: Path, out: Path, fmt: str, shard_size: int = 3) -> JobConfig:
    return parse_config(
        {
            "input": {"path": str(source), "format": fmt, "columns": COLUMNS},
            "output": {"path": str(out)},
            "judge": {"model": "lexical"},
            "ray": {"shard_size": shard_size},
        }
    )


def write_jsonl(path: Path) -> None:
    lines = [json.dumps(row) for row in ROWS]
    lines.insert(5, '{"id": "broken", "q": ')  # not JSON at all
    path.write_text("\n".join(lines) + "\n")


def write_parquet(path: Path) -> None:
    # Parquet needs one type per column: ids as text (a null, an empty one), contexts lists.
    rows = []
    for row in ROWS:
        copy = dict(row)
        value = copy.get("id")
        copy["id"] = None if value is None or isinstance(value, bool | float) else str(value)
        copy["ctx"] = copy["ctx"] if isinstance(copy["ctx"], list) else None
        rows.append(copy)
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("q", pa.string()),
            ("a", pa.string()),
            ("ctx", pa.list_(pa.string())),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=4)


@pytest.mark.parametrize("read", ["ids", "items"])
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_ids_read_ahead_are_the_ids_the_workers_stage(tmp_path: Path, fmt: str, read: str) -> None:
    source = tmp_path / f"in.{fmt}"
    (write_jsonl if fmt == "jsonl" else write_parquet)(source)
    cfg = config(source, tmp_path / "out", fmt)
    spec = input_spec_of(cfg)
    shards = plan_shards(spec, list_input_files(spec), 3)
    assert len(shards) >= 3
    store = open_store(cfg.output.path)
    context = shard_context(cfg, STAGING)
    numbered = list(enumerate(shards))
    for number, shard in numbered:
        run_shard(shard, number, context)

    fingerprint = "fp" if read == "items" else None  # whole items: the pairs are keyed too
    rows = RunRows(reader=ItemReader.for_config(cfg), tables=RunSchema())
    found = shard_keys(KeyReading(rows=rows, fingerprint=fingerprint), numbered, ids=True)
    read_ahead = found.ids
    staged = pl.concat(
        pl.read_parquet(shard_files(store, STAGING, shard.shard_id)[1], columns=KEYS.names())
        for shard in shards
    )
    assert read_ahead.schema == KEYS
    assert read_ahead.equals(staged)
    assert found.pairs.is_empty() == (read == "ids")
    ids = read_ahead["query_id"].to_list()
    assert {"a", "7", "bad-ctx", "b"} <= set(ids)
    # rows without a usable id (and a broken JSON line) are known by `source#row`
    fallbacks = [query_id for query_id in ids if query_id.startswith(f"{source}#")]
    assert len(fallbacks) == (6 if fmt == "jsonl" else 5)


def test_a_worker_writes_the_later_occurrences_it_is_given_as_duplicates(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(good(f"q{n}", n)) + "\n" for n in range(6)))
    cfg = config(source, tmp_path / "out", "jsonl", shard_size=100)
    spec = input_spec_of(cfg)
    (shard,) = plan_shards(spec, list_input_files(spec), 100)
    store = open_store(cfg.output.path)
    first = "/elsewhere.jsonl line at byte 0"
    seq = 2 << SEQ_SHIFT
    store.write_parquet_atomic(
        needs_path(store, STAGING, shard.shard_id, "repeats"),
        pa.table({"item_seq": [seq | 1, seq | 4], "duplicate_of": [first, first]}),
    )
    staged = StagedNeeds(with_repeats=frozenset({shard.shard_id}))
    assert read_needs(store, STAGING, shard.shard_id, staged).later == {
        seq | 1: first,
        seq | 4: first,
    }
    report = run_shard(shard, 2, shard_context(cfg, STAGING, needs=staged))

    items = pl.read_parquet(shard_files(store, STAGING, shard.shard_id)[1])
    marked = items.filter(pl.col("duplicate_of").is_not_null())
    assert marked["query_id"].to_list() == ["q1", "q4"]
    assert set(marked["status"]) == {"error"} and set(marked["calls"]) == {0}
    assert marked["error"].to_list() == [duplicate_error("q1", first), duplicate_error("q4", first)]
    assert report.statuses == {"ok": 4, "error": 2}
    verdicts = pl.read_parquet(shard_files(store, STAGING, shard.shard_id)[0])
    assert set(verdicts["query_id"]) == {"q0", "q2", "q3", "q5"}


def run_plan(cfg: JobConfig) -> RunPlan:
    """The run of `cfg` as the driver plans it, finding repeated ids first."""
    spec = input_spec_of(cfg)
    shards = plan_shards(spec, list_input_files(spec), cfg.ray.shard_size)
    location = RunLocation("look", dt.date(2026, 12, 1))
    assert location.staging == STAGING
    parts = dataclasses.replace(run_parts(cfg, location), find_duplicates_first=True)
    return RunPlan(
        parts=parts,
        location=location,
        store=open_store(cfg.output.path),
        output=cfg.output,
        ray=cfg.ray,
        rate_limit=cfg.rate_limit,
        shards=shards,
    )


@pytest.mark.usefixtures("ray_local")
def test_found_once_by_ray_tasks_and_reused_by_a_resumed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_log: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(lookahead, "LOCAL_ITEMS", 0)  # a large run: Ray tasks read the shards
    monkeypatch.setattr(lookahead, "TASK_SHARDS", 1)
    mappers: list[object] = []
    monkeypatch.setattr(lookahead, "ray_map", lambda *a, **k: mappers.append(a) or ray_map(*a, **k))
    source = tmp_path / "in.jsonl"
    ids = ["a", "b", "c", "a", "d", "b", "e", "a", "f"]  # shards of 3: repeats in shards 1, 2
    lines = [json.dumps(good(qid, n)) + "\n" for n, qid in enumerate(ids)]
    source.write_text("".join(lines))
    at_b = len(lines[0])
    cfg = config(source, tmp_path / "out", "jsonl")
    plan = run_plan(cfg.model_copy(update={"ray": cfg.ray.model_copy(update={"workers": 1})}))
    todo = list(enumerate(plan.shards))
    found = look_ahead(plan, todo, shared=True)
    assert len(mappers) == 1

    assert "3 later occurrence(s) of a query_id in 2 shard(s) will not be judged" in run_log.text
    by_id = {shard.shard_id: number for number, shard in enumerate(plan.shards)}
    marks = {
        by_id[shard_id]: read_needs(plan.store, STAGING, shard_id, found).later
        for shard_id in found.with_repeats
    }
    assert {number: sorted(m) for number, m in marks.items()} == {
        1: [1 << SEQ_SHIFT | 0, 1 << SEQ_SHIFT | 2],
        2: [2 << SEQ_SHIFT | 1],
    }
    assert marks[1] == {
        1 << SEQ_SHIFT | 0: f"{source} line at byte 0",
        1 << SEQ_SHIFT | 2: f"{source} line at byte {at_b}",
    }
    assert marks[2] == {2 << SEQ_SHIFT | 1: f"{source} line at byte 0"}
    assert found.with_pairs == frozenset() and found.owners == {}  # the lexical judge: no cache

    source.unlink()  # a resumed run must not read the input again
    assert look_ahead(plan, todo[1:], shared=True) == found
