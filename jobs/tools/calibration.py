"""`ctxprec calibrate`: how well the configured judge agrees with human relevance labels.

The config's judge, built as the job builds it (real calls for an LLM judge, paced by
`rate_limit` in this process), judges a labelled JSONL file (`jobs.inputs.labels`); reported:
per-context precision, recall, F1 and Cohen's kappa, item-score correlations, and per retriever
the mean scores and Kendall's tau-b between the rankings (docs/judges.md). Unscored and failed
items are counted and left out; no reasons, no verdict cache. The result is a `Calibration`.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from pydantic import BaseModel, ConfigDict

from jobs.core import formatting as fmt
from jobs.core.config import JobConfig
from jobs.core.formatting import Column, table
from jobs.inputs.labels import LabelledItem, load_labels
from jobs.run import factory
from jobs.run.canary import judge_labelled
from jobs.tools.tool_options import CalibrateOptions
from scorer_core.errors import InputError
from scorer_core.metrics import (
    cohen_kappa,
    confusion,
    kendall_tau_b,
    pearson,
    precision_recall_f1,
    spearman,
)
from scorer_core.precision import context_precision
from scorer_core.response_format import negotiation_summary
from scorer_core.types import ScoreResult, Usage, as_verdict_flags

_MAX_INVALID_EXAMPLES = 5


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RejectedForm(_Record):
    """A structured-output form the judge's endpoint rejected, with its answer."""

    form: str
    reason: str


class FormNegotiation(_Record):
    """The structured-output form the judge settled on with its endpoint
    (`ResponseFormatNegotiation.summary()`)."""

    endpoint: str
    setting: str
    in_use: str
    confirmed: bool
    dropped: tuple[RejectedForm, ...]


class RowCounts(_Record):
    """Labelled rows read: invalid ones (the first few quoted), truncated ones, `--limit`."""

    read: int
    invalid: int
    truncated: int
    invalid_examples: tuple[str, ...]
    limit: int | None


class ItemStatuses(_Record):
    """Items judged, by result status; unscored and error items are excluded from metrics."""

    judged: int
    ok: int
    unscored: int
    error: int
    excluded: int


class ContextAgreement(_Record):
    """The judge's verdicts against the gold labels, context by context."""

    contexts: int
    human_yes_rate: float | None
    judge_yes_rate: float | None
    tp: int
    fp: int
    fn: int
    tn: int
    precision: float | None
    recall: float | None
    f1: float | None
    cohen_kappa: float | None


class ItemAgreement(_Record):
    """Item scores (context precision) by the judge's verdicts against by the gold labels."""

    items: int
    pearson: float | None
    spearman: float | None
    mean_judge: float | None
    mean_labels: float | None


class RetrieverMeans(_Record):
    """One retriever's mean item score by the judge and by the labels."""

    retriever: str
    items: int
    mean_judge: float | None
    mean_labels: float | None


class JudgeUsage(_Record):
    """What the judge's requests cost."""

    calls: int
    prompt_tokens: int
    completion_tokens: int
    retries: int
    reasks: int


class Agreement(_Record):
    """How well the judge agrees with the labels (`agreement`)."""

    items: ItemStatuses
    excluded_examples: tuple[str, ...]
    per_context: ContextAgreement
    per_item: ItemAgreement
    retrievers: tuple[RetrieverMeans, ...]
    retriever_kendall_tau_b: float | None
    usage: JudgeUsage


class _Judged(_Record):
    """What was judged how."""

    labels: str
    model: str
    gold_rule: tuple[str, ...]
    judge_output: str
    response_format: FormNegotiation | None
    rows: RowCounts


class Calibration(Agreement, _Judged):
    """What `ctxprec calibrate` found: what was judged how, the `Agreement`, the time taken
    (`--json` prints it field for field, in this order: pydantic puts the later base's
    fields first)."""

    seconds: float

    def to_json(self) -> str:
        """The `--json` output."""
        return json.dumps(self.model_dump(mode="json"), indent=2)


# -- metrics ----------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


@dataclass
class _Tally:
    """The scored items' verdicts and scores, gathered for the metrics."""

    statuses: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    pred: list[bool] = field(default_factory=list)
    gold: list[bool] = field(default_factory=list)
    judge_scores: list[float] = field(default_factory=list)
    label_scores: list[float] = field(default_factory=list)
    by_retriever: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)

    def add(self, labelled: LabelledItem, result: ScoreResult) -> None:
        self.statuses[result.status] += 1
        self.usage = self.usage + result.usage
        if result.status != "ok":
            if len(self.problems) < _MAX_INVALID_EXAMPLES:
                self.problems.append(f"{labelled.item_id}: {result.status}: {result.error}")
            return
        flags = as_verdict_flags(result.verdicts)
        self.pred.extend(flags)
        self.gold.extend(labelled.gold)
        judge_score = context_precision(flags)
        label_score = context_precision(labelled.gold)
        self.judge_scores.append(judge_score)
        self.label_scores.append(label_score)
        if labelled.retriever is not None:
            pair = self.by_retriever.setdefault(labelled.retriever, ([], []))
            pair[0].append(judge_score)
            pair[1].append(label_score)


