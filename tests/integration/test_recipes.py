"""The "Questions, answered" recipes of docs/recipes.md, run as written (DuckDB, Polars, Spark)
against the output of two runs of the real job, each answer checked against one computed here
in plain Python from the same tables.

The job (Ray, the offline lexical judge; stricter in the second run, so scores move) reads
items that carry a `retriever` column and a list of context ids; the recipes are taken from the
page between `<!-- recipe: NAME ENGINE -->` markers, with `results/` pointed at the output.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest

from jobs.core.config import parse_config
from jobs.tools.sample_data import generate
from tests.support.paths import REPO

RECIPES = REPO / "docs" / "recipes.md"
RUNS = (("2026-11-29", None), ("2026-11-30", 0.35))  # (run id and date, lexical threshold)
RETRIEVERS = ("bm25", "dense", "hybrid")
DOCS = 40  # distinct context ids: each is retrieved many times
ITEMS = 120
NAMES = ("by-day", "irrelevant", "moved")
RESULT = {"by-day": "by_day", "irrelevant": "irrelevant", "moved": "moved"}


def recipes() -> dict[tuple[str, str], str]:
    """(name, engine) -> the code of that recipe in docs/recipes.md."""
    text = RECIPES.read_text(encoding="utf-8")
    found = re.findall(r"<!-- recipe: ([\w-]+) (\w+) -->\n```\w+\n(.*?)```", text, re.DOTALL)
    return {(name, engine): code for name, engine, code in found}


@pytest.fixture(scope="module")
def output(tmp_path_factory: pytest.TempPathFactory, ray_local: Any) -> Path:
    from jobs.run.job import run_job

    root = tmp_path_factory.mktemp("recipes")
    rows = []
    for n, row in enumerate(generate(ITEMS, seed=3)):
        ids = [f"doc-{(n * 7 + k * 3) % DOCS:02d}" for k in range(len(row["contexts"]))]
        rows.append({**row, "retriever": RETRIEVERS[n % 3], "doc_ids": ids})
    source = root / "items.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = root / "results"
    for run_id, threshold in RUNS:
        judge: dict[str, Any] = {"model": "lexical"}
        if threshold is not None:
            judge["lexical"] = {"threshold": threshold}
        config = parse_config(
            {
                "input": {
                    "path": str(source),
                    "columns": {
                        "query_id": "id",
                        "input": "question",
                        "output": "answer",
                        "expected_output": "ground_truth",
                        "context": "contexts",
                        "context_ids": "doc_ids",
                    },
                    "carry": ["retriever"],
                    "carry_to_verdicts": ["retriever"],
                },
                "summary": {"by": ["retriever"]},
                "output": {"path": str(out)},
                "judge": judge,
                "run": {"id": run_id, "date": run_id},
                "ray": {"shard_size": 50, "workers": 2},
            }
        )
        run_job(config)
    return out


def _rows(output: Path, table: str) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(output.glob(f"{table}/run_date=*/run_id=*/*.parquet")):
        run_date = path.parent.parent.name.removeprefix("run_date=")
        run_id = path.parent.name.removeprefix("run_id=")
        for row in pq.read_table(path).to_pylist():
            rows.append({**row, "run_date": run_date, "run_id": run_id})
    return rows


def expected(output: Path, name: str) -> list[dict[str, Any]]:
    """The answer to recipe `name`, computed here from the published tables."""
    if name == "by-day":
        groups: dict[tuple[str, str], list[float]] = defaultdict(list)
        for row in _rows(output, "scores"):
            if row["status"] == "ok":
                groups[(row["run_date"], row["retriever"])].append(row["score"])
        return [
            {"run_date": d, "retriever": r, "items": len(v), "mean_score": sum(v) / len(v)}
            for (d, r), v in sorted(groups.items())
        ]
    if name == "irrelevant":
        counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for row in _rows(output, "verdicts"):
            if row["relevant"] is not None and row["context_id"] is not None:
                counts[row["context_id"]][0] += 1
                counts[row["context_id"]][1] += not row["relevant"]
        ranked = sorted(counts.items(), key=lambda item: (-item[1][1], item[0]))[:20]
        return [{"context_id": c, "judged": j, "irrelevant": i} for c, (j, i) in ranked]
    scores: dict[str, dict[str, tuple[float, str]]] = defaultdict(dict)
    for row in _rows(output, "scores"):
        if row["status"] == "ok":
            scores[row["run_id"]][row["query_id"]] = (row["score"], row["retriever"])
    (a, _), (b, _) = RUNS
    moved = [
        {
            "query_id": query_id,
            "retriever": retriever,
            "score_a": scores[a][query_id][0],
            "score_b": score,
            "delta": score - scores[a][query_id][0],
        }
        for query_id, (score, retriever) in scores[b].items()
        if query_id in scores[a]
    ]
    return sorted(moved, key=lambda r: (-abs(r["delta"]), r["query_id"]))[:20]


def normal(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with dates as text and floats rounded, for comparing engines."""
    return [
        {
            key: round(value, 9)
            if isinstance(value, float)
            else str(value)
            if key == "run_date"
            else value
            for key, value in row.items()
        }
        for row in rows
    ]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pyspark_sql = pytest.importorskip("pyspark.sql")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java")
    session = (
        pyspark_sql.SparkSession.builder.master("local[1]")
        .appName("ctxprec-recipes")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        # a JVM that lives seconds: C1 alone and one GC thread (a third less CPU, measured)
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    yield session
    session.stop()
    # stop() leaves the JVM running, and busy, until this process ends: end it now
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.shutdown()
        gateway.proc.kill()
        gateway.proc.wait()
        SparkContext._gateway = SparkContext._jvm = None


def _code(name: str, engine: str, output: Path) -> str:
    return recipes()[(name, engine)].replace("results/", f"{output}/")


def test_the_readme_has_every_recipe_for_every_engine() -> None:
    assert set(recipes()) == {(n, e) for n in NAMES for e in ("duckdb", "polars", "spark")}


def test_the_outputs_answer_something(output: Path) -> None:
    # preconditions: several days and retrievers, repeated ids with both verdicts, movement
    assert len({(r["run_date"], r["retriever"]) for r in expected(output, "by-day")}) == 6
    top = expected(output, "irrelevant")
    assert top[0]["irrelevant"] > 1 and any(r["judged"] > r["irrelevant"] for r in top)
    assert expected(output, "moved")[0]["delta"] != 0


@pytest.mark.parametrize("name", NAMES)
def test_duckdb_recipe(output: Path, name: str) -> None:
    relation = duckdb.sql(_code(name, "duckdb", output))
    rows = [dict(zip(relation.columns, row, strict=True)) for row in relation.fetchall()]
    assert normal(rows) == normal(expected(output, name))


@pytest.mark.parametrize("name", NAMES)
def test_polars_recipe(output: Path, name: str) -> None:
    namespace: dict[str, Any] = {}
    exec(_code(name, "polars", output), namespace)
    frame = namespace[RESULT[name]]
    assert normal(frame.to_dicts()) == normal(expected(output, name))


@pytest.mark.parametrize("name", NAMES)
def test_spark_recipe(output: Path, spark: Any, name: str) -> None:
    namespace: dict[str, Any] = {"spark": spark}
    exec(_code(name, "spark", output), namespace)
    rows = [row.asDict() for row in namespace[RESULT[name]].collect()]
    assert normal(rows) == normal(expected(output, name))
