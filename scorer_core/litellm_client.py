"""The `ChatClient` that reaches any model through litellm, and the one place that translates
litellm's errors into the project's tree. Retries inside litellm and the OpenAI SDK are off
(they would sleep for `Retry-After` up to two minutes, past our timeout and shared limit):
`scorer_core.judge` owns retrying.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from scorer_core.errors import (
    ConnectionFailed,
    FatalJudgeError,
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
from scorer_core.transports import litellm_endpoint

# Without this litellm fetches a price map from the internet at import and stalls offline.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# Local OpenAI-compatible servers (vLLM, Ollama, test servers) need no key, but the OpenAI SDK
# refuses to send a request without one.
_PLACEHOLDER_KEY = "no-key-needed"


def import_litellm() -> Any:
    """Import litellm once, quietly (it otherwise prints a help banner with every error)."""
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def _retry_after(exc: BaseException) -> float | None:
    """The Retry-After of the answer `exc` stands for, wherever litellm kept its headers."""
    response = getattr(exc, "response", None)
    sources = (
        getattr(exc, "headers", None),
        getattr(response, "headers", None),
        getattr(exc, "litellm_response_headers", None),
    )
    headers = next((found for found in sources if found), None)
    value = headers.get("retry-after", headers.get("Retry-After")) if headers else None
    return None if value is None else parse_retry_after(str(value))


def translate_error(
    exc: BaseException,
    model: str,
    api_key: str | None,
    response_format: ResponseFormat = "json_schema",
) -> Exception:
    """Map a litellm/OpenAI/httpx exception to the project's error tree, minus any secret."""
    litellm = import_litellm()
    full = redact(f"{type(exc).__name__}: {exc}", api_key)  # in any case and common encodings
    message = f"judge {model}: {one_line(full, 500)}"
    status = getattr(exc, "status_code", None)
    lowered = str(exc).lower()
    if isinstance(exc, litellm.RateLimitError) or status == 429:
        return RateLimited(message, retry_after=_retry_after(exc))
    if isinstance(exc, litellm.Timeout) or status == 408:
        return JudgeTimeout(message)
    if status not in (401, 403, 404):
        kind = classify_rejection(status if isinstance(status, int) else None, full[:8192])
        if kind == "response_format":
            return ResponseFormatRejected(message, response_format)
        if kind is not None and not isinstance(exc, litellm.APIConnectionError):
            return RequestRejected(message)
    if status == 409:  # a conflict with another request in flight: may pass next time
        return TransportError(message)
    if isinstance(exc, litellm.APIConnectionError) and status in (None, 500):
        # litellm reports refused connections as APIConnectionError (status 500).
        if "timeout" in lowered or "timed out" in lowered:
            return JudgeTimeout(message)
        return ConnectionFailed(message)
    if "connection error" in lowered or "connection refused" in lowered:
        # The OpenAI SDK reports an unreachable server as a 500 "Connection error."
        return ConnectionFailed(message)
    if isinstance(status, int) and status >= 500:
        return ServerError(message)
    refused = litellm.AuthenticationError | litellm.PermissionDeniedError | litellm.NotFoundError
    if isinstance(exc, refused) or status in (401, 403, 404):
        return FatalJudgeError(message)
    if isinstance(exc, litellm.BadRequestError) or (
        isinstance(status, int) and 400 <= status < 500
    ):
        return RequestRejected(message)
    return TransportError(message)


class LiteLLMClient:
    """One chat completion per call through `litellm.acompletion`, retries left to the caller.

    `settings` are each request's endpoint, key, timeout and sampling (None: litellm's default
    endpoint for the model). `request_options` are extra `litellm.acompletion` arguments (e.g.
    {"top_p": 0.9}), sent as given: the only way to pass one, so a mistyped option is never
    forwarded.
    """

    transport = "litellm"

    def __init__(
        self,
        model: str,
        settings: RequestSettings | None = None,
        *,
        request_options: Mapping[str, Any] | None = None,
    ) -> None:
        settings = settings or RequestSettings()
        api_base = settings.api_base or None
        self.model = model
        self.endpoint = api_base.rstrip("/") if api_base else litellm_endpoint(model)
        self._api_base = api_base
        self._api_key = settings.api_key or (_PLACEHOLDER_KEY if api_base else None)
        given: dict[str, Any] = {
            "api_base": self._api_base,
            "api_key": self._api_key,
            "temperature": settings.temperature,
            "max_tokens": settings.max_tokens,
        }
        # `acompletion`'s arguments but the model, the messages and the form; a setting given
        # here wins over the same name in `request_options`.
        self._arguments: dict[str, Any] = {
            "timeout": settings.timeout,
            "num_retries": 0,
            "max_retries": 0,
            "drop_params": True,
            **(request_options or {}),
            **{name: value for name, value in given.items() if value is not None},
        }

    def __repr__(self) -> str:  # never show the key
        return f"LiteLLMClient(model={self.model!r}, api_base={self._api_base!r})"

    async def complete(
        self,
        messages: Sequence[dict[str, str]],
        *,
        schema_name: str,
        schema: dict[str, Any],
        response_format: ResponseFormat = "json_schema",
    ) -> ChatReply:
        litellm = import_litellm()
        kwargs = {"model": self.model, "messages": list(messages), **self._arguments}
        form = response_format_field(response_format, schema_name, schema)
        if form is not None:
            kwargs["response_format"] = form
        try:
            response = await litellm.acompletion(**kwargs)
        except Exception as exc:
            raise translate_error(exc, self.model, self._api_key, response_format) from None
        try:
            text = response.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError) as exc:
            raise MalformedReply(f"judge {self.model}: reply has no message content") from exc
        usage: Any = getattr(response, "usage", None)
        usage = usage.model_dump() if hasattr(usage, "model_dump") else usage
        return ChatReply.from_usage(text, usage)
