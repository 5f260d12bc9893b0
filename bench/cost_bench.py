"""The judge bill per item against its floor (issue 28), on real passages.

The real job scores ../shared/data/hotpotqa_ctxprec.jsonl (595 items, 10 passages, a reference
answer; the system answer is written here from it) through the fake judge over HTTP, which
answers as the labels say and counts every character sent and returned. Cost units are prompt
characters + 4 x reply characters (providers bill output tokens about four times input). The
floor is what the judge must read (query, reference answer, passages) plus a few characters per
verdict. Every published score is checked exact against the labels' context precision.

    .venv/bin/python -m bench.cost_bench [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from bench.common import header, write_section
from jobs.core.config import parse_config
from jobs.run.job import run_job
from scorer_core.precision import context_precision
from tests.fake_judge import FakeJudgeServer

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "hotpotqa_ctxprec.jsonl"
OUTPUT_WEIGHT = 4  # reply characters cost about four prompt characters
FLOOR_CHARS_PER_VERDICT = 4  # an index, a yes/no and a separator: `3:y,`
KEY_ENV = "COST_BENCH_JUDGE_KEY"


@dataclass(frozen=True)
class Bill:
    """What one run sent and received, in characters, and its floor."""

    setting: str
    items: int
    calls: int
    prompt_chars: int
    reply_chars: int
    floor: int
    exact: bool

    @property
    def cost_units(self) -> int:
        return self.prompt_chars + OUTPUT_WEIGHT * self.reply_chars

    @property
    def ratio(self) -> float:
        return self.cost_units / self.floor


def read_items(path: Path = DATA) -> list[dict[str, Any]]:
    """The labelled rows, each with a system answer (worded unlike the reference)."""
    with path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    for row in rows:
        row["answer"] = f"Based on the passages, the answer is {row['expected_answer']}."
    return rows


def floor(rows: list[dict[str, Any]]) -> int:
    """What the judge must read, plus a few reply characters per verdict, in cost units."""
    read = sum(
        len(r["query"]) + len(r["expected_answer"]) + sum(map(len, r["contexts"])) for r in rows
    )
    verdicts = sum(len(r["contexts"]) for r in rows)
    return read + OUTPUT_WEIGHT * FLOOR_CHARS_PER_VERDICT * verdicts


def measure(rows: list[dict[str, Any]], workdir: Path, **judge: Any) -> Bill:
    """One run of the real job over `rows` with these `judge` settings, the store off."""
    gold = {
        (row["query"], text)
        for row in rows
        for text, label in zip(row["contexts"], row["relevance"], strict=True)
        if label
    }
    source = workdir / "items.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    os.environ.setdefault(KEY_ENV, "bench-not-a-secret")
    name = ",".join(f"{k}={v}" for k, v in judge.items()) or "defaults"
    with FakeJudgeServer(verdict_fn=lambda text, query: (query, text) in gold) as server:
        config = {
            "input": {
                "path": str(source),
                "columns": {
                    "query_id": "query_id",
                    "input": "query",
                    "output": "answer",
                    "expected_output": "expected_answer",
                    "context": "contexts",
                },
            },
            "output": {"path": str(workdir / "out")},
            "judge": {
                "model": "openai/fake-judge",
                "api_base": server.url,
                "api_key_env": KEY_ENV,
                **judge,
            },
            "cache": {"enabled": False},
            "run": {"id": name.replace("=", "-").replace(",", "-")},
            "ray": {"shard_size": 200, "workers": 2},
        }
        outcome = run_job(parse_config(config))
        stats = server.stats()
    scores = pl.read_parquet(f"{workdir}/out/scores/**/*.parquet", hive_partitioning=True)
    got = dict(scores.filter(pl.col("run_id") == outcome.run_id).select("query_id", "score").rows())
    exact = got == {row["query_id"]: context_precision(row["relevance"]) for row in rows}
    return Bill(
        name,
        len(rows),
        stats["total_requests"],
        stats["prompt_chars"],
        stats["reply_chars"],
        floor(rows),
        exact,
    )


def report(bills: list[Bill]) -> str:
    lines = [
        "| setting | items | calls | prompt chars/item | reply chars/item | cost units/item "
        "| floor/item | x floor | scores exact |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for b in bills:
        per = [b.prompt_chars, b.reply_chars, b.cost_units, b.floor]
        cells = [f"{value / b.items:,.0f}" for value in per]
        lines.append(
            f"| {b.setting} | {b.items} | {b.calls} | {' | '.join(cells)} | {b.ratio:.2f} "
            f"| {'yes' if b.exact else 'NO'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    rows = read_items()
    bills = []
    for judge in ({"verdict_reasons": False}, {}):
        with tempfile.TemporaryDirectory(prefix="cost-bench-") as tmp:
            bills.append(measure(rows, Path(tmp), **judge))
    table = report(bills)
    print(table)
    if args.write_docs:
        heading = "## The judge bill against its floor (issue 28)"
        body = (
            f"{heading}\n\n{header('.venv/bin/python -m bench.cost_bench --write-docs')}\n\n"
            f"{__doc__.split(chr(10) + chr(10))[1]}\n\n{table}\n"
        )
        write_section(heading, body)


if __name__ == "__main__":
    main()
