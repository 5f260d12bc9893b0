"""How well does the offline lexical judge agree with human relevance labels?

Run from the repository root:

    .venv/bin/python -m bench.lexical_agreement            # report, and update docs/benchmarks.md
    .venv/bin/python -m bench.lexical_agreement --no-write # report only
    .venv/bin/python -m bench.lexical_agreement --tune     # the parameter grid, on the tuning split

Data: the human-labelled JSONL files in ../shared/data (see its README; they are read, never
copied into this repository).

- HotpotQA (`hotpotqa_ctxprec.jsonl`): gold = `relevance` (gold supporting paragraph); the judge
  gets the question as input and `expected_answer` as both the reference answer and the output.
- TREC DL passages (`trecdl_passage_ctxprec.jsonl`): gold = `relevance_binary` (NIST grade >= 2).
  There is no reference answer, so the judge gets the query as input *and* as output: it sees the
  query only.

Splits (fixed, no randomness): the **tuning split** is the first half of the HotpotQA rows in file
order plus the TREC DL 2019 BM25 rows; everything else is **held out**. Parameters were chosen on
the tuning split only (`--tune` reproduces the grid). Held-out TREC rows of DL 2019 share queries
(not lists) with the tuning rows, so the report also gives DL 2020 + 2021 alone, whose queries
were never seen while tuning.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import average_precision, machine, show_and_write
from scorer_core.lexical import (
    DEFAULT_ANSWER_WEIGHT,
    DEFAULT_PHRASE_WEIGHT,
    DEFAULT_RELATIVE,
    DEFAULT_THRESHOLD,
    LexicalJudge,
    is_relevant,
)
from scorer_core.metrics import (
    cohen_kappa,
    kendall_tau_b,
    pearson,
    precision_recall_f1,
    spearman,
)
from scorer_core.types import ScoringItem, as_verdict_flags

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO.parent / "shared" / "data"
DOCS = REPO / "docs" / "benchmarks.md"
HEADING = "## Offline lexical judge: agreement with human labels"
HOTPOT = "hotpotqa_ctxprec.jsonl"
TREC = "trecdl_passage_ctxprec.jsonl"
COMMAND = ".venv/bin/python -m bench.lexical_agreement"


@dataclass(frozen=True, slots=True)
class Row:
    dataset: str  # "HotpotQA" or "TREC DL"
    row_id: str
    item: ScoringItem
    gold: tuple[bool, ...]
    ref_ap: float
    split: str  # "tune" or "held-out"
    collection: str  # HotpotQA setting, or the TREC collection
    retriever: str  # TREC retriever, "" for HotpotQA


def load_rows(data_dir: Path = DATA_DIR) -> list[Row]:
    """Both files as `Row`s, in file order, each with its split. Missing files are skipped."""
    rows: list[Row] = []
    hotpot = data_dir / HOTPOT
    if hotpot.exists():
        records = [json.loads(line) for line in hotpot.open(encoding="utf-8") if line.strip()]
        half = len(records) // 2
        for i, r in enumerate(records):
            answer = r["expected_answer"]
            rows.append(
                Row(
                    dataset="HotpotQA",
                    row_id=r["query_id"],
                    item=ScoringItem(
                        input=r["query"],
                        output=answer,
                        contexts=tuple(r["contexts"]),
                        expected_output=answer,
                    ),
                    gold=tuple(bool(x) for x in r["relevance"]),
                    ref_ap=float(r["ref_context_precision"]),
                    split="tune" if i < half else "held-out",
                    collection=r["setting"],
                    retriever="",
                )
            )
    trec = data_dir / TREC
    if trec.exists():
        for line in trec.open(encoding="utf-8"):
            if not line.strip():
                continue
            r = json.loads(line)
            tune = r["collection"] == "trec-dl-2019-passage" and r["retriever"] == "BM25"
            rows.append(
                Row(
                    dataset="TREC DL",
                    row_id=r["row_id"],
                    # No reference answer: the query stands in for the output as well.
                    item=ScoringItem(
                        input=r["query"], output=r["query"], contexts=tuple(r["contexts"])
                    ),
                    gold=tuple(bool(x) for x in r["relevance_binary"]),
                    ref_ap=float(r["ref_context_precision"]),
                    split="tune" if tune else "held-out",
                    collection=r["collection"],
                    retriever=r["retriever"],
                )
            )
    return rows


def judge_rows(judge: LexicalJudge, rows: Sequence[Row]) -> tuple[list[list[bool]], float]:
    """The judge's flags for every row (through the async `Judge` API) and the seconds it took."""

    async def run() -> list[list[bool]]:
        out = []
        for row in rows:
            batch = await judge.judge(row.item, range(len(row.item.contexts)))
            if batch.unscored_reason is not None:
                raise RuntimeError(f"{row.row_id}: unscored: {batch.unscored_reason}")
            out.append(as_verdict_flags(batch.verdicts))
        return out

    start = time.perf_counter()
    flags = asyncio.run(run())
    return flags, time.perf_counter() - start


