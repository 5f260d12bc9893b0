"""`ctxprec export phoenix RUN`: a run's verdicts and scores as annotations on their spans, read
in bounded batches, sent a few at a time to an `AnnotationSink` (Phoenix's, or another's)."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol, TextIO
from urllib.parse import quote

import httpx
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyarrow.fs import FSSpecHandler, PyFileSystem

from jobs.core.console import progress_extra
from jobs.tools.published_runs import PublishedRun, load_run, write_file
from jobs.tools.tool_options import EXPORT_IN_FLIGHT, ExportOptions, PublishedRoot, check_minimum
from scorer_core.errors import ConfigError, CtxPrecError
from scorer_core.retry import RetryPolicy, parse_retry_after

if TYPE_CHECKING:
    from jobs.core.config import JobConfig
    from jobs.engine import RunOutcome

logger = logging.getLogger(__name__)
IN_FLIGHT = EXPORT_IN_FLIGHT  # batches sent at a time (a request each)
RETRY_SECONDS = 120.0  # how long a request is asked again after a 429, a 5xx or no answer


class SinkFailed(CtxPrecError):
    """The sink refused us (the key, the project) or did not answer: nothing more is sent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Annotation:
    """A result on a span; with a `position`: on that retrieved document of the span."""

    span_id: str
    name: str
    score: float
    explanation: str | None
    position: int | None = None

    @property
    def label(self) -> str | None:
        """A document's label as Phoenix's own relevance evals write it; a span's has none."""
        if self.position is None:
            return None
        if self.score:
            return "relevant"
        return "unrelated"


class AnnotationSink(Protocol):
    """Where annotations go: `check` before the first batch, then `send` each batch (of one
    kind); `send` raises LookupError for a batch naming a span the sink does not hold."""

    def check(self) -> None: ...
    def send(self, annotations: Sequence[Annotation]) -> None: ...


def _backoff() -> RetryPolicy:
    return RetryPolicy(base_delay_s=0.25, max_delay_s=5.0)


