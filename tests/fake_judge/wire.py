"""The fake judge's chat completions: what a request says and what the reply looks like.

Pure functions over JSON bodies (no server, no state): which structured-output form and schema
a request asks for, the verdicts its `<contexts>` call for, the reason text, the token counts
the fake reports, the chat-completion reply body and OpenAI-style error bodies. A request the
fake refuses raises `WireError` (an HTTP status and error body); the socket server sends it as
a response, the in-process `FaultyChatClient` turns it into the client error it would cause.

The wire layout is `scorer_core.prompt`'s, re-implemented here on purpose: the fake must not
depend on the code it is meant to test.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

VERDICTS_SCHEMA_NAME = "context_precision_verdicts"
REASON_SCHEMA_NAME = "context_precision_reason"
RESPONSE_FORM_NAMES: tuple[str, ...] = ("json_schema", "json_object", "text")

VerdictFn = Callable[[str, str], bool]
"""Decides one context's relevance from (context text, query)."""

_RELEVANT_RE = re.compile(r"\bRELEVANT\b")  # case-sensitive on purpose
_QUERY_RE = re.compile(r'^<query>\n(".*")\n</query>$', re.MULTILINE)
_CONTEXTS_RE = re.compile(r"^<contexts>$(.*?)^</contexts>$", re.MULTILINE | re.DOTALL)
_CONTEXT_LINE_RE = re.compile(r'^\[(\d+)\] (".*")$', re.MULTILINE)
_SCORE_RE = re.compile(r"^<score>\n(.*)\n</score>$", re.MULTILINE)
_VERDICTS_SECTION_RE = re.compile(r"^<verdicts>$", re.MULTILINE)
_CONTEXTS_SECTION_RE = re.compile(r"^<contexts>$", re.MULTILINE)


class WireError(Exception):
    """A request answered at once with an OpenAI-style error: HTTP `status`, the error's
    `message`, `err_type` and `code`, extra `headers`, and the `outcome` the stats count."""

    def __init__(
        self,
        status: int,
        message: str,
        err_type: str,
        code: str | None = None,
        *,
        outcome: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(outcome)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.code = code
        self.outcome = outcome
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The JSON error body, as OpenAI's API shapes it."""
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": None,
                "code": self.code,
            }
        }


def bad_request(message: str, code: str | None = None) -> WireError:
    return WireError(400, message, "invalid_request_error", code, outcome="bad_request")


def rate_limit_error(headers: dict[str, str], outcome: str) -> WireError:
    return WireError(
        429,
        "Rate limit reached for requests (fake judge).",
        "rate_limit_exceeded",
        "rate_limit_exceeded",
        outcome=outcome,
        headers=headers,
    )


def form_rejection(form: str, accepted: Iterable[str], status: int) -> WireError:
    """What a server without `form` answers (llama-cpp-python's reply when `status` >= 500)."""
    allowed = " or ".join(f"'{f}'" for f in RESPONSE_FORM_NAMES if f in set(accepted))
    if status >= 500:
        detail = {
            "type": "literal_error",
            "loc": ("body", "response_format", "type"),
            "msg": f"Input should be {allowed}",
            "input": form,
        }
        return WireError(
            status,
            f"1 validation error:\n  {detail}\n\n  POST /v1/chat/completions",
            "internal_server_error",
            outcome="response_format_rejected",
        )
    return WireError(
        status,
        f"Invalid parameter: 'response_format' of type '{form}' is not supported by this server.",
        "invalid_request_error",
        "unsupported_response_format",
        outcome="response_format_rejected",
    )


def default_verdict_fn(context_text: str, query: str) -> bool:
    """Relevant iff the context contains the whole, uppercase word RELEVANT."""
    return _RELEVANT_RE.search(context_text) is not None


