"""The LLM judge: prompt, send through a `ChatClient`, retry, re-ask, parse.

Transport failures are retried within `RetryPolicy.max_retries`; if they persist the last
`TransportError` propagates (the caller records the item as an error). A reply that breaks the
wire contract is re-asked up to `RetryPolicy.max_reasks` times; if it still cannot be used the
batch comes back unscored with the reason: a verdict is never guessed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from scorer_core.errors import MalformedReply, RateLimited, TransportError
from scorer_core.parsing import parse_reason, parse_verdicts
from scorer_core.prompt import (
    REASON_SCHEMA,
    REASON_SCHEMA_NAME,
    VERDICTS_SCHEMA,
    VERDICTS_SCHEMA_NAME,
    reason_messages,
    verdict_messages,
    with_reask,
)
from scorer_core.protocols import ChatClient, ChatReply, Limiter, NoLimit, Sleeper
from scorer_core.retry import RetryPolicy, real_sleep
from scorer_core.types import ContextVerdict, ScoringItem, Usage, VerdictBatch

#: Characters per token assumed for rate-limit accounting before the provider reports real
#: usage (a rough rule for English text).
CHARS_PER_TOKEN = 4
#: Reply tokens expected per context verdict (index, yes/no and one short reason sentence):
#: reserved from the rate limiter, and the output allowance of `ctxprec estimate`.
REPLY_TOKENS_PER_VERDICT = 40


def estimate_tokens(messages: Sequence[dict[str, str]], verdicts: int = 1) -> int:
    """Prompt plus expected reply tokens, for the rate limiter and the cost estimate."""
    chars = sum(len(m["content"]) for m in messages)
    return chars // CHARS_PER_TOKEN + 1 + REPLY_TOKENS_PER_VERDICT * max(1, verdicts)


class LLMJudge:
    """A `Judge` backed by any chat model reachable through a `ChatClient`."""

    def __init__(
        self,
        client: ChatClient,
        *,
        retry: RetryPolicy | None = None,
        limiter: Limiter | None = None,
        sleep: Sleeper = real_sleep,
        scale: float = 1.0,
        max_in_flight: int | None = None,
    ) -> None:
        self._client = client
        # Bounds requests in flight (not items), so an item with thousands of contexts cannot
        # open thousands of connections at once.
        self._in_flight: asyncio.Semaphore | contextlib.AbstractAsyncContextManager[None] = (
            asyncio.Semaphore(max_in_flight) if max_in_flight else contextlib.nullcontext()
        )
        self._retry = retry or RetryPolicy()
        self._limiter = limiter or NoLimit()
        self._sleep = sleep
        self._scale = scale
        # The first request goes alone: a client's first call can take a second or more (lazy
        # imports, connection set-up) while the calls behind it wait inside the client, so rate
        # slots taken meanwhile would all be spent at the same instant when it returns.
        self._first_taken = False
        self._first_done = asyncio.Event()

    @property
    def model(self) -> str:
        return self._client.model

    async def _send(
        self,
        messages: Sequence[dict[str, str]],
        schema_name: str,
        schema: dict[str, object],
        verdicts: int,
    ) -> tuple[ChatReply, Usage]:
        """One logical request: retried on transport failures, each attempt rate-limited."""
        tokens = estimate_tokens(messages, verdicts)
        calls = retries = rate_limited = 0
        while True:
            calls += 1
            first = not self._first_taken
            self._first_taken = True
            if not first and not self._first_done.is_set():
                await self._first_done.wait()
            try:
                async with self._in_flight:
                    # Rate slot taken only once a connection slot is ours, so slots are not
                    # hoarded by waiters and then spent in a burst.
                    try:
                        await self._limiter.acquire(tokens)
                        reply = await self._client.complete(
                            messages, schema_name=schema_name, schema=schema
                        )
                    finally:
                        if first:
                            self._first_done.set()
            except TransportError as exc:
                retry_after = exc.retry_after if isinstance(exc, RateLimited) else None
                if isinstance(exc, RateLimited):
                    rate_limited += 1
                    await self._limiter.rate_limited(retry_after)
                if retries >= self._retry.max_retries:
                    raise type(exc)(f"gave up after {calls} attempts; last error: {exc}") from None
                await self._sleep(self._retry.delay_for(retries, retry_after))
                retries += 1
                continue
            usage = Usage(
                calls=calls,
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                retries=retries,
                rate_limited=rate_limited,
            )
            return reply, usage

    async def judge(self, item: ScoringItem, positions: Sequence[int]) -> VerdictBatch:
        base = verdict_messages(item, positions)
        messages = base
        usage = Usage()
        for attempt in range(self._retry.max_reasks + 1):
            reply, sent = await self._send(
                messages, VERDICTS_SCHEMA_NAME, VERDICTS_SCHEMA, len(positions)
            )
            usage = usage + sent
            try:
                verdicts = parse_verdicts(reply.text, positions)
            except MalformedReply as exc:
                if attempt == self._retry.max_reasks:
                    return VerdictBatch(
                        (),
                        usage,
                        unscored_reason=f"judge reply unusable after {attempt + 1} "
                        f"attempt(s): {exc}",
                    )
                usage = usage + Usage(reasks=1)
                messages = with_reask(base, str(exc))
                continue
            return VerdictBatch(verdicts, usage)
        raise AssertionError("unreachable: the loop always returns")

    async def explain(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> tuple[str, Usage]:
        base = reason_messages(item, verdicts, score, self._scale)
        messages = base
        usage = Usage()
        problem = ""
        for attempt in range(self._retry.max_reasks + 1):
            reply, sent = await self._send(messages, REASON_SCHEMA_NAME, REASON_SCHEMA, 1)
            usage = usage + sent
            try:
                return parse_reason(reply.text), usage
            except MalformedReply as exc:
                problem = str(exc)
                if attempt < self._retry.max_reasks:
                    usage = usage + Usage(reasks=1)
                    messages = with_reask(base, problem)
        raise MalformedReply(f"reason reply unusable: {problem}")