def _per_context(pred: list[bool], gold: list[bool]) -> ContextAgreement:
    prf = precision_recall_f1(pred, gold)
    counts = confusion(pred, gold)
    return ContextAgreement(
        contexts=len(pred),
        human_yes_rate=(sum(gold) / len(gold)) if gold else None,
        judge_yes_rate=(sum(pred) / len(pred)) if pred else None,
        tp=counts.tp,
        fp=counts.fp,
        fn=counts.fn,
        tn=counts.tn,
        precision=prf.precision,
        recall=prf.recall,
        f1=prf.f1,
        cohen_kappa=cohen_kappa(pred, gold),
    )


def _per_item(judge_scores: list[float], label_scores: list[float]) -> ItemAgreement:
    return ItemAgreement(
        items=len(judge_scores),
        pearson=pearson(judge_scores, label_scores),
        spearman=spearman(judge_scores, label_scores),
        mean_judge=_mean(judge_scores),
        mean_labels=_mean(label_scores),
    )


def _retrievers(
    by_retriever: dict[str, tuple[list[float], list[float]]],
) -> tuple[tuple[RetrieverMeans, ...], float | None]:
    """Each retriever's means, and Kendall's tau-b between the two rankings (2+ retrievers)."""
    means = tuple(
        RetrieverMeans(
            retriever=name,
            items=len(scores[0]),
            mean_judge=_mean(scores[0]),
            mean_labels=_mean(scores[1]),
        )
        for name, scores in sorted(by_retriever.items())
    )
    tau = None
    if len(means) >= 2:
        tau = kendall_tau_b(
            [_mean(s[0]) or 0.0 for s in by_retriever.values()],
            [_mean(s[1]) or 0.0 for s in by_retriever.values()],
        )
    return means, tau


def agreement(items: Sequence[LabelledItem], results: Sequence[ScoreResult]) -> Agreement:
    """Metrics over the items the judge scored (`status == "ok"`); the rest are counted."""
    tally = _Tally()
    for labelled, result in zip(items, results, strict=True):
        tally.add(labelled, result)
    statuses = tally.statuses
    retrievers, tau = _retrievers(tally.by_retriever)
    usage = tally.usage
    return Agreement(
        items=ItemStatuses(
            judged=len(results),
            ok=statuses["ok"],
            unscored=statuses["unscored"],
            error=statuses["error"],
            excluded=len(results) - statuses["ok"],
        ),
        excluded_examples=tuple(tally.problems),
        per_context=_per_context(tally.pred, tally.gold),
        per_item=_per_item(tally.judge_scores, tally.label_scores),
        retrievers=retrievers,
        retriever_kendall_tau_b=tau,
        usage=JudgeUsage(
            calls=usage.calls,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            retries=usage.retries,
            reasks=usage.reasks,
        ),
    )


def calibrate(
    config: JobConfig,
    labels: str,
    *,
    limit: int | None = None,
    min_grade: float | None = None,
) -> Calibration:
    """Judge the labelled rows of `labels` with `config`'s judge and measure agreement."""
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be at least 1, not {limit}")
    factory.check_api_key(config)
    loaded = load_labels(labels, config, min_grade=min_grade, limit=limit)
    if not loaded.items:
        detail = f"; first problem: {loaded.invalid_examples[0]}" if loaded.invalid_examples else ""
        raise InputError(f"no usable labelled rows in {labels}{detail}")
    started = time.monotonic()
    results, judge = asyncio.run(judge_labelled(config, loaded.items))
    seconds = time.monotonic() - started
    negotiated = negotiation_summary(judge)  # None for the offline judge
    report = agreement(loaded.items, results)
    with_reference = sum(1 for i in loaded.items if i.item.expected_output is not None)
    return Calibration(
        labels=labels,
        model=judge.model,
        gold_rule=tuple(sorted({i.rule for i in loaded.items})),
        judge_output=(
            f"expected_answer for {with_reference} item(s); none for "
            f"{len(loaded.items) - with_reference} item(s) without one (retrieval-only: "
            "judged against the query)"
        ),
        response_format=None if negotiated is None else FormNegotiation.model_validate(negotiated),
        rows=RowCounts(
            read=loaded.rows_read,
            invalid=loaded.invalid,
            truncated=loaded.truncated,
            invalid_examples=tuple(loaded.invalid_examples),
            limit=limit,
        ),
        **dict(report),  # the `Agreement` fields, in their order
        seconds=round(seconds, 3),
    )


