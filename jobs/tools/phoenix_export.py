"""`ctxprec export phoenix RUN`: a run's verdicts and scores as annotations on their spans, read
in bounded batches, sent a few at a time to an `AnnotationSink` (Phoenix's, or another's)."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
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
from jobs.tools.tool_options import ExportOptions, PublishedRoot, check_minimum
from scorer_core.errors import ConfigError, CtxPrecError

if TYPE_CHECKING:
    from jobs.core.config import JobConfig
    from jobs.engine import RunOutcome

logger = logging.getLogger(__name__)
IN_FLIGHT = 4  # batches sent at a time


class SinkFailed(CtxPrecError): ...  # refused (the key, the project) or not answering: stop


@dataclass(frozen=True, slots=True)
class Annotation:
    """A result on a span; with a `position`: on that retrieved document of the span."""

    span_id: str
    name: str
    score: float
    explanation: str | None
    position: int | None = None

    @property
    def label(self) -> str | None:  # as Phoenix's own relevance evals write it
        return None if self.position is None else ("relevant" if self.score else "unrelated")


class AnnotationSink(Protocol):  # `send` raises LookupError for a batch naming an unknown span
    def check(self) -> None: ...
    def send(self, annotations: Sequence[Annotation]) -> None: ...


@dataclass
class PhoenixSink:
    """Phoenix's `POST /v1/document_annotations` and `/v1/span_annotations` (sync)."""

    endpoint: str
    project: str
    headers: dict[str, str]
    metadata: dict[str, str]
    retry_seconds: float = 120.0
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.endpoint, headers=self.headers, timeout=30.0)

    def check(self) -> None:  # the project is there; asked once: an absent Phoenix fails at once
        sink = replace(self, retry_seconds=0.0)
        if sink._request("GET", f"/v1/projects/{quote(self.project, safe='')}").status_code == 404:
            raise SinkFailed(f"Phoenix at {self.endpoint} has no project {self.project!r}")

    def send(self, annotations: Sequence[Annotation]) -> None:
        path = f"/v1/{'span' if annotations[0].position is None else 'document'}_annotations"
        meta = self.metadata
        data = [
            {"span_id": a.span_id, "name": a.name, "annotator_kind": "LLM", "metadata": meta}
            | {"result": {"label": a.label, "score": a.score, "explanation": a.explanation}}
            | ({} if a.position is None else {"document_position": a.position})
            for a in annotations
        ]
        answer = self._request("POST", path, params={"sync": "true"}, json={"data": data})
        if answer.status_code == 404:
            raise LookupError(answer.text[:200])
        if answer.status_code >= 400:
            raise SinkFailed(f"{self.endpoint}{path}: HTTP {answer.status_code}: {answer.text}")

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        deadline, wait_s, at = time.monotonic() + self.retry_seconds, 0.25, f"{method} {path}"
        while True:
            try:
                answer = self.client.request(method, path, **kwargs)
                why = f"HTTP {answer.status_code}"
                if answer.status_code in (401, 403):  # the key: PHOENIX_API_KEY or api_key_env
                    raise SinkFailed(
                        f"Phoenix at {self.endpoint} refused {at} ({why}): check the key"
                    )
                if answer.status_code != 429 and answer.status_code < 500:
                    return answer  # else worth asking again, as when there is no answer
            except httpx.TransportError as exc:
                why = f"{type(exc).__name__}: {exc}"
            if time.monotonic() + wait_s > deadline:
                limit = f"{self.retry_seconds:g}s"
                raise SinkFailed(
                    f"Phoenix at {self.endpoint} unreachable for {limit} ({at}: {why})"
                )
            self.sleep(wait_s)
            wait_s = min(wait_s * 2, 5.0)


