"""The context-precision scorer: contexts in, verdicts from a judge, score and reason out.

`create_context_precision_scorer` mirrors Mastra's `createContextPrecisionScorer` options:
static `context` or a `context_extractor(input, output)` (which wins when both are given),
`scale`, and how the reason is produced. Long context lists are judged in slices of
`contexts_per_call` contexts, concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from scorer_core.errors import (
    ConfigError,
    FatalJudgeError,
    InputError,
    JudgeError,
    MalformedReply,
    TransportError,
)
from scorer_core.precision import check_scale, context_precision
from scorer_core.protocols import Judge
from scorer_core.reasons import template_reason
from scorer_core.types import (
    ContextVerdict,
    ReasonMode,
    ScoreResult,
    ScoringItem,
    Usage,
    as_verdict_flags,
)

ContextExtractor = Callable[[Any, Any], Sequence[str]]
REASON_MODES: tuple[ReasonMode, ...] = ("llm", "template", "none")


def validate_item(item: ScoringItem) -> None:
    """Raise `InputError` naming the field when an item cannot be scored."""
    if not isinstance(item.input, str) or not item.input.strip():
        raise InputError("input (the query) is empty or not a string")
    if not isinstance(item.output, str):
        raise InputError("output must be a string")
    if not item.output.strip() and not (item.expected_output or "").strip():
        raise InputError("output is empty and there is no expected_output to judge against")
    if item.expected_output is not None and not isinstance(item.expected_output, str):
        raise InputError("expected_output must be a string or null")
    if not item.contexts:
        raise InputError("context is empty: there is nothing to rank")
    for index, text in enumerate(item.contexts):
        if not isinstance(text, str):
            raise InputError(f"context[{index}] is {type(text).__name__}, not a string")


class ContextPrecisionScorer:
    """Scores items with a `Judge`; see `create_context_precision_scorer`."""

    def __init__(
        self,
        judge: Judge,
        *,
        context: Sequence[str] | None = None,
        context_extractor: ContextExtractor | None = None,
        scale: float = 1,
        reason: ReasonMode = "llm",
        contexts_per_call: int = 16,
    ) -> None:
        if context is None and context_extractor is None:
            raise ConfigError("give either context=[...] or context_extractor=callable")
        if context is not None and context_extractor is None:
            if isinstance(context, str) or not isinstance(context, Sequence):
                raise ConfigError("context must be a list of strings")
            if len(context) == 0:
                raise ConfigError("context is an empty list: give at least one context")
        if context_extractor is not None and not callable(context_extractor):
            raise ConfigError("context_extractor must be callable(input, output) -> list[str]")
        if reason not in REASON_MODES:
            raise ConfigError(f"reason must be one of {', '.join(REASON_MODES)}, got {reason!r}")
        if contexts_per_call < 1:
            raise ConfigError(f"contexts_per_call must be >= 1, got {contexts_per_call}")
        self.judge = judge
        self.scale = check_scale(scale)
        self.reason_mode: ReasonMode = reason
        self.contexts_per_call = contexts_per_call
        self._context = tuple(context) if context is not None else None
        self._extractor = context_extractor

    def _contexts_for(self, input: Any, output: Any) -> tuple[str, ...]:
        if self._extractor is not None:
            try:
                extracted = self._extractor(input, output)
            except Exception as exc:
                raise InputError(f"context_extractor failed: {type(exc).__name__}: {exc}") from exc
            if extracted is None or isinstance(extracted, str):
                raise InputError("context_extractor must return a list of strings")
            contexts = tuple(extracted)
            if not contexts:
                raise InputError("context_extractor returned no contexts")
            return contexts
        assert self._context is not None
        return self._context

    def run(self, input: str, output: str, expected_output: str | None = None) -> ScoreResult:
        """Score one item synchronously (not from inside a running event loop: use `arun`)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(input, output, expected_output))
        raise RuntimeError("run() was called inside an event loop; await arun() instead")

    async def arun(
        self, input: str, output: str, expected_output: str | None = None
    ) -> ScoreResult:
        """Score one item. Raises `InputError` for unusable input, `FatalJudgeError` when the
        judge cannot work at all; any other judge failure is reported in the result."""
        item = ScoringItem(
            input=input,
            output=output,
            contexts=self._contexts_for(input, output),
            expected_output=expected_output,
        )
        validate_item(item)
        return await self.score_item(item)

    async def score_item(self, item: ScoringItem) -> ScoreResult:
        """Score a validated item; transport failures become a result with status "error"."""
        positions = list(range(len(item.contexts)))
        slices = [
            positions[start : start + self.contexts_per_call]
            for start in range(0, len(positions), self.contexts_per_call)
        ]
        outcomes = await asyncio.gather(
            *(self.judge.judge(item, part) for part in slices), return_exceptions=True
        )
        usage = Usage()
        verdicts: list[ContextVerdict] = []
        problems: list[str] = []
        failure: BaseException | None = None
        for part, outcome in zip(slices, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, TransportError | JudgeError) or isinstance(
                    outcome, FatalJudgeError
                ):
                    raise outcome
                failure = failure or outcome
                continue
            usage = usage + outcome.usage
            if outcome.unscored_reason is not None:
                problems.append(f"contexts [{part[0]}..{part[-1]}]: {outcome.unscored_reason}")
            verdicts.extend(outcome.verdicts)
        if failure is not None:
            return ScoreResult(None, "", tuple(verdicts), "error", str(failure), usage)
        if problems:
            return ScoreResult(None, "", tuple(verdicts), "unscored", "; ".join(problems), usage)
        ordered = tuple(sorted(verdicts, key=lambda v: v.index))
        score = context_precision(as_verdict_flags(ordered), self.scale)
        reason, reason_usage = await self._reason(item, ordered, score)
        return ScoreResult(score, reason, ordered, "ok", None, usage + reason_usage)

    async def _reason(
        self, item: ScoringItem, verdicts: tuple[ContextVerdict, ...], score: float
    ) -> tuple[str, Usage]:
        if self.reason_mode == "none":
            return "", Usage()
        if self.reason_mode == "template":
            return template_reason(verdicts, score, self.scale), Usage()
        try:
            return await self.judge.explain(item, verdicts, score)
        except (TransportError, MalformedReply) as exc:
            # The score stands on the verdicts alone; only the prose is missing.
            fallback = template_reason(verdicts, score, self.scale)
            return f"{fallback} (LLM reason unavailable: {exc})", Usage()


