"""A real LLM judge on the human-labelled data: llama.cpp's server with Gemma 3 270M.

    .venv/bin/python -m bench.llama_bench --items 60              # make bench-llm
    .venv/bin/python -m bench.llama_bench --items 4 --no-write    # a quick look

Takes the first items/2 rows of each file in ../shared/data (HotpotQA, judged against its
reference answers; TREC DL, which has none: retrieval-only items judged against the query),
each cut to its first `--contexts` contexts (their labels cut with them), starts llama.cpp's
OpenAI-compatible server (`tests.fake_judge.llama_server`, the `llm` extra) on 127.0.0.1 and
runs against it, with `judge.response_format: auto`:

1. the job (`jobs.engine.driver.run_job`, real Ray, the verdict cache off) over those rows;
2. `ctxprec calibrate` (`jobs.tools.calibration.calibrate`) on each file's rows.

It writes the section "## A real LLM judge: llama.cpp with Gemma 3 270M" of docs/benchmarks.md
(only that section). The server answers one request at a time, so the run takes about
items x 2 x the seconds of one verdict (about 10 s on a quiet 2-core machine). Nothing of the
data is copied into the repository.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from bench.common import load_average, machine, missing_data, show_and_write
from jobs.core.config import JobConfig, parse_config
from jobs.core.run_layout import RunLocation
from jobs.engine.driver import RunOutcome
from jobs.run.job import run_job
from jobs.tools.calibration import Calibration, calibrate
from tests.fake_judge.llama_server import LlamaServer

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO.parent / "shared" / "data"
DOCS = REPO / "docs" / "benchmarks.md"
HEADING = "## A real LLM judge: llama.cpp with Gemma 3 270M"
FILES = (
    ("HotpotQA", "hotpotqa_ctxprec.jsonl"),
    ("TREC DL", "trecdl_passage_ctxprec.jsonl"),
)
MODEL_NAMES = {"gemma3": "Gemma 3 270M (Q4_K_M)", "smollm2": "SmolLM2-135M-Instruct (Q4_1)"}
LABEL_KEYS = ("relevance", "relevance_binary", "supporting_sentence_ids")


def cut_rows(path: Path, rows: int, contexts: int) -> list[dict[str, Any]]:
    """The first `rows` rows of a labelled file, each cut to its first `contexts` contexts."""
    out: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if len(out) >= rows:
                break
            row = json.loads(line)
            row["contexts"] = row["contexts"][:contexts]
            for key in LABEL_KEYS:
                if isinstance(row.get(key), list):
                    row[key] = row[key][:contexts]
            out.append(row)
    return out


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def judge_section(server: LlamaServer, timeout_s: float, max_tokens: int) -> dict[str, Any]:
    return {
        "model": f"openai/{server.alias}",
        "api_base": server.url,
        "transport": "http",
        "timeout_s": timeout_s,
        "max_tokens": max_tokens,
        "max_retries": 2,
        "response_format": "auto",
    }


def job_input(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Labelled rows as job items: no system answer, the reference answer when there is one."""
    return [
        {
            "query_id": str(row.get("row_id", row.get("query_id"))),
            "input": row["query"],
            "output": "",
            "expected_output": row.get("expected_answer"),
            "context": row["contexts"],
        }
        for row in rows
    ]


def run_the_job(
    rows: Sequence[dict[str, Any]], judge: dict[str, Any], work: Path
) -> tuple[RunOutcome, dict[str, Any], pl.DataFrame]:
    source = write_jsonl(work / "job-input.jsonl", job_input(rows))
    out = work / "results"
    config = parse_config(
        {
            "input": {"path": str(source), "columns": {"expected_output": "expected_output"}},
            "output": {"path": str(out)},
            "judge": judge,
            "cache": {"enabled": False},  # every verdict fresh
            "rate_limit": {"max_concurrency": 1},  # the server answers one request at a time
            "ray": {"shard_size": 1000, "workers": 1},
        }
    )
    outcome = run_job(config)
    location = RunLocation(outcome.run_id, outcome.run_date)
    manifest: dict[str, Any] = json.loads((out / location.manifest).read_text())
    return outcome, manifest, pl.read_parquet(out / location.table_file("scores"))


