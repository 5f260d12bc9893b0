"""`ctxprec estimate` on a small generated sample: counts exact, tokens sane, cost, time, cache."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from jobs.cli import build_parser, options_of
from jobs.cli import main as ctxprec
from jobs.core import formatting as fmt
from jobs.core.config import load_config
from jobs.core.storage import open_store
from jobs.core.verdict_cache import pair_key
from jobs.core.verdict_store import VerdictStore, partition_expr
from jobs.inputs import RowError, list_input_files, plan_shards, read_shard, to_item
from jobs.inputs import validate_record as preprocess
from jobs.inputs.spec import input_spec_of
from jobs.run.factory import cache_fingerprint
from jobs.tools.estimation import (
    LITELLM_IMPORT_S,
    OUTPUT_TOKENS_PER_REASON,
    OUTPUT_TOKENS_PER_VERDICT,
    TAIL_LATENCIES,
    WORKER_START_S,
    Estimate,
    PacedWallTime,
    estimate,
    format_estimate,
)
from jobs.tools.sample_data import generate, write_jsonl
from jobs.tools.tool_options import ConfigSource, EstimateOptions
from scorer_core.prompt import judged_item, verdict_messages
from scorer_core.types import ScoringItem

ITEMS = 60
PER_CALL = 3
SHARD_SIZE = 20
SECRET = "sk-test-do-not-print-1234567890"


@pytest.fixture
def sample(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    rows = list(generate(ITEMS, seed=11))
    path = tmp_path / "in" / "items.jsonl"
    write_jsonl(path, iter(rows))
    with path.open("a", encoding="utf-8") as handle:
        handle.write("{this is not json\n")
        bad = {"id": "bad", "question": "q?", "answer": "a", "ground_truth": "a", "contexts": []}
        handle.write(json.dumps(bad) + "\n")
    return path, rows


def write_config(tmp_path: Path, data: Path, **extra: str) -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(
        f"""
input:
  path: {data}
  columns: {{query_id: id, input: question, output: answer,
            expected_output: ground_truth, context: contexts}}
output:
  path: {tmp_path / "out"}
judge:
  model: lexical
  contexts_per_call: {PER_CALL}