@dataclass(frozen=True, slots=True)
class Agreement:
    rows: int
    contexts: int
    human_yes: float
    judge_yes: float
    precision: float | None
    recall: float | None
    f1: float | None
    kappa: float | None
    ap_pearson: float | None
    ap_spearman: float | None
    judge_map: float
    human_map: float


def agreement(rows: Sequence[Row], flags: Sequence[Sequence[bool]]) -> Agreement:
    pred = [f for fl in flags for f in fl]
    gold = [g for row in rows for g in row.gold]
    prf = precision_recall_f1(pred, gold)
    judge_ap = [average_precision(fl) for fl in flags]
    human_ap = [average_precision(row.gold) for row in rows]
    n = max(len(gold), 1)
    return Agreement(
        rows=len(rows),
        contexts=len(gold),
        human_yes=sum(gold) / n,
        judge_yes=sum(pred) / n,
        precision=prf.precision,
        recall=prf.recall,
        f1=prf.f1,
        kappa=cohen_kappa(pred, gold),
        ap_pearson=pearson(judge_ap, human_ap),
        ap_spearman=spearman(judge_ap, human_ap),
        judge_map=sum(judge_ap) / max(len(rows), 1),
        human_map=sum(human_ap) / max(len(rows), 1),
    )


def select(
    rows: Sequence[Row], flags: Sequence[Sequence[bool]], keep: Callable[[Row], bool]
) -> tuple[list[Row], list[Sequence[bool]]]:
    pairs = [(r, f) for r, f in zip(rows, flags, strict=True) if keep(r)]
    return [r for r, _ in pairs], [f for _, f in pairs]


def check_reference_ap(rows: Iterable[Row]) -> tuple[int, float]:
    """Rows checked and the largest |our AP on the human labels - ref_context_precision|."""
    worst = 0.0
    count = 0
    for row in rows:
        worst = max(worst, abs(average_precision(row.gold) - row.ref_ap))
        count += 1
    return count, worst


def fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


# -- the report --------------------------------------------------------------------------------


def _subsets(dataset: str) -> list[tuple[str, Callable[[Row], bool]]]:
    if dataset == "HotpotQA":
        return [
            ("tuning: first half of rows (all open_retrieval)", lambda r: r.split == "tune"),
            ("**held-out**: second half", lambda r: r.split == "held-out"),
            (
                "held-out, open_retrieval only",
                lambda r: r.split == "held-out" and r.collection == "open_retrieval",
            ),
            (
                "held-out, distractor only",
                lambda r: r.split == "held-out" and r.collection == "distractor",
            ),
            ("all", lambda r: True),
        ]
    return [
        ("tuning: DL19 BM25", lambda r: r.split == "tune"),
        ("**held-out**: all other rows", lambda r: r.split == "held-out"),
        (
            "held-out, DL20+DL21 (unseen queries)",
            lambda r: r.collection != "trec-dl-2019-passage",
        ),
        ("all", lambda r: True),
    ]


