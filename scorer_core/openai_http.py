"""A lean `ChatClient` for OpenAI-compatible servers: one aiohttp POST per request, no litellm.

It sends the body `LiteLLMClient` sends and translates every failure into the project's error
tree, once; retries and rate limits are `scorer_core.judge`'s. One connection pool per event
loop, closed with its loop, by `aclose()`, or at the next use after its loop closed.
"""

from __future__ import annotations

import asyncio
import contextlib
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
    one_line,
)
from scorer_core.protocols import ChatReply, RequestSettings
from scorer_core.redaction import redact
from scorer_core.response_format import ResponseFormat, classify_rejection, response_format_field
from scorer_core.retry import parse_retry_after
from scorer_core.transports import OPENAI_STYLE_PREFIXES

OPENAI_API_BASE = "https://api.openai.com/v1"
_EXCERPT_CHARS = 300  # of the server's error message, in our error messages
_CLASSIFY_CHARS = 8192  # of an error body, searched for what kind of rejection it is


def wire_model_name(model: str) -> str:
    """`model` without litellm's provider prefix ("openai/", "hosted_vllm/", "lm_studio/")."""
    prefix = next((known for known in OPENAI_STYLE_PREFIXES if model.startswith(known)), "")
    return model[len(prefix) :]


def env_proxy_for(url: str) -> str | None:
    """The proxy that HTTP(S)_PROXY / NO_PROXY in the environment give for `url`, or None."""
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme) or None


def _error_excerpt(body: bytes) -> str:
    """The server's own error message, short: OpenAI's {"error": {"message"}} or raw text."""
    text = body.decode("utf-8", errors="replace").strip()
    with contextlib.suppress(ValueError):
        data = json.loads(text)
        if isinstance(data, dict):
            error = data.get("error", data.get("detail", data.get("message")))
            if isinstance(error, dict):
                error = error.get("message", error)
            if error is not None:
                text = error if isinstance(error, str) else json.dumps(error)
    return one_line(text, _EXCERPT_CHARS)


