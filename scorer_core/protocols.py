"""The pluggable parts of the scorer, one `Protocol` each: `Judge` (and `ChatAsker`, the part of
a judge that asks a chat model), `ChatClient`, `Limiter` and `Sleeper` (injected wherever the
code waits)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from scorer_core.capabilities import JudgeCapabilities
from scorer_core.response_format import ResponseFormat, ResponseFormatNegotiation
from scorer_core.types import ContextVerdict, ScoringItem, Usage, VerdictBatch

Gate = contextlib.AbstractAsyncContextManager[None]
"""Bounds requests in flight when shared by several judges (a worker's share of a budget)."""


@runtime_checkable
class Judge(Protocol):
    """Decides which contexts of an item are relevant, and says what it is and can do."""

    @property
    def model(self) -> str:
        """The model name recorded next to every score."""

    @property
    def capabilities(self) -> JudgeCapabilities:
        """What this judge is and can do: offline, needs a key, batchable, priced
        (`scorer_core.capabilities`)."""

    @property
    def asker(self) -> ChatAsker | None:
        """How this judge asks a chat model; None for a judge that asks none (the lexical
        judge). A judge built around another (a cache, a first pass) gives the inner one's."""

    async def judge(self, item: ScoringItem, positions: Sequence[int]) -> VerdictBatch:
        """Verdicts for `item.contexts[p]` for every p in `positions` (one judge request); a
        reply it cannot use gives a batch with `unscored_reason`, a provider that fails for
        good a `JudgeError`."""

    async def explain(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> tuple[str, Usage]:
        """A reason for the decided `score`, begun "The score is <score> because"."""

    def reason_prompt(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> str | None:
        """The user message `explain` sends first for these arguments; None when `explain`
        asks no model."""


class ChatAsker(Protocol):
    """The part of a judge that asks a chat model (`Judge.asker`): what the job records about
    it and how batch mode sends a request online."""

    @property
    def transport(self) -> str:
        """Which client carries the requests (`ChatClient.transport`)."""

    @property
    def response_format(self) -> ResponseFormatNegotiation:
        """The structured-output negotiation with the endpoint."""

    async def ask(
        self,
        messages: Sequence[dict[str, str]],
        schema_name: str,
        schema: dict[str, object],
        verdicts: int,
    ) -> tuple[ChatReply, Usage]:
        """One logical request for `verdicts` verdicts (1 for a reason), retried and paced as
        the judge's own: the reply, and what it cost (calls and retries included)."""


@dataclass(frozen=True, slots=True)
class ChatReply:
    """The text of a model's reply, and its `usage`: the token counts the provider reported
    (nothing else: the judge that sent the request counts the calls)."""

    text: str
    usage: Usage = field(default_factory=Usage)

    @classmethod
    def from_usage(cls, text: str, usage: object) -> ChatReply:
        """`text` with the counts of an OpenAI-style `usage` (JSON, or litellm's dumped): cache
        reads from `prompt_tokens_details.cached_tokens` or Anthropic's
        `cache_read_input_tokens`, writes from `cache_creation_input_tokens`."""
        reported = usage if isinstance(usage, Mapping) else {}
        details = reported.get("prompt_tokens_details")
        if not isinstance(details, Mapping):
            details = {}
        read = details.get("cached_tokens") or reported.get("cache_read_input_tokens")
        written = reported.get("cache_creation_input_tokens") or details.get("cache_write_tokens")
        counts = Usage(
            prompt_tokens=_token_count(reported.get("prompt_tokens")),
            completion_tokens=_token_count(reported.get("completion_tokens")),
            cached_prompt_tokens=_token_count(read),
            cache_creation_tokens=_token_count(written),
        )
        return cls(text, counts)


@dataclass(frozen=True, kw_only=True)
class RequestSettings:
    """How a `ChatClient` sends each request: to `api_base` (None: the provider's default),
    with `api_key` (sent, never shown: not in a repr or a message), waiting `timeout` seconds
    at most, with `temperature` and `max_tokens` (None leaves either to the server)."""

    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 60.0
    temperature: float | None = 0.0
    max_tokens: int | None = None


def _token_count(value: object) -> int:
    """A token count as the provider reported it; 0 when absent or not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return max(0, int(value))


class ChatClient(Protocol):
    """One chat-completion request, no retries.

    Raises `TransportError`s, `RequestRejected` (with `ResponseFormatRejected` when the endpoint
    refuses the structured-output form itself) and `FatalJudgeError`."""

    @property
    def model(self) -> str: ...

    @property
    def endpoint(self) -> str:
        """Where requests go (the API base URL, or the provider's name), for messages."""

    @property
    def transport(self) -> str:
        """What carries the requests, as the run's manifest names it: "http", "litellm",
        "batch", "fake"."""

    async def complete(
        self,
        messages: Sequence[dict[str, str]],
        *,
        schema_name: str,
        schema: dict[str, Any],
        response_format: ResponseFormat = "json_schema",
    ) -> ChatReply:
        """The reply to `messages`, asked for in the structured-output form `response_format`
        and the JSON `schema`."""


class Limiter(Protocol):
    """A rate limit shared by everything that calls the same provider: the judge calls
    `acquire` before each attempt and `completed` after it, so a limiter can pace on the tokens
    the provider really counted and learn the reply latency."""

    async def acquire(self, tokens: int) -> int:
        """Wait until one request of about `tokens` tokens may be sent; returns the tokens
        charged for it (the limiter may correct the estimate)."""

    async def rate_limited(self, retry_after: float | None) -> None:
        """The provider refused a request: every caller slows down."""

    def completed(self, latency_s: float | None, charged_tokens: int, used_tokens: int) -> None:
        """An attempt is over: its reply latency (None when it failed without a reply), the
        tokens `acquire` charged and the tokens the provider reported (0 when unknown)."""


class Sleeper(Protocol):
    async def __call__(self, seconds: float) -> None: ...


class NoLimit:
    """A `Limiter` that never waits."""

    async def acquire(self, tokens: int) -> int:
        return tokens

    async def rate_limited(self, retry_after: float | None) -> None:
        return None

    def completed(self, latency_s: float | None, charged_tokens: int, used_tokens: int) -> None:
        return None