def _both(dataset: str, keep: Callable[[Row], bool]) -> Callable[[Row], bool]:
    return lambda r: r.dataset == dataset and keep(r)


def throughput(rows: Sequence[Row], repeats: int = 5) -> list[float]:
    """Seconds to judge all `rows`, `repeats` times, each with a fresh judge (no item cache)."""
    return [judge_rows(LexicalJudge(), rows)[1] for _ in range(repeats)]


def report(judge: LexicalJudge, data_dir: Path = DATA_DIR) -> str:
    rows = load_rows(data_dir)
    if not rows:
        raise SystemExit(f"no data files in {data_dir}")
    flags, _ = judge_rows(judge, rows)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    runs = sorted(throughput(rows))
    seconds = runs[len(runs) // 2]
    n_contexts = sum(len(r.gold) for r in rows)
    n_chars = sum(len(c) for r in rows for c in r.item.contexts)
    out: list[str] = [HEADING, ""]
    out.append(
        f"Command: `{COMMAND}` · date {_dt.datetime.now(_dt.UTC).date().isoformat()} · "
        f"machine: {machine()}."
    )
    out.append("")
    out.append(
        f"Judge: `{judge!r}` (the defaults). Data: `../shared/data` (human labels; see its "
        "README for sources and licences, nothing of it is copied here). HotpotQA: gold = "
        "`relevance` (gold supporting paragraph), the judge sees the question and "
        "`expected_answer` as reference. TREC DL passages: gold = `relevance_binary` (NIST "
        "grade >= 2); there is no reference answer, so the judge gets the query as input and "
        "as output, i.e. it sees only the query."
    )
    out.append("")
    out.append(
        "**Tuning vs held-out.** The parameters were chosen on the tuning split only (first "
        "half of the HotpotQA rows in file order, plus the 43 TREC DL 2019 BM25 rows), by the "
        "mean of the two datasets' Cohen's kappa over a coarse grid (`--tune`: threshold x "
        "relative x answer_weight x phrase_weight, 5 x 5 x 3 x 3) and the argmax taken (the "
        "best few configurations differ by less than 0.002 in mean kappa, so the choice among "
        "them is noise). Everything else is held out. In fairness: the shape of the method "
        "(the relative-to-best rule, word-pair matching) was settled in exploratory runs that "
        "also printed held-out numbers; only the numeric parameters come from the grid alone. "
        "All HotpotQA `distractor` rows happen to fall in the held-out half. Held-out DL 2019 "
        "rows reuse the tuning queries with other retrievers' lists, so DL 2020 + 2021 (queries "
        "never seen while tuning) are shown separately."
    )
    out.append("")
    for dataset in ("HotpotQA", "TREC DL"):
        if not any(r.dataset == dataset for r in rows):
            continue
        checked, worst = check_reference_ap(r for r in rows if r.dataset == dataset)
        out.append(f"### {dataset}")
        out.append("")
        out.append(
            "| subset | rows | contexts | human yes | judge yes | precision | recall | F1 | "
            "kappa | AP Pearson | AP Spearman | MAP judge | MAP human |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, keep in _subsets(dataset):
            sub_rows, sub_flags = select(rows, flags, _both(dataset, keep))
            if not sub_rows:
                continue
            a = agreement(sub_rows, sub_flags)
            out.append(
                f"| {name} | {a.rows} | {a.contexts} | {a.human_yes:.2f} | {a.judge_yes:.2f} | "
                f"{fmt(a.precision)} | {fmt(a.recall)} | {fmt(a.f1)} | **{fmt(a.kappa)}** | "
                f"{fmt(a.ap_pearson)} | {fmt(a.ap_spearman)} | {a.judge_map:.3f} | "
                f"{a.human_map:.3f} |"
            )
        out.append("")
        out.append(
            f"Per-context metrics count the judge's yes/no against the human label (positive = "
            f"relevant). AP columns correlate, per row, the average precision of the judge's "
            f"flags with the AP of the human labels over the same order (0 when a list has no "
            f"relevant context, as in the data). Our exact AP of the human labels matches the "
            f"file's `ref_context_precision` on all {checked} rows (max abs difference "
            f"{worst:.1e}; the file rounds to 6 decimals)."
        )
        out.append("")
    trec: list[tuple[Row, Sequence[bool]]] = [
        (r, f) for r, f in zip(rows, flags, strict=True) if r.dataset == "TREC DL"
    ]
    if trec:
        out.extend(_systems_section(trec))
    out.append("### Throughput")
    out.append("")
    out.append(
        f"All {n_contexts:,} contexts ({n_chars / 1e6:.1f} M characters) judged through the "
        f"async `Judge.judge` API, one process, one thread, a fresh judge per run: median of "
        f"{len(runs)} runs {seconds:.2f} s = **{n_contexts / seconds:,.0f} contexts/s** "
        f"({n_chars / 1e6 / seconds:.1f} M chars/s; runs {runs[0]:.2f}-{runs[-1]:.2f} s; "
        f"1-minute load average {load:.1f} at the start, other jobs shared the machine). "
        f"Per context the work is bounded by `max_chars`={judge.max_chars:,} characters and "
        f"`max_tokens`={judge.max_tokens:,} tokens, so a multi-megabyte context costs about "
        f"as much as a {judge.max_chars:,}-character one."
    )
    out.append("")
    out.append("### Interpretation")
    out.append("")
    out.append(INTERPRETATION)
    out.append("")
    return "\n".join(out)


def _systems_section(trec: list[tuple[Row, Sequence[bool]]]) -> list[str]:
    out = ["### TREC DL: system ranking by mean context precision", ""]
    by_retriever: dict[str, list[tuple[Row, Sequence[bool]]]] = defaultdict(list)
    for r, f in trec:
        by_retriever[r.retriever].append((r, f))
    out.append("| retriever | rows | MAP human | MAP judge | kappa | human yes | judge yes |")
    out.append("|---|---|---|---|---|---|---|")
    for retriever in sorted(by_retriever, key=lambda k: -_mean_ap(by_retriever[k], human=True)):
        pairs = by_retriever[retriever]
        a = agreement([r for r, _ in pairs], [f for _, f in pairs])
        out.append(
            f"| {retriever} | {a.rows} | {a.human_map:.3f} | {a.judge_map:.3f} | {fmt(a.kappa)} "
            f"| {a.human_yes:.2f} | {a.judge_yes:.2f} |"
        )
    out.append("")
    taus = []
    subsets: list[tuple[str, Callable[[Row], bool]]] = [
        ("all collections (mixes tuning rows in)", lambda r: True),
        ("DL19, 6 systems (BM25 rows are tuning rows)", lambda r: "2019" in r.collection),
        ("DL20, 5 systems (held-out)", lambda r: "2020" in r.collection),
        ("DL21, 3 systems (held-out)", lambda r: "2021" in r.collection),
    ]
    for label, keep in subsets:
        groups: dict[str, list[tuple[Row, Sequence[bool]]]] = defaultdict(list)
        for r, f in trec:
            if keep(r):
                groups[r.retriever].append((r, f))
        names = sorted(groups)
        human = [_mean_ap(groups[n], human=True) for n in names]
        judged = [_mean_ap(groups[n], human=False) for n in names]
        taus.append(f"{label}: tau-b **{fmt(kendall_tau_b(judged, human))}**")
    out.append(
        "Kendall's tau-b between the system ranking by the judge's mean AP and by the human "
        "mean AP: " + "; ".join(taus) + "."
    )
    out.append("")
    return out


def _mean_ap(pairs: Sequence[tuple[Row, Sequence[bool]]], *, human: bool) -> float:
    values = [average_precision(r.gold if human else f) for r, f in pairs]
    return sum(values) / len(values)


INTERPRETATION = (
    "The lexical judge is a baseline that lets the tool run offline (tests, CI, air-gapped "
    "runs, a free first pass), not a substitute for an LLM judge. On HotpotQA, where the "
    "reference answer and the question name the entities a gold paragraph is about, word "
    "overlap recovers a fair share of the gold paragraphs (kappa around 0.6, about the same on "
    "the tuning and held-out halves), but it misses gold paragraphs that share few words with "
    "question and answer (a bridge paragraph, the second entity of a comparison) and accepts "
    "distractors that repeat the same names. On TREC DL it sees only the query, and nearly "
    "every retrieved passage already contains the query's words: agreement is weak on BM25 "
    "lists and about chance on the lists of neural retrievers, where relevance depends on "
    "whether a passage answers the question, which overlap cannot see. It also gets the "
    "system ranking wrong (it favours the lexical retrievers, negative tau), so it must not be "
    "used to compare retrievers. Use it to exercise the pipeline and as a floor; use an LLM "
    "judge for scores that mean something, and check any judge against human labels the way "
    "this benchmark does (`scorer_core.metrics`)."
)


# -- tuning ------------------------------------------------------------------------------------

GRID_THRESHOLD = (0.1, 0.2, 0.3, 0.4, 0.5)
GRID_RELATIVE = (0.0, 0.6, 0.7, 0.8, 0.9)
GRID_ANSWER_WEIGHT = (0.5, 1.0, 2.0)
GRID_PHRASE_WEIGHT = (0.0, 0.3, 0.5)


def tune(data_dir: Path = DATA_DIR, top: int = 15) -> str:
    """The grid on the tuning split, best first (objective: mean kappa of the two datasets)."""
    rows = [r for r in load_rows(data_dir) if r.split == "tune"]
    datasets = sorted({r.dataset for r in rows})
    results = []
    for aw in GRID_ANSWER_WEIGHT:
        for pw in GRID_PHRASE_WEIGHT:
            judge = LexicalJudge(answer_weight=aw, phrase_weight=pw, cache_items=0)
            scored = [(r, judge.scores(r.item)) for r in rows]
            for th in GRID_THRESHOLD:
                for rel in GRID_RELATIVE:
                    kappas = []
                    for d in datasets:
                        pred: list[bool] = []
                        gold: list[bool] = []
                        for r, s in scored:
                            if r.dataset == d:
                                best = max(s, default=0.0)
                                pred += [
                                    is_relevant(x, best, threshold=th, relative=rel) for x in s
                                ]
                                gold += r.gold
                        kappas.append(cohen_kappa(pred, gold) or 0.0)
                    results.append((sum(kappas) / len(kappas), kappas, th, rel, aw, pw))
    results.sort(key=lambda x: -x[0])
    lines = [
        "| mean kappa | "
        + " | ".join(f"kappa {d}" for d in datasets)
        + " | threshold | relative | answer_weight | phrase_weight |",
        "|---" * (5 + len(datasets)) + "|",
    ]
    for mean, kappas, th, rel, aw, pw in results[:top]:
        lines.append(
            f"| {mean:.4f} | "
            + " | ".join(f"{k:.4f}" for k in kappas)
            + f" | {th} | {rel} | {aw} | {pw} |"
        )
    current = (DEFAULT_THRESHOLD, DEFAULT_RELATIVE, DEFAULT_ANSWER_WEIGHT, DEFAULT_PHRASE_WEIGHT)
    rank = next((i for i, r in enumerate(results) if r[2:] == current), None)
    lines.append("")
    lines.append(
        f"{len(results)} configurations on {len(rows)} tuning rows; the defaults {current} "
        f"rank {'n/a' if rank is None else rank + 1}."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--tune", action="store_true", help="print the tuning grid and exit")
    parser.add_argument("--no-write", action="store_true", help="do not update docs")
    parser.add_argument("--docs", type=Path, default=DOCS)
    args = parser.parse_args(argv)
    if not args.data_dir.exists():
        print(f"no data directory {args.data_dir}", file=sys.stderr)
        return 2
    if args.tune:
        print(tune(args.data_dir))
        return 0
    show_and_write(HEADING, report(LexicalJudge(), args.data_dir), args.docs, not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