def run_calibrate(
    name: str, rows: Sequence[dict[str, Any]], judge: dict[str, Any], work: Path
) -> Calibration:
    labels = write_jsonl(work / f"labels-{name}", rows)
    config: JobConfig = parse_config(
        {
            "input": {"path": str(labels)},  # calibrate reads no job input
            "judge": judge,
            "rate_limit": {"max_concurrency": 1},
        }
    )
    return calibrate(config, str(labels))


def _f(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def report(
    args: argparse.Namespace,
    server: LlamaServer,
    startup_s: float,
    outcome: RunOutcome,
    manifest: dict[str, Any],
    scores: pl.DataFrame,
    calibrations: Sequence[tuple[str, Calibration]],
    per_file: int,
) -> str:
    summary = outcome.published.summary
    negotiated = manifest["judge"].get("response_format") or {}
    dropped = "; ".join(
        f"`{d['form']}` refused: {d['reason'][:200]}" for d in negotiated.get("dropped", [])
    )
    fan_out = manifest["timings_s"]["fan_out"]
    model = MODEL_NAMES.get(args.model, args.model)
    command = f".venv/bin/python -m bench.llama_bench --items {args.items} --model {args.model}"
    if args.calibrate_items:
        command += f" --calibrate-items {args.calibrate_items}"
    lines = [
        HEADING,
        "",
        f"Command: `{command}` (`make bench-llm`) · date {dt.date.today().isoformat()} · "
        f"machine: {machine()} · load average at the end (1/5/15 min): {load_average()}.",
        "",
        f"Judge: {model} (`{server.model_file.name if server.model_file else args.model}`) in "
        f"llama.cpp's OpenAI-compatible server (llama-cpp-python 0.3.36, built with "
        f"`-DGGML_NATIVE=OFF -DGGML_AVX2=ON`), {args.threads} threads, context window "
        f"{args.n_ctx} tokens, on 127.0.0.1; `transport: http`, `response_format: auto`, "
        f"`max_tokens: {args.max_tokens}`, `timeout_s: {args.timeout:g}`, one request at a "
        f"time (the server serialises them). Data: the first {per_file} rows of each file in "
        f"`../shared/data`, each cut to its first {args.contexts} contexts and their labels; "
        "HotpotQA rows are judged against their reference answer, TREC DL rows (no answer) as "
        f"retrieval-only items against the query. The server started in {startup_s:.1f} s.",
        "",
        "### The job",
        "",
        f"`run_job` (real Ray, 1 worker, the verdict cache off) over the {summary.items} rows.",
        "",
        "| items | ok | unscored | errors | judge calls | prompt tokens | completion tokens "
        "| fan-out s | s per item | mean score (ok) | form in use |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {summary.items} | {summary.scored} | {summary.unscored} | {summary.errors} | "
        f"{summary.judge_calls:,} | {summary.prompt_tokens:,} | {summary.completion_tokens:,} | "
        f"{fan_out:.0f} | {fan_out / max(1, summary.items):.1f} | {_f(summary.mean)} | "
        f"`{negotiated.get('in_use', 'n/a')}` |",
        "",
        f"Structured output, from the run's manifest (`judge.response_format`): in use "
        f"`{negotiated.get('in_use')}` (confirmed: {negotiated.get('confirmed')}), "
        f"{dropped or 'nothing refused'}.",
        "",
        "Items per band: "
        + ", ".join(f"{name} {count}" for name, count in summary.bands)
        + f". Not ok: {problems(scores)}.",
        "",
        "### Calibration (`ctxprec calibrate`)",
        "",
        "The first rows of the job's input of each file, judged again (no cache), against "
        "the human labels (HotpotQA: gold supporting paragraph; TREC DL: `relevance_binary`, "
        "NIST grade >= 2).",
        "",
        "| data | items ok of judged | contexts | human yes | judge yes | precision | recall | "
        "F1 | Cohen's kappa | Pearson | Spearman | mean judge | mean labels | judging s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in calibrations:
        ctx, item = r.per_context, r.per_item
        lines.append(
            f"| {label} | {r.items.ok} of {r.items.judged} | {ctx.contexts:,} | "
            f"{_f(ctx.human_yes_rate, 2)} | {_f(ctx.judge_yes_rate, 2)} | "
            f"{_f(ctx.precision)} | {_f(ctx.recall)} | {_f(ctx.f1)} | "
            f"**{_f(ctx.cohen_kappa)}** | {_f(item.pearson)} | {_f(item.spearman)} | "
            f"{_f(item.mean_judge)} | {_f(item.mean_labels)} | {r.seconds:.0f} |"
        )
    lines += ["", "### Interpretation", "", INTERPRETATION]
    return "\n".join(lines) + "\n"


def problems(scores: pl.DataFrame, shown: int = 3) -> str:
    """Why the items that are not ok are not (the first `shown` of them)."""
    failed = scores.filter(pl.col("status") != "ok")
    if failed.is_empty():
        return "none"
    listed = [
        f"{row['status']}: {str(row['error'])[:160]}" for row in failed.head(shown).to_dicts()
    ]
    return "; ".join(listed) + (
        f"; and {failed.height - shown} more" if failed.height > shown else ""
    )


INTERPRETATION = (
    "What this shows is the contract against a real server, not a judge worth using. "
    "llama.cpp's server refuses `json_schema` (a validation error naming "
    "`response_format.type`); under `auto` each worker process sends one such request, steps "
    "down to `json_object` with the schema, and llama.cpp constrains decoding to it, so "
    "replies parse and items come back ok rather than unscored: no item was lost to the "
    "refusal. The verdicts of a 270M model are close to chance (see the kappas): it says yes "
    "or no largely regardless of the passage, so its scores must not be read as a measure "
    "of retrieval quality. Use a capable model and check it the same way before trusting it."
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.llama_bench")
    parser.add_argument("--items", type=int, default=60, help="rows in all, half per file")
    parser.add_argument("--contexts", type=int, default=4, help="contexts kept per row")
    parser.add_argument(
        "--calibrate-items",
        type=int,
        default=None,
        help="rows per file for calibrate (default: the job's rows of that file)",
    )
    parser.add_argument("--model", default="gemma3", help="gemma3, smollm2 or a .gguf path")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per request")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--docs", type=Path, default=DOCS)
    parser.add_argument("--no-write", action="store_true", help="do not update the docs")
    args = parser.parse_args(argv)
    if missing_data(args.data_dir, [name for _, name in FILES]):
        return 2
    per_file = max(1, args.items // len(FILES))
    data = [
        (label, cut_rows(args.data_dir / name, per_file, args.contexts)) for label, name in FILES
    ]
    with tempfile.TemporaryDirectory(prefix="ctxprec-llama-bench-") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        with LlamaServer(args.model, n_threads=args.threads, n_ctx=args.n_ctx) as server:
            startup_s = time.monotonic() - started
            judge = judge_section(server, args.timeout, args.max_tokens)
            rows = [row for _, file_rows in data for row in file_rows]
            outcome, manifest, scores = run_the_job(rows, judge, work)
            print(f"job: {outcome.published.summary.to_dict()}", file=sys.stderr)
            calibrations = []
            for label, file_rows in data:
                subset = file_rows[: args.calibrate_items or len(file_rows)]
                result = run_calibrate(label.replace(" ", "_"), subset, judge, work)
                print(f"calibrate {label}: {json.dumps(result)}", file=sys.stderr)
                calibrations.append((label, result))
            section = report(
                args, server, startup_s, outcome, manifest, scores, calibrations, per_file
            )
    show_and_write(HEADING, section, args.docs, not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
