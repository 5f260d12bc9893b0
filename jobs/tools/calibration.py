"""`ctxprec calibrate`: how well the configured judge agrees with human relevance labels.

The config's judge, built as the job builds it, judges a labelled JSONL file: per-context
precision, recall, F1 and Cohen's kappa, item-score correlations, and per retriever the means
and Kendall's tau-b between the rankings (docs/judges.md). Unscored and failed items are left
out; no reasons, no verdict cache. An LLM judge judges twice, with and without a reason per
verdict (`judge.verdict_reasons`), so the cheaper setting's agreement is measured, not guessed.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import TextIO

from jobs.core import formatting as fmt
from jobs.core.config import JobConfig
from jobs.core.formatting import Column, JsonRecord, table
from jobs.inputs.labels import LabelledItem, load_labels
from jobs.run.canary import judge_labelled
from jobs.tools.tool_options import CalibrateOptions
from scorer_core import metrics
from scorer_core.capabilities import capabilities_of
from scorer_core.errors import InputError, one_line
from scorer_core.precision import context_precision
from scorer_core.response_format import negotiation_summary
from scorer_core.types import ScoreResult, Usage, as_verdict_flags

_MAX_INVALID_EXAMPLES = 5


class RejectedForm(JsonRecord):
    form: str
    reason: str


class FormNegotiation(JsonRecord):
    """The structured-output form the judge settled on (`ResponseFormatNegotiation.summary`)."""

    endpoint: str
    setting: str
    in_use: str
    confirmed: bool
    dropped: tuple[RejectedForm, ...]


class RowCounts(JsonRecord):
    """Labelled rows read: invalid ones (the first few quoted), truncated ones, `--limit`."""

    read: int
    invalid: int
    truncated: int
    invalid_examples: tuple[str, ...]
    limit: int | None


class ItemStatuses(JsonRecord):
    """Items judged, by result status; unscored and error items are excluded from metrics."""

    judged: int
    ok: int
    unscored: int
    error: int
    excluded: int


class ContextAgreement(JsonRecord):
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


class ItemAgreement(JsonRecord):
    """Item scores (context precision) by the judge's verdicts against by the gold labels."""

    items: int
    pearson: float | None
    spearman: float | None
    mean_judge: float | None
    mean_labels: float | None


class RetrieverMeans(JsonRecord):
    retriever: str
    items: int
    mean_judge: float | None
    mean_labels: float | None


class JudgeUsage(JsonRecord):
    calls: int
    prompt_tokens: int
    completion_tokens: int
    retries: int
    reasks: int


class Agreement(JsonRecord):
    """How well the judge agrees with the labels (`agreement`)."""

    items: ItemStatuses
    excluded_examples: tuple[str, ...]
    per_context: ContextAgreement
    per_item: ItemAgreement
    retrievers: tuple[RetrieverMeans, ...]
    retriever_kendall_tau_b: float | None
    usage: JudgeUsage


class _Judged(JsonRecord):
    labels: str
    model: str
    verdict_reasons: bool
    # the same judge with the other `verdict_reasons` setting (None: the offline judge)
    other_reasons: Agreement | None
    gold_rule: tuple[str, ...]
    judge_output: str
    response_format: FormNegotiation | None
    rows: RowCounts


