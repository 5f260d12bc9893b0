"""Issue 28 point 4 through the real job: the prompt tokens a provider's cache read and wrote,
reported by the fake judge over real HTTP (online in both transports, and in batch result
files), land in the scores table, the summary, the manifest and the price."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from jobs.core.pricing import estimate_cost_usd
from jobs.engine.clock import RunClock
from jobs.engine.driver import RunOutcome
from jobs.run.job import run_job
from tests.fake_judge import FakeJudgeServer
from tests.fake_judge.batches import BatchPlan
from tests.support.fakes import JudgeFactory, RecordingSleep
from tests.support.job import assert_complete, config_for, llm_judge, manifest, sample_job, truth

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local", "judge_key")]

MODEL = "openai/gpt-5-mini"  # priced in litellm's map, cache reads at a tenth of the input rate
ITEMS = 60


def _check_counted_and_priced(
    out: Path, rows: list[dict[str, Any]], outcome: RunOutcome, server: FakeJudgeServer
) -> None:
    stats = server.stats()
    scores = assert_complete(out, rows, outcome)
    assert dict(scores.select("query_id", "score").rows()) == {
        key: round(value, 2) for key, value in truth(rows).items()
    }
    read, written = stats["cached_prompt_tokens"], stats["cache_creation_tokens"]
    assert read > 0  # every request after the first reads the instructions from the cache
    assert scores["cached_prompt_tokens"].sum() == read
    assert scores["cache_creation_tokens"].sum() == written
    summary = outcome.published.summary
    assert (summary.cached_prompt_tokens, summary.cache_creation_tokens) == (read, written)
    recorded = manifest(out, outcome)["summary"]
    assert (recorded["cached_prompt_tokens"], recorded["cache_creation_tokens"]) == (read, written)
    table = pl.read_parquet(f"{out}/summary/**/*.parquet", hive_partitioning=True)
    metric = dict(table.filter(pl.col("segment_by").is_null()).select("metric", "value").rows())
    assert metric["cached_prompt_tokens"] == read
    tokens = (summary.prompt_tokens, summary.completion_tokens)
    batch = outcome.published.judge.mode == "batch"
    priced = estimate_cost_usd(MODEL, *tokens, batch=batch, cached=(read, written))
    full = estimate_cost_usd(MODEL, *tokens, batch=batch)
    assert summary.cost_usd == pytest.approx(priced)
    assert priced is not None and full is not None and priced < full


@pytest.mark.parametrize(("style", "transport"), [("openai", "http"), ("anthropic", "litellm")])
def test_cached_tokens_are_counted_per_item_summed_recorded_and_priced(
    tmp_path: Path, fake_judge: JudgeFactory, style: str, transport: str
) -> None:
    source, rows, out = sample_job(tmp_path, ITEMS)
    server = fake_judge(prompt_cache=style, cache_min_tokens=16)
    judge = llm_judge(server, model=MODEL, transport=transport)
    outcome = run_job(config_for(source, out, judge=judge))
    _check_counted_and_priced(out, rows, outcome, server)


def test_batch_result_files_carry_the_cached_tokens(
    tmp_path: Path, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, ITEMS)
    server = fake_judge(
        prompt_cache="openai", cache_min_tokens=16, batch_plan=BatchPlan(steps_per_retrieve=1)
    )
    judge = llm_judge(server, model=MODEL, mode="batch", batch={"poll_interval_s": 5})
    outcome = run_job(config_for(source, out, judge=judge), clock=RunClock(sleep=RecordingSleep()))
    assert server.batches.stats()["uploads"] > 0
    _check_counted_and_priced(out, rows, outcome, server)
