"""The batch judge: the online `LLMJudge` (prompts, strict parser, re-asks, unscored reasons,
the LLM reason) over a `ReplayClient`, which answers each request from the batch replies
ingested so far, found by custom_id: a reply as the provider's, a final error as
`BatchRequestFailed`, a transient one (or none yet) recorded for the next batch
(`BatchPending`); with `reask`, re-asks (and in the deadline's pass every request) go online."""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.engine.batch.requests import RequestLines, custom_id
from scorer_core.capabilities import JudgeCapabilities
from scorer_core.errors import JudgeError, TransportError
from scorer_core.judge import JudgeRuntime, LLMJudge, LLMJudgeSettings
from scorer_core.protocols import ChatReply
from scorer_core.response_format import ResponseFormat, ResponseFormatNegotiation
from scorer_core.retry import RetryPolicy
from scorer_core.types import ContextVerdict, ScoringItem, Usage, VerdictBatch

TRANSPORT = "batch"

OnlineAsk = Callable[
    [Sequence[dict[str, str]], str, dict[str, Any], int], Awaitable[tuple[ChatReply, Usage]]
]
"""Sends one request online (retried and paced as online): (messages, schema name, schema,
verdicts asked) -> (reply, its usage)."""


class BatchPending(JudgeError):
    """The request has no reply yet: it goes into the next batch."""


class BatchRequestFailed(JudgeError):
    """The batch answered the request with an error, or not at all; the message says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """What came back for one request: its text and the token counts the provider reported
    (`usage`), or (text None) the error saying why not. `retry`: why an error is transient
    ("HTTP 500", "batch_expired"; asked again next round); `tries`: the rounds in which it
    failed transiently so far."""

    text: str | None
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    retry: str | None = None
    tries: int = 0

    @classmethod
    def answered(cls, chat: ChatReply) -> Reply:
        return cls(text=chat.text, usage=chat.usage)

    @classmethod
    def failed(cls, error: str, *, retry: str | None = None, tries: int = 0) -> Reply:
        """No reply: `error` says why, `retry` (when set) why it is transient."""
        return cls(text=None, error=error, retry=retry, tries=tries)

    def chat(self) -> ChatReply:
        return ChatReply(self.text or "", self.usage)

    @property
    def transient(self) -> bool:
        return self.text is None and self.retry is not None


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request line recorded for the next batch."""

    custom_id: str
    line: bytes
    tokens: int


@dataclass(kw_only=True)
class _Asking:
    """The judge call a request belongs to: the item and slice, the attempts so far."""

    item: str
    part: str
    attempt: int = -1
    last: object = None
    # Usage of online re-asks beyond the one call the online judge counts for a reply:
    # their retries and 429s.
    extra: Usage = field(default_factory=Usage)


_ASKING: contextvars.ContextVar[_Asking] = contextvars.ContextVar("batch_asking")


