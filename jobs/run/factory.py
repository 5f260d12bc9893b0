"""A job config turned into the objects that do the work: input reader, judge, limiter, cache
location, and the judge's settings the engine acts on (`run_parts`). Workers and tools get them
from here only: one config, one judge; the engine reads no `judge.*` setting itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from jobs.core.config import TRACES, JobConfig
from jobs.core.endpoints import endpoint_identity, judge_endpoint
from jobs.core.run_layout import RunLocation
from jobs.core.storage import open_store
from jobs.core.verdict_cache import CacheSpec, judge_fingerprint
from jobs.engine import (
    BatchParts,
    CanaryJudge,
    LiteLLMBatches,
    RequestLines,
    RunParts,
    batch_provider,
    budget_settings,
)
from jobs.inputs.records import ItemReader
from jobs.inputs.traces import items_url
from scorer_core.capabilities import JudgeCapabilities, capabilities_of
from scorer_core.judge import JudgeRuntime, TokenCounter, count_prompt_tokens
from scorer_core.judge_spec import JudgeSpec
from scorer_core.judge_spec import build_judge as build_core_judge
from scorer_core.protocols import Gate, Judge, Limiter, Sleeper
from scorer_core.response_format import shared_negotiation
from scorer_core.scoring import ScoringSettings
from scorer_core.transports import resolve_transport


def build_judge(
    config: JobConfig,
    limiter: Limiter | None,
    api_key: str | None = None,
    *,
    gate: Gate | None = None,
    max_in_flight: int | None = None,
) -> Judge:
    """The configured judge, its requests in flight bounded by `gate` (a worker's share of the
    run's budget), else `max_in_flight`, else `rate_limit.max_concurrency` in this process."""
    judge_config = config.judge
    if capabilities_of(judge_config.model).offline:
        return build_core_judge(JudgeSpec(model=judge_config.model, lexical=judge_config.lexical))
    limits = config.rate_limit
    bound: int | Gate = max_in_flight or single_process_concurrency(config)
    if gate is not None:
        bound = gate
    transport = resolve_transport(judge_config.transport, judge_config.model, judge_config.api_base)
    # The run's budget bounds requests in flight; the pool must not bound them lower.
    explicit = limits.max_concurrency if isinstance(limits.max_concurrency, int) else 0
    pool = max(limits.concurrency_ceiling, explicit) if transport == "http" else None
    as_is = {"temperature", "max_retries", "max_reasks", "response_format", "verdict_reasons"}
    spec = JudgeSpec(
        model=judge_config.model,
        api_base=judge_config.api_base or None,
        api_key=api_key or judge_config.api_key() or None,
        transport=transport,
        timeout=judge_config.timeout_s,
        max_tokens=judge_config.max_tokens or None,
        completion_budget=judge_config.max_tokens,
        scale=config.scorer.scale,
        max_connections=pool,
        **judge_config.model_dump(include=as_is),  # the spec's fields of the same names
    )
    counter: TokenCounter = count_prompt_tokens
    if limits.tokens_per_minute:
        counter = prompt_token_counter(judge_config.model)
    runtime = JudgeRuntime(
        limiter=limiter,
        max_in_flight=bound,
        first_alone=gate is None,
        token_counter=counter,
        # One negotiation per endpoint per process: the shards a Ray worker process runs one
        # after another probe the endpoint once, not once each.
        negotiation=shared_negotiation(judge_endpoint(config), judge_config.response_format),
    )
    return build_core_judge(spec, runtime)


def workers_import_litellm(config: JobConfig) -> bool:
    """Whether workers import litellm (seconds of start-up): for tokens per minute or transport."""
    judge_config = config.judge
    if capabilities_of(judge_config.model).offline:
        return False
    transport = resolve_transport(judge_config.transport, judge_config.model, judge_config.api_base)
    return bool(config.rate_limit.tokens_per_minute) or transport == "litellm"


def prompt_token_counter(model: str) -> Callable[[Sequence[dict[str, str]]], int]:
    """Counts a request's prompt tokens with litellm's tokenizer for `model`."""
    from scorer_core.litellm_client import import_litellm

    litellm = import_litellm()

    def count(messages: Sequence[dict[str, str]]) -> int:
        return int(litellm.token_counter(model=model, messages=list(messages)))

    return count


def single_process_concurrency(config: JobConfig) -> int:
    """Requests in flight for a judge alone in one process (under auto: the budget's default)."""
    settings = budget_settings(config.rate_limit)
    return settings.explicit or settings.unlimited


def local_limiter(config: JobConfig) -> Limiter | None:
    """The run's rate limit inside this one process (None when no limit is set)."""
    from jobs.engine import LocalLimiter, pacing_for

    pacing = pacing_for(config.rate_limit)
    return LocalLimiter(pacing) if pacing is not None else None


def cache_fingerprint(config: JobConfig) -> str:
    """The cache namespace of this config's judge: verdicts are shared only within it."""
    options = {**config.judge.lexical, "verdict_reasons": config.judge.verdict_reasons}
    return judge_fingerprint(config.judge.model, options, endpoint=endpoint_identity(config))


def cache_url(config: JobConfig) -> tuple[str, str]:
    """(store URL, folder under it) of the verdict cache."""
    return (config.cache.path, "") if config.cache.path else (config.output.path, "_cache")


def cache_spec(config: JobConfig) -> CacheSpec | None:
    """Where the run's verdict cache is; None without one (the offline judge never has one)."""
    if not config.cache.enabled or capabilities(config).offline:
        return None
    return CacheSpec(
        fingerprint=cache_fingerprint(config),
        folder="" if config.cache.path else "_cache",
        url=config.cache.path or None,
        storage_options=dict(config.output.storage_options),
        max_age_days=config.cache.max_age_days,
        journal_interval_s=config.cache.journal_interval_s,
    )


def capabilities(config: JobConfig) -> JudgeCapabilities:
    """What the configured judge can do."""
    return capabilities_of(config.judge.model)


@dataclass(frozen=True)
class ConfiguredJudges:
    """Builds the configured judge in each worker (`jobs.engine.parts.JudgeMaker`), with the
    API key the driver read from its environment (`api_key`: None, the judge reads its own)."""

    config: JobConfig
    api_key: str | None = field(default=None, repr=False)

    def build(self, limiter: Limiter | None, gate: Gate | None) -> Judge:
        return build_judge(self.config, limiter, self.api_key, gate=gate)

    def local_limiter(self) -> Limiter | None:
        return local_limiter(self.config)


@dataclass(frozen=True)
class ConfiguredBatches:
    """Opens the configured provider's Files + Batches API (`jobs.engine.parts.BatchesMaker`),
    with the API key the driver read from its environment."""

    config: JobConfig
    api_key: str | None = field(default=None, repr=False)

    def open(self, sleep: Sleeper) -> LiteLLMBatches:
        return LiteLLMBatches.for_config(self.config, self.api_key, sleep=sleep)


def check_judge_settings(config: JobConfig) -> None:
    """`ConfigError` when the judge's model string cannot be routed by litellm (when litellm
    carries the requests) or judge.mode batch names a provider without a batch API."""
    judge = config.judge
    if capabilities_of(judge.model).offline:
        return
    if judge.mode == "batch":
        batch_provider(config)
    access = judge.access()
    if not access.routes_by_http():  # an OpenAI-compatible endpoint takes any model name
        access.provider()


def batch_parts(config: JobConfig) -> BatchParts | None:
    """Batch mode's parts (None for an online run), the API key read from the environment."""
    judge = config.judge
    if judge.mode != "batch":
        return None
    return BatchParts(
        settings=judge.batch,
        provider=batch_provider(config),
        lines=RequestLines.for_config(config),
        max_reasks=judge.max_reasks,
        verdict_reasons=judge.verdict_reasons,
        batches=ConfiguredBatches(config, judge.api_key()),
    )


def item_reader(config: JobConfig, location: RunLocation) -> ItemReader:
    """How `location`'s run reads `config`'s items; traces: the items it assembles from them."""
    if config.input.format not in TRACES:
        return ItemReader.for_config(config)
    store = open_store(config.output.path, config.output.storage_options, create=False)
    return ItemReader.for_config(config, items_url(store, location.traces))


def run_parts(
    config: JobConfig, location: RunLocation, canary: CanaryJudge | None = None
) -> RunParts:
    """What the engine runs for `config`'s run at `location` (input, judge, cache, `canary`),
    the judge's settings and its API key checked."""
    check_judge_settings(config)
    config.judge.access().check()
    judge = config.judge
    duplicates_first = config.input.find_duplicates_first
    offline = capabilities(config).offline
    scoring = ScoringSettings(
        scale=config.scorer.scale,
        reason=config.scorer.reason,
        contexts_per_call=judge.contexts_per_call,
    )
    return RunParts(
        reader=item_reader(config, location),
        judges=ConfiguredJudges(config, judge.api_key()),
        model=judge.model,
        capabilities=capabilities(config),
        scoring=scoring,
        batch=batch_parts(config),
        cache=cache_spec(config),
        find_duplicates_first=not offline if duplicates_first == "auto" else duplicates_first,
        canary=canary,
    )
