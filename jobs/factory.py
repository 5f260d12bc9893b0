"""A job config turned into the objects that do the work: input spec, items, judge, limiter,
cache location, and the API-key check.

The Ray worker, `ctxprec estimate` and `ctxprec calibrate` get these from here and nowhere else,
so one config means one judge, one reading path and one cache everywhere.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from jobs.cache import judge_fingerprint
from jobs.config import JobConfig
from jobs.engine.budget import BudgetSettings
from jobs.inputs import ColumnMap, InputSpec, ItemRecord, RowError, Shard, read_items
from jobs.schema import CarriedColumn
from jobs.storage import Store, open_store
from scorer_core.errors import ConfigError
from scorer_core.protocols import Judge, Limiter
from scorer_core.response_format import ResponseFormatNegotiation, shared_negotiation
from scorer_core.scorer import make_judge
from scorer_core.transports import resolve_transport


def check_api_key(config: JobConfig) -> None:
    """Fail before any judge call when the judge needs a key and its variable is not set."""
    judge = config.judge
    if judge.model == "lexical" or not judge.api_key_env:
        return
    if judge.api_base and "api_key_env" not in judge.model_fields_set:
        return  # a local server needs no key, unless a variable was named for it explicitly
    if not os.environ.get(judge.api_key_env):
        raise ConfigError(
            f"judge.api_key_env: environment variable {judge.api_key_env} is not set "
            f"(model {judge.model} needs an API key; set judge.api_key_env to the variable that "
            "holds it, or judge.api_base for a local server)"
        )


def input_spec(config: JobConfig) -> InputSpec:
    """Where the items are and which columns hold which field."""
    columns = config.input.columns
    return InputSpec(
        path=config.input.path,
        format=config.input.format,
        columns=ColumnMap(
            query_id=columns.query_id,
            input=columns.input,
            output=columns.output,
            expected_output=columns.expected_output,
            context=columns.context,
            context_ids=columns.context_ids,
        ),
        storage_options=config.input.storage_options,
        context_extractor=config.input.context_extractor,
        carry=tuple(config.input.carry),
        carry_to_verdicts=tuple(config.input.carry_to_verdicts),
    )


def shard_items(
    config: JobConfig, shard: Shard, carried: Sequence[CarriedColumn] = ()
) -> Iterator[ItemRecord | RowError]:
    """A shard's rows as the job judges them: read, normalised, truncated, validated, with
    the values of the `carried` columns (their types decided at start-up)."""
    return read_items(
        input_spec(config),
        shard,
        max_context_chars=config.input.max_context_chars,
        max_contexts=config.input.max_contexts,
        carried=carried,
    )


def build_judge(
    config: JobConfig,
    limiter: Limiter | None,
    api_key: str | None = None,
    *,
    gate: contextlib.AbstractAsyncContextManager[None] | None = None,
    max_in_flight: int | None = None,
) -> Judge:
    """The configured judge.

    Requests in flight are bounded by `gate` (a worker's allowance of the run-wide budget: the
    run's governor then owns the cold start too), else by `max_in_flight`, else by the
    configured `rate_limit.max_concurrency` (64 under auto) in this one process.
    """
    judge_config = config.judge
    if judge_config.model == "lexical":
        return make_judge("lexical", **judge_config.lexical)
    limits = config.rate_limit
    bound: int | contextlib.AbstractAsyncContextManager[None]
    if gate is not None:
        bound = gate
    elif max_in_flight is not None:
        bound = max_in_flight
    else:
        bound = single_process_concurrency(config)
    transport = resolve_transport(judge_config.transport, judge_config.model, judge_config.api_base)
    options: dict[str, Any] = {
        "timeout": judge_config.timeout_s,
        "temperature": judge_config.temperature,
        "max_retries": judge_config.max_retries,
        "max_reasks": judge_config.max_reasks,
        "max_in_flight": bound,
        "first_alone": gate is None,
        "scale": config.scorer.scale,
        "limiter": limiter,
        "transport": transport,
        "completion_budget": judge_config.max_tokens,
        "response_format": judge_config.response_format,
    }
    if limits.tokens_per_minute:
        options["token_counter"] = prompt_token_counter(judge_config.model)
    if transport == "http":
        # The run's budget bounds requests in flight; the pool must not bound them lower.
        options["max_connections"] = max(
            limits.concurrency_ceiling,
            limits.max_concurrency if isinstance(limits.max_concurrency, int) else 0,
        )
    if judge_config.api_base:
        options["api_base"] = judge_config.api_base
    if judge_config.max_tokens:
        options["max_tokens"] = judge_config.max_tokens
    api_key = api_key or judge_config.api_key()
    if api_key:
        options["api_key"] = api_key
    # One negotiation per endpoint per process: the shards a Ray worker process runs one after
    # another probe the endpoint once, not once each.
    options["negotiation"] = shared_negotiation(
        judge_endpoint(config), judge_config.response_format
    )
    return make_judge(judge_config.model, **options)


def judge_endpoint(config: JobConfig) -> str:
    """The endpoint the configured LLM judge talks to, named as its client names it
    (`Judge.endpoint`): the key of its shared structured-output negotiation."""
    judge_config = config.judge
    if judge_config.api_base:
        return judge_config.api_base.rstrip("/")
    transport = resolve_transport(judge_config.transport, judge_config.model, None)
    if transport == "http":
        from scorer_core.openai_http import OPENAI_API_BASE

        return OPENAI_API_BASE
    model = judge_config.model
    provider = model.split("/", 1)[0] if "/" in model else model
    return f"{provider} (litellm's default endpoint)"


def response_format_summary(judge: Judge) -> dict[str, Any] | None:
    """The judge's structured-output negotiation as `ResponseFormatNegotiation.summary()`
    reports it; None for a judge that negotiates nothing (the offline lexical judge)."""
    negotiation = getattr(judge, "response_format", None)
    if isinstance(negotiation, ResponseFormatNegotiation):
        return negotiation.summary()
    return None


def workers_import_litellm(config: JobConfig) -> bool:
    """Whether each worker imports litellm before its first request (seconds of start-up):
    it counts prompt tokens for a tokens-per-minute limit, or it is the judge's transport.
    The offline lexical judge imports neither."""
    judge_config = config.judge
    if judge_config.model == "lexical":
        return False
    transport = resolve_transport(judge_config.transport, judge_config.model, judge_config.api_base)
    return bool(config.rate_limit.tokens_per_minute) or transport == "litellm"


def prompt_token_counter(model: str) -> Callable[[Sequence[dict[str, str]]], int]:
    """Counts a request's prompt tokens the provider's way (litellm's tokenizer for `model`),
    for a tokens-per-minute limit. Imports litellm on first use."""
    from scorer_core.litellm_client import import_litellm

    litellm = import_litellm()

    def count(messages: Sequence[dict[str, str]]) -> int:
        return int(litellm.token_counter(model=model, messages=list(messages)))

    return count


def single_process_concurrency(config: JobConfig) -> int:
    """Requests in flight for a judge working alone in one process: the configured number, or
    under auto (no run-wide governor to measure latency) the budget's default."""
    settings = budget_settings(config)
    return settings.explicit or settings.unlimited


def budget_settings(config: JobConfig) -> BudgetSettings:
    """How the run-wide in-flight budget is sized (`rate_limit.max_concurrency` and bounds)."""
    limits = config.rate_limit
    explicit = limits.max_concurrency if isinstance(limits.max_concurrency, int) else None
    return BudgetSettings(
        explicit=explicit,
        floor=limits.concurrency_floor,
        ceiling=limits.concurrency_ceiling,
    )


def local_limiter(config: JobConfig) -> Limiter | None:
    """The run's rate limit inside this one process (None when no limit is set)."""
    limits = config.rate_limit
    if not (limits.requests_per_minute or limits.tokens_per_minute):
        return None
    from jobs.engine.limiter import LocalLimiter, PacingState

    return LocalLimiter(
        PacingState(
            requests_per_minute=limits.requests_per_minute,
            tokens_per_minute=limits.tokens_per_minute,
            headroom=limits.headroom,
        )
    )


def find_duplicates_first(config: JobConfig) -> bool:
    """Whether the run looks for duplicate query ids across shards before judging
    (`input.find_duplicates_first`)."""
    wanted = config.input.find_duplicates_first
    return config.judge.model != "lexical" if wanted == "auto" else bool(wanted)


def use_cache(config: JobConfig) -> bool:
    """Whether the run reads and writes the verdict cache (never for the offline judge)."""
    return config.cache.enabled and config.judge.model != "lexical"


def cache_fingerprint(config: JobConfig) -> str:
    """The cache namespace of this config's judge: verdicts are shared only within it (the
    same model string at another endpoint is another judge)."""
    return judge_fingerprint(
        config.judge.model, dict(config.judge.lexical), endpoint=endpoint_identity(config)
    )


def endpoint_identity(config: JobConfig) -> str:
    """Whatever besides the model string decides which model answers: the endpoint
    (`judge.api_base`, else the provider's default, or the base URL litellm takes from the
    provider's environment variables), and an explicit batch provider."""
    judge = config.judge
    parts = [judge_endpoint(config)]
    if judge.batch.provider:
        parts.append(f"batch provider {judge.batch.provider}")
    if not judge.api_base and judge.model != "lexical":
        transport = resolve_transport(judge.transport, judge.model, None)
        if transport == "litellm":
            provider = judge.model.split("/", 1)[0].upper() if "/" in judge.model else "OPENAI"
            for name in (f"{provider}_API_BASE", f"{provider}_BASE_URL"):
                if os.environ.get(name):
                    parts.append(f"{name}={os.environ[name].rstrip('/')}")
    return " | ".join(parts)


def cache_url(config: JobConfig) -> tuple[str, str]:
    """(store URL, folder under it) of the verdict cache: `cache.path`, else
    `<output.path>/_cache`."""
    if config.cache.path:
        return config.cache.path, ""
    return config.output.path, "_cache"


def cache_root(config: JobConfig, output_store: Store) -> tuple[Store, str]:
    """The store holding the verdict cache and the cache folder relative to its root."""
    url, folder = cache_url(config)
    if config.cache.path:
        return open_store(url, config.output.storage_options), folder
    return output_store, folder