class Calibration(Agreement, _Judged):
    """What `ctxprec calibrate` found; `--json` prints it field for field (pydantic puts the
    later base's fields first)."""

    seconds: float


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def agreement(items: Sequence[LabelledItem], results: Sequence[ScoreResult]) -> Agreement:
    """Metrics over the items the judge scored (`status == "ok"`); the rest are counted."""
    statuses = Counter(result.status for result in results)
    usage = sum((result.usage for result in results), Usage())
    problems = []  # each item left out, with why
    pred: list[bool] = []  # the judge's verdict per context of the scored items
    gold: list[bool] = []  # the label per context of the same items
    judge: list[float] = []  # each scored item's score by the judge's verdicts
    labels: list[float] = []  # and by its labels
    scores = []  # (by the judge, by the labels, the item's retriever)
    for labelled, result in zip(items, results, strict=True):
        if result.status != "ok":
            problems.append(f"{labelled.item_id}: {result.status}: {result.error}")
            continue
        flags = as_verdict_flags(result.verdicts)
        pred += flags
        gold += labelled.gold
        judge.append(context_precision(flags))
        labels.append(context_precision(labelled.gold))
        scores.append((judge[-1], labels[-1], labelled.retriever))
    retrievers, tau = _retrievers(scores)
    return Agreement(
        items=ItemStatuses(
            judged=len(results),
            excluded=len(results) - statuses["ok"],
            ok=statuses["ok"],
            unscored=statuses["unscored"],
            error=statuses["error"],
        ),
        excluded_examples=tuple(problems[:_MAX_INVALID_EXAMPLES]),
        per_context=ContextAgreement(
            contexts=len(pred),
            human_yes_rate=(sum(gold) / len(gold)) if gold else None,
            judge_yes_rate=(sum(pred) / len(pred)) if pred else None,
            **metrics.confusion(pred, gold)._asdict(),
            **metrics.precision_recall_f1(pred, gold)._asdict(),
            cohen_kappa=metrics.cohen_kappa(pred, gold),
        ),
        per_item=ItemAgreement(
            items=len(judge),
            pearson=metrics.pearson(judge, labels),
            spearman=metrics.spearman(judge, labels),
            mean_judge=_mean(judge),
            mean_labels=_mean(labels),
        ),
        retrievers=retrievers,
        retriever_kendall_tau_b=tau,
        usage=JudgeUsage(**{name: getattr(usage, name) for name in JudgeUsage.model_fields}),
    )


def _retrievers(
    scores: Sequence[tuple[float, float, str | None]],
) -> tuple[tuple[RetrieverMeans, ...], float | None]:
    """Each retriever's means, and Kendall's tau-b between the two rankings (2+ retrievers)."""
    by_retriever: dict[str, list[tuple[float, float]]] = {}
    for judge, label, retriever in scores:
        if retriever is not None:
            by_retriever.setdefault(retriever, []).append((judge, label))
    means = tuple(
        RetrieverMeans(
            retriever=name,
            items=len(pairs),
            mean_judge=_mean([judge for judge, _ in pairs]),
            mean_labels=_mean([label for _, label in pairs]),
        )
        for name, pairs in sorted(by_retriever.items())
    )
    if len(means) < 2:
        return means, None
    by_judge = [retriever.mean_judge or 0.0 for retriever in means]
    by_labels = [retriever.mean_labels or 0.0 for retriever in means]
    return means, metrics.kendall_tau_b(by_judge, by_labels)


def calibrate(
    config: JobConfig, labels: str, *, limit: int | None = None, min_grade: float | None = None
) -> Calibration:
    """Judge the labelled rows of `labels` with `config`'s judge and measure agreement."""
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be at least 1, not {limit}")
    config.judge.access().check()
    loaded = load_labels(labels, config, min_grade=min_grade, limit=limit)
    if not loaded.items:
        detail = f"; first problem: {loaded.invalid_examples[0]}" if loaded.invalid_examples else ""
        raise InputError(f"no usable labelled rows in {labels}{detail}")
    started = time.monotonic()
    results, judge = asyncio.run(judge_labelled(config, loaded.items))
    other = None
    if not capabilities_of(config.judge.model).offline:
        judging = config.judge
        flipped = judging.with_changes(verdict_reasons=not judging.verdict_reasons)
        other_config = config.with_changes(judge=flipped)
        other_results, _ = asyncio.run(judge_labelled(other_config, loaded.items))
        other = agreement(loaded.items, other_results)
    seconds = time.monotonic() - started
    negotiated = negotiation_summary(judge)  # None for the offline judge
    report = agreement(loaded.items, results)
    with_reference = sum(1 for row in loaded.items if row.item.expected_output is not None)
    return Calibration(
        labels=labels,
        model=judge.model,
        verdict_reasons=config.judge.verdict_reasons,
        other_reasons=other,
        gold_rule=tuple(sorted({row.rule for row in loaded.items})),
        judge_output=(
            f"the reference answer for {with_reference} item(s); none for "
            f"{len(loaded.items) - with_reference} item(s) without one (retrieval-only: "
            "judged against the query)"
        ),
        response_format=None if negotiated is None else FormNegotiation.model_validate(negotiated),
        rows=RowCounts(
            read=loaded.rows_read,
            limit=limit,
            invalid=loaded.invalid,
            truncated=loaded.truncated,
            invalid_examples=loaded.invalid_examples,
        ),
        **dict(report),  # the `Agreement` fields, in their order
        seconds=round(seconds, 3),
    )


