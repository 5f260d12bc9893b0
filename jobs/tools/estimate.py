"""`ctxprec estimate`: what a run would cost before it runs (no judge calls, no Ray).

Streams the input through the job's own reading path (`list_input_files` -> `check_schema` ->
`plan_shards` -> `read_shard` -> `to_item` -> `preprocess`), one row at a time, and counts:

- in a sampled run (`sample:`), only the rows its plan keeps (`jobs.sampling`: the input is
  read once more first, for the strata's populations, as the driver does);
- items (valid / invalid) and context pairs, exactly as the job would see them (duplicate
  `query_id`s are counted: the job judges them too and marks them at publish time);
- judge calls: per item ceil(contexts / `judge.contexts_per_call`), plus one per item when
  `scorer.reason` is `llm`. Retries and re-asks are not included (they depend on the provider);
- prompt tokens: the real prompts (`scorer_core.prompt.verdict_messages`, and `reason_messages`
  for `reason: llm`) are built for every item and their characters summed; tokens are counted
  exactly with `litellm.token_counter` on a deterministic sample of at most `--sample` items
  (the items with the smallest content hash, independent of input order) and extrapolated to
  all items by characters (tokens per character of the sample);
- output tokens: an allowance of `OUTPUT_TOKENS_PER_VERDICT` per context pair (one short reason
  per verdict, the same allowance the LLM judge reserves from the rate limiter) plus
  `OUTPUT_TOKENS_PER_REASON` per LLM-reason call;
- cost at the model's price (`litellm.cost_per_token`; "n/a" for a model without a price,
  0 for the offline lexical judge); in batch mode (`judge.mode: batch`) at the model's batch
  price, or half the online price, ASSUMED, when litellm knows none (`jobs.pricing`);
- in batch mode, the batches of the first round: the real request lines
  (`jobs.engine.batch.requests`) of every verdict request the cache would not answer, cut by
  the provider's limits as the run cuts them (`jobs.engine.batch.state.BatchPacker`);
- wall time at the configured rate limit: the larger of calls / requests_per_minute and
  limiter tokens / tokens_per_minute, both at `rate_limit.headroom` as the job paces them,
  plus the workers' start (`WORKER_START_S`, and `LITELLM_IMPORT_S` more where workers import
  litellm), a latency for the first request and `TAIL_LATENCIES` for the slowest last replies
  (limiter tokens are what the job reserves per request, `scorer_core.judge.estimate_tokens`:
  prompt characters / `CHARS_PER_TOKEN` + 1 + `REPLY_TOKENS_PER_VERDICT` per verdict). With
  no rate limit the run is "unbounded by rate limit" and the time shown is calls x an ASSUMED
  latency / the run's concurrency (`--assumed-latency`); the same concurrency floor applies
  when it is larger than the rate-limit time;
- the share of context pairs the verdict cache would answer: pair keys
  (`jobs.cache.pair_key`)
  looked up in the cache files that exist under this config's cache path, using the same slot
  and neighbour rule as the workers. The lexical judge does not use the cache.

The API key is never read.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import io
import json
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.parquet as pq

from jobs import factory, sampling
from jobs import formatting as fmt
from jobs.cache import pair_key, slot_path
from jobs.config import JobConfig, load_config
from jobs.engine.batch.requests import RequestLines, custom_id, item_key
from jobs.engine.batch.state import BatchPacker
from jobs.inputs import (
    RowError,
    check_schema,
    inspect_input,
    list_input_files,
    plan_shards,
)
from jobs.pricing import estimate_cost_usd, price_basis
from jobs.schema import CarriedColumn
from jobs.storage import Store, filesystem
from scorer_core.errors import CtxPrecError, StorageError
from scorer_core.judge import REPLY_TOKENS_PER_VERDICT, estimate_tokens
from scorer_core.litellm_client import import_litellm
from scorer_core.prompt import (
    VERDICTS_SCHEMA_NAME,
    reason_messages,
    verdict_messages,
    verdicts_schema,
)
from scorer_core.types import ContextVerdict, ScoringItem

DEFAULT_SAMPLE = 2000
"""Items whose prompts are tokenized exactly; the rest is extrapolated by characters."""
OUTPUT_TOKENS_PER_VERDICT = REPLY_TOKENS_PER_VERDICT
"""Expected reply tokens per context verdict: the allowance the LLM judge itself reserves."""
OUTPUT_TOKENS_PER_REASON = 100
"""Expected reply tokens per LLM-reason call ("two or three sentences")."""
DEFAULT_ASSUMED_LATENCY_S = 2.0
"""Seconds per judge request assumed when no rate limit bounds the run."""
TAIL_LATENCIES = 5.0
"""The run ends with its slowest last reply: with hundreds in flight at the end, about a p99
latency, taken as 5x the assumed mean (a heavy-tailed reply time: the flow benchmark's runs
measured p99 at 4.5x, 5.2x and 6.2x the mean at 1, 3 and 10 s, the client's own queueing
included)."""
WORKER_START_S = 3.0
"""The fan-out's fixed start before its first request: the coordinator and the worker
processes starting and importing the engine, about 3 s on 2 quiet cores with the bytecode
compiled at install (the flow section of docs/benchmarks.md; a loaded machine takes longer)."""
LITELLM_IMPORT_S = 3.5
"""What a worker's start adds when it imports litellm (to count prompt tokens for a
tokens-per-minute limit, or as the transport): measured 3.5 s more than a worker without it."""
_PLACEHOLDER_VERDICT_REASON = "The passage states the fact that the query asks about, so it helps."
"""Stands in for the judge's per-verdict reason when sizing LLM-reason prompts."""
_MAX_INVALID_EXAMPLES = 5


