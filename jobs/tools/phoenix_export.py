"""`ctxprec export phoenix RUN`: a published run's verdicts as document annotations and its
scores as span annotations on the retrieval spans, read in bounded batches and sent a few
batches at a time to an `AnnotationSink` (Phoenix's here; another backend implements it too).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TextIO
from urllib.parse import quote

import httpx
import pyarrow.compute as pc
import pyarrow.dataset as ds

from jobs.core.console import progress_extra
from jobs.tools.published_runs import PublishedRun, load_run, write_file
from jobs.tools.tool_options import ExportOptions, PublishedRoot
from scorer_core.errors import ConfigError, CtxPrecError

if TYPE_CHECKING:
    from jobs.core.config import JobConfig
    from jobs.engine import RunOutcome

logger = logging.getLogger(__name__)
SPAN_SUFFIX = "_relevance"  # the document name's suffix the span name drops


class SinkRefused(CtxPrecError):
    """The backend refused us (credentials, unknown project): nothing more is sent."""


class SinkUnavailable(CtxPrecError):
    """The backend did not answer within the retry deadline."""


class UnknownSpans(Exception):
    """The batch names a span the backend does not hold: the whole batch was refused."""


@dataclass(frozen=True, slots=True)
class Annotation:
    """One result on a span; `position` set: on that retrieved document of the span."""

    span_id: str
    name: str
    score: float
    label: str | None
    explanation: str | None
    position: int | None = None


class AnnotationSink(Protocol):
    """Where annotations go: `check` before the first, `send` a batch (one kind) or raise."""

    def check(self) -> None: ...

    def send(self, annotations: Sequence[Annotation]) -> None: ...


def retryable(status: int | None) -> bool:
    """Worth asking again: no answer (None), too many requests, or a server error."""
    return status is None or status == 429 or status >= 500


@dataclass
class PhoenixSink:
    """Phoenix's REST API: `POST /v1/document_annotations` and `/v1/span_annotations`."""

    endpoint: str
    project: str
    headers: dict[str, str]
    metadata: dict[str, str]
    retry_seconds: float = 120.0
    sleep: Callable[[float], None] = time.sleep
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.endpoint = self.endpoint.rstrip("/")
        self.client = httpx.Client(base_url=self.endpoint, headers=self.headers, timeout=30.0)

    def check(self) -> None:
        answer = self._request("GET", f"/v1/projects/{quote(self.project, safe='')}")
        if answer.status_code == 404:
            raise SinkRefused(f"Phoenix at {self.endpoint} has no project {self.project!r}")

    def send(self, annotations: Sequence[Annotation]) -> None:
        documents = annotations[0].position is not None
        body = [self._record(a) for a in annotations]
        path = "/v1/document_annotations" if documents else "/v1/span_annotations"
        answer = self._request("POST", path, params={"sync": "true"}, json={"data": body})
        if answer.status_code == 404:
            raise UnknownSpans(answer.text[:200])
        if answer.status_code >= 400:
            raise CtxPrecError(f"{self.endpoint}{path}: HTTP {answer.status_code}: {answer.text}")

    def _record(self, a: Annotation) -> dict[str, Any]:
        result = {"label": a.label, "score": a.score, "explanation": a.explanation}
        record: dict[str, Any] = {
            "span_id": a.span_id,
            "name": a.name,
            "annotator_kind": "LLM",
            "result": result,
        }
        if a.position is not None:
            record["document_position"] = a.position
        return record | {"metadata": self.metadata}

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        deadline, wait_s = time.monotonic() + self.retry_seconds, 0.25
        while True:
            try:
                answer = self.client.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                why = f"{type(exc).__name__}: {exc}"
            else:
                if answer.status_code in (401, 403):
                    raise SinkRefused(
                        f"Phoenix at {self.endpoint} refused {method} {path} (HTTP "
                        f"{answer.status_code}): check the API key variable (api_key_env, "
                        "default PHOENIX_API_KEY) and the headers"
                    )
                if not retryable(answer.status_code):
                    return answer
                why = f"HTTP {answer.status_code}"
            if time.monotonic() + wait_s > deadline:
                raise SinkUnavailable(
                    f"Phoenix at {self.endpoint} unreachable for {self.retry_seconds:g}s "
                    f"({method} {path}: {why})"
                )
            self.sleep(wait_s)
            wait_s = min(wait_s * 2, 5.0)


