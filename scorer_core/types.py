"""Plain data carried between the scorer's parts: items, verdicts, usage and results, frozen so
they can be shared between tasks and processes without copies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["ok", "unscored", "error"]
Band = Literal["none", "low", "moderate", "good", "excellent"]
ReasonMode = Literal["llm", "template", "none"]


@dataclass(frozen=True, slots=True)
class ScoringItem:
    """One thing to score: a query, the system's output, an optional reference, the contexts."""

    input: str
    output: str
    contexts: tuple[str, ...]
    expected_output: str | None = None


@dataclass(frozen=True, slots=True)
class ContextVerdict:
    """The judge's verdict on one context, at its 0-based position in the retrieved order."""

    index: int
    relevant: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    """What judging cost: requests actually sent, tokens reported by the provider, re-asks."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    rate_limited: int = 0
    reasks: int = 0
    cache_hits: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            calls=self.calls + other.calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            retries=self.retries + other.retries,
            rate_limited=self.rate_limited + other.rate_limited,
            reasks=self.reasks + other.reasks,
            cache_hits=self.cache_hits + other.cache_hits,
        )


@dataclass(frozen=True, slots=True)
class VerdictBatch:
    """Verdicts for a subset of an item's contexts, or why there are none.

    `verdicts` is empty exactly when `unscored_reason` is set.
    """

    verdicts: tuple[ContextVerdict, ...]
    usage: Usage = field(default_factory=Usage)
    unscored_reason: str | None = None
    # The user message of the first request sent for these verdicts ("" when none was sent,
    # e.g. the offline judge or a cache hit).
    prompt: str = ""


@dataclass(frozen=True, slots=True)
class ScoreResult:
    """The outcome for one item.

    status "ok": `score` is the context precision implied by `verdicts`.
    status "unscored": the judge never gave a usable answer; `error` says why, `score` is None.
    status "error": the item itself is unusable or the judge failed for good; `error` says why.
    """

    score: float | None
    reason: str
    verdicts: tuple[ContextVerdict, ...]
    status: Status = "ok"
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    # The named band of `score` (see scorer_core.precision.score_band); None unless "ok".
    band: Band | None = None
    # The user message of each verdict request, one per slice of `contexts_per_call`
    # contexts, and of the reason request (None when no reason was asked of a model).
    analyze_prompts: tuple[str, ...] = ()
    reason_prompt: str | None = None

    @property
    def relevant_count(self) -> int:
        return sum(1 for v in self.verdicts if v.relevant)

    def to_dict(self) -> dict[str, Any]:
        """The result in the shape of Mastra's scorer result (camelCase keys), plus ours.

        `analyzeStepResult.verdicts` holds `{context_index, verdict: "yes"|"no", reason}` in
        position order; `analyzePrompt` is the verdict prompt (slices separated by a blank
        line when the contexts were judged in several requests)."""
        return {
            "score": self.score,
            "reason": self.reason,
            "band": self.band,
            "status": self.status,
            "error": self.error,
            "analyzeStepResult": {
                "verdicts": [
                    {
                        "context_index": v.index,
                        "verdict": "yes" if v.relevant else "no",
                        "reason": v.reason,
                    }
                    for v in sorted(self.verdicts, key=lambda v: v.index)
                ]
            },
            "analyzePrompt": "\n\n".join(self.analyze_prompts) or None,
            "generateReasonPrompt": self.reason_prompt,
            "usage": asdict(self.usage),
        }


def as_verdict_flags(verdicts: Sequence[ContextVerdict]) -> list[bool]:
    """Relevance flags in position order, for `context_precision`."""
    return [v.relevant for v in sorted(verdicts, key=lambda v: v.index)]