@dataclass
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
    calls_after_cache: int = 0
    invalid_examples: list[str] = field(default_factory=list)


def _messages_chars(messages: Sequence[dict[str, str]]) -> int:
    return sum(len(m["content"]) for m in messages)


def _slices(count: int, per_call: int) -> list[list[int]]:
    return [list(range(s, min(s + per_call, count))) for s in range(0, count, per_call)]


def _reason_prompt(item: ScoringItem, scale: float) -> list[dict[str, str]]:
    verdicts = [
        ContextVerdict(p, False, _PLACEHOLDER_VERDICT_REASON) for p in range(len(item.contexts))
    ]
    return reason_messages(item, verdicts, 0.0, scale)


def _item_prompts(item: ScoringItem, config: JobConfig) -> list[tuple[list[dict[str, str]], int]]:
    """(messages, verdicts asked) for every request the job would send for `item`."""
    prompts = [
        (verdict_messages(item, part), len(part))
        for part in _slices(len(item.contexts), config.judge.contexts_per_call)
    ]
    if config.scorer.reason == "llm":
        prompts.append((_reason_prompt(item, config.scorer.scale), 1))
    return prompts


def _sample_key(query_id: str, item: ScoringItem) -> bytes:
    digest = hashlib.blake2b(digest_size=12)
    for part in (query_id, item.input, *item.contexts[:1]):
        encoded = part.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.digest()


class _CacheProbe:
    """Which pair keys the workers would find in the existing cache files.

    Mirrors `jobs.cache.load_cache` (a shard sees its own slot and both neighbours) but keeps
    only keys, and keeps at most three slots of one file in memory at a time.
    """

    def __init__(self, store: Store, folder: str, fingerprint: str) -> None:
        self._store = store
        self._folder = folder
        self._fingerprint = fingerprint
        self._loaded: dict[tuple[int, int], frozenset[str]] = {}
        root = store.join(folder, fingerprint)
        self._existing = set(store.list(root))
        self.files = len(self._existing)

    def _keys(self, file_index: int, slot: int) -> frozenset[str]:
        where = (file_index, slot)
        if where not in self._loaded:
            path = slot_path(self._store, self._folder, self._fingerprint, file_index, slot)
            keys: frozenset[str] = frozenset()
            if path in self._existing:
                try:
                    table = pq.read_table(
                        io.BytesIO(self._store.read_bytes(path)), columns=["pair_key"]
                    )
                    keys = frozenset(k for k in table.column("pair_key").to_pylist() if k)
                except (StorageError, pa.ArrowInvalid, OSError, KeyError):
                    keys = frozenset()  # an unreadable cache file is ignored, as in the job
            self._loaded[where] = keys
        return self._loaded[where]

    def keys_for(self, file_index: int, slot: int) -> set[str]:
        for where in list(self._loaded):
            if where[0] != file_index or where[1] < slot - 1:
                del self._loaded[where]
        found: set[str] = set()
        for neighbour in (slot - 1, slot, slot + 1):
            if neighbour >= 0:
                found |= self._keys(file_index, neighbour)
        return found