def _header(result: Calibration) -> list[str]:
    rows = result.rows
    items = result.items
    read = f"invalid {rows.invalid:,}"
    if rows.truncated:
        read += f", truncated {rows.truncated:,}"
    if rows.limit:
        read += f", --limit {rows.limit}"
    return [
        f"ctxprec calibrate: judge {result.model} vs human labels in {result.labels}",
        f"  gold label: {', '.join(result.gold_rule)}; output given to the judge: "
        f"{result.judge_output}",
        f"  rows read {rows.read:,} ({read}); items judged {items.judged:,}: ok {items.ok:,}, "
        f"unscored {items.unscored:,}, error {items.error:,} (unscored and error excluded)",
    ]


def _agreement_tables(result: Calibration) -> list[str]:
    """A row per `verdict_reasons` setting judged: the config's first ("judge vs labels")."""
    judged: list[tuple[str, Agreement]] = [("judge vs labels", result)]
    if result.other_reasons is not None:
        other = f"verdict_reasons: {str(not result.verdict_reasons).lower()}"
        judged.append((other, result.other_reasons))
    per_context = []
    per_items = []
    for label, found in judged:
        figures = found.per_context
        per_context.append(
            (
                label,
                f"{figures.contexts:,}",
                fmt.number(figures.human_yes_rate, 2),
                fmt.number(figures.judge_yes_rate, 2),
                fmt.number(figures.precision, 3),
                fmt.number(figures.recall, 3),
                fmt.number(figures.f1, 3),
                fmt.number(figures.cohen_kappa, 3),
                f"{figures.tp} / {figures.fp} / {figures.fn} / {figures.tn}",
            )
        )
        per_item = found.per_item
        per_items.append(
            (
                label,
                f"{per_item.items:,}",
                fmt.number(per_item.pearson, 3),
                fmt.number(per_item.spearman, 3),
                fmt.number(per_item.mean_judge, 3),
                fmt.number(per_item.mean_labels, 3),
            )
        )
    context_headers = [
        "per context",
        "contexts",
        "human yes",
        "judge yes",
        "precision",
        "recall",
        "F1",
        "Cohen's kappa",
        "tp / fp / fn / tn",
    ]
    item_headers = [
        "per item (context precision)",
        "items",
        "Pearson",
        "Spearman",
        "mean judge",
        "mean labels",
    ]
    return ["", _markdown(context_headers, per_context), "", _markdown(item_headers, per_items)]


def _markdown(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    columns = [
        Column(header=headers[0], align="<"),
        *(Column(header=header) for header in headers[1:]),
    ]
    return table(columns, rows, markdown=True)


def _retriever_table(result: Calibration) -> list[str]:
    if not result.retrievers:
        return []
    by_labels = sorted(result.retrievers, key=lambda means: -(means.mean_labels or 0.0))
    rows = [
        (
            means.retriever,
            f"{means.items:,}",
            fmt.number(means.mean_judge, 3),
            fmt.number(means.mean_labels, 3),
        )
        for means in by_labels
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
        said = negotiated.in_use
        for rejected in negotiated.dropped:
            reason = one_line(rejected.reason, 200)
            said += f"; {rejected.form} rejected: {reason}"
        lines.append(f"\nstructured output: {said}")
    lines += [f"  invalid row: {example}" for example in result.rows.invalid_examples]
    lines += [f"  excluded item: {example}" for example in result.excluded_examples]
    judged: list[tuple[str, Agreement]] = [("", result)]
    if result.other_reasons is not None:
        judged.append((" (other setting)", result.other_reasons))
    for label, found in judged:
        usage = found.usage
        lines.append(
            f"\njudge usage{label}: {usage.calls:,} calls, {usage.prompt_tokens:,} prompt / "
            f"{usage.completion_tokens:,} completion tokens, {usage.retries} retries, "
            f"{usage.reasks} re-asks"
        )
    lines.append(f"judged in {result.seconds:.1f} s")
    return lines


def format_report(result: Calibration) -> str:
    """The calibration as `ctxprec calibrate` prints it: Markdown tables and notes."""
    lines = _header(result)
    lines += _agreement_tables(result)
    lines += _retriever_table(result)
    lines += _notes(result)
    return "\n".join(lines)


def run(options: CalibrateOptions, out: TextIO | None = None) -> int:
    """`ctxprec calibrate`: judge the labelled rows, print the agreement; returns 0."""
    out = out or sys.stdout
    config = options.config.load()
    result = calibrate(config, options.labels, limit=options.limit, min_grade=options.min_grade)
    out.write((result.to_json() if options.as_json else format_report(result)) + "\n")
    return 0
