"""`FakeChatClient`: a `ChatClient` answered in-process by a function, to test code built on the
scorer without a model or a socket (as httpx ships `MockTransport`); see docs/library.md."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from scorer_core.openai_http import chat_request_body
from scorer_core.prompt import REASON_SCHEMA_NAME
from scorer_core.protocols import ChatReply
from scorer_core.response_format import ResponseFormat, response_format_field

Handler = Callable[[dict[str, Any]], str | Sequence[bool]]
"""A request body (as it would go over HTTP) -> the reply's text, or one relevance flag per
context the request asks about."""

_CONTEXT_LINE = re.compile(r'^\[(\d+)\] (".*")$', re.MULTILINE)
_SCORE = re.compile(r"^<score>\n(\S+) out of ", re.MULTILINE)


def asked_contexts(body: dict[str, Any]) -> dict[int, str]:
    """Position -> text of every context a verdict request asks about, in the order asked."""
    section = body["messages"][-1]["content"].partition("<contexts>\n")[2]
    found = _CONTEXT_LINE.findall(section.partition("\n</contexts>")[0])
    return {int(position): json.loads(text) for position, text in found}


def relevant_word(body: dict[str, Any]) -> list[bool]:
    """The default handler: a context is relevant iff it holds the word RELEVANT."""
    return [re.search(r"\bRELEVANT\b", text) is not None for text in asked_contexts(body).values()]


class FakeChatClient:
    """A `ChatClient` whose replies come from `handler`; `requests` holds every request body
    received, oldest first.

    Args:
        handler: called with each request's body; a string is the reply as sent, a list of
            flags answers a verdict request (and a reason request with a fixed reason).
        model: the model name recorded next to every score.
    """

    transport = "fake"
    endpoint = "fake-chat (in-process)"

    def __init__(self, handler: Handler = relevant_word, *, model: str = "fake/judge") -> None:
        self._handler = handler
        self.model = model
        self.requests: list[dict[str, Any]] = []

    async def complete(
        self,
        messages: Sequence[dict[str, str]],
        *,
        schema_name: str,
        schema: dict[str, Any],
        response_format: ResponseFormat = "json_schema",
    ) -> ChatReply:
        form = response_format_field(response_format, schema_name, schema)
        body = chat_request_body(self.model, messages, form)
        self.requests.append(body)
        reply = self._handler(body)
        if isinstance(reply, str):
            return ChatReply(reply)
        if schema_name == REASON_SCHEMA_NAME:
            found = _SCORE.search(messages[-1]["content"])
            score = found.group(1) if found else "0"
            text = f"The score is {score} because of the verdicts."
            return ChatReply(json.dumps({"reason": text}))
        flags = zip(asked_contexts(body), reply, strict=True)
        verdicts = [{"i": position, "v": "yes" if flag else "no"} for position, flag in flags]
        return ChatReply(json.dumps({"verdicts": verdicts}))