def _cache_probe(config: JobConfig) -> tuple[_CacheProbe | None, str]:
    """A probe of this config's cache, or None with the reason there is nothing to look up."""
    if config.judge.model == "lexical":
        return None, "not used: the lexical judge is offline and never uses the verdict cache"
    if not factory.use_cache(config):
        return None, "not used: cache.enabled is false"
    url, folder = factory.cache_url(config)
    # Not `open_store`: estimating must not create the output folder.
    fs, root, protocol = filesystem(url, config.output.storage_options)
    store = Store(fs=fs, root=root, protocol=protocol)
    fingerprint = factory.cache_fingerprint(config)
    if not store.exists(store.join(folder, fingerprint)):
        return None, f"no cache files yet at {store.url(store.join(folder, fingerprint))}"
    probe = _CacheProbe(store, folder, fingerprint)
    return probe, f"{probe.files} cache file(s) at {store.url(store.join(folder, fingerprint))}"


def _count_tokens(model: str, prompts: Iterable[list[dict[str, str]]]) -> int:
    litellm = import_litellm()
    return sum(int(litellm.token_counter(model=model, messages=m)) for m in prompts)


def estimate(
    config: JobConfig,
    *,
    sample: int = DEFAULT_SAMPLE,
    assumed_latency_s: float = DEFAULT_ASSUMED_LATENCY_S,
) -> dict[str, Any]:
    """The estimate as plain data (see the module docstring); makes no judge calls."""
    if sample < 1:
        raise CtxPrecError(f"--sample must be at least 1, not {sample}")
    spec = factory.input_spec(config)
    files = list_input_files(spec)
    check_schema(spec, files)
    shards = plan_shards(spec, files, config.ray.shard_size)
    carried: tuple[CarriedColumn, ...] = ()
    if config.sample.enabled:  # a sampled run judges only the rows its plan keeps
        carried = inspect_input(spec, files).carried
        config = sampling.attach(config, sampling.plan_sample(config, shards, carried))
    names = [column.name for column in carried]
    probe, cache_note = _cache_probe(config)
    fingerprint = factory.cache_fingerprint(config)
    lexical = config.judge.model == "lexical"
    per_call = config.judge.contexts_per_call
    llm_reason = config.scorer.reason == "llm"
    batch_mode = config.judge.mode == "batch"
    limits = config.judge.batch
    packer = BatchPacker(
        0,
        max_requests=limits.max_requests_per_batch,
        max_bytes=limits.max_bytes_per_batch,
        max_tokens=limits.max_enqueued_tokens,
    )
    lines = RequestLines.for_config(config) if batch_mode else None

    counts = _Counts()
    # Bottom-k sample by content hash: a max-heap (negated keys) of the `sample` smallest.
    heap: list[tuple[bytes, int, ScoringItem]] = []
    slots: dict[int, int] = {}
    for shard_number, shard in enumerate(shards):
        slot = slots.get(shard.file_index, 0)
        slots[shard.file_index] = slot + 1
        known = probe.keys_for(shard.file_index, slot) if probe is not None else set()
        line_number = 0
        for row_index, record in enumerate(factory.shard_items(config, shard, carried)):
            if not sampling.keeps(config, record, names):
                continue
            if isinstance(record, RowError):
                counts.invalid += 1
                if len(counts.invalid_examples) < _MAX_INVALID_EXAMPLES:
                    counts.invalid_examples.append(record.message)
                continue
            item = record.to_scoring_item()
            counts.valid += 1
            counts.truncated += int(record.truncated)
            contexts = len(item.contexts)
            counts.pairs += contexts
            prompts = _item_prompts(item, config)
            for messages, verdicts in prompts:
                counts.prompt_chars += _messages_chars(messages)
                counts.limiter_tokens += estimate_tokens(messages, verdicts)
            parts = _slices(contexts, per_call)
            counts.verdict_calls += len(parts)
            counts.reason_calls += int(llm_reason)
            hits: set[int] = set()
            if known:
                hits = {p for p in range(contexts) if pair_key(fingerprint, item, p) in known}
                counts.cached_pairs += len(hits)
                counts.calls_after_cache += sum(1 for part in parts if not hits.issuperset(part))
            else:
                counts.calls_after_cache += len(parts)
            if lines is not None:
                # The first round's lines: every verdict request the cache does not answer
                # (its whole slice: a partly cached slice asks less, so this is an upper bound).
                request_item = item_key(shard_number, row_index)
                for part, (messages, _) in zip(parts, prompts, strict=False):
                    if hits.issuperset(part):
                        continue
                    data, tokens = lines.line(
                        custom_id(request_item, f"v{part[0]}", 0),
                        messages,
                        VERDICTS_SCHEMA_NAME,
                        verdicts_schema(part),
                    )
                    packer.add(shard.shard_id, line_number, len(data), tokens)
                    line_number += 1
            counts.calls_after_cache += int(llm_reason)  # reasons are never cached
            key = _sample_key(record.query_id, item)
            entry = (bytes(255 - b for b in key), counts.valid, item)
            if len(heap) < sample:
                heapq.heappush(heap, entry)
            elif entry[0] > heap[0][0]:
                heapq.heapreplace(heap, entry)

    calls = counts.verdict_calls + counts.reason_calls
    tokenizer_model = "" if lexical else config.judge.model
    sampled = [entry[2] for entry in heap]
    sample_prompts = [m for item in sampled for m, _ in _item_prompts(item, config)]
    sample_chars = sum(_messages_chars(m) for m in sample_prompts)
    sample_tokens = _count_tokens(tokenizer_model, sample_prompts) if sample_prompts else 0
    exact = len(sampled) == counts.valid
    if exact:
        prompt_tokens = sample_tokens
    else:
        prompt_tokens = round(counts.prompt_chars * sample_tokens / max(sample_chars, 1))
    output_tokens = (
        counts.pairs * OUTPUT_TOKENS_PER_VERDICT + counts.reason_calls * OUTPUT_TOKENS_PER_REASON
    )

    cost: float | None
    if lexical:
        cost, cost_note = 0.0, "lexical judge: offline, no API cost"
    else:
        cost = estimate_cost_usd(config.judge.model, prompt_tokens, output_tokens, batch=batch_mode)
        cost_note = price_basis(config.judge.model, batch=batch_mode)
    packer.close()

    share = counts.cached_pairs / counts.pairs if counts.pairs and probe is not None else 0.0
    return {
        "model": config.judge.model,
        "input": {"path": config.input.path, "files": len(files), "shards": len(shards)},
        "items": {
            "valid": counts.valid,
            "invalid": counts.invalid,
            "total": counts.valid + counts.invalid,
            "truncated": counts.truncated,
            "invalid_examples": counts.invalid_examples,
        },
        "context_pairs": counts.pairs,
        "judge_calls": {
            "total": calls,
            "verdict_calls": counts.verdict_calls,
            "reason_calls": counts.reason_calls,
            "contexts_per_call": per_call,
            "reason": config.scorer.reason,
            "sends_requests": not lexical,
            "note": "retries and re-asks not included",
        },
        "prompt_tokens": {
            "estimate": prompt_tokens,
            "method": "exact" if exact else "sample extrapolated by characters",
            "sampled_items": len(sampled),
            "sample_tokens": sample_tokens,
            "sample_chars": sample_chars,
            "total_chars": counts.prompt_chars,
            "chars_per_token": round(sample_chars / sample_tokens, 3) if sample_tokens else None,
            "tokenizer": f"litellm.token_counter(model={tokenizer_model!r})",
            "note": (
                "the lexical judge sends no prompts: tokens are what an LLM judge would be sent"
                if lexical
                else "verdict prompts" + (" and LLM-reason prompts" if llm_reason else "")
            ),
        },
        "output_tokens": {
            "estimate": output_tokens,
            "per_verdict": OUTPUT_TOKENS_PER_VERDICT,
            "per_reason_call": OUTPUT_TOKENS_PER_REASON,
        },
        "cost_usd": cost,
        "cost_note": cost_note,
        "wall_time": (
            _batch_wall_time(config)
            if batch_mode
            else _wall_time(config, calls, counts.limiter_tokens, assumed_latency_s)
        ),
        "batch": _batches(config, packer) if batch_mode else None,
        "cache": {
            "used": probe is not None,
            "note": cache_note,
            "cached_pairs": counts.cached_pairs,
            "share": share,
            "calls_after_cache": counts.calls_after_cache if probe is not None else calls,
        },
    }


