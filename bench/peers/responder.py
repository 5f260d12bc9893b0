"""The side-by-side benchmark's judge: the fake judge, plus DeepEval's and RAGAS's prompts.

One zero-latency OpenAI-compatible server on 127.0.0.1 for every contender of
`bench.peers_bench`. Our own requests (a `context_precision_*` schema name or our `<contexts>`
prompt) go to `tests.fake_judge.FakeJudgeServer` unchanged; the peers' requests are
recognised by their prompt text and answered in the JSON shape each tool parses:

- DeepEval `ContextualPrecisionMetric` verdicts: the prompt lists the contexts as a Python list
  after "Retrieval Context (N documents):"; reply `{"verdicts": [{"verdict": "yes"|"no",
  "reason": ...}, ...]}`, one per context, in order.
- DeepEval's reason: the prompt holds "Contextual Precision Score:" and the score on the next
  line; reply `{"reason": "The score is <score> because ..."}`.
- RAGAS context precision (one request per context): the last `input: {...}` object of the
  prompt holds `question`, `context`, `answer`; reply `{"reason": ..., "verdict": 1|0}`.

With `--count-tokens` it counts the prompt and reply tokens of every request it answers, ours
and the peers' alike (GET /stats: billed_prompt_tokens, billed_reply_tokens), for the bill's
side by side (`python -m bench.peers_bench --bill`).

Relevance is the fake's rule for every contender (a context is relevant iff it contains the
uppercase word RELEVANT), so all tools must arrive at the same scores. Kept in bench/ so the
fake the tests rely on stays about our contract only.

    python -m bench.peers.responder --max-seconds 1800     # prints http://127.0.0.1:PORT/v1
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import time
from collections import Counter
from typing import Any

from aiohttp import web

from tests.fake_judge.server import (
    FakeJudgeServer,
    chat_completion,
    default_verdict_fn,
    serve_until_stopped,
)

# Every request of ours names its schema (json_schema form) or carries our tagged prompt.
_OURS = (b'"context_precision_', b"<contexts>")
DEEPEVAL_VERDICTS = "deepeval_verdicts"
DEEPEVAL_REASON = "deepeval_reason"
RAGAS_VERDICT = "ragas_verdict"
# The template renders "Retrieval Context {{ document_count_str }}:" with a leading space in
# the count string, so two spaces; the count is checked against the list.
_DEEPEVAL_CONTEXTS = re.compile(r"^Retrieval Context\s*\((\d+) documents?\):\n", re.MULTILINE)
_DEEPEVAL_SCORE = "Contextual Precision Score:\n"
_RAGAS_MARK = "verify if the context was useful in arriving at the given answer"
_RAGAS_INPUT = "\ninput: "
TOKENIZER = "gpt-5-mini"  # whose tokenizer counts the billed tokens (`billed_tokens`)


class PeerPromptError(ValueError):
    """A request this server does not recognise, or whose prompt it cannot read."""


def _user_text(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise PeerPromptError("messages must be a list")
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    raise PeerPromptError("no user message")


def deepeval_verdicts(text: str) -> tuple[str, int]:
    """DeepEval's verdict reply for this prompt, and how many contexts it judges."""
    header = _DEEPEVAL_CONTEXTS.search(text)
    end = text.rfind("\n\nJSON:")
    if header is None or end < header.end():
        raise PeerPromptError("DeepEval prompt: no retrieval context section")
    try:
        contexts = ast.literal_eval(text[header.end() : end].strip())
    except (ValueError, SyntaxError) as exc:
        raise PeerPromptError(f"DeepEval prompt: retrieval context is not a list: {exc}") from None
    if not isinstance(contexts, list) or len(contexts) != int(header.group(1)):
        raise PeerPromptError("DeepEval prompt: retrieval context is not the list it announces")
    verdicts = []
    for position, context in enumerate(contexts):
        relevant = default_verdict_fn(str(context), "")
        verdicts.append(
            {
                "verdict": "yes" if relevant else "no",
                "reason": f"Node {position + 1} is {'' if relevant else 'not '}useful here.",
            }
        )
    return json.dumps({"verdicts": verdicts}), len(verdicts)


def deepeval_reason(text: str) -> str:
    start = text.find(_DEEPEVAL_SCORE) + len(_DEEPEVAL_SCORE)
    score = text[start : text.find("\n", start)].strip()
    return json.dumps(
        {"reason": f"The score is {score} because relevant nodes rank where they do."}
    )


