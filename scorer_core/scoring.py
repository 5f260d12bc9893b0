"""The scoring of one item: slices of contexts to a judge, verdicts to a score, a reason.

The library's scorer calls `score_item` after resolving Mastra's call shapes; the job's workers
and tools call it directly with the judge and settings of their config.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from scorer_core.errors import (
    ConfigError,
    FatalJudgeError,
    JudgeError,
    MalformedReply,
    TransportError,
)
from scorer_core.precision import check_scale, context_precision, score_band
from scorer_core.protocols import Judge
from scorer_core.reasons import template_reason
from scorer_core.types import (
    ContextVerdict,
    ReasonMode,
    ScoreResult,
    ScoringItem,
    Status,
    Usage,
    as_verdict_flags,
)

REASON_MODES: tuple[ReasonMode, ...] = ("llm", "template", "none")


@dataclass(frozen=True, kw_only=True)
class ScoringSettings:
    """How an item is scored: from 0 to `scale` (None means 1), with a `reason` ("llm": one
    more judge call, "template" or "none"), its contexts judged `contexts_per_call` per request
    (the requests sent concurrently). A value out of range is a `ConfigError` naming it."""

    scale: float = 1.0
    reason: ReasonMode = "llm"
    contexts_per_call: int = 16

    def __post_init__(self) -> None:
        # The scale as a float (None, an int: 1.0, 10.0), as every score is computed with it.
        object.__setattr__(self, "scale", check_scale(self.scale))
        if self.reason not in REASON_MODES:
            modes = ", ".join(REASON_MODES)
            raise ConfigError(f"reason must be one of {modes}, got {self.reason!r}")
        per_call = self.contexts_per_call
        if isinstance(per_call, bool) or not isinstance(per_call, int):
            raise ConfigError(f"contexts_per_call must be an integer, got {per_call!r}")
        if per_call < 1:
            raise ConfigError(f"contexts_per_call must be >= 1, got {per_call}")


def context_slices(count: int, contexts_per_call: int) -> list[list[int]]:
    """Context positions 0..count-1 in slices of at most `contexts_per_call`, in order."""
    starts = range(0, count, contexts_per_call)
    return [list(range(start, min(start + contexts_per_call, count))) for start in starts]


async def score_item(judge: Judge, item: ScoringItem, settings: ScoringSettings) -> ScoreResult:
    """Score an item (checked by `validate_item`) with `judge`, as `settings` say. The
    result's status is "ok", "unscored" (a reply the judge could not use) or "error" (a
    transport or judge failure); a `FatalJudgeError` (no request can succeed) is raised."""
    slices = context_slices(len(item.contexts), settings.contexts_per_call)
    asks = (judge.judge(item, part) for part in slices)
    outcomes = await asyncio.gather(*asks, return_exceptions=True)
    usage = Usage()
    verdicts: list[ContextVerdict] = []
    prompts: list[str] = []
    problems: list[str] = []
    failure: JudgeError | None = None
    for part, outcome in zip(slices, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            # Anything but a (non-fatal) judge error is a bug or a stop, not this item's problem.
            if not isinstance(outcome, JudgeError) or isinstance(outcome, FatalJudgeError):
                raise outcome
            failure = failure or outcome
            continue
        usage += outcome.usage
        if outcome.prompt:
            prompts.append(outcome.prompt)
        if outcome.unscored_reason is not None:
            problems.append(f"contexts [{part[0]}..{part[-1]}]: {outcome.unscored_reason}")
        verdicts.extend(outcome.verdicts)
    sent = tuple(prompts)
    if failure is not None or problems:
        status: Status = "unscored" if failure is None else "error"
        error = "; ".join(problems) if failure is None else str(failure)
        return ScoreResult(
            score=None,
            reason="",
            verdicts=tuple(verdicts),
            status=status,
            error=error,
            usage=usage,
            analyze_prompts=sent,
        )
    ordered = tuple(sorted(verdicts, key=lambda verdict: verdict.index))
    score = context_precision(as_verdict_flags(ordered), settings.scale)
    text, reason_usage, reason_prompt = await explain_score(judge, item, ordered, score, settings)
    return ScoreResult(
        score=score,
        reason=text,
        verdicts=ordered,
        usage=usage + reason_usage,
        band=score_band(score, settings.scale),
        analyze_prompts=sent,
        reason_prompt=reason_prompt,
    )


async def explain_score(
    judge: Judge,
    item: ScoringItem,
    verdicts: tuple[ContextVerdict, ...],
    score: float,
    settings: ScoringSettings,
) -> tuple[str, Usage, str | None]:
    """(reason, usage, the prompt sent for it or None) of the reason `settings` ask for; an LLM
    reason that cannot be had falls back to the template, marked as such."""
    if settings.reason == "none":
        return "", Usage(), None
    if settings.reason == "template":
        return template_reason(verdicts, score, settings.scale), Usage(), None
    prompt = judge.reason_prompt(item, verdicts, score)
    try:
        text, usage = await judge.explain(item, verdicts, score)
    except (TransportError, MalformedReply) as exc:
        # The score stands on the verdicts alone; only the prose is missing.
        fallback = template_reason(verdicts, score, settings.scale)
        return f"{fallback} (LLM reason unavailable: {exc})", Usage(), prompt
    return text, usage, prompt
