"""Structured-output forms and their negotiation with an endpoint.

A request asks for JSON as "json_schema" (OpenAI, vLLM, Ollama, LiteLLM proxy), "json_object"
with the schema (llama.cpp constrains decoding with it) or "prompt" (no `response_format`: the
prompt demands JSON). "auto" starts with the strongest and steps down once per endpoint when the
endpoint rejects the form itself; until a form is accepted, one request at a time carries it
(docs/judges.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from scorer_core.errors import ConfigError, FatalJudgeError, one_line

if TYPE_CHECKING:
    from scorer_core.protocols import Judge

ResponseFormat = Literal["json_schema", "json_object", "prompt"]
ResponseFormatSetting = Literal["auto", "json_schema", "json_object", "prompt"]

RESPONSE_FORMATS: tuple[ResponseFormat, ...] = ("json_schema", "json_object", "prompt")
"""The forms, strongest first: the order "auto" tries them in."""

RESPONSE_FORMAT_SETTINGS: tuple[ResponseFormatSetting, ...] = get_args(ResponseFormatSetting)

# Pydantic (FastAPI, llama-cpp-python) and similar validators say "1 validation error(s)": a
# request that failed validation fails the same way every time.
_VALIDATION_ERROR = re.compile(r"\bvalidation errors?\b", re.IGNORECASE)
_RESPONSE_FORMAT = re.compile(r"response_format|response format|responseformat", re.IGNORECASE)
_REASON_CHARS = 400  # kept of a rejection's message in summaries and errors
TRANSIENT_4XX = frozenset({408, 409, 429})  # request timeout, conflict, rate limit


def check_response_format(value: object) -> ResponseFormatSetting:
    """Validate a `response_format` setting; ConfigError names the allowed values."""
    if value not in RESPONSE_FORMAT_SETTINGS:
        allowed = ", ".join(RESPONSE_FORMAT_SETTINGS)
        raise ConfigError(f"response_format must be one of {allowed}, got {value!r}")
    return value


def response_format_field(
    form: ResponseFormat, schema_name: str, schema: dict[str, Any]
) -> dict[str, Any] | None:
    """The request's `response_format` value for `form` (None: send no such field)."""
    if form == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": schema_name, "schema": _strict(schema), "strict": True},
        }
    if form == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


def _strict(schema: Any) -> Any:
    """`schema` without `maxLength`, which strict endpoints (OpenAI, Azure) refuse: there the
    prompt caps a string; llama.cpp's grammar and vLLM honour it in the other forms."""
    if isinstance(schema, dict):
        return {key: _strict(value) for key, value in schema.items() if key != "maxLength"}
    return [_strict(value) for value in schema] if isinstance(schema, list) else schema


def classify_rejection(
    status: int | None, text: str
) -> Literal["response_format", "request"] | None:
    """Whether an error answer is a deterministic rejection: a 4xx but 408/409/429 (callers
    make 401/403/404 fatal first), or a validation error at any status (llama-cpp-python
    answers them with HTTP 500); "response_format" when its text names the form, None when
    retrying may help."""
    if status in TRANSIENT_4XX:
        return None
    if _VALIDATION_ERROR.search(text) is None and not (status and 400 <= status < 500):
        return None
    return "response_format" if _RESPONSE_FORMAT.search(text) else "request"


@dataclass(frozen=True, slots=True)
class DroppedForm:
    """A form the endpoint rejected, and its answer."""

    form: ResponseFormat
    reason: str