@dataclass(kw_only=True)
class PhoenixSink:
    """Phoenix's `POST /v1/document_annotations` and `/v1/span_annotations` (sync), over
    `transport` (None: the network; tests pass an `httpx.MockTransport`)."""

    endpoint: str
    project: str
    headers: dict[str, str]
    metadata: dict[str, str]
    api_key_env: str = "PHOENIX_API_KEY"  # where the key in `headers` came from, for messages
    retry_seconds: float = RETRY_SECONDS
    retry: RetryPolicy = field(default_factory=_backoff)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    transport: httpx.BaseTransport | None = None
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.endpoint = self.endpoint.rstrip("/")  # as messages name it: URL + path
        self.client = httpx.Client(
            base_url=self.endpoint, headers=self.headers, timeout=30.0, transport=self.transport
        )

    def check(self) -> None:
        """The project is there. Asked once, not again: an absent Phoenix fails at once."""
        path = f"/v1/projects/{quote(self.project, safe='')}"
        answer = self._request("GET", path, patience_s=0.0)
        if answer.status_code == 404:
            raise SinkFailed(f"Phoenix at {self.endpoint} has no project {self.project!r}")

    def send(self, annotations: Sequence[Annotation]) -> None:
        if annotations[0].position is None:
            path = "/v1/span_annotations"
        else:
            path = "/v1/document_annotations"
        data = [self._record(annotation) for annotation in annotations]
        answer = self._request(
            "POST",
            path,
            patience_s=self.retry_seconds,
            params={"sync": "true"},
            json={"data": data},
        )
        if answer.status_code == 404:
            raise LookupError(answer.text[:200])
        if answer.status_code >= 400:
            raise SinkFailed(f"{self.endpoint}{path}: HTTP {answer.status_code}: {answer.text}")

    def close(self) -> None:
        self.client.close()

    def _record(self, annotation: Annotation) -> dict[str, Any]:
        """One annotation as Phoenix's API takes it."""
        result = {
            "label": annotation.label,
            "score": annotation.score,
            "explanation": annotation.explanation,
        }
        record: dict[str, Any] = {
            "span_id": annotation.span_id,
            "name": annotation.name,
            "annotator_kind": "LLM",
            "metadata": self.metadata,
            "result": result,
        }
        if annotation.position is not None:
            record["document_position"] = annotation.position
        return record

    def _request(
        self, method: str, path: str, *, patience_s: float, **request: Any
    ) -> httpx.Response:
        """The answer to `method path`. A 429, a 5xx or no answer is asked again after the
        wait `retry` gives (a 429's Retry-After obeyed) until `patience_s` have passed; a
        refused key stops at once."""
        asked = f"{method} {path}"
        deadline = self.clock() + patience_s
        attempt = 0
        while True:
            retry_after = None
            try:
                answer = self.client.request(method, path, **request)
            except httpx.TransportError as exc:
                why = f"{type(exc).__name__}: {exc}"
            else:
                if answer.status_code in (401, 403):
                    raise SinkFailed(self._refused(asked, answer.status_code))
                if answer.status_code != 429 and answer.status_code < 500:
                    return answer
                why = f"HTTP {answer.status_code}"
                retry_after = parse_retry_after(answer.headers.get("retry-after"))
            wait_s = self.retry.delay_for(attempt, retry_after)
            if self.clock() + wait_s >= deadline:
                raise SinkFailed(self._unreachable(asked, why, patience_s))
            self.sleep(wait_s)
            attempt += 1

    def _refused(self, asked: str, status: int) -> str:
        """Why Phoenix refused us (401, 403), and what to check: the key and where it is read."""
        refused = f"Phoenix at {self.endpoint} refused {asked} (HTTP {status})"
        where = "export.phoenix.api_key_env in the config, --api-key-env on the command line"
        sent = any(name.lower() == "authorization" for name in self.headers)
        if not sent:
            return (
                f"{refused}: no API key was sent, as the environment variable "
                f"{self.api_key_env} is not set; set it to the key, or name the variable "
                f"that holds it ({where})"
            )
        return (
            f"{refused}: check the API key in the environment variable {self.api_key_env} "
            f"({where}) and any headers set in the config"
        )

    def _unreachable(self, asked: str, why: str, patience_s: float) -> str:
        if patience_s:
            return f"Phoenix at {self.endpoint} unreachable for {patience_s:g}s ({asked}: {why})"
        return f"Phoenix at {self.endpoint} unreachable ({asked}: {why})"


