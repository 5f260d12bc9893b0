"""The fake judge without a transport: how it answers one chat-completions body, and what it
saw. `FakeJudgeServer` puts it behind real HTTP, `FaultyChatClient` calls it in-process, and the
fake Batches API answers each batch line with it, so all three answer alike.

One lock guards all mutable state (statistics, the request log, the fault generator, the rate
windows): a server answers on its own thread while tests read `stats()` from theirs. It is
never held across an await.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from tests.fake_judge.faults import (
    CONTENT_FAULTS,
    FaultDraws,
    FaultPlan,
    apply_content_fault,
)
from tests.fake_judge.limits import RequestLimits, max_in_window
from tests.fake_judge.wire import (
    REASON_SCHEMA_NAME,
    RESPONSE_FORM_NAMES,
    VERDICTS_SCHEMA_NAME,
    VerdictFn,
    WireError,
    asks_reasons,
    bad_request,
    chat_completion,
    default_verdict_fn,
    form_name,
    form_rejection,
    rate_limit_error,
    reason_text,
    request_kind,
    text_of,
    token_counts,
    verdicts_for,
)

PromptCache = Literal["openai", "anthropic"]
"""Whose usage a prompt cache is reported in: OpenAI's `prompt_tokens_details.cached_tokens`,
or the `cache_read_input_tokens` / `cache_creation_input_tokens` Anthropic's usage has."""


@dataclass(frozen=True)
class Prepared:
    """A request admitted and answered, before its latency: the reply's content and tokens,
    the limit headers, and the fault and plan it drew."""

    content: str
    prompt_tokens: int
    completion_tokens: int
    headers: dict[str, str]
    schema: str
    fault: str | None
    plan: FaultPlan