class ResponseFormatNegotiation:
    """Which structured-output form to send to one endpoint, shared by all its requests.

    `setting` is "auto" (strongest first, step down on rejection) or one form; `endpoint` names
    the endpoint in messages. Call `acquire` before each request and exactly one of `accepted`,
    `rejected` or `released` after it.
    """

    def __init__(self, setting: str = "auto", endpoint: str = "") -> None:
        self.setting: ResponseFormatSetting = check_response_format(setting)
        self.endpoint = endpoint
        self._remaining: list[ResponseFormat] = (
            list(RESPONSE_FORMATS) if self.setting == "auto" else [cast(ResponseFormat, setting)]
        )
        self._dropped: list[DroppedForm] = []
        # "prompt" sends no response_format, so there is nothing for the endpoint to refuse.
        self._confirmed = self._remaining[0] == "prompt"
        self._probing = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        # A threading lock (never held across an await): the state may be shared by judges
        # running in different threads and event loops.
        self._lock = threading.Lock()

    @property
    def current(self) -> ResponseFormat:
        """The form requests are sent with now."""
        with self._lock:
            return self._remaining[0]

    def summary(self) -> dict[str, Any]:
        """A JSON-compatible record for run summaries."""
        with self._lock:
            return {
                "endpoint": self.endpoint,
                "setting": self.setting,
                "in_use": self._remaining[0],
                "confirmed": self._confirmed,
                "dropped": [
                    {"form": dropped.form, "reason": dropped.reason} for dropped in self._dropped
                ],
            }

    def __repr__(self) -> str:
        return (
            f"ResponseFormatNegotiation(setting={self.setting!r}, endpoint={self.endpoint!r}, "
            f"in_use={self.current!r})"
        )

    async def acquire(self) -> tuple[ResponseFormat, bool]:
        """The form to send now, and whether this request is the probe for it: until the form is
        accepted only its probe is sent, and other callers wait here for the probe's answer."""
        while True:
            with self._lock:
                if self._confirmed:
                    return self._remaining[0], False
                if not self._probing:
                    self._probing = True
                    return self._remaining[0], True
                loop = asyncio.get_running_loop()
                waiter: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, waiter))
            await waiter

    def accepted(self, form: ResponseFormat, probe: bool) -> None:
        """The endpoint answered a request sent with `form` (whatever the reply said)."""
        with self._lock:
            if form == self._remaining[0]:
                self._confirmed = True
            if probe:
                self._probing = False
            self._wake()

    def released(self, form: ResponseFormat, probe: bool) -> None:
        """The request ended without settling the form (timeout, 5xx, cancelled, ...)."""
        if not probe:
            return
        with self._lock:
            self._probing = False
            self._wake()

    def rejected(self, form: ResponseFormat, probe: bool, reason: str) -> None:
        """The endpoint refused `form`: the next request goes with a weaker one, or, when there
        is none (an explicit setting, or "prompt" refused), FatalJudgeError."""
        # Server tracebacks span lines; summaries do not.
        reason = one_line(reason, _REASON_CHARS)
        with self._lock:
            if probe:
                self._probing = False
            # A form other than the current one was dropped already: the current one is next.
            fatal = self._remaining == [form]
            if form == self._remaining[0] and not fatal:
                self._dropped.append(DroppedForm(form, reason))
                self._remaining.pop(0)
                self._confirmed = self._remaining[0] == "prompt"
            self._wake()
        if fatal:
            if self.setting == "auto":
                advice = "even a request without response_format was refused"
            else:
                others = ", ".join(other for other in RESPONSE_FORMATS if other != form)
                advice = (
                    'set response_format to "auto" to let the judge find a form this endpoint '
                    f"takes, or to one of {others}"
                )
            raise FatalJudgeError(
                f"judge endpoint {self.endpoint or '(default)'} rejects response_format "
                f"{form!r}: {reason}; {advice}"
            )

    def _wake(self) -> None:
        """Wake every waiter (caller holds the lock); they re-check the state themselves."""
        waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            with contextlib.suppress(RuntimeError):  # the waiter's loop is already closed
                loop.call_soon_threadsafe(_settle, waiter)


def negotiation_summary(judge: Judge) -> dict[str, Any] | None:
    """The summary of the structured-output negotiation of `judge`'s asker; None for a judge
    that asks no chat model."""
    asker = judge.asker
    return None if asker is None else asker.response_format.summary()


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


_SHARED: dict[tuple[str, str], ResponseFormatNegotiation] = {}
_SHARED_LOCK = threading.Lock()


def shared_negotiation(endpoint: str, setting: str = "auto") -> ResponseFormatNegotiation:
    """The process-wide negotiation for `endpoint` (as `ChatClient.endpoint` names it) and
    `setting`, created on first use: judges built for one endpoint in a process pass it as
    `make_judge(..., negotiation=...)` and probe it once."""
    key = (endpoint, check_response_format(setting))
    with _SHARED_LOCK:
        return _SHARED.setdefault(key, ResponseFormatNegotiation(setting, endpoint))