def make_judge(model: str, **options: Any) -> Judge:
    """A judge for `model`: "lexical" (offline) or any litellm model string."""
    scale = options.pop("scale", 1.0)
    if model == "lexical":
        from scorer_core.lexical import LexicalJudge

        return LexicalJudge(**options)
    from scorer_core.judge import LLMJudge
    from scorer_core.litellm_client import LiteLLMClient
    from scorer_core.retry import RetryPolicy, real_sleep

    retry = options.pop("retry", None) or RetryPolicy(
        max_retries=options.pop("max_retries", 6), max_reasks=options.pop("max_reasks", 2)
    )
    limiter = options.pop("limiter", None)
    sleep = options.pop("sleep", real_sleep)
    max_in_flight = options.pop("max_in_flight", None)
    transport = options.pop("transport", "litellm")
    client = options.pop("client", None)
    if client is None and transport == "http":  # lean aiohttp client, OpenAI-compatible servers
        from scorer_core.openai_http import OPENAI_API_BASE, OpenAIHTTPClient

        options["api_base"] = options.get("api_base") or OPENAI_API_BASE
        client = OpenAIHTTPClient(model, **options)
    elif client is None and transport == "litellm":
        client = LiteLLMClient(model, **options)
    elif client is None:
        raise ConfigError(f"transport must be 'litellm' or 'http', got {transport!r}")
    return LLMJudge(
        client, retry=retry, limiter=limiter, sleep=sleep, scale=scale, max_in_flight=max_in_flight
    )


def create_context_precision_scorer(
    model: str,
    *,
    context: Sequence[str] | None = None,
    context_extractor: ContextExtractor | None = None,
    scale: float = 1,
    reason: ReasonMode = "llm",
    contexts_per_call: int = 16,
    **judge_options: Any,
) -> ContextPrecisionScorer:
    """A scorer whose `run(input, output, expected_output=None)` returns a `ScoreResult`.

    `model` is "lexical" (offline, deterministic) or any litellm model string such as
    "openai/gpt-4o-mini"; `judge_options` go to the judge (`api_base`, `api_key`, `timeout`,
    `temperature`, `max_retries`, `max_reasks`, a shared `limiter`, `transport`="litellm" or
    "http" for the lean OpenAI-compatible client, ...).
    """
    judge = make_judge(model, scale=scale, **judge_options)
    return ContextPrecisionScorer(
        judge,
        context=context,
        context_extractor=context_extractor,
        scale=scale,
        reason=reason,
        contexts_per_call=contexts_per_call,
    )
