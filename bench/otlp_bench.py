"""Benchmark of `input.format: otlp`: OTLP JSON traces assembled into items, at two sizes.

    .venv/bin/python -m bench.otlp_bench --spans 1000000 --small 100000 --files 50

Writes `--spans` spans (traces of 10 spans: a CHAIN root with the answer, 3 x RETRIEVER with
3 documents + LLM, an EMBEDDING and 2 TOOL spans, so 3 retrievals per 10 spans) as OTLP JSON
spread over `--files` files, every trace's spans scattered over the files in reverse order
(children before parents), 100 spans to a line; and `--small` spans the same way. Then:

1. parsers: one file of the large set read by the job's reader (`jobs.inputs.otlp`: `json` +
   a walk over the dicts) and by opentelemetry-proto (`json_format.ParseDict` into
   `ExportTraceServiceRequest`, after turning the hex ids into the base64 it expects, then the
   same fields taken from the messages); spans per second of each.
2. assembly: each size in a fresh subprocess (its own local Ray, 2 workers), through the job's
   own path (`jobs.engine.trace_staging.stage_traces`: Ray tasks reading the files, then assembling
   the partitions); its wall time, the driver's peak RSS (the subprocess, VmHWM) and the
   workers' (the highest peak any task reported). The item count is checked.

Prints a markdown section and writes it into docs/benchmarks.md under SECTION.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common

SECTION = "## OTLP traces in: assembly at scale"
SPANS_PER_TRACE = 10
RETRIEVALS_PER_TRACE = 3
SPANS_PER_LINE = 100


# -- data ------------------------------------------------------------------------------------


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def _span(
    trace: str, span: str, parent: str | None, name: str, start: int, attrs: dict[str, Any]
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": trace,
        "spanId": span,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 2_000_000),
        "attributes": [{"key": k, "value": _value(v)} for k, v in attrs.items()],
        "status": {},
    }
    if parent:
        out["parentSpanId"] = parent
    return out


def _trace(rng: random.Random, number: int) -> list[dict[str, Any]]:
    trace = rng.getrandbits(128).to_bytes(16, "big").hex()
    root = rng.getrandbits(64).to_bytes(8, "big").hex()
    start = 1_764_000_000_000_000_000 + number * 1_000_000_000
    spans = [
        _span(
            trace,
            root,
            None,
            "rag",
            start,
            {
                "openinference.span.kind": "CHAIN",
                "input.value": f"question {number}",
                "output.value": f"the answer to question {number} is in the passages " * 3,
                "session.id": f"s-{number % 1000}",
            },
        )
    ]
    filler = "lorem ipsum dolor sit amet consectetur adipiscing elit " * 3
    for k in range(RETRIEVALS_PER_TRACE):
        attrs: dict[str, Any] = {
            "openinference.span.kind": "RETRIEVER",
            "input.value": f"question {number} part {k}",
        }
        for i in range(3):
            attrs[f"retrieval.documents.{i}.document.id"] = f"doc-{number}-{k}-{i}"
            attrs[f"retrieval.documents.{i}.document.content"] = f"passage {i} {filler}"
            attrs[f"retrieval.documents.{i}.document.score"] = 0.9 - i / 10
        clock = start + (k + 1) * 10_000_000
        spans.append(_span(trace, _id(rng), root, "retrieve", clock, attrs))
        spans.append(
            _span(
                trace,
                _id(rng),
                root,
                "llm",
                clock + 3_000_000,
                {
                    "openinference.span.kind": "LLM",
                    "llm.model_name": "gpt-4o-mini",
                    "llm.token_count.total": 420,
                    "output.value": f"answer {number}.{k}",
                },
            )
        )
    spans.append(
        _span(trace, _id(rng), root, "embed", start + 1, {"openinference.span.kind": "EMBEDDING"})
    )
    for tool in range(2):
        spans.append(
            _span(
                trace, _id(rng), root, f"tool{tool}", start + 2, {"openinference.span.kind": "TOOL"}
            )
        )
    return spans


def _id(rng: random.Random) -> str:
    return rng.getrandbits(64).to_bytes(8, "big").hex()


def _line(spans: list[dict[str, Any]], service: str) -> str:
    resource_attrs = [{"key": "service.name", "value": {"stringValue": service}}]
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": resource_attrs},
                    "scopeSpans": [{"scope": {"name": "bench"}, "spans": spans}],
                }
            ]
        }
    )


def generate(folder: Path, spans: int, files: int, seed: int = 1) -> int:
    """Write the traces (streaming: a line per file buffered); returns the traces written."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    handles = [(folder / f"traces-{n:03d}.json").open("w") for n in range(files)]
    buffers: list[list[dict[str, Any]]] = [[] for _ in range(files)]
    traces = spans // SPANS_PER_TRACE
    for number in range(traces):
        for item in reversed(_trace(rng, number)):  # children first
            n = rng.randrange(files)
            buffers[n].append(item)
            if len(buffers[n]) >= SPANS_PER_LINE:
                handles[n].write(_line(buffers[n], f"svc-{n % 4}") + "\n")
                buffers[n] = []
    for n, handle in enumerate(handles):
        if buffers[n]:
            handle.write(_line(buffers[n], f"svc-{n % 4}") + "\n")
        handle.close()
    return traces