class ReplayClient:
    """A `ChatClient` answering from batch replies and recording what has none (module doc)."""

    def __init__(
        self,
        lines: RequestLines,
        replies: Mapping[str, Reply],
        *,
        reask: OnlineAsk | None = None,
        max_rounds: int = 1,
        all_online: bool = False,
    ) -> None:
        self._lines = lines
        self._replies = replies
        self._reask = reask
        self._max_rounds = max_rounds
        # The deadline's pass: every request without a final reply goes online through `reask`.
        self._all_online = all_online and reask is not None
        self.recorded: list[RecordedRequest] = []
        self.online_replies: dict[str, Reply] = {}

    @property
    def model(self) -> str:
        return self._lines.model

    @property
    def form(self) -> ResponseFormat:
        return self._lines.form

    @property
    def endpoint(self) -> str:
        return "the provider's batch API"

    @property
    def transport(self) -> str:
        return TRANSPORT

    async def complete(
        self,
        messages: Sequence[dict[str, str]],
        *,
        schema_name: str,
        schema: dict[str, Any],
        response_format: ResponseFormat = "json_schema",
    ) -> ChatReply:
        asking = _ASKING.get()
        if messages is not asking.last:  # a retry re-sends the same list, a re-ask a new one
            asking.attempt += 1
            asking.last = messages
        request_id = custom_id(asking.item, asking.part, asking.attempt, self._lines.tag)
        reply = self.online_replies.get(request_id) or self._replies.get(request_id)
        if reply is not None and reply.transient:
            reply = self._after_transient(reply)
        if reply is None and self._reask is not None and (asking.attempt > 0 or self._all_online):
            reply = await self._ask_online(request_id, messages, schema_name, schema, asking)
        if reply is None:
            line, tokens = self._lines.line(request_id, messages, schema_name, schema)
            self.recorded.append(RecordedRequest(request_id, line, tokens))
            raise BatchPending(request_id)
        if reply.text is None:
            raise BatchRequestFailed(reply.error or f"request {request_id} has no reply")
        return reply.chat()

    def _after_transient(self, reply: Reply) -> Reply | None:
        """A transient failure: asked again (None) while rounds are left or the deadline's
        pass sends it online, else the item's error saying how often it failed."""
        if self._all_online or reply.tries < self._max_rounds:
            return None
        return dataclasses.replace(
            reply,
            error=f"{reply.error} (failed transiently in {reply.tries} batch round(s), "
            f"judge.batch.max_rounds {self._max_rounds})",
        )

    async def _ask_online(
        self,
        request_id: str,
        messages: Sequence[dict[str, str]],
        schema_name: str,
        schema: dict[str, Any],
        asking: _Asking,
    ) -> Reply:
        assert self._reask is not None
        try:
            chat, usage = await self._reask(messages, schema_name, schema, _verdicts_asked(schema))
        except TransportError as exc:  # retried online and still failing: the item's error
            reply = Reply.failed(f"online re-ask failed: {exc}")
        else:
            reply = Reply.answered(chat)
            # The replay counts one call and the reply's tokens; the online judge's further
            # calls (its retries) and its rate-limited answers are extra.
            beyond_replay = Usage(
                calls=usage.calls - 1, retries=usage.retries, rate_limited=usage.rate_limited
            )
            asking.extra = asking.extra + beyond_replay
        self.online_replies[request_id] = reply
        return reply


def _verdicts_asked(schema: dict[str, Any]) -> int:
    """How many verdicts a request's schema asks for (1 for a reason request)."""
    verdicts = schema.get("properties", {}).get("verdicts", {})
    return int(verdicts.get("minItems", 1)) if isinstance(verdicts, dict) else 1


class BatchJudge:
    """A `Judge` answering from batch replies through the online judge's code (module doc);
    `keys`: each item of the shard (by content) -> its `item_key`."""

    def __init__(
        self,
        client: ReplayClient,
        keys: Mapping[ScoringItem, str],
        *,
        max_reasks: int,
        scale: float,
        verdict_reasons: bool = True,
    ) -> None:
        form = client.form
        negotiation = ResponseFormatNegotiation(form, client.endpoint)
        # A batch fixes the form for all its lines: nothing to probe, one request at a time.
        negotiation.accepted(form, probe=False)
        self.client = client
        self._keys = keys
        # Nothing to retry: a transport failure of the batch comes back in a later round.
        settings = LLMJudgeSettings(
            retry=RetryPolicy(max_retries=0, max_reasks=max_reasks),
            scale=scale,
            verdict_reasons=verdict_reasons,
        )
        runtime = JudgeRuntime(negotiation=negotiation, first_alone=False)
        self._online = LLMJudge(client, settings=settings, runtime=runtime)

    @property
    def model(self) -> str:
        return self._online.model

    @property
    def capabilities(self) -> JudgeCapabilities:
        return self._online.capabilities

    @property
    def asker(self) -> LLMJudge:
        """The online judge's code over the replay: transport "batch", the batch's fixed form."""
        return self._online

    def reason_prompt(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> str:
        return self._online.reason_prompt(item, verdicts, score)

    async def judge(self, item: ScoringItem, positions: Sequence[int]) -> VerdictBatch:
        asking = _Asking(item=self._keys[item], part=f"v{positions[0]}")
        token = _ASKING.set(asking)
        try:
            batch = await self._online.judge(item, positions)
        finally:
            _ASKING.reset(token)
        return dataclasses.replace(batch, usage=batch.usage + asking.extra)

    async def explain(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> tuple[str, Usage]:
        asking = _Asking(item=self._keys[item], part="r")
        token = _ASKING.set(asking)
        try:
            text, usage = await self._online.explain(item, verdicts, score)
        except BatchPending:
            return "", Usage()  # the item waits for the next round; this result is not kept
        except BatchRequestFailed as exc:
            # As online when a reason request fails for good: the scorer falls back to the
            # template, saying why.
            raise TransportError(str(exc)) from None
        finally:
            _ASKING.reset(token)
        return text, usage + asking.extra
