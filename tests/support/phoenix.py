"""A real Phoenix server (`phoenix serve`, the dev extra's arize-phoenix) on 127.0.0.1 for a
test module, its own working folder (SQLite) and free ports; `stop` and `start` again keep its
data. RAG traces sent to it with the OpenTelemetry SDK's OTLP/HTTP exporter, and what the tests
read back (span annotations over REST, document annotations over GraphQL).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.otlp import Expected

HOST = "127.0.0.1"


def executable() -> str | None:
    """`phoenix` beside this interpreter, else on PATH (None: not installed)."""
    beside = Path(sys.executable).parent / "phoenix"
    return str(beside) if beside.exists() else shutil.which("phoenix")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


@dataclass
class PhoenixServer:
    """`phoenix serve` in `folder` on a port of its own; `url` once started."""

    folder: Path
    port: int = field(default_factory=_free_port)
    grpc_port: int = field(default_factory=_free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, timeout_s: float = 120.0) -> PhoenixServer:
        env = os.environ | {
            "PHOENIX_WORKING_DIR": str(self.folder),
            "PHOENIX_HOST": HOST,
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
        }
        log = (self.folder / "phoenix.log").open("ab")
        command = [executable() or "phoenix", "serve"]
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"phoenix serve exited: see {self.folder / 'phoenix.log'}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"phoenix serve not answering at {self.url} after {timeout_s}s")

    def stop(self, kill: bool = False) -> None:
        """Ended (`kill`: at once, as a crash would), its data kept for `start`."""
        if self.process is not None and self.process.poll() is None:
            (self.process.kill if kill else self.process.terminate)()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def send_rag_traces(url: str, project: str, count: int, seed: int = 3) -> list[Expected]:
    """`count` traces (a CHAIN root with an answer and a `tenant`, a RETRIEVER child with 2-5
    documents marked RELEVANT or IRRELEVANT) over OTLP/HTTP; the items they must give."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    rng = random.Random(seed)
    provider = TracerProvider(resource=Resource({"openinference.project.name": project}))
    exporter = OTLPSpanExporter(f"{url}/v1/traces")
    # a queue that holds every span: the default (2,048) drops spans of a larger burst
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=max(2048, 2 * count)))
    tracer = provider.get_tracer("ctxprec.tests")
    expected = []
    for n in range(count):
        relevance = [rng.random() < 0.5 for _ in range(rng.randint(2, 5))]
        texts = [
            f"passage {n}.{i} {'RELEVANT' if r else 'IRRELEVANT'}" for i, r in enumerate(relevance)
        ]
        documents = {f"retrieval.documents.{i}.document.content": t for i, t in enumerate(texts)}
        documents |= {
            f"retrieval.documents.{i}.document.id": f"doc-{n}-{i}" for i in range(len(texts))
        }
        root_attributes = {
            "openinference.span.kind": "CHAIN",
            "output.value": f"answer {n}",
            "tenant": f"t{n % 3}",
        }
        with tracer.start_as_current_span("rag", attributes=root_attributes) as root:
            retriever = {"openinference.span.kind": "RETRIEVER", "input.value": f"question {n}"}
            with tracer.start_as_current_span("retrieve", attributes=retriever | documents) as span:
                context = span.get_span_context()
        expected.append(
            Expected(
                query_id=f"{context.span_id:016x}",
                trace_id=f"{context.trace_id:032x}",
                input=f"question {n}",
                output=f"answer {n}",
                contexts=texts,
                context_ids=[f"doc-{n}-{i}" for i in range(len(texts))],
                relevance=relevance,
                start_ns=span.start_time or 0,  # type: ignore[attr-defined]
                carried={
                    "tenant": f"t{n % 3}",
                    "root_span": f"{root.get_span_context().span_id:016x}",
                },
            )
        )
    provider.shutdown()  # flushes
    return expected


def wait_for_spans(url: str, project: str, count: int, timeout_s: float = 60.0) -> None:
    """Until Phoenix holds `count` RETRIEVER spans of `project` (it writes them asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = retriever_count(url, project)
        if found >= count or time.monotonic() > deadline:
            assert found == count, f"Phoenix holds {found} retrieval span(s), {count} were sent"
            return
        time.sleep(0.3)


def retriever_count(url: str, project: str) -> int:
    found, cursor = 0, None
    while True:
        query: dict[str, Any] = {"span_kind": "RETRIEVER", "limit": 1000}
        if cursor:
            query["cursor"] = cursor
        answer = httpx.get(f"{url}/v1/projects/{project}/spans", params=query, timeout=30)
        if answer.status_code == 404:
            return 0
        page = answer.json()
        found += len(page["data"])
        if not (cursor := page.get("next_cursor")):
            return found


def span_annotations(url: str, project: str, span_ids: Iterable[str]) -> list[dict[str, Any]]:
    """Every span annotation on `span_ids` (REST, 100 spans a request)."""
    ids, found = list(span_ids), []
    for start in range(0, len(ids), 100):
        cursor = None
        while True:
            query: dict[str, Any] = {"span_ids": ids[start : start + 100], "limit": 1000}
            if cursor:
                query["cursor"] = cursor
            page = httpx.get(
                f"{url}/v1/projects/{project}/span_annotations", params=query, timeout=30
            ).json()
            found += page["data"]
            if not (cursor := page.get("next_cursor")):
                break
    return found


_DOCUMENTS = """query($id: ID!, $after: String) { node(id: $id) { ... on Project {
  spans(first: 500, after: $after) { pageInfo { hasNextPage endCursor }
    edges { node { spanId
      documentEvaluations { name label score explanation documentPosition } } } }
} } }"""


def document_annotations(url: str, project: str) -> dict[tuple[str, str, int], dict[str, Any]]:
    """(name, span id, position) -> the document annotation, for every span of `project`."""
    project_id = httpx.get(f"{url}/v1/projects/{project}", timeout=30).json()["data"]["id"]
    found: dict[tuple[str, str, int], dict[str, Any]] = {}
    after = None
    while True:
        variables = {"id": project_id, "after": after}
        answer = httpx.post(
            f"{url}/graphql", json={"query": _DOCUMENTS, "variables": variables}, timeout=60
        )
        spans = answer.json()["data"]["node"]["spans"]
        for edge in spans["edges"]:
            for doc in edge["node"]["documentEvaluations"]:
                found[(doc["name"], edge["node"]["spanId"], doc["documentPosition"])] = doc
        if not spans["pageInfo"]["hasNextPage"]:
            return found
        after = spans["pageInfo"]["endCursor"]
