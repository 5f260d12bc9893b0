"""The LLM judge: prompt, send through a `ChatClient`, retry, re-ask, parse.

Transport failures are retried (`RetryPolicy.max_retries`), then propagate; an unusable reply is
re-asked (`max_reasks`), then its batch is unscored: a verdict is never guessed. A deterministic
rejection becomes a `FatalJudgeError` naming the endpoint (every item would be refused alike),
except a refused structured-output form, which the negotiation may step down from first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from scorer_core.capabilities import LLM_CAPABILITIES
from scorer_core.errors import (
    FatalJudgeError,
    MalformedReply,
    RateLimited,
    RequestRejected,
    ResponseFormatRejected,
    TransportError,
)
from scorer_core.parsing import parse_reason, parse_verdicts
from scorer_core.prompt import (
    REASON_SCHEMA,
    REASON_SCHEMA_NAME,
    VERDICTS_SCHEMA_NAME,
    reason_messages,
    verdict_messages,
    verdicts_schema,
    with_reask,
)
from scorer_core.protocols import ChatClient, ChatReply, Gate, Limiter, NoLimit, Sleeper
from scorer_core.response_format import RESPONSE_FORMATS, ResponseFormat, ResponseFormatNegotiation
from scorer_core.retry import RetryPolicy, real_sleep
from scorer_core.types import ContextVerdict, ScoringItem, Usage, VerdictBatch

#: Characters per token assumed for rate-limit accounting before the provider reports usage.
CHARS_PER_TOKEN = 4
#: Reply tokens expected per context verdict (index, yes/no, a reason under 60 characters; or
#: without the reason): reserved from the rate limiter, the output allowance of `estimate`.
REPLY_TOKENS_PER_VERDICT = 20
REPLY_TOKENS_PER_BARE_VERDICT = 6

T = TypeVar("T")

TokenCounter = Callable[[Sequence[dict[str, str]]], int]
"""Counts a request's prompt tokens (e.g. the provider's tokenizer through litellm)."""


def count_prompt_tokens(messages: Sequence[dict[str, str]]) -> int:
    """A rough prompt token count from characters, when no tokenizer is at hand."""
    return sum(len(message["content"]) for message in messages) // CHARS_PER_TOKEN + 1


def estimate_tokens(
    messages: Sequence[dict[str, str]],
    verdicts: int = 1,
    *,
    counter: TokenCounter = count_prompt_tokens,
    completion_budget: int | None = None,
    reasons: bool = True,
) -> int:
    """Prompt plus expected reply tokens (`completion_budget` when set, else a verdict with or
    without a short reason each), for the rate limiter and the cost estimate."""
    per_verdict = REPLY_TOKENS_PER_VERDICT if reasons else REPLY_TOKENS_PER_BARE_VERDICT
    reply = completion_budget or per_verdict * max(1, verdicts)
    return counter(messages) + reply


@dataclass(frozen=True, kw_only=True)
class LLMJudgeSettings:
    """What an LLM judge takes from its config (`JudgeSpec.llm_settings`).

    retry: transport retries and re-asks of unusable replies.
    scale: the score scale, for the reason prompt.
    response_format: "auto" or one structured-output form, for a judge given no negotiation.
    completion_budget: the reply tokens a tokens-per-minute limiter reserves per request
        (None: a verdict with a short reason each, or without).
    verdict_reasons: False asks for verdicts alone, without a reason each.
    """

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    scale: float = 1.0
    response_format: str = "auto"
    completion_budget: int | None = None
    verdict_reasons: bool = True


@dataclass(frozen=True, kw_only=True)
class JudgeRuntime:
    """What an LLM judge shares at run time with the other judges of its process or run, and
    how it waits: nothing a config can hold.

    limiter: paces requests against a provider's limit.
    max_in_flight: bounds the requests in flight: a number, or a `Gate` shared with other
        judges, such as a worker's share of a run-wide budget.
    first_alone: False leaves the cold start to whoever owns the `max_in_flight` gate.
    negotiation: the endpoint's shared structured-output state (`shared_negotiation`); its
        setting wins over the judge's `response_format`.
    token_counter: counts a request's prompt tokens for a tokens-per-minute `limiter`.
    sleep, clock: how the judge waits and times a reply (tests inject them).
    """

    limiter: Limiter | None = None
    max_in_flight: int | Gate | None = None
    first_alone: bool = True
    negotiation: ResponseFormatNegotiation | None = None
    token_counter: TokenCounter = count_prompt_tokens
    sleep: Sleeper = real_sleep
    clock: Callable[[], float] = time.monotonic


@dataclass(frozen=True, kw_only=True)
class _Request:
    """One logical request: its messages, the schema its reply must follow, and the tokens
    the rate limiter is asked for."""

    messages: Sequence[dict[str, str]]
    schema_name: str
    schema: dict[str, object]
    tokens: int


class LLMJudge:
    """A `Judge` backed by any chat model reachable through a `ChatClient`.

    Args:
        client: carries each request (`OpenAIHTTPClient`, `LiteLLMClient`, `FakeChatClient`).
        settings: what the judge asks for and how often it asks again (from its config).
        runtime: the limiter, in-flight bound and negotiation it shares with other judges.
    """

    #: Reached over the network, paced, priced, cacheable (`scorer_core.capabilities`).
    capabilities = LLM_CAPABILITIES

    def __init__(
        self,
        client: ChatClient,
        *,
        settings: LLMJudgeSettings | None = None,
        runtime: JudgeRuntime | None = None,
    ) -> None:
        settings = settings or LLMJudgeSettings()
        runtime = runtime or JudgeRuntime()
        self._client = client
        self._reasons = settings.verdict_reasons
        self.model = client.model
        self.endpoint = client.endpoint
        #: Which client carries the requests ("http", "litellm", "batch", ...).
        self.transport = client.transport
        #: The structured-output negotiation with this judge's endpoint.
        self.response_format = runtime.negotiation or ResponseFormatNegotiation(
            settings.response_format, client.endpoint
        )
        # Bounds requests in flight (not items), so an item with thousands of contexts cannot
        # open thousands of connections at once.
        in_flight = runtime.max_in_flight
        if isinstance(in_flight, int):
            in_flight = asyncio.Semaphore(in_flight)
        self._in_flight: Gate = in_flight or contextlib.nullcontext()
        self._retry = settings.retry
        self._limiter = runtime.limiter or NoLimit()
        self._sleep = runtime.sleep
        self._scale = settings.scale
        self._count_tokens = runtime.token_counter
        self._completion_budget = settings.completion_budget
        self._clock = runtime.clock
        # The first request goes alone: a client's first call can take a second or more (lazy
        # imports, connection set-up) while the calls behind it wait inside the client, so rate
        # slots taken meanwhile would all be spent at the same instant when it returns.
        self._first_taken = not runtime.first_alone
        self._first_done = asyncio.Event()
        if not runtime.first_alone:
            self._first_done.set()

    @property
    def response_format_in_use(self) -> ResponseFormat:
        return self.response_format.current

    @property
    def asker(self) -> LLMJudge:
        """The judge itself: it asks its chat model (`scorer_core.protocols.ChatAsker`)."""
        return self

    def reason_prompt(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> str:
        """The user message `explain` sends first for these arguments."""
        return reason_messages(item, verdicts, score, self._scale)[-1]["content"]

    async def ask(
        self,
        messages: Sequence[dict[str, str]],
        schema_name: str,
        schema: dict[str, object],
        verdicts: int,
    ) -> tuple[ChatReply, Usage]:
        """One logical request (batch mode's online re-asks too): a refused structured-output
        form steps down to a weaker one, a transport failure waits and retries."""
        tokens = estimate_tokens(
            messages,
            verdicts,
            counter=self._count_tokens,
            completion_budget=self._completion_budget,
            reasons=self._reasons,
        )
        request = _Request(messages=messages, schema_name=schema_name, schema=schema, tokens=tokens)
        calls = retries = rate_limited = form_rejections = 0
        while True:
            calls += 1
            first = await self._wait_for_first()
            form, probe = await self.response_format.acquire()
            try:
                reply = await self._attempt(request, form, first)
            except ResponseFormatRejected as exc:
                form_rejections += 1
                if form_rejections > len(RESPONSE_FORMATS):
                    raise self._fatal_rejection(exc, form) from None
                # Raises FatalJudgeError when no weaker form is allowed.
                self.response_format.rejected(form, probe, str(exc))
                continue
            except RequestRejected as exc:
                self.response_format.released(form, probe)
                raise self._fatal_rejection(exc, form) from None
            except TransportError as exc:
                self.response_format.released(form, probe)
                retry_after = None
                if isinstance(exc, RateLimited):  # also slows down every caller of the limiter
                    retry_after = exc.retry_after
                    rate_limited += 1
                    await self._limiter.rate_limited(retry_after)
                if retries >= self._retry.max_retries:
                    raise type(exc)(f"gave up after {calls} attempts; last error: {exc}") from None
                await self._sleep(self._retry.delay_for(retries, retry_after))
                retries += 1
                continue
            except BaseException:  # cancelled, or a failure no retry can mend
                self.response_format.released(form, probe)
                raise
            self.response_format.accepted(form, probe)
            sent = Usage(calls=calls, retries=retries, rate_limited=rate_limited)
            return reply, reply.usage + sent

    async def _wait_for_first(self) -> bool:
        """Whether this attempt is the judge's first; any other waits until it is over."""
        first = not self._first_taken
        self._first_taken = True
        if not first and not self._first_done.is_set():
            await self._first_done.wait()
        return first

    async def _attempt(self, request: _Request, form: ResponseFormat, first: bool) -> ChatReply:
        """One call to the client in `form`, holding an in-flight slot and a rate slot."""
        async with self._in_flight:
            # Rate slot taken only once a connection slot is ours, so slots are not hoarded by
            # waiters and then spent in a burst.
            charged = 0
            sent_at: float | None = None
            reply: ChatReply | None = None
            try:
                charged = await self._limiter.acquire(request.tokens)
                sent_at = self._clock()
                reply = await self._client.complete(
                    request.messages,
                    schema_name=request.schema_name,
                    schema=request.schema,
                    response_format=form,
                )
                return reply
            finally:
                if first:
                    self._first_done.set()
                if sent_at is not None:
                    latency = self._clock() - sent_at if reply is not None else None
                    used = self._counted_tokens(reply) if reply else 0
                    self._limiter.completed(latency, charged, used)

    def _counted_tokens(self, reply: ChatReply) -> int:
        """The tokens a provider counts against its limit: OpenAI-style limits count a
        request's max_tokens when it sets one, whatever the reply used."""
        tokens = reply.usage
        return tokens.prompt_tokens + max(tokens.completion_tokens, self._completion_budget or 0)

    def _fatal_rejection(self, exc: RequestRejected, form: ResponseFormat) -> FatalJudgeError:
        return FatalJudgeError(
            f"judge endpoint {self.endpoint} rejected the request (sent with response_format "
            f"{form!r}); a deterministic rejection is not retried (every item would be refused "
            f"the same way): {exc}"
        )

    async def _parsed(
        self,
        base: list[dict[str, str]],
        schema_name: str,
        schema: dict[str, object],
        verdicts: int,
        parse: Callable[[str], T],
    ) -> tuple[T | None, Usage, str]:
        """`parse` of the reply to `base`, re-asked while unusable: (parsed or None, usage, the
        last problem)."""
        messages = base
        usage = Usage()
        problem = ""
        for attempt in range(self._retry.max_reasks + 1):
            if attempt:
                usage = usage + Usage(reasks=1)
                messages = with_reask(base, problem)
            reply, sent = await self.ask(messages, schema_name, schema, verdicts)
            usage = usage + sent
            try:
                return parse(reply.text), usage, ""
            except MalformedReply as exc:
                problem = str(exc)
        return None, usage, problem

    async def judge(self, item: ScoringItem, positions: Sequence[int]) -> VerdictBatch:
        base = verdict_messages(item, positions, self._reasons)
        prompt = base[-1]["content"]
        schema = verdicts_schema(positions, self._reasons)
        parse = functools.partial(parse_verdicts, positions=positions)
        verdicts, usage, problem = await self._parsed(
            base, VERDICTS_SCHEMA_NAME, schema, len(positions), parse
        )
        if verdicts is None:
            attempts = self._retry.max_reasks + 1
            reason = f"judge reply unusable after {attempts} attempt(s): {problem}"
            return VerdictBatch(verdicts=(), usage=usage, unscored_reason=reason, prompt=prompt)
        return VerdictBatch(verdicts=verdicts, usage=usage, prompt=prompt)

    async def explain(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> tuple[str, Usage]:
        base = reason_messages(item, verdicts, score, self._scale)
        reason, usage, problem = await self._parsed(
            base, REASON_SCHEMA_NAME, REASON_SCHEMA, 1, lambda text: parse_reason(text, score)
        )
        if reason is None:
            raise MalformedReply(f"reason reply unusable: {problem}")
        return reason, usage
