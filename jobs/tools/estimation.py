"""`ctxprec estimate`: what a run would cost before it runs (no judge calls, no Ray).

Streams the input once as the run reads it, building every real prompt: counts items, pairs and
calls, tokens (exact on a bottom-k sample, extrapolated by characters), the pairs the verdict
store holds, the first round's batches, and paces the rest as the run would (docs/commands.md).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TextIO

from jobs.core import formatting as fmt
from jobs.core.config import JobConfig
from jobs.core.formatting import Column, JsonRecord, table
from jobs.core.pricing import estimate_cost_usd, price_basis
from jobs.core.schema import RunSchema
from jobs.core.storage import open_store
from jobs.core.verdict_cache import pair_key
from jobs.core.verdict_store import VerdictStore
from jobs.engine import (
    BatchPacker,
    KeyReading,
    RequestLines,
    budget_settings,
    custom_id,
    item_key,
    stored_pair_keys,
)
from jobs.inputs import RowError, Shard, inspect_input, list_input_files, plan_shards
from jobs.inputs.records import ItemReader
from jobs.inputs.sampling import judged, plan_sample
from jobs.inputs.shard_read import RunRows
from jobs.run import factory
from jobs.tools.tool_options import EstimateOptions
from scorer_core.errors import CtxPrecError
from scorer_core.judge import (
    CHARS_PER_TOKEN,
    REPLY_TOKENS_PER_BARE_VERDICT,
    REPLY_TOKENS_PER_VERDICT,
    estimate_tokens,
)
from scorer_core.litellm_client import import_litellm
from scorer_core.prompt import (
    VERDICT_INSTRUCTIONS,
    VERDICTS_SCHEMA_NAME,
    reason_messages,
    verdict_messages,
    verdicts_schema,
)
from scorer_core.scoring import context_slices
from scorer_core.types import ContextVerdict, ScoringItem

# Reply tokens per verdict: the allowance the LLM judge itself reserves; per LLM reason.
OUTPUT_TOKENS_PER_VERDICT = REPLY_TOKENS_PER_VERDICT
OUTPUT_TOKENS_PER_REASON = 100
# The run's edges, measured (docs/design.md): the slowest last reply as a multiple
# of the mean latency, the workers' start, and what importing litellm adds to it.
TAIL_LATENCIES = 5.0
WORKER_START_S = 3.0
LITELLM_IMPORT_S = 3.5
# Stands in for the judge's per-verdict reason when sizing LLM-reason prompts.
_PLACEHOLDER_VERDICT_REASON = "The passage states the fact that the query asks about, so it helps."
_MAX_INVALID_EXAMPLES = 5
_PROVIDERS = {"openai": "OpenAI", "anthropic": "Anthropic", "gemini": "Gemini"}


class InputFacts(JsonRecord):
    path: str
    files: int
    shards: int


class ItemCounts(JsonRecord):
    valid: int
    invalid: int
    total: int
    truncated: int
    invalid_examples: tuple[str, ...]


class JudgeCalls(JsonRecord):
    total: int
    verdict_calls: int
    reason_calls: int
    contexts_per_call: int
    reason: str  # `scorer.reason`
    sends_requests: bool  # False for the offline judge
    note: str


class PromptTokens(JsonRecord):
    estimate: int
    after_cache: int  # of the requests the verdict cache does not answer
    method: Literal["exact", "sample extrapolated by characters"]
    sampled_items: int
    sample_tokens: int
    sample_chars: int
    total_chars: int
    chars_per_token: float | None
    tokenizer: str
    note: str


class OutputTokens(JsonRecord):
    estimate: int
    after_cache: int
    per_verdict: int
    per_reason_call: int


class BatchWallTime(JsonRecord):
    seconds: None = None
    completion_window: str
    basis: str


class Pacing(JsonRecord):
    """The limits as the config holds them, and the tokens and in-flight budget of the run."""

    requests_per_minute: int | float  # the config's default 0 is an int: printed as it is
    tokens_per_minute: int | float
    headroom: float
    limiter_tokens: int
    concurrency: int
    concurrency_mode: Literal["explicit", "auto"]
    assumed_latency_s: float


class OfflineWallTime(Pacing):
    seconds: None = None
    basis: str


class PacedWallTime(Pacing):
    by_requests_s: float | None
    by_tokens_s: float | None
    by_concurrency_s: float
    worker_start_s: float
    seconds: float
    basis: str


WallTime = BatchWallTime | OfflineWallTime | PacedWallTime


class BatchPlan(JsonRecord):
    mode: Literal["batch"] = "batch"
    batches: int
    requests: int
    bytes: int
    tokens: int
    max_requests_per_batch: int
    max_bytes_per_batch: int
    max_enqueued_tokens: int
    note: str


class CacheShare(JsonRecord):
    used: bool
    note: str
    cached_pairs: int
    share: float
    calls_after_cache: int


class Estimate(JsonRecord):
    """What `ctxprec estimate` found; `--json` prints it field for field, in this order."""

    model: str
    input: InputFacts
    items: ItemCounts
    context_pairs: int
    judge_calls: JudgeCalls
    prompt_tokens: PromptTokens
    output_tokens: OutputTokens
    cost_usd: float | None
    cost_note: str
    # after the cache, per 1,000 valid items; judge characters: prompt and expected reply
    cost_per_1000_items_usd: float | None
    judge_chars_per_item: float
    # the verdict instructions, every request's static prefix, against the provider's minimum
    instruction_tokens: int
    prompt_cache: str
    wall_time: WallTime
    batch: BatchPlan | None
    cache: CacheShare


Messages = list[dict[str, str]]


def _item_prompts(item: ScoringItem, config: JobConfig) -> list[tuple[Messages, list[int]]]:
    """(messages, context positions asked) of every request the job would send for `item`."""
    prompts = [
        (verdict_messages(item, part, config.judge.verdict_reasons), part)
        for part in context_slices(len(item.contexts), config.judge.contexts_per_call)
    ]
    if config.scorer.reason == "llm":
        placeholder = _PLACEHOLDER_VERDICT_REASON
        verdicts = [
            ContextVerdict(index=position, relevant=False, reason=placeholder)
            for position in range(len(item.contexts))
        ]
        prompts.append((reason_messages(item, verdicts, 0.0, config.scorer.scale), []))
    return prompts


def _chars(messages: Messages) -> int:
    return sum(len(message["content"]) for message in messages)


def _cache_probe(
    config: JobConfig, rows: RunRows, shards: list[Shard]
) -> tuple[str, set[str] | None, str]:
    """(fingerprint, the input's pair keys the verdict store holds or None, where it looked)."""
    if factory.capabilities(config).offline:
        return "", None, "not used: the lexical judge is offline and never uses the verdict cache"
    spec = factory.cache_spec(config)
    if spec is None:
        return "", None, "not used: cache.enabled is false"
    # estimating must not create the output folder
    store = open_store(spec.url or config.output.path, spec.storage_options, create=False)
    verdicts = VerdictStore(store=store, folder=spec.store_folder, max_age_days=spec.max_age_days)
    where = store.url(store.join(verdicts.folder))
    if not store.exists(store.join(verdicts.folder)):
        return spec.fingerprint, None, f"no verdict store yet at {where}"
    reading = KeyReading(rows=rows, fingerprint=spec.fingerprint)
    with tempfile.TemporaryDirectory(prefix="ctxprec-estimate-") as scratch:
        found = stored_pair_keys(reading, shards, verdicts, Path(scratch))
        known: set[str] = set()
        for keys in found:  # a series of pair keys per shard
            known.update(keys.to_list())
    return spec.fingerprint, known, f"the verdict store at {where}"


@dataclass(kw_only=True)
class _Counts:
    valid: int = 0
    invalid: int = 0
    truncated: int = 0
    pairs: int = 0
    verdict_calls: int = 0
    reason_calls: int = 0
    prompt_chars: int = 0
    limiter_tokens: int = 0
    cached_pairs: int = 0
    # the requests the verdict cache does not answer
    calls_after_cache: int = 0
    prompt_chars_sent: int = 0
    limiter_tokens_sent: int = 0
    invalid_examples: list[str] = field(default_factory=list)


class _Scan:
    """Streams the input once: counts, the token sample and (batch mode) the first batches."""

    def __init__(
        self,
        config: JobConfig,
        rows: RunRows,  # the run's: with a sampled run's plan, only the rows it keeps
        cache: tuple[str, set[str] | None],  # the fingerprint and the stored pair keys
        sample: int,
    ) -> None:
        self.config = config
        self.rows = rows
        self.sample = sample
        self.fingerprint, self.known = cache
        self.counts = _Counts()
        # Bottom-k sample by content hash: a max-heap (negated keys) of the `sample` smallest.
        self.heap: list[tuple[bytes, int, ScoringItem]] = []
        limits = config.judge.batch
        self.packer = BatchPacker(
            0,
            max_requests=limits.max_requests_per_batch,
            max_bytes=limits.max_bytes_per_batch,
            max_tokens=limits.max_enqueued_tokens,
        )
        self._lines = RequestLines.for_config(config) if config.judge.mode == "batch" else None

    def shard(self, number: int, shard: Shard) -> None:
        """Count the run's `number`-th shard; in batch mode pack its uncached requests' lines."""
        names = self.rows.tables.names
        line = 0
        for row, record in enumerate(self.rows.reader.read(shard, self.rows.tables.carried)):
            if not judged(self.rows.sample, record, names):
                continue
            if isinstance(record, RowError):
                self.counts.invalid += 1
                if len(self.counts.invalid_examples) < _MAX_INVALID_EXAMPLES:
                    self.counts.invalid_examples.append(record.message)
                continue
            item = record.to_scoring_item()
            self.counts.truncated += int(record.truncated)
            for messages, part in self._count(item):
                if self._lines is not None and part:
                    ask = custom_id(item_key(number, row), f"v{part[0]}", 0)
                    schema = verdicts_schema(part, self.config.judge.verdict_reasons)
                    data, tokens = self._lines.line(ask, messages, VERDICTS_SCHEMA_NAME, schema)
                    self.packer.add(shard.shard_id, line, len(data), tokens)
                    line += 1
            self._keep_sample(record.query_id, item)

    def _count(self, item: ScoringItem) -> list[tuple[Messages, list[int]]]:
        """Count one valid item; returns the requests the verdict cache does not answer."""
        counts, contexts = self.counts, len(item.contexts)
        prompts = _item_prompts(item, self.config)
        counts.valid += 1
        counts.pairs += contexts
        reasons = int(self.config.scorer.reason == "llm")
        counts.reason_calls += reasons
        counts.verdict_calls += len(prompts) - reasons
        hits: set[int] = set()
        if self.known:
            for position in range(contexts):
                if pair_key(self.fingerprint, item, position) in self.known:
                    hits.add(position)
            counts.cached_pairs += len(hits)
        sent = []
        verdict_reasons = self.config.judge.verdict_reasons
        for messages, part in prompts:
            chars = _chars(messages)
            tokens = estimate_tokens(messages, len(part) or 1, reasons=verdict_reasons)
            counts.prompt_chars += chars
            counts.limiter_tokens += tokens
            if not part or not hits.issuperset(part):
                sent.append((messages, part))
                counts.calls_after_cache += 1
                counts.prompt_chars_sent += chars
                counts.limiter_tokens_sent += tokens
        return sent

    def _keep_sample(self, query_id: str, item: ScoringItem) -> None:
        digest = hashlib.blake2b(digest_size=12)
        for part in (query_id, item.input, *item.contexts[:1]):
            encoded = part.encode("utf-8", "surrogatepass")
            digest.update(len(encoded).to_bytes(8, "little"))
            digest.update(encoded)
        # negated, so that the max-heap keeps the `sample` smallest digests
        negated = bytes(255 - byte for byte in digest.digest())
        entry = (negated, self.counts.valid, item)
        if len(self.heap) < self.sample:
            heapq.heappush(self.heap, entry)
        elif entry[0] > self.heap[0][0]:
            heapq.heapreplace(self.heap, entry)


def estimate(
    config: JobConfig,
    *,
    sample: int = EstimateOptions.sample,
    assumed_latency_s: float = EstimateOptions.assumed_latency_s,
) -> Estimate:
    """The estimate (see the module docstring); makes no judge calls."""
    if sample < 1:
        raise CtxPrecError(f"--sample must be at least 1, not {sample}")
    scan, facts, cache_note = _scan_input(config, sample)
    counts = scan.counts
    used = scan.known is not None  # the verdict store was looked at
    calls = counts.verdict_calls + counts.reason_calls
    prompt_tokens = _prompt_tokens(config, scan)
    output_tokens = _output_tokens(config, counts.pairs, counts.cached_pairs, counts.reason_calls)
    instructions, cached, caching = _prompt_cache(config, counts.calls_after_cache)
    cost, cost_note = _cost(config, prompt_tokens.after_cache, output_tokens.after_cache, cached)
    reply_chars = output_tokens.after_cache * CHARS_PER_TOKEN
    if counts.cached_pairs:
        cost_note += "; only the requests the verdict cache does not answer"
    per_1000 = None
    if cost is not None and counts.valid:
        per_1000 = cost / counts.valid * 1000
    judge_chars = 0.0
    if counts.valid:
        judge_chars = (counts.prompt_chars_sent + reply_chars) / counts.valid
    wall_time = _wall_time(
        config, counts.calls_after_cache, counts.limiter_tokens_sent, assumed_latency_s
    )
    return Estimate(
        model=config.judge.model,
        input=facts,
        items=_item_counts(counts),
        context_pairs=counts.pairs,
        judge_calls=_judge_calls(config, counts),
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        cost_usd=cost,
        cost_note=cost_note,
        cost_per_1000_items_usd=per_1000,
        judge_chars_per_item=judge_chars,
        instruction_tokens=instructions,
        prompt_cache=caching,
        wall_time=wall_time,
        batch=_batches(config, scan.packer) if config.judge.mode == "batch" else None,
        cache=CacheShare(
            used=used,
            note=cache_note,
            cached_pairs=counts.cached_pairs,
            share=counts.cached_pairs / counts.pairs if counts.pairs and used else 0.0,
            calls_after_cache=counts.calls_after_cache if used else calls,
        ),
    )


def _item_counts(counts: _Counts) -> ItemCounts:
    return ItemCounts(
        valid=counts.valid,
        invalid=counts.invalid,
        total=counts.valid + counts.invalid,
        truncated=counts.truncated,
        invalid_examples=tuple(counts.invalid_examples),
    )


def _judge_calls(config: JobConfig, counts: _Counts) -> JudgeCalls:
    return JudgeCalls(
        total=counts.verdict_calls + counts.reason_calls,
        verdict_calls=counts.verdict_calls,
        reason_calls=counts.reason_calls,
        contexts_per_call=config.judge.contexts_per_call,
        reason=config.scorer.reason,
        sends_requests=not factory.capabilities(config).offline,
        note="retries and re-asks not included",
    )


def _output_tokens(config: JobConfig, pairs: int, cached: int, reason_calls: int) -> OutputTokens:
    """The replies' allowance: a verdict per pair (the cache's excepted), each LLM reason."""
    reasons = reason_calls * OUTPUT_TOKENS_PER_REASON
    bare = not config.judge.verdict_reasons
    per_verdict = REPLY_TOKENS_PER_BARE_VERDICT if bare else OUTPUT_TOKENS_PER_VERDICT
    return OutputTokens(
        estimate=pairs * per_verdict + reasons,
        after_cache=(pairs - cached) * per_verdict + reasons,
        per_verdict=per_verdict,
        per_reason_call=OUTPUT_TOKENS_PER_REASON,
    )


def _scan_input(config: JobConfig, sample: int) -> tuple[_Scan, InputFacts, str]:
    """The input streamed once (`_Scan`), its facts, and where the cache probe looked."""
    reader = ItemReader.for_config(config)
    spec = reader.spec
    files = list_input_files(spec)
    schema = inspect_input(spec, files)  # checks the columns, as the run does first
    carried = schema.carried if config.sample.enabled else ()
    shards = plan_shards(spec, files, config.ray.shard_size)
    plan = None
    if config.sample.enabled:  # a sampled run judges only the rows its plan keeps
        read = reader.read
        plan = plan_sample(config.sample, shards, lambda shard: read(shard, carried), carried)
    rows = RunRows(reader=reader, tables=RunSchema(tuple(carried)), sample=plan)
    fingerprint, known, cache_note = _cache_probe(config, rows, shards)
    scan = _Scan(config, rows, (fingerprint, known), sample)
    for number, shard in enumerate(shards):
        scan.shard(number, shard)
    scan.packer.close()
    facts = InputFacts(path=config.input.path, files=len(files), shards=len(shards))
    return scan, facts, cache_note


def _prompt_tokens(config: JobConfig, scan: _Scan) -> PromptTokens:
    """Tokens of every prompt: the sample's counted exactly, the rest by characters."""
    offline = factory.capabilities(config).offline
    tokenizer_model = "" if offline else config.judge.model
    sampled = [item for _, _, item in scan.heap]
    prompts: list[Messages] = []
    for item in sampled:
        prompts += [messages for messages, _ in _item_prompts(item, config)]
    sample_chars = sum(_chars(messages) for messages in prompts)
    sample_tokens = 0
    if prompts:
        count = import_litellm().token_counter
        for messages in prompts:
            sample_tokens += int(count(model=tokenizer_model, messages=messages))
    total_chars = scan.counts.prompt_chars
    exact = len(sampled) == scan.counts.valid
    if offline:
        note = "the lexical judge sends no prompts: tokens are what an LLM judge would be sent"
    elif config.scorer.reason == "llm":
        note = "verdict prompts and LLM-reason prompts"
    else:
        note = "verdict prompts"
    tokens = sample_tokens if exact else round(total_chars * sample_tokens / max(sample_chars, 1))
    sent = scan.counts.prompt_chars_sent
    return PromptTokens(
        estimate=tokens,
        after_cache=round(tokens * sent / total_chars) if total_chars else 0,
        method="exact" if exact else "sample extrapolated by characters",
        sampled_items=len(sampled),
        sample_tokens=sample_tokens,
        sample_chars=sample_chars,
        total_chars=total_chars,
        chars_per_token=round(sample_chars / sample_tokens, 3) if sample_tokens else None,
        tokenizer=f"litellm.token_counter(model={tokenizer_model!r})",
        note=note,
    )


def _prompt_cache(config: JobConfig, calls: int) -> tuple[int, int, str]:
    """(the verdict instructions' tokens, prompt tokens a provider's cache would read over
    `calls` requests, and whether it caches them, in words)."""
    if factory.capabilities(config).offline:
        return 0, 0, "none: the offline judge sends no prompts"
    from litellm.utils import get_llm_provider, get_prompt_cache_min_tokens

    model = config.judge.model
    text = VERDICT_INSTRUCTIONS[config.judge.verdict_reasons]
    tokens = int(import_litellm().token_counter(model=model, text=text))
    minimum = int(get_prompt_cache_min_tokens(model))  # litellm's default for others
    try:
        provider = get_llm_provider(model)[1]
    except Exception:  # litellm does not know the model's provider
        provider = "the provider"
    name = _PROVIDERS.get(provider, provider)
    instructions = f"instructions: {tokens:,} tokens"
    cache_minimum = f"{name}'s {minimum:,}-token cache minimum"
    if tokens < minimum:
        return tokens, 0, f"{instructions}, below {cache_minimum}: no prompt caching"
    cached = tokens * max(calls - 1, 0)
    return tokens, cached, f"{instructions}, above {cache_minimum}: cached after one call"


def _cost(
    config: JobConfig, prompt_tokens: int, output_tokens: int, cached: int = 0
) -> tuple[float | None, str]:
    """The cost in USD (None: no price known; `cached` prompt tokens at the cache rate) and
    what it is based on."""
    if factory.capabilities(config).offline:
        return 0.0, "no API cost"
    if not prompt_tokens and not output_tokens:
        return 0.0, "nothing to ask: the verdict cache answers every request"
    model = config.judge.model
    batch = config.judge.mode == "batch"
    cost = estimate_cost_usd(model, prompt_tokens, output_tokens, batch=batch, cached=(cached, 0))
    return cost, price_basis(model, batch=batch)


def _batches(config: JobConfig, packer: BatchPacker) -> BatchPlan:
    """The first round's batches as the run would cut them."""
    limits = config.judge.batch
    return BatchPlan(
        batches=len(packer.batches),
        requests=sum(batch.requests for batch in packer.batches),
        bytes=sum(batch.bytes for batch in packer.batches),
        tokens=sum(batch.tokens for batch in packer.batches),
        max_requests_per_batch=limits.max_requests_per_batch,
        max_bytes_per_batch=limits.max_bytes_per_batch,
        max_enqueued_tokens=limits.max_enqueued_tokens,
        note="round 0 only: re-asks and LLM reasons go in later rounds",
    )


def _concurrency(config: JobConfig, calls: int, limiter_tokens: int, latency_s: float) -> int:
    """The in-flight budget: as set, or as the governor sizes it (Little's law)."""
    limits = config.rate_limit
    settings = budget_settings(limits)
    if settings.explicit is not None:
        return settings.explicit
    rates = []
    if limits.requests_per_minute:
        rates.append(limits.requests_per_minute * limits.headroom / 60.0)
    if limits.tokens_per_minute and calls and limiter_tokens:
        rates.append(limits.tokens_per_minute * limits.headroom / 60.0 / (limiter_tokens / calls))
    if not rates:
        return settings.unlimited
    needed = math.ceil(min(rates) * latency_s * settings.margin)
    return max(settings.floor, min(settings.ceiling, needed))


def _wall_time(config: JobConfig, calls: int, limiter_tokens: int, latency_s: float) -> WallTime:
    """The slowest of the request rate, the token rate and the in-flight budget at `latency_s`,
    plus the workers' start, the first request (alone) and `TAIL_LATENCIES`."""
    if config.judge.mode == "batch":
        window = config.judge.batch.completion_window
        basis = (
            f"batch mode: the provider answers within its completion window ({window}), "
            "usually far sooner; rate_limit does not pace it"
        )
        return BatchWallTime(completion_window=window, basis=basis)
    limits = config.rate_limit
    rpm = limits.requests_per_minute
    tpm = limits.tokens_per_minute
    headroom = limits.headroom
    concurrency = _concurrency(config, calls, limiter_tokens, latency_s)
    explicit = budget_settings(config.rate_limit).explicit is not None
    pacing = Pacing(
        requests_per_minute=rpm,
        tokens_per_minute=tpm,
        headroom=headroom,
        limiter_tokens=limiter_tokens,
        concurrency=concurrency,
        concurrency_mode="explicit" if explicit else "auto",
        assumed_latency_s=latency_s,
    ).model_dump()
    if factory.capabilities(config).offline:
        basis = "offline lexical judge: no API calls, no rate limit (CPU-bound)"
        return OfflineWallTime(**pacing, basis=basis)
    by_requests = calls / (rpm * headroom) * 60.0 if rpm else None
    by_tokens = limiter_tokens / (tpm * headroom) * 60.0 if tpm else None
    by_concurrency = calls / concurrency * latency_s if calls else 0.0
    litellm_s = LITELLM_IMPORT_S if factory.workers_import_litellm(config) else 0.0
    edges = WORKER_START_S + litellm_s + (1 + TAIL_LATENCIES) * latency_s if calls else 0.0
    bound = max((by for by in (by_requests, by_tokens) if by is not None), default=None)
    assumed = f"{concurrency} in flight at an ASSUMED {latency_s:g} s per request"
    if bound is None:
        basis = (
            f"unbounded by rate limit; ASSUMING {latency_s:g} s per request with "
            f"{concurrency} requests in flight"
        )
    else:
        which = "requests_per_minute" if bound == by_requests else "tokens_per_minute"
        if by_concurrency > bound:
            basis = f"concurrency-bound: {assumed} is slower than the rate limit ({which})"
        else:
            basis = f"rate limit: {which} at headroom {headroom:g}, {assumed}"
    return PacedWallTime(
        **pacing,
        by_requests_s=by_requests,
        by_tokens_s=by_tokens,
        by_concurrency_s=by_concurrency,
        worker_start_s=WORKER_START_S + litellm_s,
        seconds=max(by_concurrency, bound or 0.0) + edges,
        basis=basis,
    )


def _after_cache(estimate: int, after_cache: int) -> str:
    cached = f", {after_cache:,} after the cache" if after_cache != estimate else ""
    return f"{estimate:,}{cached}"


def _calls_text(calls: JudgeCalls) -> str:
    detail = f"{calls.verdict_calls:,} verdict"
    if calls.reason_calls:
        detail += f" + {calls.reason_calls:,} LLM-reason"
    detail += f"; contexts_per_call {calls.contexts_per_call}, reason {calls.reason}"
    detail += f"; {calls.note}" if calls.sends_requests else "; offline judge, no requests sent"
    return f"{calls.total:,} ({detail})"


def _tokens_text(tokens: PromptTokens) -> str:
    if tokens.method == "exact":
        detail = f"exact count of all {tokens.sampled_items:,} items"
    else:
        detail = (
            f"exact count on a sample of {tokens.sampled_items:,} items, extrapolated by "
            f"characters ({fmt.integer(tokens.total_chars)} chars)"
        )
    if tokens.chars_per_token:
        detail += f", {tokens.chars_per_token:.2f} chars/token"
    return f"{_after_cache(tokens.estimate, tokens.after_cache)} ({detail}; {tokens.note})"


def _batch_text(batch: BatchPlan) -> str:
    limits = (
        f"at most {batch.max_requests_per_batch:,} requests and "
        f"{batch.max_bytes_per_batch / 1e6:,.0f} MB per batch"
    )
    if batch.max_enqueued_tokens:
        limits += f", {batch.max_enqueued_tokens:,} tokens enqueued"
    return (
        f"{batch.batches:,} ({batch.requests:,} requests, {batch.bytes / 1e6:,.1f} MB, "
        f"~{batch.tokens:,} prompt tokens; {limits}; {batch.note})"
    )


def _cache_text(cache: CacheShare) -> str:
    if not cache.used:
        return f"0% ({cache.note})"
    return (
        f"{cache.share:.1%} of pairs ({cache.cached_pairs:,}) cached; "
        f"{cache.calls_after_cache:,} calls left ({cache.note})"
    )


def format_estimate(result: Estimate) -> str:
    """The estimate as `ctxprec estimate` prints it: one row per figure, with its basis."""
    items = result.items
    output = result.output_tokens
    source = result.input
    truncated = f" ({items.truncated:,} truncated)" if items.truncated else ""
    allowance = (
        f"{output.per_verdict} reply tokens allowed per verdict, {output.per_reason_call} per "
        "LLM reason"
    )
    per_1000 = f"{fmt.cost(result.cost_per_1000_items_usd, result.model)} per 1,000 items"
    chars = f"{result.judge_chars_per_item:,.0f} judge characters (prompt and expected reply)"
    batches = [("batches", _batch_text(result.batch))] if result.batch else []
    rows = [
        ("judge", result.model),
        ("input", f"{source.path}: {source.files} file(s), {source.shards} shard(s)"),
        ("items", f"{items.valid:,} valid / {items.invalid:,} invalid{truncated}"),
        ("context pairs", f"{result.context_pairs:,}"),
        ("judge calls", _calls_text(result.judge_calls)),
        ("prompt tokens", _tokens_text(result.prompt_tokens)),
        ("output tokens", f"{_after_cache(output.estimate, output.after_cache)} ({allowance})"),
        ("estimated cost", f"{fmt.cost(result.cost_usd, result.model)} ({result.cost_note})"),
        ("per item", f"{per_1000}; {chars}"),
        ("prompt cache", result.prompt_cache),
        ("wall time", f"{fmt.duration(result.wall_time.seconds)} ({result.wall_time.basis})"),
        *batches,
        ("verdict cache", _cache_text(result.cache)),
    ]
    title = "ctxprec estimate (no judge calls made)"
    figures = (Column(align="<"), Column(align="<"))
    lines = [table(figures, rows, title=title, indent="  ", header=False)]
    lines += [f"  invalid row: {example}" for example in items.invalid_examples]
    return "\n".join(lines)


def run(options: EstimateOptions, out: TextIO | None = None) -> int:
    """`ctxprec estimate`: the estimate, or the items `target_ci` needs; returns 0."""
    out = out or sys.stdout
    config = options.config.load()
    config.judge.access().check()  # as `run` checks: the estimate is of a run that can start
    if options.target_ci is not None:
        from jobs.tools.target_ci import format_target, previous_run, target_ci

        by = config.summary.by or config.sample.by
        planned = target_ci(previous_run(config, options.run), options.target_ci, by)
        text = json.dumps(planned, indent=2) if options.as_json else format_target(planned)
    else:
        found = estimate(config, sample=options.sample, assumed_latency_s=options.assumed_latency_s)
        text = found.to_json() if options.as_json else format_estimate(found)
    out.write(text + "\n")
    return 0