def ragas_verdict(text: str) -> str:
    start = text.rfind(_RAGAS_INPUT)
    if start < 0:
        raise PeerPromptError("RAGAS prompt: no 'input:' object")
    try:
        data, _ = json.JSONDecoder().raw_decode(text[start + len(_RAGAS_INPUT) :])
    except ValueError as exc:
        raise PeerPromptError(f"RAGAS prompt: input is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("context"), str):
        raise PeerPromptError("RAGAS prompt: input has no context")
    relevant = default_verdict_fn(data["context"], str(data.get("question", "")))
    reason = "The context states the answer." if relevant else "The context is about else."
    return json.dumps({"reason": reason, "verdict": 1 if relevant else 0})


def peer_reply(body: dict[str, Any]) -> tuple[str, str, int]:
    """(kind, reply content, contexts judged) for a DeepEval or RAGAS request."""
    text = _user_text(body)
    if _RAGAS_MARK in text:
        return RAGAS_VERDICT, ragas_verdict(text), 1
    if _DEEPEVAL_SCORE in text:
        return DEEPEVAL_REASON, deepeval_reason(text), 0
    if "'verdicts' key" in text and _DEEPEVAL_CONTEXTS.search(text):
        content, judged = deepeval_verdicts(text)
        return DEEPEVAL_VERDICTS, content, judged
    raise PeerPromptError("not a DeepEval or RAGAS context-precision prompt")


def billed_tokens(body: dict[str, Any], content: str) -> tuple[int, int]:
    """(prompt, reply) tokens of one request as a provider bills them, by GPT-5-mini's tokenizer
    (o200k, through litellm, offline): the messages with their per-message overhead plus the
    JSON schema a `json_schema` request carries; the reply's content."""
    from litellm import token_counter

    spec = body.get("response_format") or {}
    schema = spec.get("json_schema", {}).get("schema") if isinstance(spec, dict) else None
    prompt = token_counter(model=TOKENIZER, messages=body.get("messages") or [])
    if schema:
        prompt += token_counter(model=TOKENIZER, text=json.dumps(schema))
    return prompt, token_counter(model=TOKENIZER, text=content, count_response_tokens=True)


class PeersJudgeServer(FakeJudgeServer):
    """`FakeJudgeServer` that also answers DeepEval's and RAGAS's context-precision prompts;
    with `count_tokens`, it counts every answered request's tokens (`billed_tokens`)."""

    def __init__(self, port: int = 0, *, count_tokens: bool = False, **kwargs: Any) -> None:
        super().__init__(port, **kwargs)
        self._count_tokens = count_tokens
        self._billed = [0, 0]  # prompt and reply tokens of the answered requests
        self._peer_requests: Counter[str] = Counter()
        self._peer_contexts: Counter[str] = Counter()
        self._peer_counter = 0
        self._first_seen: float | None = None
        self._last_seen: float | None = None

    def reset_stats(self) -> None:
        super().reset_stats()
        with self._lock:
            self._peer_requests = Counter()
            self._peer_contexts = Counter()
            self._first_seen = self._last_seen = None
            self._billed = [0, 0]

    def stats(self) -> dict[str, Any]:
        snapshot = super().stats()
        with self._lock:
            snapshot["peer_requests"] = dict(self._peer_requests)
            snapshot["peer_contexts_judged"] = dict(self._peer_contexts)
            snapshot["billed_prompt_tokens"], snapshot["billed_reply_tokens"] = self._billed
            first, last = self._first_seen, self._last_seen
        # From the first request to the last, ours and the peers' alike: the time a client
        # spent sending, its start-up and shut-down left out.
        snapshot["request_span_s"] = last - first if first is not None and last is not None else 0.0
        # time.monotonic() is the system-wide CLOCK_MONOTONIC on Linux: a client process can
        # set these against its own start and end.
        snapshot["first_request_at"] = first
        snapshot["last_request_at"] = last
        return snapshot

    async def _answer(self, request: web.Request, number: int) -> web.Response:
        now = time.monotonic()
        with self._lock:
            if self._first_seen is None:
                self._first_seen = now
            self._last_seen = now
        raw = await request.read()  # aiohttp keeps the body: the fake reads it again
        if any(mark in raw for mark in _OURS):
            response = await super()._answer(request, number)
            if self._count_tokens and isinstance(response.body, bytes):
                reply = json.loads(response.body)["choices"][0]["message"]["content"]
                self._bill(json.loads(raw), reply)
            return response
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise PeerPromptError("request body must be a JSON object")
            with self._lock:
                self._log.append(body)  # GET /requests shows the peers' prompts too
            kind, content, judged = peer_reply(body)
        except ValueError as exc:  # PeerPromptError and JSON errors alike
            with self._lock:
                self._peer_requests["unrecognised"] += 1
            return web.json_response(
                {"error": {"message": f"peers responder: {exc}", "type": "invalid_request_error"}},
                status=400,
            )
        if self._count_tokens:
            self._bill(body, content)
        with self._lock:
            self._peer_requests[kind] += 1
            self._peer_contexts[kind] += judged
            self._peer_counter += 1
            reply_id = f"chatcmpl-peer{self._peer_counter}"
        prompt_tokens = len(raw) // 4 + 1
        completion_tokens = len(content) // 4 + 1
        model = body.get("model", "judge")
        reply = chat_completion(reply_id, model, content, prompt_tokens, completion_tokens)
        return web.Response(body=json.dumps(reply).encode(), content_type="application/json")

    def _bill(self, body: dict[str, Any], content: str) -> None:
        prompt, reply = billed_tokens(body, content)
        with self._lock:
            self._billed[0] += prompt
            self._billed[1] += reply


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.responder", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    parser.add_argument("--max-seconds", type=float, default=1800.0, help="exit after this long")
    parser.add_argument("--count-tokens", action="store_true", help="count billed tokens")
    args = parser.parse_args(argv)
    server = PeersJudgeServer(args.port, count_tokens=args.count_tokens).start()
    try:
        serve_until_stopped(server.url, args.max_seconds)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
