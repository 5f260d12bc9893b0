"""A fake OpenAI-compatible judge: a real aiohttp server on 127.0.0.1 for tests and benchmarks.

`POST /v1/chat/completions` answers a verdict request (schema `context_precision_verdicts`, or
with the other forms a prompt with a `<contexts>` section) with one verdict per context line,
relevant iff the context holds the word RELEVANT (or as `verdict_fn` says), and a reason
request with "The score is <score> because ..."; anything else gets an OpenAI-style 400.
`accepted_response_formats` imitates servers without a structured-output form (refused as
llama-cpp-python does, HTTP 500 with a validation error, or an OpenAI-style 400).

On top: a sliding-window request and token limit (429 + Retry-After), faults drawn from a
seeded `FaultPlan` (one draw per request, so a retry can succeed), refusing connections for a
while, the fake Files + Batches API (`server.batches`), and `stats()` / `GET /stats`. Time is
injectable (`clock`, `sleep`), and `on_request` sees each request first, in its own thread, so
a test can count, act at an exact request or hold requests. The server runs in a background
thread with its own event loop; per-request work is small and every log bounded, since a
zero-latency benchmark pushes thousands of requests per second at it. The answering rules live
in `chat`, the wire format in `wire`, faults in `faults`, rate windows in `limits`.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from aiohttp import web

from tests.fake_judge.batches import MAX_BYTES, BatchPlan, FakeBatchAPI
from tests.fake_judge.chat import ChatJudge, Prepared, PromptCache
from tests.fake_judge.faults import (
    CONTENT_FAULTS,
    FAULT_KINDS,
    STATUS_FAULTS,
    VALID_CONTENT_FAULTS,
    WRAPPED_CONTENT_FAULTS,
    FaultPlan,
    lognormal_parameters,
)
from tests.fake_judge.limits import max_in_window
from tests.fake_judge.wire import (
    REASON_SCHEMA_NAME,
    RESPONSE_FORM_NAMES,
    VERDICTS_SCHEMA_NAME,
    WireError,
    bad_request,
    build_verdict_prompt_for_tests,
    chat_completion,
    default_verdict_fn,
)

# Names this module has always offered, now defined next door.
__all__ = [
    "CONTENT_FAULTS",
    "FAULT_KINDS",
    "HOST",
    "REASON_SCHEMA_NAME",
    "RESPONSE_FORM_NAMES",
    "STATUS_FAULTS",
    "VALID_CONTENT_FAULTS",
    "VERDICTS_SCHEMA_NAME",
    "WRAPPED_CONTENT_FAULTS",
    "Arrival",
    "FakeJudgeServer",
    "FaultPlan",
    "build_verdict_prompt_for_tests",
    "chat_completion",
    "default_verdict_fn",
    "lognormal_parameters",
    "serve_until_stopped",
]

HOST = "127.0.0.1"  # never bind anything else: this server is for local tests only


@dataclass(frozen=True)
class Arrival:
    """A chat request about to be answered, as `on_request` sees it."""

    number: int  # 1 for the first chat request the server received, 2 for the next, ...
    schema: str  # VERDICTS_SCHEMA_NAME or REASON_SCHEMA_NAME
    peer: tuple[str, int] | None  # the client's (address, port)


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


def _response(error: WireError) -> web.Response:
    """The HTTP response of a refused request."""
    return web.Response(
        status=error.status,
        body=json.dumps(error.body()).encode(),
        content_type="application/json",
        headers=error.headers or None,
    )


class FakeJudgeServer:
    """An OpenAI-compatible chat-completions server on 127.0.0.1, run in a background thread.

    `tpm` is the number of tokens admitted per `window_s` (0 = unlimited; see `set_tpm`).
    `rpm` is the number of requests admitted per `window_s` seconds (0 = unlimited); it is
    called rpm because the window defaults to 60 s, and tests shrink both proportionally.
    `prompt_cache` ("openai" or "anthropic") reports a provider's prompt cache in that
    provider's usage keys: the leading message, once seen and at least `cache_min_tokens` long.

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
        prompt_cache: PromptCache | None = None,
        cache_min_tokens: int = 1024,
    ) -> None:
        # The answering rules, faults, rate windows and statistics (tests.fake_judge.chat).
        self._chat = ChatJudge(
            verdict_fn=verdict_fn,
            fault_plan=fault_plan,
            accepted_response_formats=accepted_response_formats,
            response_format_rejection_status=response_format_rejection_status,
            retry_after_header=retry_after_header,
            max_logged_requests=max_logged_requests,
            max_timestamps=max_timestamps,
            clock=clock,
            prompt_cache=prompt_cache,
            cache_min_tokens=cache_min_tokens,
        )
        self.set_rpm(rpm, window_s)
        self.set_tpm(tpm)
        self._requested_port = port
        self.port: int = port
        self._require_auth = f"Bearer {require_api_key}" if require_api_key is not None else None
        self._shutdown_timeout_s = shutdown_timeout_s
        self._sleep = sleep
        self._on_request = on_request
        self._listening = threading.Event()
        self._refusals = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._reopen_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        # The Files + Batches API (tests.fake_judge.batches), answering with this judge.
        self.batches = FakeBatchAPI(self.answer_body, batch_plan)

    @property
    def _lock(self) -> threading.Lock:
        """The lock of the judge's state (subclasses add state of their own under it)."""
        return self._chat.lock

    @property
    def _log(self) -> Any:
        """The request log (a bounded deque of bodies), under `_lock`."""
        return self._chat.log

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
        self._chat.set_fault_plan(plan)

    @property
    def fault_plan(self) -> FaultPlan:
        return self._chat.fault_plan

    def set_tpm(self, limit: int) -> None:
        """Admit at most `limit` tokens per window (the `rpm` window; 0 = unlimited), counted
        from each request as a provider does: its prompt tokens plus its completion tokens
        (the request's `max_tokens` when it sets one)."""
        self._chat.set_tpm(limit)

    def set_rpm(self, limit: int, window_s: float | None = None) -> None:
        """Admit at most `limit` requests per `window_s` seconds (0 = unlimited)."""
        self._chat.set_rpm(limit, window_s)

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

    def reset_stats(self) -> None:
        """Forget counters, logs and timestamps. The rate limiter keeps its current window."""
        self._chat.reset_stats()

    def accepted_timestamps(self) -> list[float]:
        """The clock's time of each admitted request (the last `max_timestamps`), oldest first."""
        with self._lock:
            return list(self._chat.accepted_ts)

    def max_in_any_window(self, window_s: float | None = None) -> int:
        """The most admitted requests in any window of `window_s` (default: the limiter's)."""
        with self._lock:
            stamps = list(self._chat.accepted_ts)
            window = self._chat.limits.window_s if window_s is None else window_s
        return max_in_window(stamps, window)

    def authorization_headers(self) -> set[str]:
        """Every distinct Authorization header value seen."""
        with self._lock:
            return set(self._chat.auth_seen)

    def requests(self) -> list[dict[str, Any]]:
        """The last `max_logged_requests` parsed request bodies, newest last."""
        return self._chat.requests()

    def stats(self) -> dict[str, Any]:
        """A JSON-compatible snapshot. Status codes are string keys, as they are in GET /stats."""
        snapshot = {"url": self.url, **self._chat.stats()}
        with self._lock:
            snapshot["refusals"] = self._refusals
        snapshot["listening"] = self._site is not None
        return snapshot

    # ----------------------------------------------------------------------------------------
    # request handling

    async def _handle_chat(self, request: web.Request) -> web.Response:
        number = self._chat.begin()
        outcome = "ok"
        try:
            try:
                response = await self._answer(request, number)
            except WireError as error:
                response, outcome = _response(error), error.outcome
        except Exception as exc:  # a bug in the fake must show up as a 500, not a hang
            internal = WireError(
                500, f"fake judge internal error: {exc!r}", "server_error", outcome="internal_error"
            )
            response, outcome = _response(internal), internal.outcome
        self._chat.finish(response.status, outcome)
        return response

    async def _answer(self, request: web.Request, number: int) -> web.Response:
        """Answer one request: its key checked, its body parsed and answered by the judge
        (`ChatJudge.prepare`), `on_request` told, the reply's latency slept."""
        auth = request.headers.get("Authorization")
        raw = await request.read()
        self._chat.record_auth(auth)
        if self._require_auth is not None and auth != self._require_auth:
            raise WireError(
                401,
                "Incorrect API key.",
                "invalid_request_error",
                "invalid_api_key",
                outcome="unauthorized",
            )
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise bad_request(f"request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise bad_request("request body must be a JSON object")
        prepared = self._chat.prepare(body)
        if self._on_request is not None:
            peer = request.transport.get_extra_info("peername") if request.transport else None
            arrival = Arrival(number, prepared.schema, (peer[0], peer[1]) if peer else None)
            await asyncio.to_thread(self._on_request, arrival)
        delay = self._chat.latency(prepared)
        if delay > 0:
            await self._sleep(delay)
        return self._completion(body, prepared)

    def _completion(self, body: dict[str, Any], prepared: Prepared) -> web.Response:
        reply = self._chat.completion_body(
            body, prepared.content, prepared.prompt_tokens, prepared.completion_tokens
        )
        return web.Response(
            body=json.dumps(reply).encode(),
            content_type="application/json",
            headers=prepared.headers,
        )

    def answer_body(self, body: Any) -> tuple[int, dict[str, Any]]:
        """One chat-completions body answered as this judge answers it over HTTP (the same
        verdicts, reasons, content faults and 5xx/429 faults of the fault plan), without the
        rate limits, latency or connection behaviour: (HTTP status, JSON body). Each line of a
        fake batch is answered with it."""
        return self._chat.answer_line(body)

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
            return _response(WireError(400, str(exc), "invalid_request_error", outcome="admin"))
        self.set_fault_plan(plan)
        return web.json_response({"ok": True, "fault_plan": plan.to_dict()})

    async def _handle_admin_rpm(self, request: web.Request) -> web.Response:
        try:
            data = await request.json()
            self.set_rpm(int(data["rpm"]), data.get("window_s"))
        except (ValueError, TypeError, KeyError) as exc:
            return _response(WireError(400, repr(exc), "invalid_request_error", outcome="admin"))
        return web.json_response({"ok": True})

    async def _handle_admin_refuse(self, request: web.Request) -> web.Response:
        try:
            seconds = float((await request.json())["seconds"])
        except (ValueError, TypeError, KeyError) as exc:
            return _response(WireError(400, repr(exc), "invalid_request_error", outcome="admin"))

        async def later() -> None:
            await asyncio.sleep(0.05)  # let this response go out before the connection drops
            await self._refuse(seconds)

        task = asyncio.get_running_loop().create_task(later())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return web.json_response({"ok": True, "seconds": seconds})
