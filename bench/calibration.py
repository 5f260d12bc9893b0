"""`ctxprec calibrate` with the offline lexical judge on the human-labelled data in ../shared/data.

    .venv/bin/python -m bench.calibration             # report, and update docs/benchmarks.md
    .venv/bin/python -m bench.calibration --no-write  # report only

Runs `jobs.tools.calibration.calibrate` (the code behind `ctxprec calibrate`) once per file with the
default lexical judge, plus TREC DL with gold grade >= 1 as a second gold rule, and writes the
numbers under "## Judge calibration against human labels" in docs/benchmarks.md (only that
section is replaced). Nothing of the data is copied into the repository.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.common import machine, missing_data, show_and_write
from jobs.core.config import JobConfig, parse_config
from jobs.tools.calibration import Calibration, calibrate

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO.parent / "shared" / "data"
DOCS = REPO / "docs" / "benchmarks.md"
HEADING = "## Judge calibration against human labels"
FILES = (
    ("HotpotQA", "hotpotqa_ctxprec.jsonl", None),
    ("TREC DL", "trecdl_passage_ctxprec.jsonl", None),
    ("TREC DL, gold grade >= 1", "trecdl_passage_ctxprec.jsonl", 1.0),
)


def lexical_config() -> JobConfig:
    # calibrate reads no job input; the path is required by the schema only
    return parse_config({"input": {"path": "unused.jsonl"}, "judge": {"model": "lexical"}})


def _f(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def run(data_dir: Path) -> list[tuple[str, str, float | None, Calibration]]:
    config = lexical_config()
    results = []
    for label, name, min_grade in FILES:
        path = data_dir / name
        results.append((label, name, min_grade, calibrate(config, str(path), min_grade=min_grade)))
    return results


def report(results: Sequence[tuple[str, str, float | None, Calibration]]) -> str:
    lines = [
        HEADING,
        "",
        f"Command: `.venv/bin/python -m bench.calibration` (for each file the same as "
        f"`ctxprec calibrate --config configs/local.yaml --labels ../shared/data/<file> --json`, "
        f"TREC DL once more with `--min-grade 1`) · date {dt.date.today().isoformat()} · "
        f"machine: {machine()}.",
        "",
        "Judge: the offline `lexical` judge with its default options (no API calls). Gold: "
        "HotpotQA `relevance` (gold supporting paragraph, 0/1; rule relevance > 0); TREC DL "
        "`relevance_binary` (NIST grade >= 2), and in the last row grade >= 1. The judge gets the "
        "query, and `expected_answer` as reference and as output when there is one (HotpotQA); "
        "TREC DL has none, so its rows are retrieval-only items (empty output, no reference) and "
        "the judge sees only the query (the lexical judge's verdicts are the same as with the "
        "query given as the output, as earlier versions did). "
        "Item scores are `context_precision` (scale 1, 2 decimals) of the judge's verdicts and of "
        "the gold labels over the file's order; items the judge could not score would be "
        "excluded (none here).",
        "",
        "| data | items | contexts | human yes | judge yes | precision | recall | F1 | "
        "Cohen's kappa | Pearson | Spearman | mean judge | mean labels | judging s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, _name, _grade, r in results:
        ctx, item = r.per_context, r.per_item
        lines.append(
            f"| {label} | {r.items.ok} of {r.items.judged} | {ctx.contexts:,} | "
            f"{_f(ctx.human_yes_rate, 2)} | {_f(ctx.judge_yes_rate, 2)} | "
            f"{_f(ctx.precision)} | {_f(ctx.recall)} | {_f(ctx.f1)} | "
            f"**{_f(ctx.cohen_kappa)}** | {_f(item.pearson)} | {_f(item.spearman)} | "
            f"{_f(item.mean_judge)} | {_f(item.mean_labels)} | {r.seconds:.1f} |"
        )
    for label, _name, _grade, r in results:
        if not r.retrievers:
            continue
        ranked = sorted(r.retrievers, key=lambda e: -(e.mean_labels or 0.0))
        by_judge = sorted(r.retrievers, key=lambda e: -(e.mean_judge or 0.0))
        judge_rank = {e.retriever: n for n, e in enumerate(by_judge, start=1)}
        lines += [
            "",
            f"{label}: mean context precision per retriever (ranked by labels).",
            "",
            "| retriever | items | mean labels | mean judge | rank by labels | rank by judge |",
            "|---|---|---|---|---|---|",
        ]
        for n, e in enumerate(ranked, start=1):
            lines.append(
                f"| {e.retriever} | {e.items} | {_f(e.mean_labels)} | "
                f"{_f(e.mean_judge)} | {n} | {judge_rank[e.retriever]} |"
            )
        lines += [
            "",
            f"Kendall's tau-b between the two system rankings: "
            f"**{_f(r.retriever_kendall_tau_b)}**.",
        ]
    lines += ["", "### Interpretation", "", INTERPRETATION]
    return "\n".join(lines) + "\n"


INTERPRETATION = (
    "These are the lexical judge's numbers through the calibrate command; its per-context "
    "verdicts are the same as in the lexical-judge benchmark above, so precision, recall, F1 "
    "and kappa agree with that section's 'all' rows (item correlations differ slightly: here "
    "they use the 2-decimal score, there the unrounded AP). On HotpotQA word overlap with "
    "question and answer finds a fair share of the gold paragraphs (kappa about 0.6) and the "
    "item scores follow the labels moderately. On TREC DL, where the judge sees only the "
    "query and nearly every retrieved passage shares its words, agreement is near chance "
    "whichever grade counts as relevant, item scores hardly correlate, and the system ranking "
    "is largely inverted (negative tau: it ranks BM25, fifth by the labels, first and "
    "RepLLaMA, the assessors' best, last). So the lexical judge must not be used to compare "
    "retrievers or to report scores that mean something; it is the pipeline's offline floor. "
    "Before trusting an "
    "LLM judge, run `ctxprec calibrate` with its config on these files (it makes real, "
    "billed calls: check the price with `ctxprec estimate` first) and look for kappa well "
    "above these values and a positive tau. The only LLM judges measured here are tiny local "
    "models (see 'A real LLM judge' below): they exercise the pipeline, not the judging."
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.calibration")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--docs", type=Path, default=DOCS)
    parser.add_argument("--no-write", action="store_true", help="do not update the docs")
    args = parser.parse_args(argv)
    if missing_data(args.data_dir, [name for _, name, _ in FILES]):
        return 2
    show_and_write(HEADING, report(run(args.data_dir)), args.docs, not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
