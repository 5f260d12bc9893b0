"""A finished batch's output and error files as one `Reply` per request sent, matched by
custom_id: a chat completion's content and usage, or an error naming the batch and the
provider's answer, transient (5xx, 429, expired, cancelled, missing: asked again next round)
or final (e.g. a 400: asked no more)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.engine.batch.batch_judge import Reply
from jobs.engine.batch.state import BatchRecord
from scorer_core.errors import one_line
from scorer_core.protocols import ChatReply

_EXCERPT = 300
TRANSIENT_CODES = frozenset(
    {"batch_expired", "batch_cancelled", "server_error", "rate_limit_exceeded"}
)
"""Error codes of an error line (or a response body) that a later batch may well not meet."""


@dataclass
class Ingested:
    """A batch's replies by custom_id, and the lines that did not fit."""

    replies: dict[str, Reply] = field(default_factory=dict)
    unknown: int = 0
    unreadable: int = 0

    @property
    def retried(self) -> dict[str, int]:
        """The transient failures by reason: the requests the next round asks again."""
        transient = (reply for reply in self.replies.values() if reply.transient)
        return dict(Counter(str(reply.retry) for reply in transient))

    @property
    def final_errors(self) -> int:
        """Requests that failed for good (a deterministic failure, e.g. HTTP 400)."""
        return sum(
            1 for reply in self.replies.values() if reply.text is None and reply.retry is None
        )


def _error(value: Any) -> tuple[str | None, str]:
    """(code or type, message) of an error line's error or an error response's body."""
    inner = value.get("error", value) if isinstance(value, Mapping) else value
    if not isinstance(inner, Mapping):
        return None, one_line(str(inner), _EXCERPT)
    code = inner.get("code") or inner.get("type")
    message = str(inner.get("message") or "")
    text = f"{code}: {message}" if code else message or json.dumps(inner)
    return (str(code) if code else None), one_line(text, _EXCERPT)


def reply_of_line(line: Mapping[str, Any], batch_id: str) -> Reply:
    """One output or error line as a reply (see the module doc)."""
    error = line.get("error")
    response = line.get("response")
    if error:
        code, message = _error(error)
        retry = code if code in TRANSIENT_CODES else None
        return Reply.failed(f"batch {batch_id}: {message}", retry=retry)
    if not isinstance(response, Mapping):
        return Reply.failed(f"batch {batch_id}: a line with neither a response nor an error")
    status = response.get("status_code")
    body = response.get("body")
    if status != 200:
        transient = isinstance(status, int) and (status == 429 or 500 <= status <= 599)
        message = f"batch {batch_id}: HTTP {status}: {_error(body)[1]}"
        return Reply.failed(message, retry=f"HTTP {status}" if transient else None)
    try:
        content = body["choices"][0]["message"].get("content")  # type: ignore[index]
        if content is not None and not isinstance(content, str):
            raise TypeError("message.content is not a string")
    except (LookupError, TypeError, AttributeError) as exc:
        return Reply.failed(f"batch {batch_id}: HTTP 200 but not a chat completion ({exc!r})")
    usage = body.get("usage") if isinstance(body, Mapping) else None
    return Reply.answered(ChatReply.from_usage(content or "", usage))


def missing_reason(record: BatchRecord) -> str:
    """Why a request of this (final) batch has no line, in the batch's own words."""
    batch = record.batch_id or record.name
    if record.stopped:
        return f"batch {batch} was stopped at judge.batch.deadline before this request was answered"
    ended = {
        "failed": f"failed validation: {record.errors or 'no reason given'}",
        "expired": "expired before this request was answered",
        "cancelled": "was cancelled before this request was answered",
    }
    default = f"ended {record.status} without a line for this request"
    return f"batch {batch} {ended.get(record.status or '', default)}"


def ingest_batch(record: BatchRecord, files: Iterable[bytes], sent: Sequence[str]) -> Ingested:
    """Every request in `sent` with its reply, from the batch's output and error files (the
    first line for a request wins; lines for requests it was not sent are counted)."""
    wanted = set(sent)
    result = Ingested()
    batch_id = record.batch_id or record.name
    for raw in _nonblank_lines(files):
        try:
            line = json.loads(raw)
        except ValueError:
            result.unreadable += 1
            continue
        request_id = line.get("custom_id") if isinstance(line, dict) else None
        if not isinstance(request_id, str) or request_id not in wanted:
            result.unknown += 1
        elif request_id not in result.replies:
            result.replies[request_id] = reply_of_line(line, batch_id)
    reason = missing_reason(record)
    why = "deadline" if record.stopped else f"missing (batch {record.status})"
    for request_id in sent:
        result.replies.setdefault(request_id, Reply.failed(reason, retry=why))
    return result


def _nonblank_lines(files: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of every file in turn, blank ones left out."""
    for data in files:
        for line in data.splitlines():
            if line.strip():
                yield line
