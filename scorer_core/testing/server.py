"""A fake OpenAI-compatible judge: a real aiohttp server on 127.0.0.1 for tests and benchmarks.

It answers `POST /v1/chat/completions` the way a well-behaved (or, on purpose, a badly
behaved) LLM judge would, following the wire contract of `scorer_core.prompt`:

- a verdict request (`response_format.json_schema.name == "context_precision_verdicts"`, or,
  with the `json_object` and prompt-only forms, a last user message with a `<contexts>` section
  and no `<verdicts>` section): the message holds `<query>`, optional `<output>` and
  `<reference_answer>`, and `<contexts>` sections, each value a one-line JSON string; context
  lines look like `[7] "text"`. The reply content is
  `{"verdicts": [{"context_index": 7, "verdict": "yes", "reason": "..."}, ...]}`, one entry per
  context line. By default a context is relevant iff it contains the word `RELEVANT`
  (uppercase, whole word, so `IRRELEVANT` does not count); pass `verdict_fn` to change that.
- a reason request (`... name == "context_precision_reason"`, or a `<verdicts>` section): the
  reply content is `{"reason": "The score is <score> because ..."}`.
- anything else: HTTP 400 with an OpenAI-style error body.

`accepted_response_formats` imitates servers that lack a structured-output form: a request
whose form ("json_schema", "json_object", or "text" for no response_format) is not in the set
is answered as llama-cpp-python answers a `json_schema` request: HTTP 500 with a validation
error naming `response_format.type` (or, with `response_format_rejection_status=400`, an
OpenAI-style 400 naming `response_format`). `stats()["by_response_format"]` counts the form
of every request and `stats()["response_format_rejections"]` the rejected ones.

The same app serves a fake OpenAI Files + Batches API (`server.batches`, see
`scorer_core.testing.batches`) that answers every line of a batch with `answer_body`: this
judge's own logic, without rate limits or latency.

On top of that it can enforce a sliding-window request limit (HTTP 429 + Retry-After), inject
faults drawn from a seeded `FaultPlan` (one draw per request, so a retry can succeed), stop
listening for a while (`refuse_connections`, `accept_connections`) and report what it saw
(`stats()`, `GET /stats`).

Tests need not wait on real time: `clock` (the sliding window's time) and `sleep` (the latency
and slow replies) are injectable, and `on_request` is called with each request before it is
answered, in a thread of its own, so a test can count requests, act at an exact request, or
hold requests (by blocking) until it is ready.

The server runs in a background thread with its own event loop, so synchronous tests and
benchmarks in other processes can both talk to it over real HTTP. Per-request work is kept
small (one JSON parse, one regex pass, one JSON dump) and every log is bounded, because a
zero-latency benchmark pushes thousands of requests per second at it.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import math
import random
import re
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, fields
from types import FrameType
from typing import Any

from aiohttp import web

from scorer_core.testing.batches import MAX_BYTES, BatchPlan, FakeBatchAPI

HOST = "127.0.0.1"  # never bind anything else: this server is for local tests only
VERDICTS_SCHEMA_NAME = "context_precision_verdicts"
REASON_SCHEMA_NAME = "context_precision_reason"

# Faults that change the HTTP answer; they apply to verdict and reason requests alike.
STATUS_FAULTS: tuple[str, ...] = (
    "rate_limit_429",
    "rate_limit_429_no_header",
    "server_error",
    "slow",
)
# Faults that change the content of a 200 reply; only verdict requests get them.
CONTENT_FAULTS: tuple[str, ...] = (
    "malformed_json",
    "truncated_json",
    "code_fence",
    "text_around",
    "wrong_count",
    "unknown_verdict_word",
    "duplicate_index",
    "out_of_range_index",
    "shuffled",
    "case_and_space",
)
FAULT_KINDS: tuple[str, ...] = STATUS_FAULTS + CONTENT_FAULTS
# Replies that are valid under the contract: the client maps verdicts by index and normalises
# the verdict word, so these must be scored exactly like a clean reply.
VALID_CONTENT_FAULTS: frozenset[str] = frozenset({"shuffled", "case_and_space"})
# Correct verdicts wrapped in extra text: a lenient parser may recover them, a strict one re-asks.
WRAPPED_CONTENT_FAULTS: frozenset[str] = frozenset({"code_fence", "text_around"})

_RELEVANT_RE = re.compile(r"\bRELEVANT\b")  # case-sensitive on purpose
_QUERY_RE = re.compile(r'^<query>\n(".*")\n</query>$', re.MULTILINE)
_CONTEXTS_RE = re.compile(r"^<contexts>$(.*?)^</contexts>$", re.MULTILINE | re.DOTALL)
_CONTEXT_LINE_RE = re.compile(r'^\[(\d+)\] (".*")$', re.MULTILINE)
_SCORE_RE = re.compile(r"^<score>\n(.*)\n</score>$", re.MULTILINE)
_VERDICTS_SECTION_RE = re.compile(r"^<verdicts>$", re.MULTILINE)
_CONTEXTS_SECTION_RE = re.compile(r"^<contexts>$", re.MULTILINE)
RESPONSE_FORM_NAMES: tuple[str, ...] = ("json_schema", "json_object", "text")
_MALFORMED_CONTENT = '{"verdicts": [ {"context_index": 0, "verd'


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


_Z99 = 2.3263478740408408  # the standard normal's 99th percentile


def lognormal_parameters(mean: float, p99: float) -> tuple[float, float]:
    """(mu, sigma) of the lognormal with this mean and 99th percentile.

    mean = exp(mu + sigma^2 / 2) and p99 = exp(mu + z99 sigma), so sigma solves
    sigma^2 / 2 - z99 sigma + ln(p99 / mean) = 0 (the smaller root: the tail the p99 names).
    """
    if not 0 < mean < p99:
        raise ValueError(f"a latency tail needs 0 < mean < p99, got mean {mean}, p99 {p99}")
    gap = math.log(p99 / mean)
    discriminant = _Z99 * _Z99 - 2 * gap
    if discriminant < 0:
        raise ValueError(f"p99 {p99} is too far above the mean {mean} for a lognormal (<= ~15x)")
    sigma = _Z99 - math.sqrt(discriminant)
    return math.log(mean) - sigma * sigma / 2, sigma


@dataclass(frozen=True)
class FaultPlan:
    """How often each fault is injected (probabilities, 0..1, summing to at most 1).

    Every chat request makes one draw from `random.Random(seed)`; the draw picks at most one
    fault, so a retried request draws again and may succeed. Content faults drawn for a reason
    request are not applied (the reply is clean and nothing is counted).
    """

    rate_limit_429: float = 0.0  # 429 with a Retry-After header (`retry_after_s`)
    rate_limit_429_no_header: float = 0.0  # 429 without Retry-After
    server_error: float = 0.0  # 500, 502 or 503 with an error body
    slow: float = 0.0  # sleep `slow_s`, then answer correctly (the client should time out)
    malformed_json: float = 0.0  # content is broken JSON
    truncated_json: float = 0.0  # a correct reply cut at a random point
    code_fence: float = 0.0  # correct JSON inside ```json ... ```
    text_around: float = 0.0  # correct JSON with prose before and after
    wrong_count: float = 0.0  # one verdict dropped, or one extra added
    unknown_verdict_word: float = 0.0  # one verdict is "maybe"
    duplicate_index: float = 0.0  # two entries share a context_index
    out_of_range_index: float = 0.0  # one entry names a context that was not asked for
    shuffled: float = 0.0  # VALID: correct verdicts in another list order
    case_and_space: float = 0.0  # VALID: verdict words like " Yes " / "NO"
    slow_s: float = 30.0
    retry_after_s: int = 1  # Retry-After sent with an injected 429
    latency_s: float = 0.0  # added to every admitted request (the mean, with latency_p99_s)
    latency_jitter_s: float = 0.0  # plus uniform(0, jitter)
    # > latency_s: each reply's latency is drawn from a lognormal with mean `latency_s` and
    # this 99th percentile (a real judge's heavy tail); at most ~15x the mean.
    latency_p99_s: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for kind in FAULT_KINDS:
            rate = getattr(self, kind)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"FaultPlan.{kind} must be within 0..1, got {rate}")
        total = sum(self.rates().values())
        if total > 1.0 + 1e-9:
            raise ValueError(f"FaultPlan rates sum to {total:.3f}; they must sum to at most 1")
        if min(self.slow_s, self.latency_s, self.latency_jitter_s, self.latency_p99_s) < 0 or (
            self.retry_after_s < 0
        ):
            raise ValueError("FaultPlan durations must not be negative")
        if self.latency_p99_s:
            lognormal_parameters(self.latency_s, self.latency_p99_s)  # raises when impossible

    def draw_latency(self, rng: random.Random) -> float:
        """One reply's latency under this plan (before any `slow` fault)."""
        delay = self.latency_s
        if self.latency_p99_s > self.latency_s > 0:
            mu, sigma = lognormal_parameters(self.latency_s, self.latency_p99_s)
            delay = rng.lognormvariate(mu, sigma)
        if self.latency_jitter_s > 0:
            delay += rng.uniform(0.0, self.latency_jitter_s)
        return delay

    def rates(self) -> dict[str, float]:
        """The non-zero fault rates by kind."""
        return {k: float(getattr(self, k)) for k in FAULT_KINDS if getattr(self, k) > 0}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FaultPlan:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown FaultPlan fields: {sorted(unknown)}")
        return cls(**data)

    @classmethod
    def mixed(
        cls,
        total: float,
        *,
        kinds: Iterable[str] = FAULT_KINDS,
        seed: int = 0,
        **overrides: Any,
    ) -> FaultPlan:
        """A plan with `total` fault probability spread evenly over `kinds`."""
        chosen = list(kinds)
        bad = set(chosen) - set(FAULT_KINDS)
        if bad:
            raise ValueError(f"unknown fault kinds: {sorted(bad)}")
        share = total / len(chosen) if chosen else 0.0
        rates: dict[str, Any] = {k: share for k in chosen}
        return cls(**rates, seed=seed, **overrides)