class ChatJudge:
    """The answering rules and the statistics shared by every face of the fake judge."""

    def __init__(
        self,
        *,
        verdict_fn: VerdictFn | None = None,
        fault_plan: FaultPlan | None = None,
        accepted_response_formats: Iterable[str] = RESPONSE_FORM_NAMES,
        response_format_rejection_status: int = 500,
        retry_after_header: bool = True,
        max_logged_requests: int = 1000,
        max_timestamps: int = 200_000,
        clock: Callable[[], float] = time.monotonic,
        prompt_cache: PromptCache | None = None,
        cache_min_tokens: int = 1024,
    ) -> None:
        self.accepted_forms = frozenset(accepted_response_formats)
        unknown_forms = self.accepted_forms - set(RESPONSE_FORM_NAMES)
        if unknown_forms:
            raise ValueError(f"unknown response formats {sorted(unknown_forms)}")
        self.lock = threading.Lock()
        self.limits = RequestLimits()
        self._verdict_fn = verdict_fn or default_verdict_fn
        self._rejection_status = response_format_rejection_status
        self._retry_after_header = retry_after_header
        self._max_logged_requests = max_logged_requests
        self._max_timestamps = max_timestamps
        self._clock = clock
        self._draws = FaultDraws(fault_plan or FaultPlan())
        self._reply_counter = 0
        self._prompt_cache, self._cache_min_tokens = prompt_cache, cache_min_tokens
        self._cached_prefixes: set[str] = set()  # kept across reset_stats, as a provider's
        self.init_stats()

    # -- settings ----------------------------------------------------------------------------

    @property
    def fault_plan(self) -> FaultPlan:
        return self._draws.plan

    def set_fault_plan(self, plan: FaultPlan) -> None:
        """Use `plan` from the next request on; re-seeds the random generator."""
        draws = FaultDraws(plan)
        with self.lock:
            self._draws = draws

    def set_rpm(self, limit: int, window_s: float | None = None) -> None:
        with self.lock:
            self.limits.set_rpm(limit, window_s)

    def set_tpm(self, limit: int) -> None:
        with self.lock:
            self.limits.set_tpm(limit)

    # -- statistics --------------------------------------------------------------------------

    def init_stats(self) -> None:
        """Counters, logs and timestamps from zero (the caller holds the lock, or is __init__)."""
        self.total = 0
        self.by_status: Counter[str] = Counter()
        self.by_schema: Counter[str] = Counter()
        self.by_outcome: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.count_429 = 0
        self.window_429 = 0
        self.accepted = 0
        self.tokens_admitted = 0
        self.accepted_ts: deque[float] = deque(maxlen=self._max_timestamps)
        self.auth_seen: set[str] = set()
        self.no_auth = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.contexts_judged = 0
        # characters of the messages sent and of the replies' content, as a bill counts them
        self.prompt_chars = self.reply_chars = 0
        # prompt tokens the replies reported as read from the prompt cache, and as written to it
        self.cached_tokens = self.cache_creation_tokens = 0
        self.by_form: Counter[str] = Counter()
        self.form_rejections: Counter[str] = Counter()
        self.log: deque[dict[str, Any]] = deque(maxlen=self._max_logged_requests)

    def reset_stats(self) -> None:
        """Forget counters, logs and timestamps. The rate limiter keeps its current window."""
        with self.lock:
            in_flight = self.in_flight
            self.init_stats()
            self.in_flight = in_flight

    def stats(self) -> dict[str, Any]:
        """A JSON-compatible snapshot (status codes as string keys)."""
        with self.lock:
            snapshot: dict[str, Any] = {
                "total_requests": self.total,
                "by_status": dict(self.by_status),
                "by_schema": dict(self.by_schema),
                "by_outcome": dict(self.by_outcome),
                "faults": dict(self.faults),
                "rate_limited_429": self.count_429,  # every 429 sent, injected or not
                "rate_limited_by_window": self.window_429,  # 429s from the sliding window
                "accepted": self.accepted,  # admitted by the sliding window
                "rpm": self.limits.limit,
                "tpm": self.limits.token_limit,
                "tokens_admitted": self.tokens_admitted,  # counted as the token limit counts
                "window_s": self.limits.window_s,
                "authorization_headers": sorted(self.auth_seen),
                "requests_without_authorization": self.no_auth,
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "contexts_judged": self.contexts_judged,
                "prompt_chars": self.prompt_chars,
                "reply_chars": self.reply_chars,
                "cached_prompt_tokens": self.cached_tokens,
                "cache_creation_tokens": self.cache_creation_tokens,
                "by_response_format": dict(self.by_form),
                "response_format_rejections": dict(self.form_rejections),
                "fault_plan": self._draws.plan.to_dict(),
            }
            stamps = list(self.accepted_ts)
        snapshot["max_in_any_window"] = max_in_window(stamps, snapshot["window_s"])
        # The span over which requests were admitted (seconds, monotonic clock): the rate a
        # client held while it was sending, start-up excluded.
        snapshot["accepted_span_s"] = stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0
        # time.monotonic() of the first and last admitted request (one clock for every process
        # on the machine), so a benchmark can place the sending span inside its own timings.
        snapshot["first_accepted_at"] = stamps[0] if stamps else None
        snapshot["last_accepted_at"] = stamps[-1] if stamps else None
        return snapshot

    def requests(self) -> list[dict[str, Any]]:
        """The last `max_logged_requests` request bodies, newest last."""
        with self.lock:
            return list(self.log)

    def begin(self) -> int:
        """A request arrives: its number (1 for the first), counted in flight."""
        with self.lock:
            self.total += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return self.total

    def finish(self, status: int, outcome: str) -> None:
        """A request is answered with `status`; `outcome` says how ("ok", "fault:slow", ...)."""
        with self.lock:
            self.in_flight -= 1
            self.by_status[str(status)] += 1
            self.by_outcome[outcome] += 1
            if status == 429:
                self.count_429 += 1

    def abandon(self, outcome: str) -> None:
        """A request ends without an answer taken (its client gave up or was cancelled)."""
        with self.lock:
            self.in_flight -= 1
            self.by_outcome[outcome] += 1

    def record_auth(self, auth: str | None) -> None:
        with self.lock:
            if auth is None:
                self.no_auth += 1
            elif auth not in self.auth_seen and len(self.auth_seen) < 1000:
                self.auth_seen.add(auth)

    # -- answering ---------------------------------------------------------------------------

    def prepare(self, body: dict[str, Any]) -> Prepared:
        """Answer one chat request as a rate-limited provider would, up to its latency: raises
        the `WireError` it is refused with (a bad request, a refused form, a 429 or a 5xx)."""
        schema, messages = self._accept_form(body, online=True)
        fault, plan = self._draw_fault(schema)
        if fault in ("rate_limit_429", "rate_limit_429_no_header"):
            headers = {"Retry-After": str(plan.retry_after_s)} if fault == "rate_limit_429" else {}
            raise rate_limit_error(headers, f"fault:{fault}")
        # The reply is decided before admission so that the token limit counts what the reply
        # will report, as a provider counts prompt plus completion tokens.
        content, judged, prompt_tokens, completion_tokens = self._reply_content(
            messages, schema, fault, asks_reasons(body)
        )
        max_tokens = body.get("max_tokens")
        budget = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else None
        headers = self._admit(prompt_tokens + (budget or completion_tokens))
        with self.lock:
            self.contexts_judged += judged
        if fault == "server_error":
            with self.lock:
                status = self._draws.rng.choice((500, 502, 503))
            raise WireError(
                status,
                f"fake judge injected HTTP {status}",
                "server_error",
                outcome=f"fault:{fault}",
            )
        return Prepared(content, prompt_tokens, completion_tokens, headers, schema, fault, plan)

    def latency(self, prepared: Prepared) -> float:
        """How long the reply takes: the plan's latency, plus `slow_s` for a slow fault."""
        with self.lock:
            delay = prepared.plan.draw_latency(self._draws.rng)
        if prepared.fault == "slow":
            delay += prepared.plan.slow_s
        return delay

    def completion_body(
        self, body: dict[str, Any], content: str, prompt_tokens: int, completion_tokens: int
    ) -> dict[str, Any]:
        """The chat-completion reply to `body`, numbered in the order replies are made."""
        with self.lock:
            self._reply_counter += 1
            reply_id = f"chatcmpl-fake{self._reply_counter}"
            cache = self._cache_usage(body.get("messages"))
        model = body.get("model", "fake-judge")
        reply = chat_completion(reply_id, model, content, prompt_tokens, completion_tokens)
        reply["usage"].update(cache)
        return reply

    def _cache_usage(self, messages: Any) -> dict[str, Any]:
        """The usage keys a provider with a prompt cache adds (the caller holds the lock): the
        leading message, at least `cache_min_tokens` long, is read from the cache once seen
        before, and written to it the first time (which only Anthropic's usage reports)."""
        prefix = text_of(messages[0]) if isinstance(messages, list) and messages else ""
        tokens = len(prefix) // 4
        if self._prompt_cache is None or not prefix or tokens < self._cache_min_tokens:
            return {}
        read, written = (tokens, 0) if prefix in self._cached_prefixes else (0, tokens)
        self._cached_prefixes.add(prefix)
        self.cached_tokens += read
        if self._prompt_cache == "openai":
            return {"prompt_tokens_details": {"cached_tokens": read}}
        self.cache_creation_tokens += written
        return {"cache_read_input_tokens": read, "cache_creation_input_tokens": written}

    def answer_line(self, body: Any) -> tuple[int, dict[str, Any]]:
        """One chat-completions body answered with the same verdicts, reasons, content faults
        and 5xx/429 faults, without rate limits or latency: (HTTP status, JSON body). Each
        line of a fake batch is answered with it."""
        try:
            if not isinstance(body, dict):
                raise bad_request("request body must be a JSON object")
            schema, messages = self._accept_form(body, online=False)
            fault, _ = self._draw_fault(schema)
            if fault in ("rate_limit_429", "rate_limit_429_no_header"):
                raise rate_limit_error({}, f"fault:{fault}")
            if fault == "server_error":
                raise WireError(500, "fake judge injected HTTP 500", "server_error", outcome=fault)
            content, judged, prompt_tokens, completion_tokens = self._reply_content(
                messages, schema, fault, asks_reasons(body)
            )
            with self.lock:
                self.contexts_judged += judged
            return 200, self.completion_body(body, content, prompt_tokens, completion_tokens)
        except WireError as error:
            return error.status, error.body()

    def _accept_form(self, body: dict[str, Any], *, online: bool) -> tuple[str, list[Any]]:
        """The request's schema and messages once its form is one this judge takes, counted.
        An `online` request is also logged, and refused as a chat endpoint words it; a batch
        line is refused as the Batches API's answer words it."""
        form = form_name(body)
        with self.lock:
            if online:
                self.log.append(body)
            self.by_form[form or "invalid"] += 1
        if form is None and online:
            raise bad_request(
                "response_format.type must be json_schema, json_object or text",
                "invalid_response_format",
            )
        if form is None or form not in self.accepted_forms:
            if online and form is not None:
                with self.lock:
                    self.form_rejections[form] += 1
            raise form_rejection(form or "invalid", self.accepted_forms, self._rejection_status)
        messages, schema = request_kind(body, form)
        with self.lock:
            self.by_schema[schema or "missing"] += 1
        if schema not in (VERDICTS_SCHEMA_NAME, REASON_SCHEMA_NAME):
            if not online:
                raise bad_request(f"not a context-precision request (schema {schema!r})")
            raise bad_request(
                "response_format must be a json_schema named "
                f"{VERDICTS_SCHEMA_NAME!r} or {REASON_SCHEMA_NAME!r}, got {schema!r}",
                "invalid_response_format",
            )
        return schema, messages

    def _draw_fault(self, schema: str) -> tuple[str | None, FaultPlan]:
        """One draw per request; counts the fault if it will actually be applied."""
        with self.lock:
            draws = self._draws
            fault = draws.draw(schema)
            if fault is not None:
                self.faults[fault] += 1
            return fault, draws.plan

    def _reply_content(
        self, messages: list[Any], schema: str, fault: str | None, reasons: bool = True
    ) -> tuple[str, int, int, int]:
        """The reply's content to a verdicts or reason request (with the drawn content fault,
        if any), the contexts it judged, and its prompt and completion tokens."""
        if schema == VERDICTS_SCHEMA_NAME:
            verdicts = verdicts_for(messages, self._verdict_fn, reasons)
            if fault is not None and fault in CONTENT_FAULTS:
                with self.lock:
                    content = apply_content_fault(fault, verdicts, self._draws.rng)
            else:
                content = json.dumps({"verdicts": verdicts})
            judged = len(verdicts)
        else:
            content, judged = json.dumps({"reason": reason_text(messages)}), 0
        prompt_tokens, completion_tokens = token_counts(messages, content)
        with self.lock:
            self.prompt_chars += sum(len(text_of(m)) for m in messages)
            self.reply_chars += len(content)
        return content, judged, prompt_tokens, completion_tokens

    def _admit(self, tokens: int) -> dict[str, str]:
        """The rate windows' verdict on a request of `tokens`, counted."""
        with self.lock:
            now = self._clock()
            try:
                headers = self.limits.admit(now, tokens, self._retry_after_header)
            except WireError:
                self.window_429 += 1
                raise
            self.tokens_admitted += tokens
            self.accepted += 1
            self.accepted_ts.append(now)
            return headers
