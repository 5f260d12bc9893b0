"""The nightly job as the tests drive it: configs, inputs whose scores are known, and the
published tables read back.

Inputs come from `jobs.tools.sample_data.generate(markers=True)`: every context carries the word
RELEVANT or IRRELEVANT, which is what the fake judge keys on, so the exact score of every item
is known in advance (`truth`).
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from jobs.core.config import JobConfig, parse_config
from jobs.core.run_layout import RunLocation, StagingArea
from jobs.core.run_manifest import RunManifest
from jobs.core.storage import Store
from jobs.core.verdict_cache import pair_key
from jobs.engine.driver import RunOutcome
from jobs.engine.messages import ShardContext, ShardReport
from jobs.engine.shards.worker import ShardRunner
from jobs.inputs import Shard
from jobs.run.factory import cache_fingerprint, run_parts
from jobs.tools.sample_data import generate, write_jsonl
from scorer_core import context_precision
from scorer_core.errors import StorageError
from scorer_core.lexical import LexicalJudge
from scorer_core.prompt import judged_item
from scorer_core.types import ScoringItem, as_verdict_flags
from tests.fake_judge import VERDICTS_SCHEMA_NAME, FakeJudgeServer

# The sample data's column names, mapped to the job's fields.
COLUMNS = {
    "query_id": "id",
    "input": "question",
    "output": "answer",
    "expected_output": "ground_truth",
    "context": "contexts",
}
# The environment variable the job reads the judge's key from, and the key the tests put in it
# (the `judge_key` fixture).
KEY_ENV = "CTXPREC_TEST_JUDGE_KEY"
KEY_VALUE = "sk-test-not-a-real-key"


def write_items(path: Path, count: int, seed: int = 7) -> list[dict[str, Any]]:
    """`count` sample items (with markers) as JSONL at `path`; returns the rows."""
    rows = list(generate(count, seed=seed, markers=True))
    write_jsonl(path, iter(rows))
    return rows


def sample_job(
    tmp_path: Path, count: int, seed: int = 7
) -> tuple[Path, list[dict[str, Any]], Path]:
    """(input, rows, output) of a job on `count` sample items: the items as JSONL at
    <tmp_path>/items.jsonl, the output folder <tmp_path>/out (not created)."""
    source = tmp_path / "items.jsonl"
    return source, write_items(source, count, seed=seed), tmp_path / "out"


def truth(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The true score of every row by id: what the fake judge's verdicts imply."""
    return {row["id"]: context_precision(row["relevance"]) for row in rows}


def sample_item(row: dict[str, Any]) -> ScoringItem:
    """A sample row as the item the job scores (judged against its reference: `auto`)."""
    item = ScoringItem(
        input=row["question"],
        output=row["answer"],
        contexts=tuple(row["contexts"]),
        expected_output=row["ground_truth"],
    )
    return judged_item(item, "auto")


def run_shard(shard: Shard, number: int, ctx: ShardContext) -> ShardReport:
    """Run one shard in this process, without Ray."""

    async def one() -> ShardReport:
        runner = ShardRunner(ctx, "local")
        try:
            return await runner.run_shard(shard, number)
        finally:
            await runner.close()

    return asyncio.run(one())


def lexical_flags(item: ScoringItem, judge: LexicalJudge | None = None) -> list[bool]:
    """The offline lexical judge's verdicts on `item`, in context order (`judge`: one with
    other options than the defaults)."""
    judge = judge if judge is not None else LexicalJudge()
    batch = asyncio.run(judge.judge(item, range(len(item.contexts))))
    return as_verdict_flags(batch.verdicts)