# -- output -----------------------------------------------------------------------------------


def _header(result: Calibration) -> list[str]:
    rows, items = result.rows, result.items
    return [
        f"ctxprec calibrate: judge {result.model} vs human labels in {result.labels}",
        f"  gold label: {', '.join(result.gold_rule)}; output given to the judge: "
        f"{result.judge_output}",
        f"  rows read {rows.read:,} (invalid {rows.invalid:,}"
        + (f", truncated {rows.truncated:,}" if rows.truncated else "")
        + (f", --limit {rows.limit}" if rows.limit else "")
        + f"); items judged {items.judged:,}: ok {items.ok:,}, unscored "
        f"{items.unscored:,}, error {items.error:,} (unscored and error excluded)",
    ]


def _agreement_tables(ctx: ContextAgreement, per_item: ItemAgreement) -> list[str]:
    contexts = ("contexts", "human yes", "judge yes", "precision", "recall", "F1")
    per_context = [
        (
            "judge vs labels",
            f"{ctx.contexts:,}",
            fmt.number(ctx.human_yes_rate, 2),
            fmt.number(ctx.judge_yes_rate, 2),
            *(fmt.number(v, 3) for v in (ctx.precision, ctx.recall, ctx.f1, ctx.cohen_kappa)),
            f"{ctx.tp} / {ctx.fp} / {ctx.fn} / {ctx.tn}",
        )
    ]
    items = ("items", "Pearson", "Spearman", "mean judge", "mean labels")
    figures = (per_item.pearson, per_item.spearman, per_item.mean_judge, per_item.mean_labels)
    per_items = [("judge vs labels", f"{per_item.items:,}", *(fmt.number(v, 3) for v in figures))]
    return [
        "",
        _markdown(["per context", *contexts, "Cohen's kappa", "tp / fp / fn / tn"], per_context),
        "",
        _markdown(["per item (context precision)", *items], per_items),
    ]


def _markdown(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    columns = [Column(headers[0], "<"), *(Column(h) for h in headers[1:])]
    return table(columns, rows, markdown=True)


def _retriever_table(result: Calibration) -> list[str]:
    if not result.retrievers:
        return []
    rows = [
        (e.retriever, f"{e.items:,}", fmt.number(e.mean_judge, 3), fmt.number(e.mean_labels, 3))
        for e in sorted(result.retrievers, key=lambda e: -(e.mean_labels or 0.0))
    ]
    return [
        "",
        _markdown(["retriever", "items", "mean judge", "mean labels"], rows),
        f"\nKendall's tau-b between the system rankings (judge vs labels): "
        f"{fmt.number(result.retriever_kendall_tau_b, 3)}",
    ]


def _notes(result: Calibration) -> list[str]:
    """The structured-output form, the rows and items left out, and the judge's usage."""
    lines = []
    negotiated = result.response_format
    if negotiated:
        dropped = "".join(
            f"; {d.form} rejected: {textwrap.shorten(d.reason, 200, placeholder='...')}"
            for d in negotiated.dropped
        )
        lines.append(f"\nstructured output: {negotiated.in_use}{dropped}")
    lines += [f"  invalid row: {example}" for example in result.rows.invalid_examples]
    lines += [f"  excluded item: {example}" for example in result.excluded_examples]
    usage = result.usage
    lines.append(
        f"\njudge usage: {usage.calls:,} calls, {usage.prompt_tokens:,} prompt / "
        f"{usage.completion_tokens:,} completion tokens, {usage.retries} retries, "
        f"{usage.reasks} re-asks; {result.seconds:.1f} s"
    )
    return lines


def format_report(result: Calibration) -> str:
    """The calibration as `ctxprec calibrate` prints it: Markdown tables and notes."""
    lines = _header(result)
    lines += _agreement_tables(result.per_context, result.per_item)
    lines += _retriever_table(result)
    lines += _notes(result)
    return "\n".join(lines)


# -- command ----------------------------------------------------------------------------------


def run(options: CalibrateOptions, out: TextIO | None = None) -> int:
    """`ctxprec calibrate`: judge the labelled rows and print the agreement.

    Args:
        options: the config, the labels, how many rows, the gold rule, the output form.
        out: where to print (default stdout).

    Returns:
        0 (errors raise, and exit as every command's do).
    """
    out = out or sys.stdout
    config = options.config.load()
    result = calibrate(config, options.labels, limit=options.limit, min_grade=options.min_grade)
    out.write((result.to_json() if options.as_json else format_report(result)) + "\n")
    return 0