# -- 1. parsers ------------------------------------------------------------------------------


def parse_ours(path: Path) -> tuple[int, float]:
    from jobs.core.storage import filesystem
    from jobs.inputs.otlp import SpanRow, read_otlp_file

    fs, fs_path, _ = filesystem(str(path), {})
    started = time.perf_counter()
    count = sum(
        isinstance(found, SpanRow)
        for found in read_otlp_file(fs, fs_path, str(path), None, ("service.name",))
    )
    return count, time.perf_counter() - started


def parse_proto(path: Path) -> tuple[int, float]:
    """opentelemetry-proto's json_format, then the same fields as ours from the messages."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    def plain(value: Any) -> Any:
        kind = value.WhichOneof("value")
        if kind == "array_value":
            return [plain(v) for v in value.array_value.values]
        if kind == "kvlist_value":
            return {kv.key: plain(kv.value) for kv in value.kvlist_value.values}
        return getattr(value, kind) if kind else None

    started = time.perf_counter()
    count = 0
    with path.open("rb") as handle:
        for line in handle:
            data = json.loads(line)
            for group in data["resourceSpans"]:
                for scope in group["scopeSpans"]:
                    for item in scope["spans"]:
                        for key in ("traceId", "spanId", "parentSpanId"):
                            if item.get(key):
                                item[key] = base64.b64encode(bytes.fromhex(item[key])).decode()
            request = json_format.ParseDict(data, ExportTraceServiceRequest())
            for group in request.resource_spans:
                resource_attrs = {kv.key: plain(kv.value) for kv in group.resource.attributes}
                for scope in group.scope_spans:
                    for span in scope.spans:
                        attrs = {kv.key: plain(kv.value) for kv in span.attributes}
                        _ = (
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.start_time_unix_nano,
                            attrs.get("openinference.span.kind"),
                            attrs.get("service.name", resource_attrs.get("service.name")),
                        )
                        count += 1
    return count, time.perf_counter() - started


# -- 2. assembly (a subprocess per size) -----------------------------------------------------


def assemble_worker(folder: Path, out: Path) -> dict[str, Any]:
    from jobs.core.config import parse_config
    from jobs.core.run_layout import RunLocation
    from jobs.core.storage import open_store
    from jobs.engine.trace_staging import stage_traces
    from jobs.run.factory import run_parts

    config = parse_config(
        {
            "input": {
                "path": str(folder),
                "format": "otlp",
                "carry": ["service.name", "session.id", "start_time"],
            },
            "output": {"path": str(out)},
            "ray": {"workers": 2, "shard_size": 2000},
        }
    )
    store = open_store(str(out))
    location = RunLocation("bench", dt.date.today())
    parts = run_parts(config, location)
    started = time.monotonic()
    report = stage_traces(config, parts, store, location).model_dump()
    seconds = time.monotonic() - started
    return {
        "seconds": seconds,
        "report": report,
        "driver_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_size(folder: Path, out: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.otlp_bench", "--worker", str(folder), str(out)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- report ----------------------------------------------------------------------------------


def render(
    sizes: list[tuple[int, int, dict[str, Any]]],
    parsers: dict[str, tuple[int, float]],
    command: str,
    load_start: str,
) -> str:
    rows = []
    for spans, files, result in sizes:
        report = result["report"]
        seconds = report["seconds"]
        rows.append(
            f"| {spans:,} | {files} | {report['items']:,} | {report['partitions']} | "
            f"{seconds:.1f} | {seconds / spans * 1e6:.1f} | {result['seconds']:.1f} | "
            f"{result['driver_peak_mb']:.0f} | {report['peak_rss_mb'].get('read', 0):.0f} | "
            f"{report['peak_rss_mb'].get('assemble', 0):.0f} |"
        )
    (small_spans, _, small), (big_spans, _, big) = sizes[0], sizes[-1]

    def peak(result: dict[str, Any], phase: str) -> float:
        return float(result["report"]["peak_rss_mb"].get(phase, 0.0))

    driver = big["driver_peak_mb"] / small["driver_peak_mb"]
    read = peak(big, "read") / peak(small, "read")
    assemble = peak(big, "assemble") / peak(small, "assemble")

    ours_n, ours_s = parsers["ours"]
    proto_n, proto_s = parsers["proto"]
    return "\n".join(
        [
            SECTION,
            "",
            common.header(command) + f" Load average at the start: {load_start} (the 2 cores "
            "are shared with other engineers' work: times are upper bounds).",
            "",
            "Traces of 10 OpenInference spans (CHAIN root, 3 x RETRIEVER with 3 documents + "
            "LLM, EMBEDDING, 2 TOOL), every trace's spans scattered over the files in reverse "
            "order (children before parents), 100 spans to a line. Assembly through the job's "
            "own path (`jobs.engine.trace_staging.stage_traces`) on a local Ray of 2 workers, each "
            "size in a fresh process: the assembly's wall time (without, then with starting "
            "Ray), the driver's peak RSS and the highest peak RSS any Ray worker reported, "
            "reading the files and assembling the partitions.",
            "",
            "| spans | files | items | partitions | assembly s | s per 1M spans | with Ray start s "
            "| driver peak MiB | worker peak MiB (read) | worker peak MiB (assemble) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            f"Memory, {big_spans:,} vs {small_spans:,} spans: driver x{driver:.2f}, workers "
            f"reading x{read:.2f}, workers assembling x{assemble:.2f}.",
            "",
            f"Parsers on one file of the large set ({ours_n:,} spans): the job's reader (`json` + "
            f"a walk over the dicts) {ours_n / ours_s:,.0f} spans/s; opentelemetry-proto "
            f"(`json_format.ParseDict` after turning hex ids into base64, then the same fields) "
            f"{proto_n / proto_s:,.0f} spans/s: x{proto_s / ours_s:.1f} the time. The job uses "
            "its own reader (docs/traces.md).",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--docs", type=Path, default=common.DOCS)
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--worker", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(assemble_worker(*args.worker), default=str))
        return 0
    load_start = common.load_average()
    command = (
        f".venv/bin/python -m bench.otlp_bench --spans {args.spans} --small {args.small} "
        f"--files {args.files}"
    )
    sizes: list[tuple[int, int, dict[str, Any]]] = []
    parsers: dict[str, tuple[int, float]] = {}
    with tempfile.TemporaryDirectory(prefix="otlp-bench-") as tmp:
        for spans in (args.small, args.spans):
            folder = Path(tmp) / f"in-{spans}"
            started = time.monotonic()
            traces = generate(folder, spans, args.files)
            print(
                f"{spans:,} spans ({traces:,} traces) written in {time.monotonic() - started:.0f}s",
                file=sys.stderr,
            )
            if spans == args.spans:
                first = folder / "traces-000.json"
                parsers = {"ours": parse_ours(first), "proto": parse_proto(first)}
                print(f"parsers: {parsers}", file=sys.stderr)
            result = run_size(folder, Path(tmp) / f"out-{spans}")
            expected = traces * RETRIEVALS_PER_TRACE
            if result["report"]["items"] != expected:
                raise SystemExit(f"{result['report']['items']} items, expected {expected}")
            print(f"{spans:,} spans: {json.dumps(result)}", file=sys.stderr)
            sizes.append((spans, args.files, result))
            shutil.rmtree(folder)  # the large set is a few GB of disk
    text = render(sizes, parsers, command, load_start)
    print(text)
    if not args.no_write:
        common.write_section(SECTION, text, args.docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
