"""A lean `ChatClient` for OpenAI-compatible servers: one aiohttp POST per request, no litellm.

It sends the body `LiteLLMClient` sends to such a server to `{api_base}/chat/completions` and
translates every failure into the project's error tree here, once. Retries, re-asks and rate
limits are `scorer_core.judge`'s. Connections are pooled in one session per event loop, closed
with its loop (`asyncio.run` closes it), by `aclose()`, or at the next use after a loop closed
without either; when to choose this client over litellm is in docs/judges.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import email.utils
import json
import urllib.parse
import urllib.request
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from scorer_core.errors import (
    ConfigError,
    ConnectionFailed,
    FatalJudgeError,
    JudgeError,
    JudgeTimeout,
    MalformedReply,
    RateLimited,
    RequestRejected,
    ResponseFormatRejected,
    ServerError,
    TransportError,
)
from scorer_core.protocols import ChatReply
from scorer_core.redaction import redact
from scorer_core.response_format import ResponseFormat, classify_rejection, response_format_field
from scorer_core.transports import OPENAI_STYLE_PREFIXES

OPENAI_API_BASE = "https://api.openai.com/v1"
_EXCERPT_CHARS = 300  # of the server's error message, in our error messages
_CLASSIFY_CHARS = 8192  # of an error body, searched for what kind of rejection it is


@dataclass(slots=True)
class _Pool:
    """The session of one event loop and the async generator that closes it with the loop."""

    session: aiohttp.ClientSession
    guard: AsyncGenerator[None, None] | None = None


def wire_model_name(model: str) -> str:
    """The model name sent to the server: without litellm's provider prefix ("openai/",
    "hosted_vllm/", "lm_studio/")."""
    for prefix in OPENAI_STYLE_PREFIXES:
        if model.startswith(prefix):
            return model[len(prefix) :]
    return model


def env_proxy_for(url: str) -> str | None:
    """The proxy that HTTP(S)_PROXY / NO_PROXY in the environment give for `url`, or None."""
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme) or None


def parse_retry_after(value: str | None, now: dt.datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date; None if absent
    or unreadable. Never negative."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if seconds == seconds else None  # NaN is unreadable
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" dates parse naive; HTTP dates are always GMT
        when = when.replace(tzinfo=dt.UTC)
    now = now or dt.datetime.now(dt.UTC)
    return max(0.0, (when - now).total_seconds())


def _error_excerpt(body: bytes) -> str:
    """The server's own error message, short: OpenAI's {"error": {"message"}} or raw text."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            text = error if isinstance(error, str) else json.dumps(error)
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT_CHARS else text[: _EXCERPT_CHARS - 3] + "..."


def chat_request_body(
    wire_model: str,
    messages: Sequence[dict[str, str]],
    *,
    temperature: float | None,
    max_tokens: int | None,
    response_format: ResponseFormat,
    schema_name: str,
    schema: dict[str, Any],
) -> dict[str, Any]:
    """The JSON body of an OpenAI chat completion asking for verdicts (or a reason) in
    `response_format`: what the lean client sends and what the fake client records."""
    body: dict[str, Any] = {"model": wire_model, "messages": list(messages)}
    if temperature is not None:
        body["temperature"] = temperature
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    field = response_format_field(response_format, schema_name, schema)
    if field is not None:
        body["response_format"] = field
    return body


