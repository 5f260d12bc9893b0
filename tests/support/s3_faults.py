"""An S3 endpoint the tests can break on purpose and count requests at: `FaultyS3`.

It serves moto's S3 on 127.0.0.1 at a fixed port (moto keeps its buckets in memory per process,
so it sees the same buckets as the session's `moto_s3` server), with server-side hooks:

- every request it answers is recorded (`seen`: method, path, status), so a test counts the
  requests the client's retry layers really sent;
- `fail_next(n)` answers the next n requests with an S3 error (503 SlowDown unless told) instead
  of moto; `deny(prefix)` answers 403 AccessDenied for every key under a prefix;
- `stop()` closes the port (connections are refused) and drops every open connection;
  `start()` serves again on the same port;
- `reset_next(n)` drops every open connection and resets the next n new ones (accepted, then
  closed unread): a flapping endpoint, over once n connections met it. (werkzeug closes each
  connection after one answer, so the open connections are the requests in flight.)
- `after(hook)` runs `hook(request)` once a request's response has been sent, so a test can
  break the endpoint at a precise point of a run (say, once a shard is committed) without
  polling or sleeping.

A dropped or reset connection is what aiohttp (3.14, under aiobotocore) retries once by itself
for idempotent methods (GET, HEAD, PUT, DELETE) without a wait (aiohttp/client.py, the
`retry_persistent_connection` branch); a refused connection and an HTTP error answer are not.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server
from werkzeug.wsgi import get_input_stream

_REASONS = {403: "Forbidden", 404: "Not Found", 500: "Internal Server Error", 503: "Slow Down"}


@dataclass(frozen=True)
class Request:
    """One request the endpoint answered: `path` is the URL path, unquoted (/bucket/key)."""

    method: str
    path: str
    status: int


def _error_body(code: str, path: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>injected by the test</Message>"
        f"<Resource>{path}</Resource><RequestId>faulty-s3</RequestId></Error>"
    ).encode()


def _abort(connection: socket.socket) -> None:
    """Close with a TCP reset, the way a crashed server or a middlebox drops a connection."""
    with contextlib.suppress(OSError):
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.shutdown(socket.SHUT_RDWR)


class _Handler(MotoRequestHandler):
    """moto's request handler, with the connection-level faults and the `after` hooks."""

    server: Any  # the werkzeug server; `.owner` is the FaultyS3

    def setup(self) -> None:
        super().setup()
        self.server.owner._opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._closed(self.connection)

    def handle(self) -> None:
        if self.server.owner._take_reset():
            _abort(self.connection)
            return
        super().handle()

    def handle_one_request(self) -> None:
        owner: FaultyS3 = self.server.owner
        super().handle_one_request()
        request = owner._answered()
        if request is not None:
            owner._run_hooks(request)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Silent: a test run should not print every S3 request."""


class FaultyS3:
    """A moto S3 endpoint on a fixed loopback port with server-side fault hooks (module doc)."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.seen: list[Request] = []
        self.resets_done = 0
        self._app = DomainDispatcherApplication(create_backend_app)
        self._lock = threading.Lock()
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._live: set[socket.socket] = set()
        self._failures: deque[tuple[int, str]] = deque()
        self._denied: list[str] = []
        self._resets_left = 0
        self._hooks: list[Callable[[Request], None]] = []
        # The connection (and its last answered request) of the handler thread running now.
        self._current = threading.local()

    # -- what a test calls --------------------------------------------------------------------

    @property
    def serving(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        with self._lock:
            if self._server is not None:
                return
            logging.getLogger("werkzeug").setLevel(logging.ERROR)
            server = make_server(
                "127.0.0.1", self.port, self._wsgi, threaded=True, request_handler=_Handler
            )
            server.owner = self  # type: ignore[attr-defined]
            # How often serve_forever looks for a shutdown: stop() waits up to this long.
            thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
            thread.start()
            self._server, self._thread = server, thread

    def stop(self) -> None:
        """Refuse connections from now on and drop the open ones (idempotent). Safe to call
        from an `after` hook: the connection whose answer ran the hook is left to close."""
        with self._lock:
            server, thread = self._server, self._thread
            if server is None:
                return
            self._server = self._thread = None
            live = list(self._live)
        server.shutdown()  # werkzeug closes the listening socket when serve_forever returns
        if thread is not None:
            thread.join()
        self._drop(live)

    def reset_next(self, connections: int) -> None:
        """Drop the open connections and reset the next `connections` new ones."""
        with self._lock:
            self._resets_left += connections
            live = list(self._live)
        self._drop(live)

    def fail_next(self, requests: int, status: int = 503, code: str = "SlowDown") -> None:
        with self._lock:
            self._failures.extend([(status, code)] * requests)

    def deny(self, prefix: str) -> None:
        """403 AccessDenied for every request whose path starts with `prefix` (/bucket/key)."""
        with self._lock:
            self._denied.append(prefix)

    def after(self, hook: Callable[[Request], None]) -> None:
        with self._lock:
            self._hooks.append(hook)

    def reachable(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def requests(self, method: str | None = None, under: str = "") -> list[Request]:
        """The answered requests, optionally only one method's and under a path prefix."""
        with self._lock:
            seen = list(self.seen)
        return [
            r for r in seen if (method is None or r.method == method) and r.path.startswith(under)
        ]

    # -- the server side ----------------------------------------------------------------------

    def _wsgi(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        with self._lock:
            failure = self._failures.popleft() if self._failures else None
            if failure is None and any(path.startswith(p) for p in self._denied):
                failure = (403, "AccessDenied")
        if failure is not None:
            status, code = failure
            get_input_stream(environ).read()  # the connection stays usable for the next request
            # An answer to HEAD has no body (werkzeug would send one, and the client would
            # fail to parse the extra bytes: a transient error the test did not ask for).
            body = b"" if method == "HEAD" else _error_body(code, path)
            start_response(
                f"{status} {_REASONS.get(status, 'Error')}",
                [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))],
            )
            self._record(Request(method, path, status))
            return [body]

        def recording_start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
            self._record(Request(method, path, int(status.split()[0])))
            return start_response(status, headers, exc_info)

        return self._app(environ, recording_start_response)  # type: ignore[no-any-return]

    def _record(self, request: Request) -> None:
        # Recorded before the answer is sent: a client that has its answer finds it in `seen`.
        with self._lock:
            self.seen.append(request)
        self._current.request = request

    def _answered(self) -> Request | None:
        """The request this handler thread has just answered, if any (then forgotten)."""
        request: Request | None = getattr(self._current, "request", None)
        self._current.request = None
        return request

    def _run_hooks(self, request: Request) -> None:
        with self._lock:
            hooks = list(self._hooks)
        for hook in hooks:
            hook(request)

    def _take_reset(self) -> bool:
        with self._lock:
            if self._resets_left <= 0:
                return False
            self._resets_left -= 1
            self.resets_done += 1
            return True

    def _opened(self, connection: socket.socket) -> None:
        self._current.connection = connection  # one handler thread per connection
        with self._lock:
            self._live.add(connection)

    def _closed(self, connection: socket.socket) -> None:
        with self._lock:
            self._live.discard(connection)

    def _drop(self, connections: list[socket.socket]) -> None:
        mine = getattr(self._current, "connection", None)
        for connection in connections:
            if connection is not mine:
                _abort(connection)