ray: {{shard_size: {SHARD_SIZE}, workers: 2}}
""",
        encoding="utf-8",
    )
    return config


def run(config: Path, *overrides: str, sample: int = 2000, latency: float = 2.0) -> Estimate:
    return estimate(load_config(config, list(overrides)), sample=sample, assumed_latency_s=latency)


def expected_counts(rows: list[dict[str, Any]], reason_llm: bool = False) -> tuple[int, int]:
    pairs = sum(len(r["contexts"]) for r in rows)
    calls = sum(math.ceil(len(r["contexts"]) / PER_CALL) for r in rows)
    return pairs, calls + (len(rows) if reason_llm else 0)


def test_items_pairs_and_calls_are_exact(sample: tuple[Path, list[dict[str, Any]]]) -> None:
    data, rows = sample
    config = write_config(data.parent.parent, data)
    result = run(config)
    pairs, calls = expected_counts(rows)
    assert result.items.valid == ITEMS
    assert result.items.invalid == 2
    assert len(result.items.invalid_examples) == 2
    assert result.context_pairs == pairs
    assert result.judge_calls.total == calls
    assert result.judge_calls.reason_calls == 0
    assert result.input.shards > 1  # several shards were streamed

    llm = run(config, "scorer.reason=llm")
    pairs, calls = expected_counts(rows, reason_llm=True)
    assert llm.judge_calls.total == calls
    assert llm.judge_calls.reason_calls == ITEMS
    assert llm.output_tokens.estimate == (
        pairs * OUTPUT_TOKENS_PER_VERDICT + ITEMS * OUTPUT_TOKENS_PER_REASON
    )


def test_tokens_are_counted_and_sane(sample: tuple[Path, list[dict[str, Any]]]) -> None:
    data, _ = sample
    config = write_config(data.parent.parent, data)
    exact = run(config, "judge.model=openai/gpt-4o-mini")
    tokens = exact.prompt_tokens
    assert tokens.method == "exact"
    assert tokens.sampled_items == ITEMS
    assert tokens.estimate > 0
    ratio = tokens.estimate / (tokens.total_chars / 4)
    assert 0.5 < ratio < 2.0, ratio
    # a small sample extrapolated by characters lands close to the exact count
    sampled = run(config, "judge.model=openai/gpt-4o-mini", sample=10).prompt_tokens
    assert sampled.method == "sample extrapolated by characters"
    assert sampled.sampled_items == 10
    assert sampled.total_chars == tokens.total_chars
    assert sampled.estimate == pytest.approx(tokens.estimate, rel=0.1)
    # the sample is deterministic
    again = run(config, "judge.model=openai/gpt-4o-mini", sample=10).prompt_tokens
    assert again == sampled


def test_cost_lexical_zero_priced_model_positive_unknown_model(
    sample: tuple[Path, list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data, _ = sample
    config = write_config(data.parent.parent, data)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the estimate itself needs no key
    assert run(config).cost_usd == 0.0
    assert ctxprec(["estimate", "--config", str(config)]) == 0
    assert f"estimated cost  {fmt.FREE} (no API cost)" in capsys.readouterr().out
    priced = run(config, "judge.model=openai/gpt-4o-mini")
    assert priced.cost_usd is not None and priced.cost_usd > 0
    unknown = run(config, "judge.model=openai/no-such-model-xyz")
    assert unknown.cost_usd is None

    argv = ["estimate", "--config", str(config), "--set", "judge.model=openai/no-such-model-xyz"]
    # ...but the command checks what `run` checks: a run without its key would not start
    assert ctxprec(argv) == 2
    assert "OPENAI_API_KEY is not set" in capsys.readouterr().err
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-sent")
    assert ctxprec(argv) == 0
    text = capsys.readouterr().out
    assert "estimated cost  n/a" in text


def test_wall_time_at_a_rate_limit(sample: tuple[Path, list[dict[str, Any]]]) -> None:
    data, rows = sample
    config = write_config(data.parent.parent, data)
    _, calls = expected_counts(rows)
    model = "judge.model=openai/gpt-4o-mini"
    at_rpm = run(config, model, "rate_limit.requests_per_minute=30", "rate_limit.headroom=1.0")
    wall = at_rpm.wall_time
    # the pace, plus the workers' start, one latency for the run's first request (it goes
    # alone) and the slowest last replies (2 s assumed by default)
    edges = WORKER_START_S + (1 + TAIL_LATENCIES) * 2.0
    assert wall.seconds == pytest.approx(calls / 30 * 60 + edges)
    assert "requests_per_minute" in wall.basis
    # the job paces at `headroom` of the limit
    paced = run(config, model, "rate_limit.requests_per_minute=30").wall_time
    assert paced.seconds == pytest.approx(calls / (30 * 0.98) * 60 + edges)
    # a tight token limit binds instead
    by_tokens = run(
        config,
        model,
        "rate_limit.requests_per_minute=100000",
        "rate_limit.tokens_per_minute=1000",
        "rate_limit.headroom=1.0",
    ).wall_time
    # (the workers import litellm to count prompt tokens: their start takes longer)
    assert by_tokens.seconds == pytest.approx(
        by_tokens.limiter_tokens / 1000 * 60 + edges + LITELLM_IMPORT_S
    )
    assert by_tokens.worker_start_s == WORKER_START_S + LITELLM_IMPORT_S
    assert "tokens_per_minute" in by_tokens.basis
    # so do workers whose transport is litellm
    via_litellm = run(
        config, model, "rate_limit.requests_per_minute=30", "judge.transport=litellm"
    ).wall_time
    assert via_litellm.seconds == pytest.approx(paced.seconds + LITELLM_IMPORT_S)
    # no limit: explicit about the assumption
    free = run(config, model, "rate_limit.max_concurrency=8", latency=3.0).wall_time
    assert "unbounded by rate limit" in free.basis
    assert "ASSUMING" in free.basis
    assert free.seconds == pytest.approx(
        calls / 8 * 3.0 + WORKER_START_S + (1 + TAIL_LATENCIES) * 3.0
    )
    assert free.concurrency == 8 and free.concurrency_mode == "explicit"
    # auto, no limit: the budget's default of 64 in flight
    assert run(config, model, latency=3.0).wall_time.concurrency == 64
    # auto under a limit: Little's law at the assumed latency (20/s x 3 s x 1.25 = 75)
    sized = run(
        config, model, "rate_limit.requests_per_minute=1200", "rate_limit.headroom=1.0", latency=3.0
    ).wall_time
    assert sized.concurrency == 75 and sized.concurrency_mode == "auto"
    # offline judge: no time estimate
    assert run(config).wall_time.seconds is None


def write_cache(config_path: Path, only_first_shard: bool = False) -> None:
    """Write the verdicts a run would have stored for this input (a file of the store, as its
    partitions hold them)."""
    config = load_config(config_path, ["judge.model=openai/gpt-4o-mini"])
    spec = input_spec_of(config)
    shards = plan_shards(spec, list_input_files(spec), config.ray.shard_size)
    store = open_store(config.output.path)
    fingerprint = cache_fingerprint(config)
    verdicts = VerdictStore(store=store, folder=f"_cache/{fingerprint}")
    for shard in shards[:1] if only_first_shard else shards:
        keys: list[str] = []
        for raw in read_shard(spec, shard):
            record = preprocess(to_item(spec, raw))
            if isinstance(record, RowError):
                continue
            item = judged_item(record.to_scoring_item(), config.judge.against)
            keys += [pair_key(fingerprint, item, p) for p in range(len(item.contexts))]
        rows = verdicts.rows((key, True, "r") for key in keys)
        for (partition,), piece in (
            rows.with_columns(partition_expr()).partition_by("_partition", as_dict=True).items()
        ):
            verdicts.write(verdicts.partition_folder(int(partition)), "test", piece)


def test_cache_share(sample: tuple[Path, list[dict[str, Any]]]) -> None:
    data, _ = sample
    config = write_config(data.parent.parent, data)
    model = "judge.model=openai/gpt-4o-mini"
    paced = "rate_limit.requests_per_minute=600"
    nothing = run(config, model, paced)
    before = nothing.cache
    assert before.share == 0.0 and not before.used
    assert not (data.parent.parent / "out").exists()  # estimating creates nothing

    write_cache(config, only_first_shard=True)
    some = run(config, model, paced)
    partial = some.cache
    assert partial.used
    assert 0.0 < partial.share < 1.0
    # calls, tokens, cost and time count only what the cache does not answer
    wall, headroom = some.wall_time, 0.98
    assert isinstance(wall, PacedWallTime) and isinstance(nothing.wall_time, PacedWallTime)
    assert wall.by_requests_s == pytest.approx(partial.calls_after_cache / (600 * headroom) * 60)
    assert 0 < wall.seconds < nothing.wall_time.seconds
    assert 0 < some.prompt_tokens.after_cache < some.prompt_tokens.estimate
    assert 0 < some.output_tokens.after_cache < some.output_tokens.estimate
    assert some.cost_usd is not None and nothing.cost_usd is not None
    assert 0 < some.cost_usd < nothing.cost_usd

    write_cache(config)
    full = run(config, model, paced)
    assert full.cache.share == 1.0
    assert full.cache.cached_pairs == full.context_pairs
    assert full.cache.calls_after_cache == 0
    assert full.wall_time.seconds == 0.0 and full.cost_usd == 0.0
    assert full.prompt_tokens.after_cache == full.output_tokens.after_cache == 0
    # reasons are never cached
    with_reason = run(config, model, "scorer.reason=llm").cache
    assert with_reason.calls_after_cache == ITEMS
    # the lexical judge does not use the cache; a disabled cache is not consulted
    lexical = run(config).cache
    assert not lexical.used and "lexical" in lexical.note
    assert run(config, model, "cache.enabled=false").cache.share == 0.0


def test_cli_table_json_and_no_secret(
    sample: tuple[Path, list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data, rows = sample
    config = write_config(data.parent.parent, data)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    args = ["--config", str(config), "--set", "judge.model=openai/gpt-4o-mini"]
    assert ctxprec(["estimate", *args, "--set", "rate_limit.requests_per_minute=60"]) == 0
    text = capsys.readouterr().out
    for label in (
        "items",
        "context pairs",
        "judge calls",
        "prompt tokens",
        "output tokens",
        "estimated cost",
        "wall time",
        "verdict cache",
    ):
        assert label in text
    assert f"{ITEMS} valid / 2 invalid" in text
    assert SECRET not in text

    assert ctxprec(["estimate", *args, "--json"]) == 0
    parsed = json.loads(capsys.readouterr().out)
    assert parsed["context_pairs"] == expected_counts(rows)[0]
    # the JSON is the typed record, field for field: it reads back as the same estimate
    loaded = load_config(config, ["judge.model=openai/gpt-4o-mini"])
    assert Estimate.model_validate(parsed) == estimate(loaded)
    assert SECRET not in json.dumps(parsed)

    assert ctxprec(["estimate", "--config", str(config.parent / "missing.yaml")]) == 2
    assert "cannot read config" in capsys.readouterr().err


def test_ctxprec_estimate_parses_the_options_as_the_tool_reads_them() -> None:
    args = build_parser().parse_args(["estimate", "--config", "c.yaml", "--sample", "5", "--json"])
    assert options_of(EstimateOptions, args) == EstimateOptions(
        config=ConfigSource("c.yaml"), sample=5, as_json=True
    )
    args = build_parser().parse_args(
        ["estimate", "--config", "c.yaml", "--set", "a.b=1", "--target-ci", "0.02", "--run", "r"]
    )
    assert options_of(EstimateOptions, args) == EstimateOptions(
        config=ConfigSource("c.yaml", ("a.b=1",)), target_ci=0.02, run="r"
    )


def test_batch_mode_is_priced_at_the_batch_price_and_counts_its_batches(
    sample: tuple[Path, list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-sent")
    data, rows = sample
    config = write_config(data.parent.parent, data)
    model = "judge.model=openai/gpt-4o-mini"
    online = run(config, model)
    batch = run(config, model, "judge.mode=batch", "judge.batch.max_requests_per_batch=40")
    _, calls = expected_counts(rows)
    # litellm knows gpt-4o-mini's batch price: half its online price, tokens for tokens.
    assert batch.cost_usd == pytest.approx(online.cost_usd / 2)
    assert batch.cost_note == "at litellm's batch price for openai/gpt-4o-mini"
    assert batch.wall_time.seconds is None and "24h" in batch.wall_time.basis
    plan = batch.batch
    assert plan.requests == calls and plan.batches == math.ceil(calls / 40)
    assert plan.bytes > plan.requests * 1000  # whole request lines, system prompt included
    assert online.batch is None
    # A model with an online price but no batch price: half, and the estimate says ASSUMED.
    assumed = run(config, "judge.model=gpt-3.5-turbo", "judge.mode=batch")
    full = run(config, "judge.model=gpt-3.5-turbo")
    assert assumed.cost_usd == pytest.approx(full.cost_usd / 2)
    assert assumed.cost_note.startswith("ASSUMED: half of litellm's online price")
    assert (
        ctxprec(["estimate", "--config", str(config), "--set", model, "--set", "judge.mode=batch"])
        == 0
    )
    text = capsys.readouterr().out
    assert f"batches         1 ({calls:,} requests" in text


def test_retrieval_only_rows_are_estimated_with_the_prompt_the_job_sends(tmp_path: Path) -> None:
    # Queries and passages only (issue 10): no answer column, no reference. Every row is an
    # item, and the prompt counted is the retrieval-only one the judge will be sent.
    rows = [
        {"id": f"r{i}", "question": f"what is topic {i}?", "contexts": [f"p{i}a", f"p{i}b"]}
        for i in range(7)
    ]
    data = tmp_path / "in" / "retrieval.jsonl"
    write_jsonl(data, iter(rows))
    config = tmp_path / "job.yaml"
    config.write_text(
        f"""
