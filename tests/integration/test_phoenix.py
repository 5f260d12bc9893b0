"""Phoenix in and out against a real `phoenix serve` on 127.0.0.1 (tests/support/phoenix.py):
300 RAG traces sent over OTLP/HTTP, scored with `input.format: phoenix` through the fake judge,
exported back and read through Phoenix's API, annotation by annotation; the same spans from
OTLP files under another name; an export twice, with unknown spans, to an absent Phoenix, and
across a Phoenix stopped and started again midway."""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from jobs.cli.main import main
from jobs.core.config import ExportConfig, PhoenixExportConfig, parse_config
from jobs.core.storage import open_store
from jobs.engine import RunOutcome
from jobs.run.job import run_job
from jobs.tools.phoenix_export import (
    Annotation,
    ExportReport,
    PhoenixSink,
    export_after_run,
    export_run,
)
from jobs.tools.published_runs import load_run
from jobs.tools.tool_options import ExportOptions, PublishedRoot
from scorer_core.errors import CtxPrecError
from tests.fake_judge import FakeJudgeServer
from tests.support import phoenix as ph
from tests.support.job import llm_judge, scores_frame, verdict_requests, verdicts_frame
from tests.support.otlp import Expected, export_line, span
from tests.support.published import RUN_DATE, Query, publish

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]
PROJECT = "rag-nightly"
TRACES = 300


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ph.PhoenixServer]:
    if ph.executable() is None:
        pytest.skip("phoenix serve is not installed (arize-phoenix, the dev extra: make install)")
    server = ph.PhoenixServer(tmp_path_factory.mktemp("phoenix")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def sent(phoenix: ph.PhoenixServer) -> list[Expected]:
    expected = ph.send_rag_traces(phoenix.url, PROJECT, TRACES)
    ph.wait_for_spans(phoenix.url, PROJECT, TRACES)
    return expected


def _export(out: Path, run_id: str, url: str, *extra: str) -> tuple[int, dict[str, Any]]:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(
            [
                "export",
                "phoenix",
                run_id,
                "--output",
                str(out),
                "--endpoint",
                url,
                "--project",
                PROJECT,
                "--json",
                *extra,
            ]
        )
    return code, json.loads(stdout.getvalue().splitlines()[0])


def _raw_config(out: Path, server: FakeJudgeServer, **input_: Any) -> dict[str, Any]:
    return {
        "input": {"carry": ["tenant", "trace_id"], **input_},
        "output": {"path": str(out)},
        "judge": llm_judge(server),
        "ray": {"shard_size": 100, "workers": 2},
    }


def _config(out: Path, server: FakeJudgeServer, **input_: Any) -> Any:
    return parse_config(_raw_config(out, server, **input_))


def _check_documents(
    found: dict[tuple[str, str, int], dict[str, Any]], name: str, items: Sequence[Expected]
) -> None:
    mine = {key: doc for key, doc in found.items() if key[0] == name}
    assert len(mine) == sum(len(item.relevance) for item in items)
    for item in items:
        for position, relevant in enumerate(item.relevance):
            doc = mine[(name, item.query_id, position)]
            assert (doc["label"], doc["score"]) == (
                ("relevant", 1.0) if relevant else ("unrelated", 0.0)
            )


def test_phoenix_spans_are_scored_and_every_verdict_lands_beside_its_span(
    phoenix: ph.PhoenixServer,
    sent: list[Expected],
    tmp_path: Path,
    server: FakeJudgeServer,
    judge_key: str,
) -> None:
    out = tmp_path / "out"
    window = {"endpoint": phoenix.url, "project": PROJECT, "last_hours": 1}
    outcome = run_job(_config(out, server, format="phoenix", phoenix=window))
    scores = scores_frame(out)
    expected = {item.query_id: item for item in sent}
    assert sorted(scores["query_id"]) == sorted(expected)  # one item per retrieval span
    for row in scores.iter_rows(named=True):
        item = expected[row["query_id"]]
        assert row["status"] == "ok", row["error"]
        assert row["score"] == round(item.score, 2)
        assert (row["tenant"], row["trace_id"]) == (item.carried["tenant"], item.trace_id)
    verdicts = verdicts_frame(out)
    for row in verdicts.iter_rows(named=True):
        assert row["context_id"] == expected[row["query_id"]].context_ids[row["position"]]

    code, report = _export(out, outcome.run_id, phoenix.url)
    assert code == 0, report
    assert report["documents_sent"] == verdicts.height and report["spans_sent"] == TRACES
    documents = ph.document_annotations(phoenix.url, PROJECT)
    _check_documents(documents, "context_precision_relevance", sent)
    spans = ph.span_annotations(phoenix.url, PROJECT, expected)
    assert len(spans) == TRACES
    by_span = {row["query_id"]: row for row in scores.iter_rows(named=True)}
    for annotation in spans:
        assert annotation["name"] == "context_precision"
        assert annotation["result"]["score"] == pytest.approx(
            by_span[annotation["span_id"]]["score"]
        )
        assert annotation["result"]["explanation"] == by_span[annotation["span_id"]]["reason"]
        assert annotation["metadata"]["run_id"] == outcome.run_id

    # again: Phoenix replaces what it holds, the counts stay
    code, again = _export(out, outcome.run_id, phoenix.url)
    assert code == 0 and again["documents_sent"] == report["documents_sent"]
    assert len(ph.document_annotations(phoenix.url, PROJECT)) == len(documents)
    assert len(ph.span_annotations(phoenix.url, PROJECT, expected)) == TRACES


def _otlp_files(folder: Path, items: Sequence[Expected]) -> None:
    """The same spans as OTLP JSON files, as a collector's file exporter would have written."""
    folder.mkdir()
    lines = []
    for item in items:
        root = item.carried["root_span"]
        documents = {
            f"retrieval.documents.{i}.document.content": t for i, t in enumerate(item.contexts)
        }
        retrieval = {"openinference.span.kind": "RETRIEVER", "input.value": item.input} | documents
        start = item.start_ns
        lines.append(
            export_line(
                [
                    span(
                        item.trace_id,
                        root,
                        None,
                        "rag",
                        start - 10,
                        start + 10,
                        {"output.value": item.output, "tenant": item.carried["tenant"]},
                    ),
                    span(
                        item.trace_id, item.query_id, root, "retrieve", start, start + 5, retrieval
                    ),
                ],
                {},
            )
        )
    (folder / "traces.json").write_text("\n".join(lines) + "\n")


def test_a_nightly_run_of_otlp_files_of_the_same_spans_exports_onto_them(
    phoenix: ph.PhoenixServer,
    sent: list[Expected],
    tmp_path: Path,
    server: FakeJudgeServer,
    judge_key: str,
) -> None:
    items = sent[:40]
    _otlp_files(tmp_path / "traces", items)
    out, config = tmp_path / "out", tmp_path / "nightly.yaml"
    raw = _raw_config(out, server, format="otlp", path=str(tmp_path / "traces"))
    raw["export"] = {
        "phoenix": {"endpoint": phoenix.url, "project": PROJECT, "name": "from_files_relevance"}
    }
    config.write_text(json.dumps(raw))  # JSON is YAML
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        assert main(["run", "--config", str(config)]) == 0
    documents = sum(len(i.relevance) for i in items)
    line = f"{documents} document and {len(items)} span annotation(s) sent"
    assert f"to Phoenix at {phoenix.url} ({PROJECT}): {line}" in stderr.getvalue()
    _check_documents(ph.document_annotations(phoenix.url, PROJECT), "from_files_relevance", items)
    spans = ph.span_annotations(phoenix.url, PROJECT, [item.query_id for item in items])
    assert {a["span_id"] for a in spans if a["name"] == "from_files"} == {i.query_id for i in items}


def test_unknown_spans_are_counted_and_listed_and_the_others_arrive(
    phoenix: ph.PhoenixServer, sent: list[Expected], tmp_path: Path
) -> None:
    unknown = [f"{n:016x}" for n in (0xDEAD01, 0xDEAD02, 0xDEAD03)]
    known = sent[40:60]
    queries = [Query(item.query_id, verdicts=item.relevance) for item in known]
    queries[5:5] = [Query(span_id, verdicts=[True, False]) for span_id in unknown]
    out = tmp_path / "out"
    publish(open_store(str(out), {}), "unknowns", queries)
    code, report = _export(
        out, "unknowns", phoenix.url, "--name", "probe_relevance", "--batch-size", "16"
    )
    assert code == 0, report
    assert report["unknown_spans"] == 3 and report["left"] == 0
    assert report["documents_sent"] == sum(len(i.relevance) for i in known)
    assert sorted(Path(report["unknown_spans_file"]).read_text().split()) == unknown
    _check_documents(ph.document_annotations(phoenix.url, PROJECT), "probe_relevance", known)


def test_an_absent_phoenix_fails_fast_naming_its_endpoint(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str
) -> None:
    url = f"http://127.0.0.1:{ph._free_port()}"
    out = tmp_path / "out"
    publish(open_store(str(out), {}), "lonely", [Query("00000000000000aa", verdicts=[True])])
    started = time.monotonic()
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = main(
            [
                "export",
                "phoenix",
                "lonely",
                "--output",
                str(out),
                "--endpoint",
                url,
                "--project",
                PROJECT,
            ]
        )
    assert code == 1 and f"Phoenix at {url} unreachable" in stderr.getvalue()
    # and the job with input.format phoenix stops before judging anything
    window = {"endpoint": url, "project": PROJECT}
    with pytest.raises(Exception, match=f"Phoenix at {url} \\(project '{PROJECT}'\\) unreachable"):
        run_job(_config(tmp_path / "out2", server, format="phoenix", phoenix=window))
    assert verdict_requests(server) == 0 and time.monotonic() - started < 60
    # a nightly run's export that fails leaves the run published and names the command
    config = _config(out, server, path="unused.jsonl")
    config = config.model_copy(
        update={"export": ExportConfig(phoenix=PhoenixExportConfig(endpoint=url, project=PROJECT))}
    )
    lonely = RunOutcome(
        run_id="lonely",
        run_date=RUN_DATE,
        published=None,  # type: ignore[arg-type]
        shards_total=1,
        shards_skipped=0,
        seconds=1.0,
    )
    with pytest.raises(
        CtxPrecError,
        match=f"run lonely is published, but its export to Phoenix failed: .*unreachable.*the "
        f"run stays published; complete the export with: ctxprec export phoenix lonely --output "
        f"{out} --endpoint {url}",
    ):
        export_after_run(config, lonely)


class _Restarting:
    """Phoenix's sink that stops Phoenix at its 4th batch and starts it again meanwhile."""

    def __init__(self, sink: PhoenixSink, phoenix: ph.PhoenixServer) -> None:
        self.sink = sink
        self.phoenix = phoenix
        self.calls = 0
        self.lock = threading.Lock()
        self.restart: threading.Thread | None = None

    def check(self) -> None:
        self.sink.check()

    def send(self, annotations: Sequence[Annotation]) -> None:
        with self.lock:
            self.calls += 1
            if self.calls == 4:
                self.phoenix.stop(kill=True)
                self.restart = threading.Thread(target=self.phoenix.start)
                self.restart.start()
        self.sink.send(annotations)


def test_an_export_across_a_phoenix_restart_ends_with_everything_sent(
    phoenix: ph.PhoenixServer, sent: list[Expected], tmp_path: Path
) -> None:
    items = sent[60:160]
    out = tmp_path / "out"
    publish(
        open_store(str(out), {}),
        "restart",
        [Query(i.query_id, verdicts=i.relevance) for i in items],
    )
    run = load_run(open_store(str(out), {}), "restart")
    options = ExportOptions(
        target="phoenix",
        run="restart",
        endpoint=phoenix.url,
        project=PROJECT,
        root=PublishedRoot(str(out)),
        name="restart_relevance",
        batch_size=20,
    )
    sink = PhoenixSink(
        endpoint=phoenix.url, project=PROJECT, headers={}, metadata={"run_id": "restart"}
    )
    restarting = _Restarting(sink, phoenix)
    report = ExportReport(target="phoenix")
    export_run(run, restarting, report, options)
    assert restarting.restart is not None
    restarting.restart.join()
    assert report.left == 0 and report.error is None
    assert report.documents_sent == sum(len(i.relevance) for i in items)
    _check_documents(ph.document_annotations(phoenix.url, PROJECT), "restart_relevance", items)