def deliver(sink: AnnotationSink, batch: Sequence[Annotation]) -> tuple[int, list[str]]:
    """(annotations sent, spans the sink does not hold): a refused batch is halved between
    spans until the unknown spans are alone; the rest is sent."""
    try:
        sink.send(batch)
        return len(batch), []
    except LookupError:  # the batch names a span the sink lacks: all of it was refused
        spans = list(dict.fromkeys(annotation.span_id for annotation in batch))
        if len(spans) == 1:
            return 0, spans
    middle = spans[len(spans) // 2]
    cut = next(index for index, annotation in enumerate(batch) if annotation.span_id == middle)
    sent_before, unknown_before = deliver(sink, batch[:cut])
    sent_after, unknown_after = deliver(sink, batch[cut:])
    return sent_before + sent_after, unknown_before + unknown_after


@dataclass(kw_only=True)
class ExportReport:
    """What an export did; `left`: sendable annotations not sent (0: all sent)."""

    target: str
    documents_sent: int = 0
    spans_sent: int = 0
    skipped_verdicts: int = 0
    skipped_scores: int = 0
    unknown_spans: int = 0
    left: int = 0
    unknown_spans_file: str | None = None
    error: str | None = None
    seconds: float = 0.0

    def summary(self) -> str:
        listed = ""
        if self.unknown_spans_file:
            listed = f" (listed in {self.unknown_spans_file})"
        parts = [
            f"{self.target}: {self.documents_sent:,} document and {self.spans_sent:,} span "
            "annotation(s) sent",
            f"skipped {self.skipped_verdicts:,} verdict(s) not obtained, "
            f"{self.skipped_scores:,} item(s) not scored",
            f"{self.unknown_spans:,} span(s) not found{listed}",
        ]
        if self.left:
            parts.append(f"NOT SENT: {self.left:,} annotation(s) ({self.error})")
        parts.append(f"{self.seconds:.1f}s")
        return "; ".join(parts)


@dataclass(frozen=True)
class _Source:
    """A published table sent as annotations: its columns of the score and the explanation."""

    table: str
    score: str
    explanation: str


_SOURCES = (_Source("verdicts", "relevant", "judge_reason"), _Source("scores", "score", "reason"))


def annotation_batches(
    run: PublishedRun, names: tuple[str, str], options: ExportOptions, report: ExportReport
) -> Iterator[list[Annotation]]:
    """Verdicts (as `names[0]`) then scores (as `names[1]`) as annotations, by record batches
    (flat memory); rows without a verdict or score are skipped and counted in `report`."""
    filesystem = None if run.store.is_local else PyFileSystem(FSSpecHandler(run.store.fs))
    span = options.span_id_column
    for source, name in zip(_SOURCES, names, strict=True):
        path = run.store.join(run.location.table_file(source.table))
        data = ds.dataset(path, format="parquet", filesystem=filesystem)
        if span not in data.schema.names:
            raise ConfigError(
                f"--span-id-column {span}: run {run.run_id}'s {source.table} table has no such "
                "column (carry it: input.carry and input.carry_to_verdicts)"
            )
        skipped = data.count_rows(filter=pc.field(source.score).is_null())
        if source.table == "verdicts":
            report.skipped_verdicts = skipped
        else:
            report.skipped_scores = skipped
        columns = [span, source.score, source.explanation]
        if source.table == "verdicts":
            columns.append("position")
        batches = data.to_batches(
            columns=columns, filter=pc.field(source.score).is_valid(), batch_size=options.batch_size
        )
        for batch in batches:
            yield _annotations(batch.to_pydict(), name, span, source)


def _annotations(
    rows: dict[str, list[Any]], name: str, span: str, source: _Source
) -> list[Annotation]:
    """A record batch's rows (columns of Python values) as annotations named `name`."""
    positions = rows.get("position", [None] * len(rows[span]))
    columns = (rows[span], rows[source.score], rows[source.explanation], positions)
    return [
        Annotation(
            span_id=str(span_id),
            name=name,
            score=float(score),
            explanation=explanation,
            position=position,
        )
        for span_id, score, explanation, position in zip(*columns, strict=True)
    ]


def export_run(
    run: PublishedRun, sink: AnnotationSink, report: ExportReport, options: ExportOptions
) -> list[str]:
    """Send to `sink`, `IN_FLIGHT` batches at a time, until done or it fails; returns the
    spans the sink does not hold."""
    sink.check()
    names = (options.name, span_annotation_name(options.name))
    batches = annotation_batches(run, names, options, report)
    unknown: dict[str, None] = {}  # the spans in the order found, each once
    with ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="export") as pool:
        try:
            while group := list(islice(batches, IN_FLIGHT)):
                report.left += sum(len(batch) for batch in group)
                results = pool.map(partial(deliver, sink), group)
                for batch, (sent, spans) in zip(group, results, strict=True):
                    report.left -= len(batch)  # sent, or on spans the sink lacks
                    unknown.update(dict.fromkeys(spans))
                    if batch[0].position is None:
                        report.spans_sent += sent
                    else:
                        report.documents_sent += sent
                done = report.documents_sent + report.spans_sent
                logger.info(f"export: {done:,} annotation(s) sent", extra=progress_extra())
        except SinkFailed as exc:
            report.error = str(exc)
            report.left += sum(len(batch) for batch in batches)
    report.unknown_spans = len(unknown)
    return list(unknown)


def span_annotation_name(name: str) -> str:
    """The span annotations' name: the documents' without `_relevance` (the default's), else
    the documents' with `_precision` added."""
    stem = name.removesuffix("_relevance")
    if stem and stem != name:
        return stem
    return f"{name}_precision"