def _encode_data(text: str) -> str:
    # Same encoding as scorer_core.prompt.encode_data, duplicated so the fake does not depend on
    # the code it is meant to test.
    return json.dumps(text, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")


def build_verdict_prompt_for_tests(
    query: str,
    output: str,
    contexts: Iterable[str],
    reference: str | None = None,
    start: int = 0,
) -> str:
    """The user message of a verdict request, in the wire layout, for contexts numbered from
    `start`. Lets tests talk to the server without the real scorer."""
    lines = [
        "<query>",
        _encode_data(query),
        "</query>",
        "<output>",
        _encode_data(output),
        "</output>",
    ]
    if reference is not None:
        lines += ["<reference_answer>", _encode_data(reference), "</reference_answer>"]
    lines.append("<contexts>")
    lines += [f"[{start + i}] {_encode_data(text)}" for i, text in enumerate(contexts)]
    lines.append("</contexts>")
    return "\n".join(lines)


def chat_completion(
    reply_id: str, model: Any, content: str, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """A chat-completions reply body with one choice, as OpenAI's API shapes it."""
    return {
        "id": reply_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def form_name(body: dict[str, Any]) -> str | None:
    """The structured-output form of a request: "text" when it asks for none."""
    fmt = body.get("response_format")
    if fmt is None:
        return "text"
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    return kind if kind in RESPONSE_FORM_NAMES else None


def request_kind(body: dict[str, Any], form: str | None) -> tuple[list[Any], str | None]:
    """The request's messages (400 unless a non-empty list) and which of our requests it is:
    the schema name, or for the other forms the kind its prompt reads as."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list")
    return messages, _schema_name(body) if form == "json_schema" else _kind_of(messages)


def _kind_of(messages: list[Any]) -> str | None:
    """Which request this is when no schema name says so: by the prompt's sections."""
    try:
        text = last_user_text(messages)
    except WireError:
        return None
    if _VERDICTS_SECTION_RE.search(text):
        return REASON_SCHEMA_NAME
    if _CONTEXTS_SECTION_RE.search(text):
        return VERDICTS_SCHEMA_NAME
    return None


def token_counts(messages: list[Any], content: str) -> tuple[int, int]:
    """(prompt, completion) tokens as this fake counts and reports them: 4 characters each."""
    prompt_chars = sum(len(text_of(m)) for m in messages)
    return prompt_chars // 4 + 1, len(content) // 4 + 1


def _schema_name(body: dict[str, Any]) -> str | None:
    fmt = body.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict):
        return None
    name = spec.get("name")
    return name if isinstance(name, str) else None


def text_of(message: Any) -> str:
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multi-part content: count the text parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return text_of(message)
    raise bad_request("fake judge: no user message")


def asks_reasons(body: dict[str, Any]) -> bool:
    """Whether a verdict request asks for a reason per verdict, as a model reads it: from the
    schema's verdict entry, else from the reply shape the instructions show (a request that
    shows neither gets reasons)."""
    fmt = body.get("response_format")
    schema = fmt.get("schema") if isinstance(fmt, dict) else None
    if isinstance(fmt, dict) and isinstance(fmt.get("json_schema"), dict):
        schema = fmt["json_schema"].get("schema")
    if isinstance(schema, dict):
        entry = schema.get("properties", {}).get("verdicts", {}).get("items", {})
        if entry.get("properties"):
            return "reason" in entry["properties"]
    shapes = [text_of(m) for m in body.get("messages", []) if '"verdicts"' in text_of(m)]
    return not shapes or any('"reason"' in shape for shape in shapes)


def verdicts_for(
    messages: list[Any], verdict_fn: VerdictFn, reasons: bool = True
) -> list[dict[str, Any]]:
    """One verdict per context line of the last user message, in the order asked; with
    `reasons`, a short clause each (what a model writes when the schema asks for one)."""
    text = last_user_text(messages)
    query_match = _QUERY_RE.search(text)
    block = _CONTEXTS_RE.search(text)
    if query_match is None or block is None:
        raise bad_request("fake judge: no <query> or <contexts> in the last user message")
    try:
        query = json.loads(query_match.group(1))
        contexts = [
            (int(m.group(1)), json.loads(m.group(2)))
            for m in _CONTEXT_LINE_RE.finditer(block.group(1))
        ]
    except ValueError as exc:
        raise bad_request(f"fake judge: a data line is not a JSON string: {exc}") from None
    verdicts: list[dict[str, Any]] = []
    for index, context in contexts:
        relevant = verdict_fn(context, query)
        verdict = {"i": index, "v": "yes" if relevant else "no"}
        if reasons:
            verdict["reason"] = f"Context {index} is {'' if relevant else 'not '}useful here."
        verdicts.append(verdict)
    return verdicts


def reason_text(messages: list[Any]) -> str:
    match = _SCORE_RE.search(last_user_text(messages))
    # The section reads "<score> out of <scale>"; a reason restates only the score.
    score = match.group(1).split()[0] if match else "unknown"
    return (
        f"The score is {score} because of where the relevant contexts rank: relevant "
        "passages near the top raise it, relevant passages further down lower it."
    )