def _batch_wall_time(config: JobConfig) -> dict[str, Any]:
    window = config.judge.batch.completion_window
    return {
        "seconds": None,
        "completion_window": window,
        "basis": (
            f"batch mode: the provider answers within its completion window ({window}), "
            "usually far sooner; rate_limit does not pace it"
        ),
    }


def _batches(config: JobConfig, packer: BatchPacker) -> dict[str, Any]:
    """The first round's batches as the run would cut them."""
    limits = config.judge.batch
    records = packer.batches
    return {
        "mode": "batch",
        "batches": len(records),
        "requests": sum(r.requests for r in records),
        "bytes": sum(r.bytes for r in records),
        "tokens": sum(r.tokens for r in records),
        "max_requests_per_batch": limits.max_requests_per_batch,
        "max_bytes_per_batch": limits.max_bytes_per_batch,
        "max_enqueued_tokens": limits.max_enqueued_tokens,
        "note": "round 0 only: re-asks and LLM reasons go in later rounds",
    }


def _wall_time(
    config: JobConfig, calls: int, limiter_tokens: int, latency_s: float
) -> dict[str, Any]:
    """The fan-out's wall time as the run would pace it: the rate the limits allow, the
    in-flight budget the run would settle on (Little's law under auto, as the governor sizes
    it, taking `latency_s` as the reply latency), plus the workers' start, one latency for the
    run's first request (it goes alone) and `TAIL_LATENCIES` for the slowest last replies."""
    limits = config.rate_limit
    settings = factory.budget_settings(config)
    rates = []
    if limits.requests_per_minute:
        rates.append(limits.requests_per_minute * limits.headroom / 60.0)
    if limits.tokens_per_minute and calls and limiter_tokens:
        rates.append(limits.tokens_per_minute * limits.headroom / 60.0 / (limiter_tokens / calls))
    rate = min(rates) if rates else None
    if settings.explicit is not None:
        concurrency = settings.explicit
    elif rate is None:
        concurrency = settings.unlimited
    else:
        needed = math.ceil(rate * latency_s * settings.margin)
        concurrency = max(settings.floor, min(settings.ceiling, needed))
    base: dict[str, Any] = {
        "requests_per_minute": limits.requests_per_minute,
        "tokens_per_minute": limits.tokens_per_minute,
        "headroom": limits.headroom,
        "limiter_tokens": limiter_tokens,
        "concurrency": concurrency,
        "concurrency_mode": "explicit" if settings.explicit is not None else "auto",
        "assumed_latency_s": latency_s,
    }
    if config.judge.model == "lexical":
        return {
            **base,
            "seconds": None,
            "basis": "offline lexical judge: no API calls, no rate limit (CPU-bound)",
        }
    by_requests = (
        calls / (limits.requests_per_minute * limits.headroom) * 60.0
        if limits.requests_per_minute
        else None
    )
    by_tokens = (
        limiter_tokens / (limits.tokens_per_minute * limits.headroom) * 60.0
        if limits.tokens_per_minute
        else None
    )
    by_concurrency = calls / concurrency * latency_s if calls else 0.0
    # the workers' start, the first request (it goes alone), the slowest of the last replies
    worker_start = WORKER_START_S + (
        LITELLM_IMPORT_S if factory.workers_import_litellm(config) else 0.0
    )
    edges = worker_start + (1 + TAIL_LATENCIES) * latency_s if calls else 0.0
    base.update(
        by_requests_s=by_requests,
        by_tokens_s=by_tokens,
        by_concurrency_s=by_concurrency,
        worker_start_s=worker_start,
    )
    if by_requests is None and by_tokens is None:
        return {
            **base,
            "seconds": by_concurrency + edges,
            "basis": (
                f"unbounded by rate limit; ASSUMING {latency_s:g} s per request with "
                f"{concurrency} requests in flight"
            ),
        }
    bound = max(v for v in (by_requests, by_tokens) if v is not None)
    which = "requests_per_minute" if bound == by_requests else "tokens_per_minute"
    if by_concurrency > bound:
        return {
            **base,
            "seconds": by_concurrency + edges,
            "basis": (
                f"concurrency-bound: {concurrency} in flight at an ASSUMED {latency_s:g} s per "
                f"request is slower than the rate limit ({which})"
            ),
        }
    return {
        **base,
        "seconds": bound + edges,
        "basis": (
            f"rate limit: {which} at headroom {limits.headroom:g}, {concurrency} in flight at "
            f"an ASSUMED {latency_s:g} s per request"
        ),
    }