def export(
    options: ExportOptions,
    headers: dict[str, str],
    out: TextIO,
    transport: httpx.BaseTransport | None = None,
) -> int:
    """Send the run's annotations as `options` say (over `transport`; None: the network):
    0 when all were sent, else 1, printing the command that sends the rest."""
    check_minimum("--batch-size", options.batch_size, 1)
    started = time.monotonic()
    published = load_run(options.root.store(), options.run)
    report = ExportReport(
        target=f"run {options.run} to Phoenix at {options.endpoint} ({options.project})"
    )
    metadata = {
        "run_id": options.run,
        "judge_model": published.judge_model,
        "prompt_version": published.prompt_version,
    }
    sink = PhoenixSink(
        endpoint=options.endpoint,
        project=options.project,
        headers=headers,
        metadata=metadata,
        api_key_env=options.api_key_env,
        transport=transport,
    )
    try:
        unknown = export_run(published, sink, report, options)
    finally:
        sink.close()
    if unknown:
        listing = f"exports/{options.run}-phoenix-unknown-spans.txt"
        spans = "\n".join(unknown).encode()
        report.unknown_spans_file = write_file(published.store, None, listing, spans, {})
    report.seconds = round(time.monotonic() - started, 3)
    if options.as_json:
        print(json.dumps(asdict(report)), file=out)
    else:
        print(report.summary(), file=out)
    if report.left:
        print(f"to send the rest, run again: {_command(options, headers)}", file=out)
        return 1
    return 0


def run(
    options: ExportOptions, out: TextIO | None = None, transport: httpx.BaseTransport | None = None
) -> int:
    """`ctxprec export phoenix`: the key read from the variable `options.api_key_env` names."""
    from jobs.core.config import PhoenixAccess  # the one place the key becomes a header

    access = PhoenixAccess.model_construct(
        endpoint=options.endpoint, project=options.project, api_key_env=options.api_key_env
    )
    return export(options, access.http_headers(), out or sys.stdout, transport)


def _command(options: ExportOptions, headers: dict[str, str]) -> str:
    """The `ctxprec export phoenix` command that sends again what `options` send, and what it
    cannot carry: the storage options (they may hold secrets) and extra `headers`."""
    command = (
        f"ctxprec export phoenix {options.run} --output {options.root.output} "
        f"--endpoint {options.endpoint} --project {options.project} --name {options.name} "
        f"--span-id-column {options.span_id_column} --api-key-env {options.api_key_env}"
    )
    if options.batch_size != ExportOptions.batch_size:
        command += f" --batch-size {options.batch_size}"
    if options.root.storage_options:
        command += (
            " (add a --storage-option for each storage option of the output: not repeated "
            "here, as they may hold secrets)"
        )
    extra = sorted(name for name in headers if name.lower() != "authorization")
    if extra:
        command += (
            f" (the headers {', '.join(extra)} of export.phoenix.headers have no command-line "
            "option: it sends without them)"
        )
    return command


def export_after_run(config: JobConfig, outcome: RunOutcome) -> int:
    """`export.phoenix` once the run is published (it stays so): 1, or an error naming the
    command that completes it, on a failure."""
    phoenix = config.export.phoenix
    if phoenix is None:
        return 0
    options = ExportOptions(
        target="phoenix",
        run=outcome.run_id,
        endpoint=phoenix.endpoint,
        project=phoenix.project,
        root=PublishedRoot(config.output.path, config.output.storage_options),
        name=phoenix.name,
        span_id_column=phoenix.span_id_column,
        api_key_env=phoenix.api_key_env,
    )
    headers = phoenix.http_headers()
    try:
        return export(options, headers, sys.stderr)
    except CtxPrecError as exc:
        raise CtxPrecError(
            f"run {outcome.run_id} is published, but its export to Phoenix failed: {exc}; the "
            f"run stays published; complete the export with: {_command(options, headers)}"
        ) from None