def lexical_truth(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Every sample row's score by id under the offline lexical judge."""
    return {row["id"]: context_precision(lexical_flags(sample_item(row))) for row in rows}


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra` merged in, nested dicts key by key (neither is changed)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def raw_config(source: Path | str, out: Path | str, **sections: Any) -> dict[str, Any]:
    """A job config as the YAML would hold it: the lexical judge on `source`, published to
    `out`, 2 workers of 20-item shards; `sections` override it section by section."""
    base = {
        "input": {"path": str(source), "format": "jsonl", "columns": COLUMNS},
        "output": {"path": str(out)},
        "judge": {"model": "lexical"},
        "scorer": {"scale": 1, "reason": "template"},
        "ray": {"shard_size": 20, "workers": 2},
    }
    return merge(base, sections)


def config_for(source: Path | str, out: Path | str, **sections: Any) -> JobConfig:
    return parse_config(raw_config(source, out, **sections))


def llm_judge(server: FakeJudgeServer, **options: Any) -> dict[str, Any]:
    """The `judge` section for the fake judge at `server`, its key read from KEY_ENV."""
    return {
        "model": "openai/fake-judge",
        "api_base": server.url,
        "api_key_env": KEY_ENV,
        "timeout_s": 10,
        "max_retries": 4,
        **options,
    }


def verdict_requests(server: FakeJudgeServer) -> int:
    """The verdict requests the server has seen (reason requests not counted)."""
    return int(server.stats()["by_schema"].get(VERDICTS_SCHEMA_NAME, 0))


def journaled_items(output: Store, config: JobConfig, rows: list[dict[str, Any]]) -> int:
    """How many of `rows` have every verdict in the run's verdict store (its journal or its
    partitions) under the output `output`, local or on an object store."""
    fingerprint = cache_fingerprint(config)
    names = output.list(output.join("_cache", fingerprint))
    stored: set[str] = set()
    for path in names:
        if not path.endswith(".parquet") or path.rsplit("/", 1)[-1].startswith("."):
            continue
        try:
            frame = pl.read_parquet(io.BytesIO(output.read_bytes(path)), columns=["pair_key"])
        except (StorageError, pl.exceptions.ComputeError):
            continue  # deleted by a fold meanwhile
        stored.update(frame["pair_key"].to_list())
    count = 0
    for row in rows:
        item = sample_item(row)
        if all(pair_key(fingerprint, item, p) in stored for p in range(len(item.contexts))):
            count += 1
    return count


def wait_journaled(
    output: Store, config: JobConfig, rows: list[dict[str, Any]], count: int
) -> None:
    """Wait until `count` items are journaled: within a flush interval of their replies."""
    deadline = time.monotonic() + 60
    while journaled_items(output, config, rows) < count:
        assert time.monotonic() < deadline, f"{count} items never journaled"
        time.sleep(0.2)


def line_offsets(source: Path) -> list[int]:
    """The byte offset of every JSONL line of `source` with something on it (an item)."""
    offsets, offset = [], 0
    for line in source.read_bytes().split(b"\n"):
        if line.strip():
            offsets.append(offset)
        offset += len(line) + 1
    return offsets


# -- the published tables --------------------------------------------------------------------


def scores_frame(out: Path) -> pl.DataFrame:
    return pl.read_parquet(f"{out}/scores/**/*.parquet", hive_partitioning=True)


def verdicts_frame(out: Path) -> pl.DataFrame:
    return pl.read_parquet(f"{out}/verdicts/**/*.parquet", hive_partitioning=True)


def manifest(out: Path, outcome: RunOutcome) -> dict[str, Any]:
    location = RunLocation(outcome.run_id, outcome.run_date)
    data: dict[str, Any] = json.loads((out / location.manifest).read_text())
    return data


def assert_complete(out: Path, rows: list[dict[str, Any]], outcome: RunOutcome) -> pl.DataFrame:
    """One published row per input item (and per run), read back through Polars; staging gone."""
    scores = scores_frame(out).filter(pl.col("run_id") == outcome.run_id)
    assert scores.height == len(rows)
    assert scores["query_id"].n_unique() == len(rows)
    assert set(scores["query_id"]) == {row["id"] for row in rows}
    location = RunLocation(outcome.run_id, outcome.run_date)
    assert not (out / location.staging).exists()
    return scores


def assert_all_true(out: Path, rows: list[dict[str, Any]], outcome: RunOutcome) -> pl.DataFrame:
    """`assert_complete`, and every item scored ok with its true score, every verdict row once,
    the manifest complete."""
    scores = assert_complete(out, rows, outcome)
    expected = truth(rows)
    assert scores["status"].to_list() == ["ok"] * len(rows)
    assert {r["query_id"]: r["score"] for r in scores.iter_rows(named=True)} == expected
    verdicts = verdicts_frame(out).filter(pl.col("run_id") == outcome.run_id)
    assert verdicts.height == sum(len(row["contexts"]) for row in rows)
    assert verdicts.select("query_id", "position").n_unique() == verdicts.height
    data = manifest(out, outcome)
    assert data["status"] == "complete"
    assert data["summary"]["items"] == len(rows)
    return scores


def by_id(scores: pl.DataFrame) -> dict[str, dict[str, Any]]:
    return {row["query_id"]: row for row in scores.iter_rows(named=True)}


def shard_lines(source: Path, start: int, end: int) -> Iterator[int]:
    """Offsets of the lines that start in [start, end): the items of one JSONL shard."""
    return (offset for offset in line_offsets(source) if start <= offset < end)


def shard_context(config: JobConfig, staging: str, **options: Any) -> ShardContext:
    """The context a worker gets for `config`'s run staged under `staging` (its parts built
    by the factory, as the job builds them); `options` as `ShardContext`'s."""
    run_id = staging.rsplit("run_id=", 1)[-1]
    location = RunLocation(run_id=run_id, run_date=dt.date(2026, 1, 1))
    limits = config.rate_limit
    defaults: dict[str, Any] = {
        "paced": bool(limits.requests_per_minute or limits.tokens_per_minute),
        "attempts": config.ray.max_task_retries + 1,
    }
    return ShardContext(
        parts=run_parts(config, location),
        output=config.output,
        staging=staging,
        **(defaults | options),
    )


def shard_files(store: Store, staging: str, shard_id: str) -> tuple[str, str]:
    """(verdicts file, items file) of a shard staged under `staging`."""
    area = StagingArea(store, staging)
    return area.verdicts_file(shard_id), area.items_file(shard_id)


def manifest_of(location: RunLocation) -> RunManifest:
    """The manifest a driver starts for `location`, before publishing completes it."""
    return RunManifest(run_id=location.run_id, run_date=location.run_date.isoformat())
