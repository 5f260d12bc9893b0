"""The one exception tree of the project (drawn in `CtxPrecError`'s docstring). Lower-level
errors (litellm, HTTP, JSON) are translated into it once, at the boundary where they happen, so
callers only ever catch `CtxPrecError` subclasses. Also `one_line`, for messages.
"""

from __future__ import annotations


class CtxPrecError(Exception):
    """Base class of every error this project raises on purpose.

    CtxPrecError
    ├── ConfigError          bad arguments or configuration; raised before any judge call
    ├── InputError           one item (or one file) cannot be scored as given
    ├── StorageError         reading or writing the store failed
    └── JudgeError           the judge could not produce verdicts
        ├── TransportError   retryable: the request did not get a usable HTTP answer
        │   ├── RateLimited      HTTP 429; carries the server's Retry-After when it sent one
        │   ├── ServerError      HTTP 5xx
        │   ├── JudgeTimeout     no answer within the timeout
        │   └── ConnectionFailed the server could not be reached
        ├── MalformedReply   an answer came but cannot be used; the judge re-asks
        ├── RequestRejected  a deterministic refusal: a 4xx (not 408/409/429) or a
        │   │                validation error; never retried, the judge turns it into a
        │   │                FatalJudgeError
        │   └── ResponseFormatRejected  the endpoint does not support the structured-output
        │                    form sent; under response_format "auto" the judge steps down
        └── FatalJudgeError  no request can succeed: authentication, unknown model, a
                             deterministic rejection; the run stops
    """


class ConfigError(CtxPrecError, ValueError):
    """A configuration value or argument is wrong. The message names the key."""


class InputError(CtxPrecError, ValueError):
    """An item or input file cannot be scored as given. The message names the field or row."""


class JudgeError(CtxPrecError):
    """The judge could not produce verdicts."""


class TransportError(JudgeError):
    """A request got no usable HTTP answer; retrying may help."""


class RateLimited(TransportError):
    """The provider answered 429; `retry_after` is its Retry-After in seconds, if it sent one."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ServerError(TransportError):
    """The provider answered with a 5xx status."""


class JudgeTimeout(TransportError):
    """The provider did not answer within the timeout."""


class ConnectionFailed(TransportError):
    """The provider could not be reached."""


class MalformedReply(JudgeError):
    """The provider answered, but the reply does not follow the wire contract."""


class RequestRejected(JudgeError):
    """The provider refused the request deterministically (a 4xx other than 408/409/429, or a
    validation error whatever the status): sending it again gets the same answer."""


class ResponseFormatRejected(RequestRejected):
    """The endpoint refused the structured-output form `form` ("json_schema", ...) itself."""

    def __init__(self, message: str, form: str) -> None:
        super().__init__(message)
        self.form = form


class FatalJudgeError(JudgeError):
    """No request can succeed (bad credentials, unknown model): the whole run should stop."""


class StorageError(CtxPrecError):
    """Reading or writing the store failed. The message names the path."""


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