class OpenAIHTTPClient:
    """One chat completion per call: POST `{api_base}/chat/completions` with aiohttp.

    `api_key` is sent as `Authorization: Bearer <key>` when given (local servers need none) and
    never appears in an error message or repr. `timeout` bounds each request as a whole
    (connect, send, wait, read). `max_connections` caps the pooled connections per event loop;
    callers bound their own concurrency (`LLMJudge(max_in_flight=...)`), so this is a ceiling.
    `proxy_from_env` routes requests through the HTTP(S)_PROXY that the environment gives for
    `api_base` (honouring NO_PROXY), looked up once here, as httpx would.
    """

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
        max_connections: int = 512,
        proxy_from_env: bool = True,
    ) -> None:
        if timeout <= 0:
            raise ConfigError(f"timeout must be > 0, got {timeout}")
        if max_connections < 1:
            raise ConfigError(f"max_connections must be >= 1, got {max_connections}")
        self._model = model
        self._wire_model = wire_model_name(model)
        self._api_base = (api_base or OPENAI_API_BASE).rstrip("/")
        self._url = f"{self._api_base}/chat/completions"
        self._api_key = (api_key or "").strip() or None  # a key file's trailing newline
        if self._api_key and not all(" " < ch < "\x7f" for ch in self._api_key):
            # aiohttp would reject the header with the key in its message; say so without it.
            raise ConfigError("api_key contains whitespace, control or non-ASCII characters")
        self._timeout = timeout
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._max_connections = max_connections
        # Looked up once: aiohttp's trust_env would do it (and read ~/.netrc) in a thread per
        # request, which halves the request rate.
        self._proxy = env_proxy_for(self._url) if proxy_from_env else None
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._headers: Mapping[str, str] = headers
        self._pools: dict[asyncio.AbstractEventLoop, _Pool] = {}

    @property
    def model(self) -> str:
        return self._model

    @property
    def url(self) -> str:
        return self._url

    @property
    def endpoint(self) -> str:
        return self._api_base

    @property
    def transport(self) -> str:
        return "http"

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIHTTPClient(model={self._model!r}, api_base={self._api_base!r})"

    # ------------------------------------------------------------------------------------
    # the request

    def request_body(
        self,
        messages: Sequence[dict[str, str]],
        *,
        schema_name: str,
        schema: dict[str, Any],
        response_format: ResponseFormat = "json_schema",
    ) -> dict[str, Any]:
        """The JSON body of one request (the same fields litellm sends to such a server)."""
        return chat_request_body(
            self._wire_model,
            messages,
            temperature=self._temperature,
            max_tokens=self._max_tokens,
            response_format=response_format,
            schema_name=schema_name,
            schema=schema,
        )

    async def complete(
        self,
        messages: Sequence[dict[str, str]],
        *,
        schema_name: str,
        schema: dict[str, Any],
        response_format: ResponseFormat = "json_schema",
    ) -> ChatReply:
        data = json.dumps(
            self.request_body(
                messages, schema_name=schema_name, schema=schema, response_format=response_format
            ),
            ensure_ascii=False,
        ).encode()
        session = await self._session()
        failure: JudgeError | None = None
        try:
            async with session.post(
                self._url,
                data=data,
                headers=self._headers,
                allow_redirects=False,
                proxy=self._proxy,
            ) as response:
                status = response.status
                raw = await response.read()
                retry_after = response.headers.get("Retry-After") if status == 429 else None
                location = response.headers.get("Location", "") if 300 <= status < 400 else ""
        except Exception as exc:
            failure = self._translate_exception(exc)
        if failure is not None:
            # Raised outside the handler, so the aiohttp exception (which may hold request
            # headers) is not even kept as __context__.
            raise failure
        if 200 <= status < 300:
            return self._parse_completion(raw)
        raise status_error(status, raw, retry_after, location, response_format, self._message)

    # ------------------------------------------------------------------------------------
    # error translation (the only place that knows aiohttp's exceptions)

    def _message(self, text: str) -> str:
        if self._api_key:
            text = redact(text, self._api_key)  # before cutting, never after
        if len(text) > 500:
            text = text[:497] + "..."
        return f"judge {self._model}: {text}"

    def _translate_exception(self, exc: BaseException) -> JudgeError:
        detail = self._message(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, TimeoutError):  # also aiohttp's Server/Connection/SocketTimeoutError
            return JudgeTimeout(f"{detail} (request timed out after {self._timeout:g} s)")
        if isinstance(exc, aiohttp.InvalidURL):
            return FatalJudgeError(f"{detail} (check api_base)")
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):
            return FatalJudgeError(f"{detail} (the server's TLS certificate is not trusted)")
        if isinstance(
            exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError | ConnectionError
        ):
            # refused, reset, DNS failure, server closed the connection mid-reply
            return ConnectionFailed(detail)
        return TransportError(detail)

    def _parse_completion(self, raw: bytes) -> ChatReply:
        try:
            data = json.loads(raw)
            message = data["choices"][0]["message"]
            content = message.get("content")
            if content is not None and not isinstance(content, str):
                raise TypeError("message.content is not a string")
        except (ValueError, LookupError, TypeError, AttributeError) as exc:
            excerpt = " ".join(raw[:200].decode("utf-8", errors="replace").split())
            raise MalformedReply(
                self._message(f"HTTP 200 but not a chat completion ({exc!r}): {excerpt}")
            ) from None
        usage = data.get("usage") if isinstance(data, dict) else None
        if not isinstance(usage, dict):
            usage = {}
        return ChatReply(
            text=content or "",
            prompt_tokens=_as_int(usage.get("prompt_tokens")),
            completion_tokens=_as_int(usage.get("completion_tokens")),
        )

    # ------------------------------------------------------------------------------------
    # one session per event loop

    async def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is not None and not pool.session.closed:
            return pool.session
        await self._drop_closed_loops()
        connector = aiohttp.TCPConnector(
            limit=self._max_connections, limit_per_host=0, ttl_dns_cache=300
        )
        session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self._timeout),
            trust_env=False,
            raise_for_status=False,
        )
        pool = _Pool(session)
        self._pools[loop] = pool
        # An async generator first iterated in this loop is closed by
        # `loop.shutdown_asyncgens()` (asyncio.run calls it before closing the loop), which
        # closes the session while its loop can still run the close.
        guard = self._close_with_loop(loop, pool)
        pool.guard = guard
        await anext(guard)
        return session

    async def _close_with_loop(
        self, loop: asyncio.AbstractEventLoop, pool: _Pool
    ) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if self._pools.get(loop) is pool:
                del self._pools[loop]
            if not loop.is_closed() and not pool.session.closed:
                await pool.session.close()

    async def _drop_closed_loops(self) -> None:
        """Forget sessions whose loop was closed without shutting down async generators."""
        for loop, pool in list(self._pools.items()):
            if not loop.is_closed():
                continue
            del self._pools[loop]
            if pool.guard is not None:
                # The guard does not await when its loop is closed, so this finishes at once;
                # a guard left unfinished would be finalised later through the dead loop.
                closing = pool.guard.aclose()
                with contextlib.suppress(StopIteration, RuntimeError):
                    closing.send(None)
                closing.close()
            connector = pool.session.connector
            pool.session.detach()
            if connector is not None:
                with contextlib.suppress(Exception):
                    await connector.close()

    async def aclose(self) -> None:
        """Close this event loop's session (and forget those of closed loops)."""
        await self._drop_closed_loops()
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is None:
            return
        if pool.guard is not None:
            await pool.guard.aclose()
        if not pool.session.closed:
            await pool.session.close()

    async def __aenter__(self) -> OpenAIHTTPClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def status_error(
    status: int,
    raw: bytes,
    retry_after: str | None,
    location: str,
    response_format: ResponseFormat,
    describe: Callable[[str], str],
) -> JudgeError:
    """The client error an HTTP `status` reply means (the body `raw`, its `Retry-After` and
    `Location` headers), its message worded by `describe`: what `OpenAIHTTPClient` raises,
    and the in-process fake client (`tests.fake_judge.FaultyChatClient`) too."""
    excerpt = _error_excerpt(raw)
    detail = describe(f"HTTP {status}: {excerpt}" if excerpt else f"HTTP {status}")
    if status == 429:
        return RateLimited(detail, retry_after=parse_retry_after(retry_after))
    if status == 408:  # the server gave up waiting: as retryable as our own timeout
        return JudgeTimeout(detail)
    if status in (401, 403, 404):
        return FatalJudgeError(detail)
    if status >= 400:
        body = raw[:_CLASSIFY_CHARS].decode("utf-8", errors="replace")
        kind = classify_rejection(status, body)
        if kind == "response_format":
            return ResponseFormatRejected(detail, response_format)
        if kind is not None:
            return RequestRejected(detail)
    if status >= 500:
        return ServerError(detail)
    if status == 409:  # a conflict with another request in flight: may pass next time
        return TransportError(detail)
    if 300 <= status < 400:
        return FatalJudgeError(
            describe(f"HTTP {status} redirect to {location!r}: set api_base to the final URL")
        )
    return MalformedReply(detail)  # 1xx: not a chat completion


def _as_int(value: object) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, float) and value == value:
        return max(0, int(value))
    return 0
