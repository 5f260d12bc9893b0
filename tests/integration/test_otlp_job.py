"""The job on OpenTelemetry traces (`input.format: otlp`) with real Ray and the fake judge over
HTTP: OTLP JSON files written from the specification (tests/support/otlp.py), a trace split
across files with children before parents, several retrievals per trace, traces without a
retriever, a gzipped file and a malformed line; local, and on S3 (moto)."""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest
import s3fs

from jobs.core.config import parse_config
from jobs.core.run_layout import RunLocation
from jobs.core.storage import open_store, s3_options
from jobs.engine.driver import resolve_location
from jobs.engine.trace_staging import stage_traces
from jobs.run.factory import run_parts
from jobs.run.job import run_job
from tests.fake_judge import FakeJudgeServer
from tests.support.job import llm_judge, manifest, scores_frame, verdicts_frame
from tests.support.moto import MotoS3
from tests.support.otlp import Expected, Trace, rag_trace, scatter

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("ray_local")]


def _traces() -> tuple[list[Trace], dict[str, Expected], list[list[str]]]:
    rng = random.Random(21)
    traces = [
        rag_trace(rng, n, retrievals=1 + n % 3, service=f"svc-{n % 2}", session=f"s-{n % 3}")
        for n in range(20)
    ]
    traces += [rag_trace(rng, 200 + n, with_retriever=False) for n in range(4)]
    expected = {item.query_id: item for trace in traces for item in trace.items}
    files = scatter(traces, 3, rng)
    files[2].insert(1, '{"resourceSpans": [{"scopeSpans": oops')  # a malformed line 2
    return traces, expected, files


def _encode(n: int, lines: list[str]) -> tuple[str, bytes]:
    text = "".join(line + "\n" for line in lines).encode()
    return (f"traces-{n}.json.gz", gzip.compress(text)) if n == 1 else (f"traces-{n}.json", text)


def _config(source: str, out: str, server: FakeJudgeServer, **input_: Any) -> Any:
    return parse_config(
        {
            "input": {
                "path": source,
                "format": "otlp",
                "carry": ["service.name", "session.id", "user.id", "start_time", "trace_id"],
                **input_,
            },
            "output": {"path": out, "storage_options": input_.get("storage_options", {})},
            "judge": llm_judge(server),
            "summary": {"by": ["service.name"]},
            "ray": {"shard_size": 8, "workers": 2},
        }
    )


def _check_scores(scores: pl.DataFrame, expected: dict[str, Expected]) -> None:
    assert sorted(scores["query_id"]) == sorted(expected)
    for row in scores.iter_rows(named=True):
        want = expected[row["query_id"]]
        assert row["status"] == "ok", row["error"]
        assert row["score"] == round(want.score, 2)
        assert row["service.name"] == want.carried["service.name"]
        assert row["session.id"] == want.carried["session.id"]
        assert row["trace_id"] == want.trace_id
        assert row["start_time"].timestamp() * 1e9 == pytest.approx(want.start_ns, abs=1e3)
    assert scores.schema["start_time"] == pl.Datetime("us", "UTC")


def test_traces_on_local_files_are_scored_exactly_with_their_attributes(
    tmp_path: Path, server: FakeJudgeServer, judge_key: str, run_log: pytest.LogCaptureFixture
) -> None:
    traces, expected, files = _traces()
    source = tmp_path / "traces"
    source.mkdir()
    for n, lines in enumerate(files):
        name, data = _encode(n, lines)
        (source / name).write_bytes(data)
    out = tmp_path / "out"
    outcome = run_job(_config(str(source), str(out), server))

    _check_scores(scores_frame(out), expected)
    verdicts = verdicts_frame(out)
    assert verdicts.height == sum(len(item.contexts) for item in expected.values())
    # the context ids are the documents' ids, position by position
    for row in verdicts.iter_rows(named=True):
        assert row["context_id"] == expected[row["query_id"]].context_ids[row["position"]]
    # the summary is segmented by a resource attribute
    summary = pl.read_parquet(f"{out}/summary/**/*.parquet", hive_partitioning=True)
    assert set(summary["segment"].drop_nulls()) == {"svc-0", "svc-1"}
    # what was skipped reaches the output and the manifest, with file and line
    report = manifest(out, outcome)["traces"]
    assert report["traces"] == len(traces) and report["traces_without_retriever"] == 4
    assert report["items"] == len(expected) and report["malformed"] == 1
    assert report["malformed_examples"] == [
        f"{source}/traces-2.json line 2: not JSON (Expecting value)"
    ]
    assert "4 trace(s) without a retrieval" in run_log.text
    assert "traces-2.json line 2: not JSON" in run_log.text
    assert manifest(out, outcome)["config"]["input"]["format"] == "otlp"
    location = RunLocation(outcome.run_id, outcome.run_date)
    assert not (out / location.staging).exists()


def test_traces_on_s3_and_a_resumed_run_reads_the_assembled_items_again(
    moto_s3: MotoS3,
    s3_prefix: str,
    server: FakeJudgeServer,
    judge_key: str,
    run_log: pytest.LogCaptureFixture,
) -> None:
    _, expected, files = _traces()
    fs = s3fs.S3FileSystem(**s3_options(moto_s3.storage_options))
    for n, lines in enumerate(files):
        name, data = _encode(n, lines)
        fs.pipe_file(f"{s3_prefix}/traces/{name}", data)
    out = f"{s3_prefix}/out"
    config = _config(f"{s3_prefix}/traces/", out, server, storage_options=moto_s3.storage_options)
    config = config.with_changes(run=config.run.with_changes(id="otlp-s3"))

    # a first driver assembled the traces and stopped before judging: the rerun of the same
    # run id reads the assembled items and the report again
    store = open_store(out, moto_s3.storage_options)
    location = resolve_location(config)
    stage_traces(config, run_parts(config, location), store, location)
    run_log.clear()
    outcome = run_job(config)

    assert "(assembled before: resuming)" in run_log.text
    scores = pl.from_arrow(
        pq.read_table(outcome.published.scores_url.removeprefix("s3://"), filesystem=fs)
    )
    assert isinstance(scores, pl.DataFrame)
    _check_scores(scores, expected)
    assert not fs.exists(f"{out}/_staging/run_id=otlp-s3")
