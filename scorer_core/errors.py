"""The one exception tree of the project. Lower-level errors (litellm, HTTP, JSON) are
translated into it once, where they happen, so callers only catch `CtxPrecError`s.

    CtxPrecError
    ├── ConfigError, InputError, StorageError     the message names the key, field, row or path
    └── JudgeError           the judge could not produce verdicts
        ├── TransportError   retryable: no usable HTTP answer
        │   └── RateLimited (429, Retry-After), ServerError (5xx), JudgeTimeout, ConnectionFailed
        ├── MalformedReply   an answer that cannot be used; the judge re-asks
        ├── RequestRejected  a deterministic refusal, never retried (the judge makes it fatal)
        │   └── ResponseFormatRejected  the structured-output form refused; "auto" steps down
        └── FatalJudgeError  no request can succeed (authentication, unknown model): the run stops
"""

from __future__ import annotations


class CtxPrecError(Exception):
    """Base class of every error this project raises on purpose."""


class ConfigError(CtxPrecError, ValueError): ...


class InputError(CtxPrecError, ValueError): ...


class JudgeError(CtxPrecError): ...


class TransportError(JudgeError): ...


class RateLimited(TransportError):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ServerError(TransportError): ...


class JudgeTimeout(TransportError): ...


class ConnectionFailed(TransportError): ...


class MalformedReply(JudgeError): ...


class RequestRejected(JudgeError):
    """A 4xx other than 408/409/429, or a validation error whatever the status."""


class ResponseFormatRejected(RequestRejected):
    """The endpoint refused the structured-output form `form` ("json_schema", ...) itself."""

    def __init__(self, message: str, form: str) -> None:
        super().__init__(message)
        self.form = form


class FatalJudgeError(JudgeError): ...


class StorageError(CtxPrecError): ...


def one_line(message: str | BaseException, limit: int | None = None) -> str:
    """`message` as one line of a message: every run of whitespace (line breaks too) one
    space, cut to at most `limit` characters with "..." marking the cut. An exception without
    a message is named by its type. The project's one helper for this."""
    line = " ".join(str(message).split())
    if not line and isinstance(message, BaseException):
        line = type(message).__name__
    if limit is None or len(line) <= limit:
        return line
    return line[: limit - 3] + "..."