@dataclass(frozen=True)
class Arrival:
    """A chat request about to be answered, as `on_request` sees it."""

    number: int  # 1 for the first chat request the server received, 2 for the next, ...
    schema: str  # VERDICTS_SCHEMA_NAME or REASON_SCHEMA_NAME
    peer: tuple[str, int] | None  # the client's (address, port)


class _Reply(Exception):
    """Raised inside the handler to answer at once with an error response."""

    def __init__(self, response: web.Response, outcome: str) -> None:
        super().__init__(outcome)
        self.response = response
        self.outcome = outcome


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


def serve_until_stopped(url: str, max_seconds: float) -> None:
    """Print `url` (the line a parent process waits for), then return on SIGTERM or SIGINT,
    or after `max_seconds`: the main thread of a server process run from the command line."""
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(url, flush=True)
    done.wait(max_seconds)


def _error(
    status: int,
    message: str,
    err_type: str,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": err_type, "param": None, "code": code}}
    return web.Response(
        status=status,
        body=json.dumps(body).encode(),
        content_type="application/json",
        headers=headers,
    )


def _bad_request(message: str, code: str | None = None) -> _Reply:
    return _Reply(_error(400, message, "invalid_request_error", code), "bad_request")


def _max_in_window(timestamps: list[float], window_s: float) -> int:
    """Largest number of timestamps in any half-open window (t - window_s, t]; sorted input."""
    best = 0
    lo = 0
    for hi, t in enumerate(timestamps):
        while timestamps[lo] <= t - window_s:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


class FakeJudgeServer:
    """An OpenAI-compatible chat-completions server on 127.0.0.1, run in a background thread.

    `tpm` is the number of tokens admitted per `window_s` (0 = unlimited; see `set_tpm`).
    `rpm` is the number of requests admitted per `window_s` seconds (0 = unlimited); it is
    called rpm because the window defaults to 60 s, and tests shrink both proportionally.

        with FakeJudgeServer(rpm=600, fault_plan=FaultPlan(server_error=0.1)) as server:
            client = OpenAI(base_url=server.url, api_key="x")
    """

    def __init__(
        self,
        port: int = 0,
        *,
        rpm: int = 0,
        window_s: float = 60.0,
        tpm: int = 0,
        retry_after_header: bool = True,
        fault_plan: FaultPlan | None = None,
        verdict_fn: Callable[[str, str], bool] | None = None,
        require_api_key: str | None = None,
        accepted_response_formats: Iterable[str] = RESPONSE_FORM_NAMES,
        response_format_rejection_status: int = 500,
        max_logged_requests: int = 1000,
        max_timestamps: int = 200_000,
        shutdown_timeout_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_request: Callable[[Arrival], None] | None = None,
        batch_plan: BatchPlan | None = None,
    ) -> None:
        self._requested_port = port
        self.port: int = port
        self._retry_after_header = retry_after_header
        self._verdict_fn = verdict_fn or default_verdict_fn
        self._require_auth = f"Bearer {require_api_key}" if require_api_key is not None else None
        self._accepted_forms = frozenset(accepted_response_formats)
        unknown_forms = self._accepted_forms - set(RESPONSE_FORM_NAMES)
        if unknown_forms:
            raise ValueError(f"unknown response formats {sorted(unknown_forms)}")
        self._form_rejection_status = response_format_rejection_status
        self._shutdown_timeout_s = shutdown_timeout_s
        self._max_logged_requests = max_logged_requests
        self._max_timestamps = max_timestamps
        self._clock = clock
        self._sleep = sleep
        self._on_request = on_request
        self._listening = threading.Event()

        # One lock guards all mutable state: the handler runs on the server thread while
        # stats()/set_*() are called from test threads. It is never held across an await.
        self._lock = threading.Lock()
        self._limit = 0
        self._window_s = 60.0
        self._window: deque[float] = deque()  # admitted requests still inside the window
        self.set_rpm(rpm, window_s)
        self._token_limit = 0
        self._token_window: deque[tuple[float, int]] = deque()  # (admitted at, tokens)
        self._tokens_in_window = 0
        self.set_tpm(tpm)
        self._plan = FaultPlan()
        self._rng = random.Random(0)
        self._cumulative: list[float] = []
        self._cumulative_kinds: list[str] = []
        self.set_fault_plan(fault_plan or FaultPlan())
        self._init_stats()

        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._reopen_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._reply_counter = 0
        # The Files + Batches API (scorer_core.testing.batches), answering with this judge.
        self.batches = FakeBatchAPI(self.answer_body, batch_plan)

    # ----------------------------------------------------------------------------------------
    # lifecycle

    @property
    def url(self) -> str:
        """Base URL for OpenAI clients, e.g. http://127.0.0.1:PORT/v1."""
        return f"http://{HOST}:{self.port}/v1"

    @property
    def base_url(self) -> str:
        """Server root (for /stats and /admin/*), e.g. http://127.0.0.1:PORT."""
        return f"http://{HOST}:{self.port}"

    @property
    def is_listening(self) -> bool:
        return self._site is not None

    def start(self, timeout_s: float = 10.0) -> FakeJudgeServer:
        """Bind 127.0.0.1:port (0 = a free port), serve in a daemon thread, return self."""
        if self._thread is not None:
            raise RuntimeError("FakeJudgeServer already started")
        self._thread = threading.Thread(target=self._run, name="fake-judge", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise RuntimeError("FakeJudgeServer did not start in time")
        if self._start_error is not None:
            self._thread.join()
            self._thread = None
            raise RuntimeError(f"FakeJudgeServer failed to start: {self._start_error!r}")
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Close the listener and connections (pending slow replies are cancelled)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread.is_alive():
            fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
            try:
                fut.result(timeout_s)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout_s)
        self._thread = None
        self._loop = None

    def __enter__(self) -> FakeJudgeServer:
        return self if self._thread is not None else self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            loop.run_until_complete(self._startup())
        except BaseException as exc:  # reported to start() in the caller's thread
            self._start_error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _startup(self) -> None:
        # Batch input files may be up to MAX_BYTES (OpenAI's 200 MB), plus the multipart frame.
        app = web.Application(client_max_size=MAX_BYTES + 16 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle_chat)
        app.router.add_post("/chat/completions", self._handle_chat)  # base_url without /v1
        app.router.add_get("/stats", self._handle_stats)
        app.router.add_get("/requests", self._handle_requests)
        app.router.add_post("/admin/reset", self._handle_admin_reset)
        app.router.add_post("/admin/fault_plan", self._handle_admin_fault_plan)
        app.router.add_post("/admin/rpm", self._handle_admin_rpm)
        app.router.add_post("/admin/refuse", self._handle_admin_refuse)
        self.batches.add_routes(app)
        # No access log and no signal handling: this runs in a thread, at thousands of req/s.
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=self._shutdown_timeout_s
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, self._requested_port, reuse_address=True)
        await site.start()
        self._site = site
        self.port = site.port
        self._listening.set()

    async def _shutdown(self) -> None:
        if self._reopen_task is not None:
            self._reopen_task.cancel()
        for task in list(self._background):
            task.cancel()
        self._site = None
        if self._runner is not None:
            await self._runner.cleanup()

    # ----------------------------------------------------------------------------------------
    # runtime control

    def set_fault_plan(self, plan: FaultPlan) -> None:
        """Use `plan` from the next request on; re-seeds the random generator."""
        cumulative: list[float] = []
        kinds: list[str] = []
        acc = 0.0
        for kind, rate in plan.rates().items():
            acc += rate
            cumulative.append(acc)
            kinds.append(kind)
        with self._lock:
            self._plan = plan
            self._rng = random.Random(plan.seed)
            self._cumulative = cumulative
            self._cumulative_kinds = kinds

    @property
    def fault_plan(self) -> FaultPlan:
        return self._plan

    def set_tpm(self, limit: int) -> None:
        """Admit at most `limit` tokens per window (the `rpm` window; 0 = unlimited), counted
        from each request as a provider does: its prompt tokens plus its completion tokens
        (the request's `max_tokens` when it sets one)."""
        if limit < 0:
            raise ValueError("limit must be >= 0")
        with self._lock:
            self._token_limit = int(limit)

    def set_rpm(self, limit: int, window_s: float | None = None) -> None:
        """Admit at most `limit` requests per `window_s` seconds (0 = unlimited)."""
        if limit < 0:
            raise ValueError("limit must be >= 0")
        if window_s is not None and window_s <= 0:
            raise ValueError("window_s must be > 0")
        with self._lock:
            self._limit = int(limit)
            if window_s is not None:
                self._window_s = float(window_s)

    def refuse_connections(self, seconds: float) -> None:
        """Stop listening (and drop open connections) for `seconds`, then listen again on the
        same port. Returns once the listener is closed, so the next connect is refused."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("server is not running")
        if threading.current_thread() is self._thread:
            raise RuntimeError("call refuse_connections from another thread")
        asyncio.run_coroutine_threadsafe(self._refuse(seconds), loop).result(10.0)

    async def _refuse(self, seconds: float) -> None:
        if self._reopen_task is not None:  # a second outage replaces the first one's timer
            self._reopen_task.cancel()
            self._reopen_task = None
        with self._lock:
            self._refusals += 1
        site = self._site
        self._site = None
        self._listening.clear()
        if site is not None:
            await site.stop()
        # Closing the listener leaves accepted keep-alive connections open; drop them too,
        # otherwise pooled clients would not notice the outage.
        server = self._runner.server if self._runner is not None else None
        if server is not None:
            for conn in server.connections:
                conn.force_close()
        self._reopen_task = asyncio.get_running_loop().create_task(self._reopen_after(seconds))

    async def _reopen_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        assert self._runner is not None
        # The port was ours a moment ago; retry briefly in case the kernel is slow to free it.
        for _ in range(50):
            try:
                site = web.TCPSite(self._runner, HOST, self.port, reuse_address=True)
                await site.start()
            except OSError:
                await asyncio.sleep(0.1)
                continue
            self._site = site
            self._reopen_task = None
            self._listening.set()
            return
        raise RuntimeError(f"fake judge could not listen on port {self.port} again")

    def accept_connections(self) -> None:
        """End an outage now: listen again on the same port; returns once listening."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("server is not running")
        asyncio.run_coroutine_threadsafe(self._accept(), loop).result(10.0)

    async def _accept(self) -> None:
        if self._site is not None:
            return
        if self._reopen_task is not None:  # the outage's own timer is no longer needed
            self._reopen_task.cancel()
        await self._reopen_after(0.0)

    def wait_listening(self, timeout_s: float) -> bool:
        """Wait until the server listens (again, after an outage); False after `timeout_s`."""
        return self._listening.wait(timeout_s)

    # ----------------------------------------------------------------------------------------
    # introspection

    def _init_stats(self) -> None:
        self._total = 0
        self._by_status: Counter[str] = Counter()
        self._by_schema: Counter[str] = Counter()
        self._by_outcome: Counter[str] = Counter()
        self._faults: Counter[str] = Counter()
        self._count_429 = 0
        self._window_429 = 0
        self._accepted = 0
        self._tokens_admitted = 0
        self._accepted_ts: deque[float] = deque(maxlen=self._max_timestamps)
        self._auth_seen: set[str] = set()
        self._no_auth = 0
        self._in_flight = 0
        self._max_in_flight = 0
        self._contexts_judged = 0
        self._refusals = 0
        self._by_form: Counter[str] = Counter()
        self._form_rejections: Counter[str] = Counter()
        self._log: deque[dict[str, Any]] = deque(maxlen=self._max_logged_requests)

    def reset_stats(self) -> None:
        """Forget counters, logs and timestamps. The rate limiter keeps its current window."""
        with self._lock:
            in_flight = self._in_flight
            refusals = self._refusals
            self._init_stats()
            self._in_flight = in_flight
            self._refusals = refusals

    def accepted_timestamps(self) -> list[float]:
        """The clock's time of each admitted request (the last `max_timestamps`), oldest first."""
        with self._lock:
            return list(self._accepted_ts)

    def max_in_any_window(self, window_s: float | None = None) -> int:
        """The most admitted requests in any window of `window_s` (default: the limiter's)."""
        with self._lock:
            stamps = list(self._accepted_ts)
            window = self._window_s if window_s is None else window_s
        return _max_in_window(stamps, window)

    def authorization_headers(self) -> set[str]:
        """Every distinct Authorization header value seen."""
        with self._lock:
            return set(self._auth_seen)

    def requests(self) -> list[dict[str, Any]]:
        """The last `max_logged_requests` parsed request bodies, newest last."""
        with self._lock:
            return list(self._log)

    def stats(self) -> dict[str, Any]:
        """A JSON-compatible snapshot. Status codes are string keys, as they are in GET /stats."""
        with self._lock:
            snapshot: dict[str, Any] = {
                "url": self.url,
                "total_requests": self._total,
                "by_status": dict(self._by_status),
                "by_schema": dict(self._by_schema),
                "by_outcome": dict(self._by_outcome),
                "faults": dict(self._faults),
                "rate_limited_429": self._count_429,  # every 429 sent, injected or not
                "rate_limited_by_window": self._window_429,  # 429s from the sliding window
                "accepted": self._accepted,  # admitted by the sliding window
                "rpm": self._limit,
                "tpm": self._token_limit,
                "tokens_admitted": self._tokens_admitted,  # counted as the token limit counts
                "window_s": self._window_s,
                "authorization_headers": sorted(self._auth_seen),
                "requests_without_authorization": self._no_auth,
                "in_flight": self._in_flight,
                "max_in_flight": self._max_in_flight,
                "contexts_judged": self._contexts_judged,
                "by_response_format": dict(self._by_form),
                "response_format_rejections": dict(self._form_rejections),
                "refusals": self._refusals,
                "listening": self._site is not None,
                "fault_plan": self._plan.to_dict(),
            }
            stamps = list(self._accepted_ts)
        snapshot["max_in_any_window"] = _max_in_window(stamps, snapshot["window_s"])
        # The span over which requests were admitted (seconds, monotonic clock): the rate a
        # client held while it was sending, start-up excluded.
        snapshot["accepted_span_s"] = stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0
        # time.monotonic() of the first and last admitted request (one clock for every process
        # on the machine), so a benchmark can place the sending span inside its own timings.
        snapshot["first_accepted_at"] = stamps[0] if stamps else None
        snapshot["last_accepted_at"] = stamps[-1] if stamps else None
        return snapshot

    # ----------------------------------------------------------------------------------------
    # request handling

    async def _handle_chat(self, request: web.Request) -> web.Response:
        with self._lock:
            self._total += 1
            number = self._total
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        outcome = "ok"
        try:
            try:
                response = await self._answer(request, number)
            except _Reply as reply:
                response, outcome = reply.response, reply.outcome
        except Exception as exc:  # a bug in the fake must show up as a 500, not a hang
            response = _error(500, f"fake judge internal error: {exc!r}", "server_error")
            outcome = "internal_error"
        with self._lock:
            self._in_flight -= 1
            self._by_status[str(response.status)] += 1
            self._by_outcome[outcome] += 1
            if response.status == 429:
                self._count_429 += 1
        return response

    async def _answer(self, request: web.Request, number: int) -> web.Response:
        auth = request.headers.get("Authorization")
        raw = await request.read()
        with self._lock:
            if auth is None:
                self._no_auth += 1
            elif auth not in self._auth_seen and len(self._auth_seen) < 1000:
                self._auth_seen.add(auth)
        if self._require_auth is not None and auth != self._require_auth:
            raise _Reply(
                _error(401, "Incorrect API key.", "invalid_request_error", "invalid_api_key"),
                "unauthorized",
            )
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise _bad_request(f"request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise _bad_request("request body must be a JSON object")
        form = _form_name(body)
        with self._lock:
            self._log.append(body)
            self._by_form[form or "invalid"] += 1
        if form is None:
            raise _bad_request(
                "response_format.type must be json_schema, json_object or text",
                "invalid_response_format",
            )
        if form not in self._accepted_forms:
            with self._lock:
                self._form_rejections[form] += 1
            raise _Reply(self._form_rejection(form), "response_format_rejected")
        messages, schema = self._count_schema(body, form)
        if schema not in (VERDICTS_SCHEMA_NAME, REASON_SCHEMA_NAME):
            raise _bad_request(
                "response_format must be a json_schema named "
                f"{VERDICTS_SCHEMA_NAME!r} or {REASON_SCHEMA_NAME!r}, got {schema!r}",
                "invalid_response_format",
            )

        fault, plan = self._draw_fault(schema)
        if fault in ("rate_limit_429", "rate_limit_429_no_header"):
            headers = {"Retry-After": str(plan.retry_after_s)} if fault == "rate_limit_429" else {}
            raise _Reply(_rate_limit_error(headers), f"fault:{fault}")
        # The reply is decided before admission so that the token limit counts what the reply
        # will report, as a provider counts prompt plus completion tokens.
        answered = self._reply_content(messages, schema, fault)
        content, judged, prompt_tokens, completion_tokens = answered
        max_tokens = body.get("max_tokens")
        budget = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else None
        limit_headers = self._admit(prompt_tokens + (budget or completion_tokens))
        with self._lock:
            self._contexts_judged += judged
        if fault == "server_error":
            with self._lock:
                status = self._rng.choice((500, 502, 503))
            raise _Reply(
                _error(status, f"fake judge injected HTTP {status}", "server_error"),
                f"fault:{fault}",
            )
        if self._on_request is not None:
            peer = request.transport.get_extra_info("peername") if request.transport else None
            arrival = Arrival(number, schema, (peer[0], peer[1]) if peer else None)
            await asyncio.to_thread(self._on_request, arrival)
        with self._lock:
            delay = plan.draw_latency(self._rng)
        if fault == "slow":
            delay += plan.slow_s
        if delay > 0:
            await self._sleep(delay)
        return self._completion(body, content, prompt_tokens, completion_tokens, limit_headers)

    def _form_rejection(self, form: str) -> web.Response:
        """What a server without `form` answers (llama-cpp-python's reply by default)."""
        allowed = " or ".join(f"'{f}'" for f in RESPONSE_FORM_NAMES if f in self._accepted_forms)
        if self._form_rejection_status >= 500:
            detail = {
                "type": "literal_error",
                "loc": ("body", "response_format", "type"),
                "msg": f"Input should be {allowed}",
                "input": form,
            }
            return _error(
                self._form_rejection_status,
                f"1 validation error:\n  {detail}\n\n  POST /v1/chat/completions",
                "internal_server_error",
            )
        return _error(
            self._form_rejection_status,
            f"Invalid parameter: 'response_format' of type '{form}' is not supported by this "
            "server.",
            "invalid_request_error",
            "unsupported_response_format",
        )

    def _draw_fault(self, schema: str) -> tuple[str | None, FaultPlan]:
        """One draw per request; counts the fault if it will actually be applied."""
        with self._lock:
            plan = self._plan
            if not self._cumulative:
                return None, plan
            u = self._rng.random()
            i = bisect.bisect_right(self._cumulative, u)
            if i >= len(self._cumulative_kinds):
                return None, plan
            kind = self._cumulative_kinds[i]
            if kind in CONTENT_FAULTS and schema != VERDICTS_SCHEMA_NAME:
                return None, plan
            self._faults[kind] += 1
            return kind, plan

    def _admit(self, tokens: int) -> dict[str, str]:
        """Sliding-window limits on requests and on tokens: admit and record now, returning the
        `x-ratelimit-*` headers a provider sends with the reply, or raise a 429 reply."""
        with self._lock:
            now = self._clock()
            horizon = now - self._window_s
            window = self._window
            while window and window[0] <= horizon:
                window.popleft()
            tokens_window = self._token_window
            while tokens_window and tokens_window[0][0] <= horizon:
                self._tokens_in_window -= tokens_window.popleft()[1]
            limit, token_limit = self._limit, self._token_limit
            refusal: dict[str, str] | None = None
            if limit > 0 and len(window) >= limit:
                wait = window[0] + self._window_s - now
                refusal = {
                    "x-ratelimit-limit-requests": str(limit),
                    "x-ratelimit-remaining-requests": "0",
                    "x-ratelimit-reset-requests": f"{wait:.3f}s",
                }
            elif token_limit > 0 and self._tokens_in_window + tokens > token_limit:
                # Wait until enough of the window's tokens have aged out for this request.
                freed, wait = self._tokens_in_window, self._window_s
                for admitted, spent in tokens_window:
                    freed -= spent
                    if freed + tokens <= token_limit:
                        wait = admitted + self._window_s - now
                        break
                refusal = {
                    "x-ratelimit-limit-tokens": str(token_limit),
                    "x-ratelimit-remaining-tokens": str(
                        max(0, token_limit - self._tokens_in_window)
                    ),
                    "x-ratelimit-reset-tokens": f"{wait:.3f}s",
                }
            if refusal is not None:
                self._window_429 += 1
                if self._retry_after_header:
                    reset = max(
                        float(v.removesuffix("s")) for k, v in refusal.items() if "reset" in k
                    )
                    refusal["Retry-After"] = str(max(1, math.ceil(reset)))
                raise _Reply(_rate_limit_error(refusal), "rate_limited")
            window.append(now)
            tokens_window.append((now, tokens))
            self._tokens_in_window += tokens
            self._tokens_admitted += tokens
            self._accepted += 1
            self._accepted_ts.append(now)
            headers: dict[str, str] = {}
            if limit > 0:
                headers["x-ratelimit-limit-requests"] = str(limit)
                headers["x-ratelimit-remaining-requests"] = str(limit - len(window))
            if token_limit > 0:
                headers["x-ratelimit-limit-tokens"] = str(token_limit)
                headers["x-ratelimit-remaining-tokens"] = str(
                    max(0, token_limit - self._tokens_in_window)
                )
            return headers

    def _verdict_content(self, messages: list[Any], fault: str | None) -> tuple[str, int]:
        """The verdict reply's content and how many contexts it judges (counted by the caller
        once the request is admitted)."""
        text = _last_user_text(messages)
        query_match = _QUERY_RE.search(text)
        block = _CONTEXTS_RE.search(text)
        if query_match is None or block is None:
            raise _bad_request("fake judge: no <query> or <contexts> in the last user message")
        try:
            query = json.loads(query_match.group(1))
            contexts = [
                (int(m.group(1)), json.loads(m.group(2)))
                for m in _CONTEXT_LINE_RE.finditer(block.group(1))
            ]
        except ValueError as exc:
            raise _bad_request(f"fake judge: a data line is not a JSON string: {exc}") from None
        verdicts: list[dict[str, Any]] = []
        for index, context in contexts:
            relevant = self._verdict_fn(context, query)
            verdicts.append(
                {
                    "context_index": index,
                    "verdict": "yes" if relevant else "no",
                    "reason": f"Context {index} is {'' if relevant else 'not '}useful here.",
                }
            )
        with self._lock:
            if fault is None:
                return json.dumps({"verdicts": verdicts}), len(verdicts)
            return _apply_content_fault(fault, verdicts, self._rng), len(verdicts)

    def _completion(
        self,
        body: dict[str, Any],
        content: str,
        prompt_tokens: int,
        completion_tokens: int,
        headers: dict[str, str],
    ) -> web.Response:
        reply = self._completion_body(body, content, prompt_tokens, completion_tokens)
        return web.Response(
            body=json.dumps(reply).encode(), content_type="application/json", headers=headers
        )

    def _count_schema(self, body: dict[str, Any], form: str | None) -> tuple[list[Any], str | None]:
        """The request's messages (400 unless a non-empty list) and which of our requests it
        is (the schema name, or for the other forms the kind its prompt reads as), counted."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _bad_request("messages must be a non-empty list")
        schema = _schema_name(body) if form == "json_schema" else _kind_of(messages)
        with self._lock:
            self._by_schema[schema or "missing"] += 1
        return messages, schema

    def _reply_content(
        self, messages: list[Any], schema: str | None, fault: str | None
    ) -> tuple[str, int, int, int]:
        """The reply's content to a verdicts or reason request (with the drawn content fault,
        if any), the contexts it judged, and its prompt and completion tokens."""
        if schema == VERDICTS_SCHEMA_NAME:
            content_fault = fault if fault in CONTENT_FAULTS else None
            content, judged = self._verdict_content(messages, content_fault)
        else:
            content, judged = json.dumps({"reason": _reason_text(messages)}), 0
        return content, judged, *_token_counts(messages, content)

    def _completion_body(
        self, body: dict[str, Any], content: str, prompt_tokens: int, completion_tokens: int
    ) -> dict[str, Any]:
        with self._lock:
            self._reply_counter += 1
            reply_id = f"chatcmpl-fake{self._reply_counter}"
        model = body.get("model", "fake-judge")
        return chat_completion(reply_id, model, content, prompt_tokens, completion_tokens)

    def answer_body(self, body: Any) -> tuple[int, dict[str, Any]]:
        """One chat-completions body answered as this judge answers it over HTTP (the same
        verdicts, reasons, content faults and 5xx/429 faults of the fault plan), without the
        rate limits, latency or connection behaviour: (HTTP status, JSON body). Each line of a
        fake batch is answered with it."""
        try:
            if not isinstance(body, dict):
                raise _bad_request("request body must be a JSON object")
            form = _form_name(body)
            with self._lock:
                self._by_form[form or "invalid"] += 1
            if form is None or form not in self._accepted_forms:
                raise _Reply(self._form_rejection(form or "invalid"), "response_format_rejected")
            messages, schema = self._count_schema(body, form)
            if schema not in (VERDICTS_SCHEMA_NAME, REASON_SCHEMA_NAME):
                raise _bad_request(f"not a context-precision request (schema {schema!r})")
            fault, _ = self._draw_fault(schema)
            if fault in ("rate_limit_429", "rate_limit_429_no_header"):
                raise _Reply(_rate_limit_error({}), f"fault:{fault}")
            if fault == "server_error":
                raise _Reply(_error(500, "fake judge injected HTTP 500", "server_error"), fault)
            answered = self._reply_content(messages, schema, fault)
            content, judged, prompt_tokens, completion_tokens = answered
            with self._lock:
                self._contexts_judged += judged
            return 200, self._completion_body(body, content, prompt_tokens, completion_tokens)
        except _Reply as reply:
            raw = reply.response.body
            return reply.response.status, json.loads(raw if isinstance(raw, bytes) else b"{}")

    # ----------------------------------------------------------------------------------------
    # HTTP control endpoints (for a server running as its own process)

    async def _handle_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _handle_requests(self, request: web.Request) -> web.Response:
        last = int(request.query.get("last", "100"))
        return web.json_response(self.requests()[-last:] if last > 0 else [])

    async def _handle_admin_reset(self, request: web.Request) -> web.Response:
        self.reset_stats()
        return web.json_response({"ok": True})

    async def _handle_admin_fault_plan(self, request: web.Request) -> web.Response:
        try:
            plan = FaultPlan.from_dict(await request.json())
        except (ValueError, TypeError) as exc:
            return _error(400, str(exc), "invalid_request_error")
        self.set_fault_plan(plan)
        return web.json_response({"ok": True, "fault_plan": plan.to_dict()})

    async def _handle_admin_rpm(self, request: web.Request) -> web.Response:
        try:
            data = await request.json()
            self.set_rpm(int(data["rpm"]), data.get("window_s"))
        except (ValueError, TypeError, KeyError) as exc:
            return _error(400, repr(exc), "invalid_request_error")
        return web.json_response({"ok": True})

    async def _handle_admin_refuse(self, request: web.Request) -> web.Response:
        try:
            seconds = float((await request.json())["seconds"])
        except (ValueError, TypeError, KeyError) as exc:
            return _error(400, repr(exc), "invalid_request_error")

        async def later() -> None:
            await asyncio.sleep(0.05)  # let this response go out before the connection drops
            await self._refuse(seconds)

        task = asyncio.get_running_loop().create_task(later())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return web.json_response({"ok": True, "seconds": seconds})


# --------------------------------------------------------------------------------------------
# helpers


def _rate_limit_error(headers: dict[str, str]) -> web.Response:
    return _error(
        429,
        "Rate limit reached for requests (fake judge).",
        "rate_limit_exceeded",
        "rate_limit_exceeded",
        headers,
    )


def _form_name(body: dict[str, Any]) -> str | None:
    """The structured-output form of a request: "text" when it asks for none."""
    fmt = body.get("response_format")
    if fmt is None:
        return "text"
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    return kind if kind in RESPONSE_FORM_NAMES else None


def _kind_of(messages: list[Any]) -> str | None:
    """Which request this is when no schema name says so: by the prompt's sections."""
    try:
        text = _last_user_text(messages)
    except _Reply:
        return None
    if _VERDICTS_SECTION_RE.search(text):
        return REASON_SCHEMA_NAME
    if _CONTEXTS_SECTION_RE.search(text):
        return VERDICTS_SCHEMA_NAME
    return None


