"""Make a run's shards start on two Ray nodes, without timing: a barrier for its workers.

A run's workers take shards from one board, so a worker that starts first can take every
shard before the other one's process is up. `contexts` (a context extractor:
`input.context_extractor: tests.support.node_barrier:contexts`) holds each worker process's
first read at a `NodeBarrier` (a TCP server on 127.0.0.1 in the test process, its address in
`BARRIER_ENV`) until workers on `nodes` different Ray nodes have arrived; then every read goes
on. A worker holds at most two shards while it waits, so with more shards than that the
other node's worker gets some before anyone judges anything. A read that waits longer than
`TIMEOUT_S` fails its row (the test then sees errors instead of scores).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from typing import Any

BARRIER_ENV = "CTXPREC_NODE_BARRIER"
TIMEOUT_S = 180.0

_released = threading.Event()
_lock = threading.Lock()


def contexts(row: dict[str, Any]) -> Any:
    """The row's `contexts`, once workers on enough nodes have reached the barrier."""
    if not _released.is_set():
        with _lock:
            if not _released.is_set():
                _wait_at_barrier()
                _released.set()
    return row["contexts"]


def _wait_at_barrier() -> None:
    import ray

    host, port = os.environ[BARRIER_ENV].rsplit(":", 1)
    node = ray.get_runtime_context().get_node_id()
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as conn:
        conn.sendall(f"{node}\n".encode())
        reply = conn.makefile().readline().strip()
    if reply != "go":
        raise RuntimeError(f"node barrier answered {reply!r}")


class NodeBarrier:
    """The server side: answers "go" to every waiting worker once workers on `nodes`
    distinct nodes have connected, and at once to any later one. `nodes_seen` lists them."""

    def __init__(self, nodes: int = 2) -> None:
        self._nodes = nodes
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self.nodes_seen: set[str] = set()
        self._waiting: list[socket.socket] = []
        self._open = False
        self._thread = threading.Thread(target=self._serve, name="node-barrier", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:  # closed
                return
            node = conn.makefile().readline().strip()
            self.nodes_seen.add(node)
            self._waiting.append(conn)
            if len(self.nodes_seen) >= self._nodes:
                self._open = True
            if self._open:
                for waiting in self._waiting:
                    with waiting:
                        waiting.sendall(b"go\n")
                self._waiting = []

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the blocked accept(), which close() does not
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        for waiting in self._waiting:
            waiting.close()
        self._thread.join(timeout=10)

    def __enter__(self) -> NodeBarrier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