def chat_request_body(
    model: str,
    messages: Sequence[dict[str, str]],
    response_format: dict[str, Any] | None,
    *,
    temperature: float | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The JSON body of an OpenAI chat completion; `response_format` is the request's field of
    that name (`response_format_field`), None for none."""
    body = {
        "model": wire_model_name(model),
        "messages": list(messages),
        "temperature": temperature,
        "max_tokens": max_tokens,
        "response_format": response_format,
    }
    return {key: value for key, value in body.items() if value is not None}


@dataclass(slots=True)
class _Pool:
    """One event loop's session and the async generator that closes it with the loop."""

    session: aiohttp.ClientSession
    guard: AsyncGenerator[None, None]


class OpenAIHTTPClient:
    """One chat completion per call: POST `{api_base}/chat/completions` with aiohttp.

    Args:
        model: a litellm model string; its provider prefix is not sent.
        settings: the server (`api_base`, default OpenAI's), the key (sent as `Authorization:
            Bearer <key>` when given; local servers need none), each request's timeout as a
            whole (connect, send, wait, read), temperature and max_tokens.
        max_connections: pooled connections per event loop, a ceiling (callers bound their own
            concurrency, e.g. `JudgeRuntime(max_in_flight=...)`).
        proxy_from_env: send through the HTTP(S)_PROXY the environment gives for `api_base`
            (honouring NO_PROXY), looked up once, as httpx does.
    """

    transport = "http"

    def __init__(
        self,
        model: str,
        settings: RequestSettings | None = None,
        *,
        max_connections: int = 512,
        proxy_from_env: bool = True,
    ) -> None:
        settings = settings or RequestSettings()
        if settings.timeout <= 0:
            raise ConfigError(f"timeout must be > 0, got {settings.timeout}")
        if max_connections < 1:
            raise ConfigError(f"max_connections must be >= 1, got {max_connections}")
        api_key = (settings.api_key or "").strip() or None  # a key file's trailing newline
        if api_key and not all(" " < char < "\x7f" for char in api_key):
            # aiohttp would reject the header with the key in its message; say so without it.
            raise ConfigError("api_key contains whitespace, control or non-ASCII characters")
        self.model = model
        self.endpoint = (settings.api_base or OPENAI_API_BASE).rstrip("/")
        self.url = f"{self.endpoint}/chat/completions"
        self._api_key = api_key
        self._timeout = settings.timeout
        self._temperature = settings.temperature
        self._max_tokens = settings.max_tokens
        self._max_connections = max_connections
        # Looked up once: aiohttp's trust_env would do it (and read ~/.netrc) in a thread per
        # request, which halves the request rate.
        self._proxy = env_proxy_for(self.url) if proxy_from_env else None
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._pools: dict[asyncio.AbstractEventLoop, _Pool] = {}

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIHTTPClient(model={self.model!r}, api_base={self.endpoint!r})"

    def request_body(
        self,
        messages: Sequence[dict[str, str]],
        *,
        schema_name: str,
        schema: dict[str, Any],
        response_format: ResponseFormat = "json_schema",
    ) -> dict[str, Any]:
        """The JSON body of one request (the same fields litellm sends to such a server)."""
        form = response_format_field(response_format, schema_name, schema)
        return chat_request_body(
            self.model, messages, form, temperature=self._temperature, max_tokens=self._max_tokens
        )

    async def complete(
        self,
        messages: Sequence[dict[str, str]],
        *,
        schema_name: str,
        schema: dict[str, Any],
        response_format: ResponseFormat = "json_schema",
    ) -> ChatReply:
        body = self.request_body(
            messages, schema_name=schema_name, schema=schema, response_format=response_format
        )
        session = await self._session()
        failure: JudgeError | None = None
        try:
            async with session.post(
                self.url,
                data=json.dumps(body, ensure_ascii=False).encode(),
                headers=self._headers,
                allow_redirects=False,
                proxy=self._proxy,
            ) as response:
                raw = await response.read()
        except Exception as exc:
            failure = self._translate_exception(exc)
        if failure is not None:
            # Raised outside the handler, so the aiohttp exception (which may hold request
            # headers) is not even kept as __context__.
            raise failure
        if 200 <= response.status < 300:
            return self._parse_completion(raw)
        raise status_error(response.status, raw, response.headers, response_format, self._message)

    def _message(self, text: str) -> str:
        """`text` as an error message: the key redacted (before cutting, never after), on one
        short line."""
        return f"judge {self.model}: {one_line(redact(text, self._api_key), 500)}"

    def _translate_exception(self, exc: BaseException) -> JudgeError:
        """The one place that knows aiohttp's exceptions."""
        detail = self._message(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, TimeoutError):  # also aiohttp's Server/Connection/SocketTimeoutError
            return JudgeTimeout(f"{detail} (request timed out after {self._timeout:g} s)")
        if isinstance(exc, aiohttp.InvalidURL):
            return FatalJudgeError(f"{detail} (check api_base)")
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):
            return FatalJudgeError(f"{detail} (the server's TLS certificate is not trusted)")
        lost = aiohttp.ClientConnectionError | aiohttp.ClientPayloadError | ConnectionError
        if isinstance(exc, lost):
            # refused, reset, DNS failure, server closed the connection mid-reply
            return ConnectionFailed(detail)
        return TransportError(detail)

    def _parse_completion(self, raw: bytes) -> ChatReply:
        try:
            data = json.loads(raw)
            content = data["choices"][0]["message"].get("content")
            if content is not None and not isinstance(content, str):
                raise TypeError("message.content is not a string")
        except (ValueError, LookupError, TypeError, AttributeError) as exc:
            excerpt = one_line(raw[:200].decode("utf-8", errors="replace"))
            raise MalformedReply(
                self._message(f"HTTP 200 but not a chat completion ({exc!r}): {excerpt}")
            ) from None
        return ChatReply.from_usage(content or "", data.get("usage"))

    async def _session(self) -> aiohttp.ClientSession:
        """This event loop's session, made on first use."""
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is not None:
            return pool.session
        await self._drop_closed_loops()
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=self._max_connections, limit_per_host=0, ttl_dns_cache=300
            ),
            timeout=aiohttp.ClientTimeout(total=self._timeout),
            trust_env=False,
        )
        # An async generator first iterated in this loop is closed by
        # `loop.shutdown_asyncgens()` (asyncio.run calls it before closing the loop), which
        # closes the session while its loop can still run the close.
        guard = self._close_with_loop(loop, session)
        self._pools[loop] = _Pool(session, guard)
        await anext(guard)
        return session

    async def _close_with_loop(
        self, loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession
    ) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            pool = self._pools.get(loop)
            if pool is not None and pool.session is session:
                del self._pools[loop]
            if not loop.is_closed() and not session.closed:
                await session.close()

    async def _drop_closed_loops(self) -> None:
        """Forget sessions whose loop was closed without shutting down async generators."""
        for loop, pool in list(self._pools.items()):
            if not loop.is_closed():
                continue
            del self._pools[loop]
            # The guard does not await when its loop is closed, so this finishes at once; a
            # guard left unfinished would be finalised later through the dead loop.
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
        if pool is not None:
            await pool.guard.aclose()  # closes the session

    async def __aenter__(self) -> OpenAIHTTPClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def status_error(
    status: int,
    raw: bytes,
    headers: Mapping[str, str],
    response_format: ResponseFormat,
    describe: Callable[[str], str],
) -> JudgeError:
    """The client error an HTTP `status` answer (its body `raw` and `headers`) means, worded by
    `describe`: what `OpenAIHTTPClient` raises, and the fake judge's in-process client too."""
    excerpt = _error_excerpt(raw)
    detail = describe(f"HTTP {status}: {excerpt}" if excerpt else f"HTTP {status}")
    if status == 429:
        return RateLimited(detail, retry_after=parse_retry_after(headers.get("Retry-After")))
    if status == 408:  # the server gave up waiting: as retryable as our own timeout
        return JudgeTimeout(detail)
    if status in (401, 403, 404):
        return FatalJudgeError(detail)
    if status >= 400:
        kind = classify_rejection(status, raw[:_CLASSIFY_CHARS].decode("utf-8", errors="replace"))
        if kind == "response_format":
            return ResponseFormatRejected(detail, response_format)
        if kind is not None:
            return RequestRejected(detail)
    if status >= 500:
        return ServerError(detail)
    if status == 409:  # a conflict with another request in flight: may pass next time
        return TransportError(detail)
    if 300 <= status < 400:
        location = headers.get("Location", "")
        return FatalJudgeError(
            describe(f"HTTP {status} redirect to {location!r}: set api_base to the final URL")
        )
    return MalformedReply(detail)  # 1xx: not a chat completion
