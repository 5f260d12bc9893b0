"""Plain data carried between the scorer's parts: items, verdicts, usage and results, frozen so
they can be shared between tasks and processes without copies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

Status = Literal["ok", "unscored", "error"]
Band = Literal["none", "low", "moderate", "good", "excellent"]
ReasonMode = Literal["llm", "template", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """What judging cost, summed with `+`. The token counts are the provider's, as a reply
    reports them (`ChatReply.usage` holds those alone); the rest is counted by the judge that
    sends the requests.

    calls: requests sent, retries included.
    prompt_tokens, completion_tokens: as the provider reported them.
    retries: requests sent again after a transport failure.
    rate_limited: answers that were a rate-limit refusal (HTTP 429).
    reasks: requests asked again because the reply was unusable.
    cache_hits: verdicts the verdict cache gave, for which nothing was sent.
    cached_prompt_tokens: of prompt_tokens, read from the provider's prompt cache.
    cache_creation_tokens: of prompt_tokens, written to it (Anthropic).
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    rate_limited: int = 0
    reasks: int = 0
    cache_hits: int = 0
    cached_prompt_tokens: int = 0
    cache_creation_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        sums = {name: getattr(self, name) + getattr(other, name) for name in _USAGE_FIELDS}
        return Usage(**sums)


_USAGE_FIELDS = tuple(usage_field.name for usage_field in fields(Usage))


@dataclass(frozen=True, slots=True, kw_only=True)
class VerdictBatch:
    """Verdicts for a subset of an item's contexts, or (`unscored_reason`) why there are none."""

    verdicts: tuple[ContextVerdict, ...]
    usage: Usage = field(default_factory=Usage)
    unscored_reason: str | None = None
    prompt: str = ""  # the user message of the first request sent ("" when none was)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreResult:
    """The outcome for one item: status "ok" (`score` is the context precision `verdicts`
    imply), "unscored" (the judge never gave a usable answer) or "error" (the item is unusable
    or the judge failed for good); `error` says why there is no score."""

    score: float | None
    reason: str
    verdicts: tuple[ContextVerdict, ...]
    status: Status = "ok"
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    band: Band | None = None  # of `score` (`scorer_core.precision.score_band`), if "ok"
    analyze_prompts: tuple[str, ...] = ()  # the user message of each verdict request
    reason_prompt: str | None = None  # of the reason request, if a model was asked

    @property
    def relevant_count(self) -> int:
        return sum(1 for verdict in self.verdicts if verdict.relevant)

    def to_dict(self) -> dict[str, Any]:
        """The result in the shape of Mastra's scorer result (camelCase keys), plus ours; the
        verdict prompts of several requests are separated by a blank line."""
        ordered = sorted(self.verdicts, key=lambda verdict: verdict.index)
        verdicts = [_mastra_verdict(verdict) for verdict in ordered]
        return {
            **{
                name: getattr(self, name) for name in ("score", "reason", "band", "status", "error")
            },
            "analyzeStepResult": {"verdicts": verdicts},
            "analyzePrompt": "\n\n".join(self.analyze_prompts) or None,
            "generateReasonPrompt": self.reason_prompt,
            "usage": asdict(self.usage),
        }


def _mastra_verdict(verdict: ContextVerdict) -> dict[str, Any]:
    """A verdict as Mastra's analyze step writes it."""
    word = "yes" if verdict.relevant else "no"
    return {"context_index": verdict.index, "verdict": word, "reason": verdict.reason}


def as_verdict_flags(verdicts: Sequence[ContextVerdict]) -> list[bool]:
    """Relevance flags in position order, for `context_precision`."""
    return [verdict.relevant for verdict in sorted(verdicts, key=lambda verdict: verdict.index)]