def deliver(sink: AnnotationSink, batch: Sequence[Annotation]) -> tuple[int, list[str]]:
    """(sent, spans the sink lacks): a refused batch halved between spans, the rest sent."""
    try:
        sink.send(batch)
        return len(batch), []
    except LookupError:  # the batch names a span the sink lacks: all of it was refused
        spans = list(dict.fromkeys(a.span_id for a in batch))
        if len(spans) == 1:
            return 0, spans
    cut = next(i for i, a in enumerate(batch) if a.span_id == spans[len(spans) // 2])
    left, right = deliver(sink, batch[:cut]), deliver(sink, batch[cut:])
    return left[0] + right[0], left[1] + right[1]


@dataclass
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
        listed = f" (listed in {self.unknown_spans_file})" if self.unknown_spans_file else ""
        text = f"{self.target}: {self.documents_sent:,} document and {self.spans_sent:,} span "
        text += f"annotation(s) sent; skipped {self.skipped_verdicts:,} verdict(s) not obtained, "
        text += f"{self.skipped_scores:,} item(s) not scored; {self.unknown_spans:,} span(s) not "
        text += f"found{listed}" + (
            f"; NOT SENT: {self.left:,} ({self.error})" if self.left else ""
        )
        return text + f"; {self.seconds:.1f}s"


_TABLES = (("verdicts", "relevant", "judge_reason"), ("scores", "score", "reason"))


def annotation_batches(
    run: PublishedRun, names: tuple[str, str], options: ExportOptions, report: ExportReport
) -> Iterator[list[Annotation]]:
    """Verdicts then scores as annotations, by record batches (flat memory); nulls skipped."""
    fs = None if run.store.is_local else PyFileSystem(FSSpecHandler(run.store.fs))
    for (table, value, reason), name in zip(_TABLES, names, strict=True):
        path, span = run.store.join(run.location.table_file(table)), options.span_id_column
        data = ds.dataset(path, format="parquet", filesystem=fs)
        if span not in data.schema.names:
            raise ConfigError(
                f"--span-id-column {span}: run {run.run_id}'s {table} table has no such column "
                "(carry it: input.carry and input.carry_to_verdicts)"
            )
        setattr(report, f"skipped_{table}", data.count_rows(filter=pc.field(value).is_null()))
        columns = [span, value, reason, *(["position"] if table == "verdicts" else [])]
        keep = pc.field(value).is_valid()
        for batch in data.to_batches(columns=columns, filter=keep, batch_size=options.batch_size):
            rows = batch.to_pydict()
            at = rows.get("position", [None] * batch.num_rows)
            yield [
                Annotation(str(s), name, float(v), why, p)
                for s, v, why, p in zip(rows[span], rows[value], rows[reason], at, strict=True)
            ]


def export_run(
    run: PublishedRun, sink: AnnotationSink, report: ExportReport, options: ExportOptions
) -> list[str]:
    """Send to `sink`, `IN_FLIGHT` batches at a time, until done or it fails; unknown spans."""
    sink.check()
    names = (options.name, span_annotation_name(options.name))
    batches, unknown = annotation_batches(run, names, options, report), dict[str, None]()
    with ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="export") as pool:
        try:
            while group := list(islice(batches, IN_FLIGHT)):
                report.left += sum(len(batch) for batch in group)
                results = pool.map(partial(deliver, sink), group)
                for batch, (sent, spans) in zip(group, results, strict=True):
                    report.left -= len(batch)  # sent, or on spans the sink lacks
                    unknown.update(dict.fromkeys(spans))
                    kind = "spans_sent" if batch[0].position is None else "documents_sent"
                    setattr(report, kind, getattr(report, kind) + sent)
                done = report.documents_sent + report.spans_sent
                logger.info(f"export: {done:,} annotation(s) sent", extra=progress_extra())
        except SinkFailed as exc:
            report.error = str(exc)
            report.left += sum(len(batch) for batch in batches)
    report.unknown_spans = len(unknown)
    return list(unknown)


def span_annotation_name(name: str) -> str:
    """The documents' name without `_relevance` (the default's), else with `_precision`."""
    stem = name.removesuffix("_relevance")
    return stem if stem and stem != name else f"{name}_precision"


def export(options: ExportOptions, headers: dict[str, str], out: TextIO) -> int:
    """Send the run's annotations as `options` say: 0 when all were, else 1 naming the rest."""
    check_minimum("--batch-size", options.batch_size, 1)
    started, published = time.monotonic(), load_run(options.root.store(), options.run)
    report = ExportReport(f"run {options.run} to Phoenix at {options.endpoint} ({options.project})")
    metadata = {"run_id": options.run, "judge_model": published.judge_model}
    metadata["prompt_version"] = published.prompt_version
    sink = PhoenixSink(options.endpoint, options.project, headers, metadata)
    if unknown := export_run(published, sink, report, options):
        name, data = f"exports/{options.run}-phoenix-unknown-spans.txt", "\n".join(unknown)
        report.unknown_spans_file = write_file(published.store, None, name, data.encode(), {})
    report.seconds = round(time.monotonic() - started, 3)
    print(json.dumps(asdict(report)) if options.as_json else report.summary(), file=out)
    if report.left:
        print(f"to send the rest, run again: {_COMMAND.format(options)}", file=out)
    return 1 if report.left else 0


def run(options: ExportOptions, out: TextIO | None = None) -> int:
    from jobs.core.config import PhoenixAccess  # the one place the key becomes a header

    access = PhoenixAccess.model_construct(
        endpoint=options.endpoint, project=options.project, api_key_env=options.api_key_env
    )
    return export(options, access.http_headers(), out or sys.stdout)


_COMMAND = "ctxprec export phoenix {0.run} --output {0.root.output} --endpoint {0.endpoint} "
_COMMAND += "--project {0.project} --name {0.name} --api-key-env {0.api_key_env}"


def export_after_run(config: JobConfig, outcome: RunOutcome) -> int:
    """`export.phoenix` once the run is published (it stays so): 1, or an error naming the
    command that completes it, on a failure."""
    if (to := config.export.phoenix) is None:
        return 0
    root = PublishedRoot(config.output.path, config.output.storage_options)
    options = ExportOptions("phoenix", outcome.run_id, to.endpoint, to.project, root, to.name)
    options = replace(options, span_id_column=to.span_id_column, api_key_env=to.api_key_env)
    try:
        return export(options, to.http_headers(), sys.stderr)
    except CtxPrecError as exc:
        raise CtxPrecError(
            f"run {outcome.run_id} is published, its export is not ({exc}); complete it: "
            + _COMMAND.format(options)
        ) from None