# -- output ---------------------------------------------------------------------------------


def _batch_rows(batch: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not batch:
        return []
    tokens = batch["max_enqueued_tokens"]
    return [
        (
            "batches",
            f"{batch['batches']:,} ({batch['requests']:,} requests, "
            f"{batch['bytes'] / 1e6:,.1f} MB, ~{batch['tokens']:,} prompt tokens; at most "
            f"{batch['max_requests_per_batch']:,} requests and "
            f"{batch['max_bytes_per_batch'] / 1e6:,.0f} MB per batch"
            + (f", {tokens:,} tokens enqueued" if tokens else "")
            + f"; {batch['note']})",
        )
    ]


def format_estimate(result: dict[str, Any]) -> str:
    items = result["items"]
    calls = result["judge_calls"]
    tokens = result["prompt_tokens"]
    wall = result["wall_time"]
    cache = result["cache"]
    call_detail = f"{calls['verdict_calls']:,} verdict"
    if calls["reason_calls"]:
        call_detail += f" + {calls['reason_calls']:,} LLM-reason"
    call_detail += f"; contexts_per_call {calls['contexts_per_call']}, reason {calls['reason']}"
    if not calls["sends_requests"]:
        call_detail += "; offline judge, no requests sent"
    else:
        call_detail += f"; {calls['note']}"
    if tokens["method"] == "exact":
        token_detail = f"exact count of all {tokens['sampled_items']:,} items"
    else:
        token_detail = (
            f"exact count on a sample of {tokens['sampled_items']:,} items, extrapolated by "
            f"characters ({fmt.integer(tokens['total_chars'])} chars)"
        )
    if tokens["chars_per_token"]:
        token_detail += f", {tokens['chars_per_token']:.2f} chars/token"
    cost = result["cost_usd"]
    cost_text = fmt.usd(cost)
    wall_text = fmt.duration(wall["seconds"])
    if cache["used"]:
        cache_text = (
            f"{cache['share']:.1%} of pairs ({cache['cached_pairs']:,}) cached; "
            f"{cache['calls_after_cache']:,} calls left ({cache['note']})"
        )
    else:
        cache_text = f"0% ({cache['note']})"
    rows = [
        ("judge", result["model"]),
        (
            "input",
            f"{result['input']['path']}: {result['input']['files']} file(s), "
            f"{result['input']['shards']} shard(s)",
        ),
        (
            "items",
            f"{items['valid']:,} valid / {items['invalid']:,} invalid"
            + (f" ({items['truncated']:,} truncated)" if items["truncated"] else ""),
        ),
        ("context pairs", f"{result['context_pairs']:,}"),
        ("judge calls", f"{calls['total']:,} ({call_detail})"),
        ("prompt tokens", f"{tokens['estimate']:,} ({token_detail}; {tokens['note']})"),
        (
            "output tokens",
            f"{result['output_tokens']['estimate']:,} (allowance: "
            f"{result['output_tokens']['per_verdict']} per verdict, "
            f"{result['output_tokens']['per_reason_call']} per LLM reason)",
        ),
        ("estimated cost", f"{cost_text} ({result['cost_note']})"),
        ("wall time", f"{wall_text} ({wall['basis']})"),
        *_batch_rows(result.get("batch")),
        ("verdict cache", cache_text),
    ]
    width = max(len(name) for name, _ in rows)
    lines = ["ctxprec estimate (no judge calls made)"]
    lines += [f"  {name:<{width}}  {value}" for name, value in rows]
    for example in items["invalid_examples"]:
        lines.append(f"  invalid row: {example}")
    return "\n".join(lines)


# -- command --------------------------------------------------------------------------------


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The handler of `ctxprec estimate` (its options are defined in jobs.cli)."""
    out = out or sys.stdout
    config = load_config(args.config, args.set)
    if args.target_ci is not None:
        from jobs.tools.target_ci import format_target, previous_run, target_ci

        by = config.summary.by or config.sample.by
        planned = target_ci(previous_run(config, args.run), args.target_ci, by)
        out.write((json.dumps(planned, indent=2) if args.json else format_target(planned)) + "\n")
        return 0
    result = estimate(config, sample=args.sample, assumed_latency_s=args.assumed_latency)
    if args.json:
        out.write(json.dumps(result, indent=2) + "\n")
    else:
        out.write(format_estimate(result) + "\n")
    return 0