def deliver(sink: AnnotationSink, batch: Sequence[Annotation]) -> tuple[int, list[str]]:
    """(annotations sent, spans the sink does not hold): a refused batch is halved until the
    unknown spans are alone, the rest sent."""
    try:
        sink.send(batch)
        return len(batch), []
    except UnknownSpans:
        spans = list(dict.fromkeys(a.span_id for a in batch))
        if len(spans) == 1:
            return 0, spans
    # halve between spans, so one span's annotations stay together
    cut = next(i for i, a in enumerate(batch) if a.span_id == spans[len(spans) // 2])
    left, right = deliver(sink, batch[:cut]), deliver(sink, batch[cut:])
    return left[0] + right[0], left[1] + right[1]


@dataclass
class ExportReport:
    """What an export did; `left`: sendable annotations not sent (0: done)."""

    run_id: str
    target: str
    documents_sent: int = 0
    spans_sent: int = 0
    skipped_verdicts: int = 0
    skipped_items: int = 0
    unknown_spans: int = 0
    unknown_annotations: int = 0
    left: int = 0
    unknown_spans_file: str | None = None
    error: str | None = None
    seconds: float = 0.0

    def summary(self) -> str:
        text = (
            f"export of run {self.run_id} to {self.target}: sent {self.documents_sent:,} "
            f"document and {self.spans_sent:,} span annotation(s); skipped "
            f"{self.skipped_verdicts:,} verdict(s) without a verdict and {self.skipped_items:,} "
            f"unscored item(s); {self.unknown_spans:,} span(s) not found"
        )
        if self.unknown_spans_file:
            text += f" (listed in {self.unknown_spans_file})"
        if self.left:
            text += f"; NOT SENT: {self.left:,} annotation(s) ({self.error})"
        return text + f"; {self.seconds:.1f}s"


def _dataset(run: PublishedRun, table: str) -> ds.Dataset:
    store = run.store
    path = store.join(run.location.table_file(table))
    if store.is_local:
        return ds.dataset(path, format="parquet")
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    return ds.dataset(path, format="parquet", filesystem=PyFileSystem(FSSpecHandler(store.fs)))


def annotation_batches(
    run: PublishedRun, names: tuple[str, str], span_column: str, size: int
) -> Iterator[list[Annotation]]:
    """The run's verdicts, then its scores, as annotations, `size` at a time (batches of the
    Parquet files: memory stays flat); the rows without a verdict or a score are left out."""
    tables = (("verdicts", "relevant", "judge_reason"), ("scores", "score", "reason"))
    for (table, value, reason), name in zip(tables, names, strict=True):
        data = _dataset(run, table)
        if span_column not in data.schema.names:
            raise ConfigError(
                f"--span-id-column {span_column}: run {run.run_id}'s {table} table has no such "
                f"column (carry it: input.carry and input.carry_to_verdicts)"
            )
        columns = [span_column, value, reason, *(("position",) if table == "verdicts" else ())]
        keep = pc.field(value).is_valid() & pc.field(span_column).is_valid()
        for batch in data.to_batches(columns=columns, filter=keep, batch_size=size):
            rows = batch.to_pydict()
            yield [
                Annotation(
                    span_id=str(rows[span_column][i]),
                    name=name,
                    score=float(rows[value][i]),
                    label=("relevant" if rows[value][i] else "unrelated")
                    if table == "verdicts"
                    else None,
                    explanation=rows[reason][i],
                    position=rows["position"][i] if table == "verdicts" else None,
                )
                for i in range(batch.num_rows)
            ]


def _counts(run: PublishedRun, span_column: str) -> tuple[int, int, int]:
    """(sendable annotations, verdicts without a verdict, items without a score)."""
    verdicts, scores = _dataset(run, "verdicts"), _dataset(run, "scores")
    sendable = sum(
        data.count_rows(filter=pc.field(value).is_valid() & pc.field(span_column).is_valid())
        for data, value in ((verdicts, "relevant"), (scores, "score"))
        if span_column in data.schema.names
    )
    skipped = [
        data.count_rows(filter=pc.field(value).is_null())
        for data, value in ((verdicts, "relevant"), (scores, "score"))
    ]
    return sendable, skipped[0], skipped[1]


def export_run(
    run: PublishedRun,
    sink: AnnotationSink,
    report: ExportReport,
    options: ExportOptions,
) -> list[str]:
    """Send every annotation of `run` to `sink`, `options.in_flight` batches at a time, into
    `report`; returns the spans the sink does not hold. Stops at the first refusal or outage."""
    names = (options.name, span_annotation_name(options.name))
    sendable, report.skipped_verdicts, report.skipped_items = _counts(run, options.span_id_column)
    unknown: dict[str, None] = {}
    sink.check()
    with ThreadPoolExecutor(options.in_flight, thread_name_prefix="export") as pool:
        pending: dict[Future[tuple[int, list[str]]], list[Annotation]] = {}
        try:
            batches = annotation_batches(run, names, options.span_id_column, options.batch_size)
            for batch in batches:
                while len(pending) >= options.in_flight:
                    _collect(pending, report, unknown, wait(pending, return_when=FIRST_COMPLETED))
                pending[pool.submit(deliver, sink, batch)] = batch
            while pending:
                _collect(pending, report, unknown, wait(pending))
        except (SinkRefused, SinkUnavailable) as exc:
            report.error = str(exc)
            for future in pending:
                future.cancel()
    sent = report.documents_sent + report.spans_sent + report.unknown_annotations
    report.left, report.unknown_spans = sendable - sent, len(unknown)
    return list(unknown)


def _collect(
    pending: dict[Future[tuple[int, list[str]]], list[Annotation]],
    report: ExportReport,
    unknown: dict[str, None],
    finished: Any,
) -> None:
    for future in finished.done:
        batch = pending.pop(future)
        sent, spans = future.result()  # raises the batch's SinkRefused or SinkUnavailable
        missing = set(spans)
        report.unknown_annotations += sum(1 for a in batch if a.span_id in missing)
        unknown.update(dict.fromkeys(spans))
        if batch[0].position is None:
            report.spans_sent += sent
        else:
            report.documents_sent += sent
    done = report.documents_sent + report.spans_sent
    logger.info(f"export: {done:,} annotation(s) sent", extra=progress_extra())


def span_annotation_name(name: str) -> str:
    """The span annotation's name from the documents': without `_relevance`, else `_precision`
    added (the defaults: context_precision_relevance -> context_precision)."""
    stem = name.removesuffix(SPAN_SUFFIX)
    return stem if stem and stem != name else f"{name}_precision"


def header_map(assignments: Sequence[str]) -> dict[str, str]:
    """NAME=VALUE strings (--header) as a mapping."""
    pairs = [text.partition("=") for text in assignments]
    bad = [name for name, sep, _ in pairs if not sep or not name.strip()]
    if bad:
        raise ConfigError(f"--header {bad[0]!r}: expected NAME=VALUE")
    return {name.strip(): value for name, _, value in pairs}


def bearer_headers(api_key_env: str, headers: dict[str, str]) -> dict[str, str]:
    """`headers` and, when the variable holds a key, its bearer token (never logged)."""
    key = os.environ.get(api_key_env)
    return {**headers, **({"Authorization": f"Bearer {key}"} if key else {})}


def run(options: ExportOptions, out: TextIO | None = None) -> int:
    """`ctxprec export phoenix`: 0 when every sendable annotation was sent, else 1."""
    started = time.monotonic()
    published = load_run(options.root.store(), options.run)
    target = f"Phoenix at {options.endpoint} project {options.project!r}"
    report = ExportReport(published.run_id, target)
    metadata = {
        "run_id": published.run_id,
        "judge_model": published.judge_model,
        "prompt_version": published.prompt_version,
    }
    headers = bearer_headers(options.api_key_env, header_map(options.headers))
    sink = PhoenixSink(options.endpoint, options.project, headers, metadata, options.retry_seconds)
    unknown = export_run(published, sink, report, options)
    if unknown:
        default = f"exports/{published.run_id}-phoenix-unknown-spans.txt"
        data = "".join(f"{span}\n" for span in unknown).encode()
        store = options.root.store()
        report.unknown_spans_file = write_file(store, None, default, data, {})
    report.seconds = round(time.monotonic() - started, 3)
    print(json.dumps(asdict(report)) if options.as_json else report.summary(), file=out)
    if report.left:
        print(f"run again to send the rest: {export_command(options)}", file=out)
    return 1 if report.left else 0


def export_command(options: ExportOptions) -> str:
    """The command line that (re)sends the run's annotations."""
    return (
        f"ctxprec export phoenix {options.run} --output {options.root.output} "
        f"--endpoint {options.endpoint} --project {options.project} --name {options.name}"
    )


def export_after_run(config: JobConfig, outcome: RunOutcome) -> int:
    """The config's `export.phoenix` once the run is published: 1 on a failure, which leaves
    the run published and names the command that completes the export."""
    target = config.export.phoenix
    if target is None:
        return 0
    options = ExportOptions(
        target="phoenix",
        run=outcome.run_id,
        root=PublishedRoot(config.output.path, config.output.storage_options),
        endpoint=target.endpoint,
        project=target.project,
        name=target.name,
        span_id_column=target.span_id_column,
        batch_size=target.batch_size,
        api_key_env=target.api_key_env,
        headers=tuple(f"{name}={value}" for name, value in target.headers.items()),
    )
    try:
        return run(options, sys.stderr)
    except CtxPrecError as exc:
        print(
            f"run {outcome.run_id} is published, its export failed: {exc}; complete it with: "
            f"{export_command(options)}",
            file=sys.stderr,
        )
        return 1
