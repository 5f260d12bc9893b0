"""The human-labelled files in ../shared/data (HotpotQA, TREC DL) as the tests use them: how
each maps to the job's columns, its rows, and its labels as a published run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.paths import SHARED_DATA
from tests.support.published import Query

# The files and their columns, mapped to the job's fields.
FILES = {
    # HotpotQA has a reference answer per query; TREC DL has none (no answer column: its rows
    # are retrieval-only items, judged against the query, as `ctxprec calibrate` judges them)
    # and one row per retriever, so its row_id is the unique id.
    "hotpotqa_ctxprec.jsonl": {
        "query_id": "query_id",
        "input": "query",
        "output": "expected_answer",
        "expected_output": "expected_answer",
        "context": "contexts",
    },
    "trecdl_passage_ctxprec.jsonl": {
        "query_id": "row_id",
        "input": "query",
        "output": None,
        "context": "contexts",
    },
}

# For the test modules that need the files: skipped in a clone without them.
needs_the_files = pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason="../shared/data is not present in this clone"
)


def read_rows(name: str) -> list[dict[str, Any]]:
    # Not splitlines(): passages contain U+2028 and other characters it would split on.
    with (SHARED_DATA / name).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def lexical_job_config(name: str, out: Any, run_id: str, **judge: Any) -> dict[str, Any]:
    """A job config that scores file `name` with the offline lexical judge (options `judge`)."""
    return {
        "input": {"path": str(SHARED_DATA / name), "columns": FILES[name]},
        "output": {"path": str(out)},
        "judge": {"model": "lexical", "lexical": judge},
        "run": {"id": run_id},
        "ray": {"shard_size": 200, "workers": 2},
    }


def labelled_queries(name: str, rows: list[dict[str, Any]], *, reverse: bool) -> list[Query]:
    """One query per row, judged as the human labels say, its contexts in the file's order
    or reversed; the reason is the query text."""
    queries = []
    for row in rows:
        labels = [bool(label) for label in row.get("relevance_binary") or row["relevance"]]
        queries.append(
            Query(
                str(row[FILES[name]["query_id"]]),
                labels[::-1] if reverse else labels,
                reason=str(row["query"]),
            )
        )
    return queries
