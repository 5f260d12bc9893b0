"""`FaultyChatClient`: the fake judge in-process, as a `scorer_core.protocols.ChatClient`.

It answers as `FakeJudgeServer` does (the same verdicts, seeded `FaultPlan` faults, rate windows
and request log), and where the server would answer with an HTTP error it raises the error
`OpenAIHTTPClient` raises for that answer, so a judge on it retries, re-asks and steps down as
over HTTP. Latency is waited with the injected `sleep`; past `timeout` it raises `JudgeTimeout`.
Users test their own code with the smaller `scorer_core.FakeChatClient`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from scorer_core.errors import JudgeTimeout
from scorer_core.openai_http import chat_request_body, status_error
from scorer_core.protocols import ChatReply
from scorer_core.response_format import ResponseFormat, response_format_field
from scorer_core.types import Usage
from tests.fake_judge.chat import ChatJudge
from tests.fake_judge.faults import FaultPlan
from tests.fake_judge.wire import RESPONSE_FORM_NAMES, VerdictFn, WireError


class FaultyChatClient:
    """A `ChatClient` answered in-process by the fake judge; see the module docstring.

    `model` is the model string the judge records; the request bodies carry its wire name
    (the provider prefix dropped), as `OpenAIHTTPClient` sends it. `temperature` and
    `max_tokens` go into each body as that client puts them (a `max_tokens` also counts
    against `tpm` as the reply's budget). The other options are `FakeJudgeServer`'s.
    """

    transport = "fake"

    def __init__(
        self,
        model: str = "openai/fake-judge",
        *,
        endpoint: str = "fake-judge (in-process)",
        verdict_fn: VerdictFn | None = None,
        fault_plan: FaultPlan | None = None,
        rpm: int = 0,
        tpm: int = 0,
        window_s: float = 60.0,
        retry_after_header: bool = True,
        accepted_response_formats: Iterable[str] = RESPONSE_FORM_NAMES,
        response_format_rejection_status: int = 500,
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
        timeout: float | None = None,
        max_logged_requests: int = 1000,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._model = model
        self._endpoint = endpoint
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._timeout = timeout
        self._sleep = sleep
        self.judge = ChatJudge(
            verdict_fn=verdict_fn,
            fault_plan=fault_plan,
            accepted_response_formats=accepted_response_formats,
            response_format_rejection_status=response_format_rejection_status,
            retry_after_header=retry_after_header,
            max_logged_requests=max_logged_requests,
            clock=clock,
        )
        self.judge.set_rpm(rpm, window_s)
        self.judge.set_tpm(tpm)

    @property
    def model(self) -> str:
        return self._model

    @property
    def endpoint(self) -> str:
        return self._endpoint

    def __repr__(self) -> str:
        return f"FaultyChatClient(model={self._model!r}, fault_plan={self.judge.fault_plan!r})"

    # -- what the tests look at ----------------------------------------------------------------

    def requests(self) -> list[dict[str, Any]]:
        """The request bodies sent (the last `max_logged_requests`), oldest first."""
        return self.judge.requests()

    def stats(self) -> dict[str, Any]:
        """`FakeJudgeServer.stats()`'s counters, for the requests this client answered."""
        return self.judge.stats()

    def set_fault_plan(self, plan: FaultPlan) -> None:
        """Use `plan` from the next request on; re-seeds the random generator."""
        self.judge.set_fault_plan(plan)

    # -- ChatClient ------------------------------------------------------------------------------

    def request_body(
        self,
        messages: Sequence[dict[str, str]],
        *,
        schema_name: str,
        schema: dict[str, Any],
        response_format: ResponseFormat = "json_schema",
    ) -> dict[str, Any]:
        """The body `OpenAIHTTPClient` would send for this request."""
        return chat_request_body(
            self._model,
            messages,
            response_format_field(response_format, schema_name, schema),
            temperature=self._temperature,
            max_tokens=self._max_tokens,
        )

    async def complete(
        self,
        messages: Sequence[dict[str, str]],
        *,
        schema_name: str,
        schema: dict[str, Any],
        response_format: ResponseFormat = "json_schema",
    ) -> ChatReply:
        # Through JSON and back, as over the wire: the log holds what a server would have read.
        body = json.loads(
            json.dumps(
                self.request_body(
                    messages,
                    schema_name=schema_name,
                    schema=schema,
                    response_format=response_format,
                )
            )
        )
        self.judge.begin()
        try:
            prepared = self.judge.prepare(body)
        except WireError as error:
            self.judge.finish(error.status, error.outcome)
            raise self._client_error(error, response_format) from None
        try:
            await self._wait(self.judge.latency(prepared))
        except BaseException:  # timed out or cancelled: no reply was taken
            self.judge.abandon("abandoned")
            raise
        self.judge.finish(200, "ok")
        usage = Usage(
            prompt_tokens=prepared.prompt_tokens, completion_tokens=prepared.completion_tokens
        )
        return ChatReply(prepared.content, usage)

    async def _wait(self, delay: float) -> None:
        """The reply's latency; past `timeout`, the client gives up as a real one does."""
        if self._timeout is not None and delay > self._timeout:
            await self._sleep(self._timeout)
            raise JudgeTimeout(
                f"judge {self._model}: TimeoutError (request timed out after {self._timeout:g} s)"
            )
        if delay > 0:
            await self._sleep(delay)

    def _client_error(self, error: WireError, response_format: ResponseFormat) -> Exception:
        """The error `OpenAIHTTPClient` raises for the HTTP answer `error` stands for."""
        return status_error(
            error.status,
            json.dumps(error.body()).encode(),
            error.headers,
            response_format,
            lambda text: f"judge {self._model}: {text}",
        )
