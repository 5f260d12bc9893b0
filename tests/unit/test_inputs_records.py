"""jobs.inputs.records (rows to items: policies, truncation) and spec (the extractor)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jobs.inputs import (
    ColumnMap,
    InputSpec,
    ItemRecord,
    RawRow,
    RowError,
    to_item,
)
from jobs.inputs.spec import load_extractor, required_columns
from scorer_core.errors import ConfigError
from scorer_core.prompt import is_retrieval_only
from tests.support.inputs import (
    item,
    raw,
    write_extractor_module,
)
from tests.support.paths import REPO


def test_extractor_loaded_once_and_errors_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extractor_module = write_extractor_module(tmp_path, monkeypatch)
    first = load_extractor(f"{extractor_module}:split_docs")
    assert load_extractor(f"{extractor_module}:split_docs") is first
    assert sys.modules[extractor_module].IMPORTS == 1
    for ref, pattern in [
        ("no_colon", "must look like 'package.module:function'"),
        (f"{extractor_module}:", "must look like"),
        (f"{extractor_module}:missing", "has no attribute 'missing'"),
        (f"{extractor_module}:NOT_CALLABLE", "is not callable"),
        ("ctxprec_no_such_mod:f", "cannot import 'ctxprec_no_such_mod'"),
    ]:
        with pytest.raises(ConfigError, match=pattern) as info:
            load_extractor(ref)
        assert repr(ref) in str(info.value)


def test_to_item_with_extractor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extractor_module = write_extractor_module(tmp_path, monkeypatch)
    base = {"query_id": "a", "input": "q", "output": "o", "docs": "x|y|z"}
    spec = InputSpec(path="x", context_extractor=f"{extractor_module}:split_docs")
    record = to_item(spec, raw(base))
    assert isinstance(record, ItemRecord) and record.contexts == ("x", "y", "z")
    for func, pattern in [
        ("broken", "raised KeyError"),
        ("not_a_list", "is a string, expected a list of strings"),
        ("with_number", "element 1 is a int, expected a string"),
    ]:
        spec = InputSpec(path="x", context_extractor=f"{extractor_module}:{func}")
        error = to_item(spec, raw(base))
        assert isinstance(error, RowError), func
        assert f"context (from context_extractor '{extractor_module}:{func}')" in error.message
        assert pattern in error.message
        assert error.query_id == "a"


def test_to_item_ok() -> None:
    spec = InputSpec(path="x", columns=ColumnMap(query_id="id", input="q", output="a", context="c"))
    data = {"id": 12, "q": "why?", "a": "because", "c": ["one", "", "three"]}
    record = to_item(spec, raw(data))
    assert record == ItemRecord(
        query_id="12",
        input="why?",
        output="because",
        expected_output=None,
        contexts=("one", "", "three"),
        source="/data/f.parquet",
        row=7,
        where="/data/f.parquet row 7",
    )
    assert isinstance(record, ItemRecord)
    scoring = record.to_scoring_item()
    assert scoring.contexts == ("one", "", "three")
    assert (scoring.output, scoring.expected_output) == ("because", None)


def test_to_item_reference_and_empty_output() -> None:
    spec = InputSpec(path="x", columns=ColumnMap(expected_output="ref"))
    record = to_item(spec, raw(item(1, output="", ref="the reference")))
    assert isinstance(record, ItemRecord)
    assert record.output == "" and record.expected_output == "the reference"
    blank = to_item(spec, raw(item(1, ref="  ")))
    assert isinstance(blank, ItemRecord) and blank.expected_output is None
    null = to_item(spec, raw(item(1, ref=None)))
    assert isinstance(null, ItemRecord) and null.expected_output is None


def test_to_item_retrieval_only_rows_are_items() -> None:
    # No answer and no reference (issue 10): judged against the query, not rejected; the
    # scoring item is the library's retrieval-only item.
    empty = to_item(InputSpec(path="x"), raw(item(1, output="")))
    assert isinstance(empty, ItemRecord) and (empty.output, empty.expected_output) == ("", None)
    no_reference = to_item(
        InputSpec(path="x", columns=ColumnMap(expected_output="ref")),
        raw(item(1, output="", ref=None)),
    )
    assert isinstance(no_reference, ItemRecord) and no_reference.expected_output is None
    # No answer column at all (TREC-style data: queries and passages only).
    data = {k: v for k, v in item(2).items() if k != "output"}
    spec = InputSpec(path="x", columns=ColumnMap(output=None))
    record = to_item(spec, raw(data))
    assert isinstance(record, ItemRecord) and record.output == ""
    assert is_retrieval_only(record.to_scoring_item())
    assert ("output", "output") not in required_columns(spec)


def test_to_item_derived_query_id() -> None:
    spec = InputSpec(path="x", columns=ColumnMap(query_id=None))
    record = to_item(spec, RawRow(source="s3://b/f.jsonl", row=1234, data=item(0), unit="offset"))
    assert isinstance(record, ItemRecord) and record.query_id == "s3://b/f.jsonl#1234"


CASES: list[tuple[str, dict[str, Any], str]] = [
    (
        "context string",
        {"context": "a context"},
        "context (column 'context') is a string, expected",
    ),
    ("context json", {"context": '["a", "b"]'}, "looks like a JSON-encoded list"),
    ("context null", {"context": None}, "context (column 'context') is null"),
    ("context empty", {"context": []}, "context (column 'context') is an empty list"),
    ("context int elem", {"context": ["a", 3]}, "element 1 is a int, expected a string"),
    ("context null elem", {"context": [None]}, "element 0 is a NoneType, expected a string"),
    ("context dict", {"context": {"a": 1}}, "context (column 'context') is a dict"),
    ("query_id null", {"query_id": None}, "query_id (column 'query_id') is null"),
    ("query_id float", {"query_id": 1.5}, "query_id (column 'query_id') is a float"),
    ("query_id bool", {"query_id": True}, "query_id (column 'query_id') is a bool"),
    ("query_id empty", {"query_id": " "}, "query_id (column 'query_id') is empty"),
    ("input null", {"input": None}, "input (column 'input') is null"),
    ("input empty", {"input": "  "}, "input (column 'input') is empty"),
    ("input number", {"input": 5}, "input (column 'input') is a int, expected a string"),
    ("output null", {"output": None}, "output (column 'output') is null"),
    ("output list", {"output": ["a"]}, "output (column 'output') is a list"),
]


@pytest.mark.parametrize(("case", "change", "message"), CASES, ids=[c[0] for c in CASES])
def test_to_item_errors_name_field_and_row(case: str, change: dict[str, Any], message: str) -> None:
    result = to_item(InputSpec(path="x"), raw(item(3, **change)))
    assert isinstance(result, RowError), case
    assert result.message.startswith("/data/f.parquet row 7: ")
    assert message in result.message
    assert (result.source, result.row) == ("/data/f.parquet", 7)
    if not case.startswith("query_id"):
        assert result.query_id == "q3"


@pytest.mark.parametrize("missing", ["query_id", "input", "output", "context"])
def test_to_item_missing_key(missing: str) -> None:
    data = {k: v for k, v in item(1).items() if k != missing}
    result = to_item(
        InputSpec(path="x"), RawRow(source="f.jsonl", row=99, data=data, unit="offset")
    )
    assert isinstance(result, RowError)
    assert result.message.startswith("f.jsonl line at byte 99: ")
    assert f"(column '{missing}') is missing" in result.message


def test_to_item_reference_wrong_type() -> None:
    spec = InputSpec(path="x", columns=ColumnMap(expected_output="ref"))
    result = to_item(spec, raw(item(1, ref=3)))
    assert (
        isinstance(result, RowError) and "expected_output (column 'ref') is a int" in result.message
    )


def test_truncation_flags() -> None:
    spec = InputSpec(path="x")
    long = to_item(spec, raw(item(1, context=["a" * 50, "b" * 10, "c" * 51])), max_context_chars=50)
    assert isinstance(long, ItemRecord)
    assert long.contexts == ("a" * 50, "b" * 10, "c" * 50)
    assert long.truncated
    many = to_item(spec, raw(item(1, context=[str(i) for i in range(12)])), max_contexts=5)
    assert isinstance(many, ItemRecord)
    assert many.contexts == ("0", "1", "2", "3", "4")
    assert many.truncated
    fine = to_item(spec, raw(item(1)))
    assert isinstance(fine, ItemRecord) and not fine.truncated
    default = to_item(spec, raw(item(1, context=["x" * 200_001] + ["y"] * 1000)))
    assert isinstance(default, ItemRecord)
    assert len(default.contexts) == 1000 and len(default.contexts[0]) == 200_000
    assert default.truncated and default.contexts[1:] == ("y",) * 999


def test_config_defaults_are_the_truncation_defaults_without_loading_the_readers() -> None:
    # A fresh interpreter: in this one the readers (and pyarrow) are already imported.
    code = (
        "import sys\n"
        "from jobs.core.config import InputConfig\n"
        "config = InputConfig(path='x')\n"
        "print(config.max_context_chars, config.max_contexts)\n"
        "print(*sorted(m for m in ('pyarrow', 'fsspec', 'jobs.inputs') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    assert result.stdout.splitlines() == ["200000 1000", ""]
