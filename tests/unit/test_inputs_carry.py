"""jobs.inputs.carry and the carried columns / context ids through the input steps:
types decided at start-up (Parquet schema, JSONL sample), each row's values checked, missing
columns named, context ids parallel to the contexts."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.core.config import parse_config
from jobs.core.schema import CarriedColumn
from jobs.inputs import (
    ColumnMap,
    InputSpec,
    ItemRecord,
    RowError,
    inspect_input,
    list_input_files,
    plan_shards,
    to_item,
)
from jobs.inputs.carry import check_segment_columns, conform, infer_json_type
from jobs.inputs.records import ItemReader
from scorer_core.errors import ConfigError, InputError
from tests.support.inputs import item, raw, spec_for, write_jsonl

STRING = CarriedColumn("retriever", pa.string())
INT = CarriedColumn("shard", pa.int64())
FLOAT = CarriedColumn("latency", pa.float64())


def carried_spec(path: Path, *carry: str, **columns: Any) -> InputSpec:
    return spec_for(path, carry=carry, columns=ColumnMap(**columns))


# -- start-up: types and missing columns -----------------------------------------------------


def test_parquet_types_come_from_the_schema(tmp_path: Path) -> None:
    table = pa.table(
        {
            "query_id": ["q1"],
            "input": ["question"],
            "output": ["answer"],
            "context": [["a", "b"]],
            "retriever": pa.array(["bm25"]).dictionary_encode(),
            "shard": pa.array([3], type=pa.int16()),
            "day": pa.array([dt.date(2026, 1, 2)]),
            "tags": [["x", "y"]],
            "empty": pa.array([None], type=pa.null()),
        }
    )
    pq.write_table(table, tmp_path / "in.parquet")
    spec = carried_spec(tmp_path / "in.parquet", "retriever", "shard", "day", "tags", "empty")
    found = inspect_input(spec, list_input_files(spec))
    assert [(c.name, c.type) for c in found.carried] == [
        ("retriever", pa.string()),  # a dictionary-encoded column as its values' type
        ("shard", pa.int16()),
        ("day", pa.date32()),
        ("tags", pa.list_(pa.string())),
        ("empty", pa.string()),  # no value to learn from: text
    ]


def test_jsonl_types_are_inferred_from_the_sample(tmp_path: Path) -> None:
    rows = [
        item(0, retriever="bm25", shard=1, latency=3, ok=True, tenant=None, tags=["a"]),
        item(1, retriever="dense", shard=2, latency=2.5, ok=False, tenant=None, tags=[]),
    ]
    spec = carried_spec(
        write_jsonl(tmp_path / "in.jsonl", rows),
        "retriever",
        "shard",
        "latency",
        "ok",
        "tenant",
        "tags",
    )
    found = inspect_input(spec, list_input_files(spec))
    assert {c.name: c.type for c in found.carried} == {
        "retriever": pa.string(),
        "shard": pa.int64(),
        "latency": pa.float64(),  # integers mixed with fractions
        "ok": pa.bool_(),
        "tenant": pa.string(),  # null in every sampled row
        "tags": pa.list_(pa.string()),
    }


def test_jsonl_values_of_different_kinds_fail_at_start_up(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [item(0, shard="a"), item(1, shard=2)])
    spec = carried_spec(path, "shard")
    with pytest.raises(InputError, match=r"carried column 'shard' has values of different kinds"):
        inspect_input(spec, list_input_files(spec))
    with pytest.raises(InputError, match="int, str"):
        infer_json_type("shard", ["a", 2], "f.jsonl")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_missing_carried_column_fails_at_start_up_naming_it(tmp_path: Path, fmt: str) -> None:
    rows = [item(0, retriever="bm25")]
    path = tmp_path / f"in.{fmt}"
    if fmt == "jsonl":
        write_jsonl(path, rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    spec = carried_spec(path, "retriever", "tenant", context_ids="doc_ids")
    with pytest.raises(InputError) as caught:
        inspect_input(spec, list_input_files(spec))
    message = str(caught.value)
    assert "'tenant' (carry)" in message and "'doc_ids' (context_ids)" in message
    assert "'retriever'" not in message.split("available")[0]


def test_config_rejects_clashing_and_uncarried_names() -> None:
    def config(**input_keys: Any) -> None:
        parse_config({"input": {"path": "x.jsonl", **input_keys}, "summary": {"by": ["r"]}})

    with pytest.raises(ConfigError, match="'score' is a column of the scores table"):
        config(carry=["r", "score"])
    with pytest.raises(ConfigError, match="'run_date' is a partition column"):
        config(carry=["r", "run_date"])
    with pytest.raises(ConfigError, match="'position' is a column of the verdicts table"):
        config(carry=["r", "position"], carry_to_verdicts=["position"])
    # a name of the verdicts table is free in the scores table
    parse_config({"input": {"path": "x.jsonl", "carry": ["position"]}})
    with pytest.raises(ConfigError, match=r"which input\.carry does not carry"):
        config(carry=["r"], carry_to_verdicts=["tenant"])
    with pytest.raises(ConfigError, match=r"summary.by names \['r'\]"):
        config(carry=["tenant"])
    with pytest.raises(ConfigError, match="more than once"):
        config(carry=["r", "r"])


def test_segment_columns_must_hold_single_values() -> None:
    carried = [STRING, CarriedColumn("tags", pa.list_(pa.string()))]
    check_segment_columns(["retriever"], carried)
    with pytest.raises(ConfigError, match="column 'tags' is list<item: string>"):
        check_segment_columns(["tags"], carried)


# -- per row: values checked, ids parallel to the contexts -----------------------------------


@pytest.mark.parametrize(
    ("column", "value", "stored"),
    [
        (STRING, "bm25", "bm25"),
        (STRING, None, None),
        (INT, 7, 7),
        (FLOAT, 3, 3.0),  # JSON writes 3.0 as 3
        (CarriedColumn("ok", pa.bool_()), False, False),
        (CarriedColumn("day", pa.date32()), dt.date(2026, 1, 2), dt.date(2026, 1, 2)),
        (CarriedColumn("tags", pa.list_(pa.string())), ["a", "b"], ["a", "b"]),
    ],
)
def test_values_of_the_columns_type_are_kept(
    column: CarriedColumn, value: Any, stored: Any
) -> None:
    assert conform(column, value) == stored


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        (STRING, 3, "is a int, expected string"),
        (INT, "3", "is a str, expected int64"),
        (INT, True, "is a bool, expected int64"),
        (INT, 2.5, "is a float, expected int64"),
        (CarriedColumn("small", pa.int8()), 300, "is 300, out of the range of int8"),
        (FLOAT, "fast", "is a str, expected double"),
        (CarriedColumn("ok", pa.bool_()), 1, "is a int, expected bool"),
        (CarriedColumn("day", pa.date32()), "2026-01-02", "is a str, expected date32"),
        (CarriedColumn("tags", pa.list_(pa.string())), [1], "is a list, expected list<item"),
    ],
)
def test_values_of_another_type_are_refused(column: CarriedColumn, value: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("[", r"\[")):
        conform(column, value)


def test_a_row_with_a_value_of_another_type_is_an_error_that_keeps_the_others() -> None:
    spec = InputSpec(path="x", carry=("retriever", "shard"))
    good = to_item(spec, raw(item(1, retriever="bm25", shard=4)), carried=[STRING, INT])
    assert isinstance(good, ItemRecord)
    assert good.carried == ("bm25", 4)
    missing = to_item(spec, raw(item(1, retriever="bm25")), carried=[STRING, INT])
    assert isinstance(missing, ItemRecord) and missing.carried == ("bm25", None)
    bad = to_item(spec, raw(item(1, retriever="bm25", shard="4")), carried=[STRING, INT])
    assert isinstance(bad, RowError)
    assert bad.message == ("/data/f.parquet row 7: shard (carried column) is a str, expected int64")
    assert bad.carried == ("bm25", None)
    assert bad.query_id == "q1"
    # a row failing on a mapped field keeps its carried values too
    no_query = to_item(
        spec, raw(item(1, input="", retriever="bm25", shard=4)), carried=[STRING, INT]
    )
    assert isinstance(no_query, RowError) and no_query.carried == ("bm25", 4)


def test_context_ids_are_parallel_to_the_contexts() -> None:
    spec = InputSpec(path="x", columns=ColumnMap(context_ids="ids"))
    record = to_item(spec, raw(item(2, ids=["d1", 22, None])))
    assert isinstance(record, ItemRecord)
    assert record.contexts == ("ctx 2.0", "ctx 2.1", "ctx 2.2")
    assert record.context_ids == ("d1", "22", None)
    assert to_item(spec, raw(item(2, ids=None))).context_ids is None  # type: ignore[union-attr]
    assert to_item(spec, raw(item(2))).context_ids is None  # type: ignore[union-attr]
    cut = to_item(spec, raw(item(2, ids=["a", "b", "c"])), max_contexts=2)
    assert isinstance(cut, ItemRecord) and cut.context_ids == ("a", "b") and cut.truncated

    short = to_item(spec, raw(item(2, ids=["d1", "d2"])))
    assert isinstance(short, RowError)
    assert short.message == (
        "/data/f.parquet row 7: context_ids (column 'ids') has 2 ids for 3 contexts"
    )
    for bad, words in [
        ("d1", "is a str, expected a list with one id per context"),
        (["d1", 2.5, "d3"], "element 1 is a float, expected a string or an integer"),
    ]:
        error = to_item(spec, raw(item(2, ids=bad)))
        assert isinstance(error, RowError) and words in error.message


def test_read_items_carries_parquet_values_as_read(tmp_path: Path) -> None:
    rows = [
        item(i, retriever=f"r{i % 2}", day=dt.date(2026, 1, 1 + i), ids=[f"d{i}"] * (1 + i % 3))
        for i in range(5)
    ]
    rows[3]["retriever"] = None
    path = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    spec = carried_spec(path, "retriever", "day", context_ids="ids")
    files = list_input_files(spec)
    carried = inspect_input(spec, files).carried
    reader = ItemReader(spec=spec)
    records = [r for shard in plan_shards(spec, files, 2) for r in reader.read(shard, carried)]
    assert all(isinstance(r, ItemRecord) for r in records)
    assert [r.carried for r in records] == [  # type: ignore[union-attr]
        (row["retriever"], row["day"]) for row in rows
    ]
    assert records[4].context_ids == ("d4", "d4")  # type: ignore[union-attr]