def _token_counts(messages: list[Any], content: str) -> tuple[int, int]:
    """(prompt, completion) tokens as this server counts and reports them: 4 characters each."""
    prompt_chars = sum(len(_text_of(m)) for m in messages)
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


def _text_of(message: Any) -> str:
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multi-part content: count the text parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text_of(message)
    raise _bad_request("fake judge: no user message")


def _reason_text(messages: list[Any]) -> str:
    match = _SCORE_RE.search(_last_user_text(messages))
    # The section reads "<score> out of <scale>"; a reason restates only the score.
    score = match.group(1).split()[0] if match else "unknown"
    return (
        f"The score is {score} because of where the relevant contexts rank: relevant "
        "passages near the top raise it, relevant passages further down lower it."
    )


_CASE_VARIANTS = {"yes": (" Yes ", "YES", "Yes", " yes"), "no": (" No ", "NO", "No", "no ")}


def _apply_content_fault(fault: str, verdicts: list[dict[str, Any]], rng: random.Random) -> str:
    """Serialise `verdicts` damaged (or harmlessly altered) as `fault` says. Caller holds the
    lock because this uses the shared generator."""
    indices = [v["context_index"] for v in verdicts]
    if fault == "malformed_json":
        return _MALFORMED_CONTENT
    if fault == "truncated_json":
        full = json.dumps({"verdicts": verdicts})
        return full[: rng.randint(1, len(full) - 1)]
    if fault == "code_fence":
        return "```json\n" + json.dumps({"verdicts": verdicts}) + "\n```"
    if fault == "text_around":
        return (
            "Sure! Here are the verdicts you asked for:\n"
            + json.dumps({"verdicts": verdicts})
            + "\nLet me know if you need anything else."
        )
    if fault == "wrong_count":
        if verdicts and rng.random() < 0.5:
            del verdicts[rng.randrange(len(verdicts))]
        else:
            extra = max(indices, default=-1) + 1
            verdicts.append({"context_index": extra, "verdict": "no", "reason": "Extra."})
    elif fault == "unknown_verdict_word":
        if verdicts:
            verdicts[rng.randrange(len(verdicts))]["verdict"] = "maybe"
        else:
            verdicts.append({"context_index": 0, "verdict": "maybe", "reason": "Unsure."})
    elif fault == "duplicate_index":
        if len(verdicts) >= 2:
            i, j = rng.sample(range(len(verdicts)), 2)
            verdicts[j]["context_index"] = verdicts[i]["context_index"]
        elif verdicts:
            verdicts.append(dict(verdicts[0]))
        else:
            verdicts += [{"context_index": 0, "verdict": "no", "reason": "Dup."}] * 2
    elif fault == "out_of_range_index":
        bad = rng.choice((-1, max(indices, default=0) + 1000))
        if verdicts:
            verdicts[rng.randrange(len(verdicts))]["context_index"] = bad
        else:
            verdicts.append({"context_index": bad, "verdict": "no", "reason": "Out of range."})
    elif fault == "shuffled":
        if len(verdicts) >= 2:
            original = list(verdicts)
            rng.shuffle(verdicts)
            if verdicts == original:  # make sure the order really changed
                verdicts.append(verdicts.pop(0))
    elif fault == "case_and_space":
        for v in verdicts:
            v["verdict"] = rng.choice(_CASE_VARIANTS[v["verdict"]])
    else:
        raise ValueError(f"unknown content fault {fault!r}")
    return json.dumps({"verdicts": verdicts})