input:
  path: {data}
  columns: {{query_id: id, input: question, output: null, context: contexts}}
output:
  path: {tmp_path / "out"}
judge:
  model: openai/gpt-4o-mini
  contexts_per_call: 1
""",
        encoding="utf-8",
    )
    result = run(config)
    assert (result.items.valid, result.items.invalid) == (7, 0)
    assert result.judge_calls.total == 14
    prompts = [
        verdict_messages(
            ScoringItem(input=row["question"], output="", contexts=tuple(row["contexts"])),
            [position],
        )
        for row in rows
        for position in range(2)
    ]
    assert all("retrieval-only" in messages[-1]["content"] for messages in prompts)
    chars = sum(len(m["content"]) for messages in prompts for m in messages)
    assert result.prompt_tokens.total_chars == chars


def test_verdicts_without_reasons_and_the_cost_per_item(
    sample: tuple[Path, list[dict[str, Any]]],
) -> None:
    data, rows = sample
    config = write_config(data.parent.parent, data)
    model = "judge.model=openai/gpt-4o-mini"
    with_reasons = run(config, model)
    bare = run(config, model, "judge.verdict_reasons=false")
    assert bare.output_tokens.per_verdict < with_reasons.output_tokens.per_verdict
    assert bare.prompt_tokens.estimate < with_reasons.prompt_tokens.estimate  # shorter shape
    assert bare.judge_chars_per_item < with_reasons.judge_chars_per_item
    for found in (with_reasons, bare):
        assert found.cost_usd is not None and found.cost_per_1000_items_usd is not None
        assert found.cost_per_1000_items_usd == pytest.approx(found.cost_usd / len(rows) * 1000)
    assert "per 1,000 items; " in format_estimate(bare)
    assert "judge characters (prompt and expected reply)" in format_estimate(bare)


def test_the_estimate_says_whether_the_provider_would_cache_the_instructions(
    sample: tuple[Path, list[dict[str, Any]]],
) -> None:
    data, _ = sample
    config = write_config(data.parent.parent, data)
    found = run(config, "judge.model=openai/gpt-5-mini")
    assert 0 < found.instruction_tokens < 1024  # the instructions, counted by the tokenizer
    assert found.prompt_cache == (
        f"instructions: {found.instruction_tokens:,} tokens, below OpenAI's 1,024-token cache "
        "minimum: no prompt caching"
    )
    assert f"prompt cache    {found.prompt_cache}" in format_estimate(found)
    haiku = run(config, "judge.model=anthropic/claude-haiku-4-5")
    assert "below Anthropic's 4,096-token cache minimum" in haiku.prompt_cache  # litellm's map
    assert run(config).prompt_cache == "none: the offline judge sends no prompts"


def test_above_the_providers_minimum_the_instructions_are_priced_as_cached(
    sample: tuple[Path, list[dict[str, Any]]],
) -> None:
    import subprocess

    from jobs.core.pricing import estimate_cost_usd
    from tests.support.paths import VENV_BIN

    data, _ = sample
    config = write_config(data.parent.parent, data)
    model = "openai/gpt-5-mini"
    plain = run(config, f"judge.model={model}")
    # litellm's own override of every model's minimum, read when litellm is imported
    env = {**os.environ, "MINIMUM_PROMPT_CACHE_TOKEN_COUNT": "100", "OPENAI_API_KEY": SECRET}
    args = ["estimate", "--config", str(config), "--set", f"judge.model={model}", "--json"]
    done = subprocess.run(
        [str(VENV_BIN / "ctxprec"), *args], env=env, capture_output=True, text=True, check=True
    )
    cached = Estimate.model_validate_json(done.stdout)
    tokens = cached.instruction_tokens
    assert tokens == plain.instruction_tokens > 100
    assert cached.prompt_cache == (
        f"instructions: {tokens:,} tokens, above OpenAI's 100-token cache minimum: cached after "
        "one call"
    )
    calls = cached.cache.calls_after_cache
    after = (cached.prompt_tokens.after_cache, cached.output_tokens.after_cache)
    assert cached.cost_usd == pytest.approx(
        estimate_cost_usd(model, *after, cached=(tokens * (calls - 1), 0))
    )
    assert plain.cost_usd is not None and cached.cost_usd < plain.cost_usd
