"""The context-precision scorer: Mastra's `createContextPrecisionScorer` in Python.

`create_context_precision_scorer` takes Mastra's options (snake_case or camelCase, as keywords
or in `options={...}`) and the judge's beside them; an unknown name is a `ConfigError`, so
nothing unknown reaches a provider. `run`/`arun` take Mastra's call shapes (`run_shapes`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scorer_core.capabilities import capabilities_of
from scorer_core.errors import ConfigError, InputError
from scorer_core.judge import JudgeRuntime
from scorer_core.judge_spec import JudgeSpec, build_judge, unknown_options
from scorer_core.precision import check_scale
from scorer_core.protocols import Judge
from scorer_core.run_shapes import texts_of, unpack_run_object
from scorer_core.scoring import ScoringSettings, score_item
from scorer_core.types import ScoreResult, ScoringItem

ContextExtractor = Callable[[Any, Any], Sequence[str]]

SCORING_OPTIONS = frozenset(field.name for field in dataclasses.fields(ScoringSettings))
SCORER_OPTIONS = SCORING_OPTIONS | {"context", "context_extractor"}
# make_judge's options that are run-time objects: `JudgeRuntime`'s, and `build_judge`'s ready
# client and retry policy.
RUNTIME_JUDGE_OPTIONS = frozenset(field.name for field in dataclasses.fields(JudgeRuntime))
BUILD_OPTIONS = frozenset(inspect.signature(build_judge).parameters) - {"spec", "runtime"}
# An LLM judge's options: the spec's fields and the run-time objects.
LLM_JUDGE_OPTIONS = (
    RUNTIME_JUDGE_OPTIONS
    | BUILD_OPTIONS
    | ({field.name for field in dataclasses.fields(JudgeSpec)} - {"model", "scale", "lexical"})
)
# Mastra's camelCase spelling of every option (contextExtractor) -> ours; both are accepted.
CAMEL_CASE = {
    re.sub(r"_([a-z])", lambda match: match[1].upper(), name): name
    for name in SCORER_OPTIONS | LLM_JUDGE_OPTIONS
    if "_" in name
}


def _snake_case(options: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`options` under our names; a name given both ways is an error."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise ConfigError(f"{where}: option names must be strings, got {key!r}")
        name = CAMEL_CASE.get(key, key)
        if name in out:
            raise ConfigError(f"{where}: option {name!r} is given twice ({key!r} and {name!r})")
        out[name] = value
    return out


def validate_item(item: ScoringItem) -> None:
    """Check that `item` can be scored (an empty output with no reference is retrieval-only);
    `InputError` names the field that cannot."""
    if not isinstance(item.input, str) or not item.input.strip():
        raise InputError("input (the query) is empty or not a string")
    if not isinstance(item.output, str):
        raise InputError("output must be a string")
    if item.expected_output is not None and not isinstance(item.expected_output, str):
        raise InputError("expected_output must be a string or null")
    if not item.contexts:
        raise InputError("context is empty: there is nothing to rank")
    for index, text in enumerate(item.contexts):
        if not isinstance(text, str):
            raise InputError(f"context[{index}] is {type(text).__name__}, not a string")


_MISSING: Any = object()


class ContextPrecisionScorer:
    """Scores items with a `Judge`; `id`, `name` and `description` are Mastra's.

    Args:
        judge: gives the verdicts (`make_judge`).
        context: the contexts of every item, or
        context_extractor: `(input, output) -> contexts`, called per item (wins over context).
        settings: the scale, the reason and the contexts judged per request
            (`ScoringSettings`; its defaults when None).
    """

    id = "context-precision-scorer"
    name = "Context Precision Scorer"
    description = (
        "A scorer that evaluates the relevance and precision of retrieved context nodes for "
        "generating expected outputs"
    )

    def __init__(
        self,
        judge: Judge,
        *,
        context: Sequence[str] | None = None,
        context_extractor: ContextExtractor | None = None,
        settings: ScoringSettings | None = None,
    ) -> None:
        if context is None and context_extractor is None:
            raise ConfigError(
                "either context=[...] or context_extractor (contextExtractor) is required for "
                "context precision scoring"
            )
        if context is not None and context_extractor is None:
            if isinstance(context, str) or not isinstance(context, Sequence):
                raise ConfigError("context must be a list of strings")
            if len(context) == 0:
                raise ConfigError("context is an empty list: it cannot be empty if provided")
        if context_extractor is not None and not callable(context_extractor):
            raise ConfigError("context_extractor must be callable(input, output) -> list[str]")
        self.judge = judge
        self.settings = settings or ScoringSettings()
        self._context = tuple(context) if context is not None else ()
        self._extractor = context_extractor

    def _contexts_for(self, input: Any, output: Any) -> tuple[str, ...]:
        if self._extractor is None:
            return self._context
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

    def run(
        self,
        input: Any = _MISSING,
        output: Any = _MISSING,
        expected_output: Any = None,
        **mastra_names: Any,
    ) -> ScoreResult:
        """`arun`, synchronously (not from inside a running event loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(input, output, expected_output, **mastra_names))
        raise RuntimeError("run() was called inside an event loop; await arun() instead")

    async def arun(
        self,
        input: Any = _MISSING,
        output: Any = _MISSING,
        expected_output: Any = None,
        **mastra_names: Any,
    ) -> ScoreResult:
        """Score one item.

        Args:
            input: the query: a string, a message list or a Mastra run shape; or alone, one
                run object `{"input", "output", "groundTruth"}`.
            output: the answer: a string, a message list or one assistant message.
            expected_output: the reference answer (`groundTruth=` is accepted too).

        Returns:
            The `ScoreResult`; a judge failure other than a fatal one is reported in it.

        Raises:
            InputError: the input cannot be scored. FatalJudgeError: no request can succeed.
        """
        for key in mastra_names:
            if key not in ("groundTruth", "ground_truth"):
                raise ConfigError(f"run() got an unknown keyword {key!r}")
        if mastra_names:
            if expected_output is not None or len(mastra_names) > 1:
                raise ConfigError("run() got the reference twice (expected_output/groundTruth)")
            (expected_output,) = mastra_names.values()
        if input is _MISSING:
            raise InputError("run() needs an input (or a run object)")
        if output is _MISSING:
            input, output, expected_output = unpack_run_object(input, expected_output)
        query, answer, reference = texts_of(input, output, expected_output)
        # The extractor sees what the caller passed, as in Mastra: strings stay strings,
        # message lists and run shapes stay as they were.
        contexts = self._contexts_for(input, output)
        item = ScoringItem(input=query, output=answer, contexts=contexts, expected_output=reference)
        validate_item(item)
        return await self.score_item(item)

    async def score_item(self, item: ScoringItem) -> ScoreResult:
        """Score a validated item (`scorer_core.scoring.score_item`)."""
        return await score_item(self.judge, item, self.settings)


def make_judge(model: str, **options: Any) -> Judge:
    """A judge for `model`, its options checked by name.

    Args:
        model: "lexical" (offline) or any litellm model string.
        **options: an LLM judge's are `JudgeSpec`'s fields (`transport` only those of the
            transport chosen), `JudgeRuntime`'s run-time objects and `build_judge`'s `client`
            and `retry`; the lexical judge's are `LexicalJudge`'s. `scale` for the reason
            prompt.

    Raises:
        ConfigError: an unknown option, or one the judge or transport does not take.
    """
    options = _snake_case(options, "make_judge")
    scale = check_scale(options.pop("scale", 1.0))
    if capabilities_of(model).offline:  # build_judge checks the lexical judge's options
        return build_judge(JudgeSpec(model=model, scale=scale, lexical=options))
    unknown = set(options) - LLM_JUDGE_OPTIONS
    if unknown:
        raise unknown_options(unknown, LLM_JUDGE_OPTIONS, "an LLM judge")
    runtime = {name: options.pop(name) for name in RUNTIME_JUDGE_OPTIONS & set(options)}
    build = {name: options.pop(name) for name in BUILD_OPTIONS & set(options)}
    spec = JudgeSpec(model=model, scale=scale, **options)
    # build_judge checks that the transport chosen takes its transport-only options.
    return build_judge(spec, JudgeRuntime(**runtime), **build)


def _model_and_options(
    model: str | Mapping[str, Any] | None, options: Mapping[str, Any] | None
) -> tuple[str, Mapping[str, Any]]:
    """The model string and the options mapping, from Mastra's single argument or as given."""
    if isinstance(model, Mapping):
        unknown = set(model) - {"model", "options"}
        if unknown:
            listed = ", ".join(sorted(map(str, unknown)))
            raise ConfigError(f"unknown key(s) {listed}; use model, options")
        if options is not None and "options" in model:
            raise ConfigError("options given twice (in the argument and as options=)")
        options = model.get("options", options)
        model = model.get("model")
    if not isinstance(model, str) or not model:
        raise ConfigError("model is required: 'lexical' or a litellm model string")
    if options is not None and not isinstance(options, Mapping):
        raise ConfigError(f"options must be a mapping, got {type(options).__name__}")
    return model, options or {}


def create_context_precision_scorer(
    model: str | Mapping[str, Any] | None = None,
    *,
    options: Mapping[str, Any] | None = None,
    **keywords: Any,
) -> ContextPrecisionScorer:
    """Mastra's `createContextPrecisionScorer`. Every name may be Mastra's camelCase.

    Args:
        model: "lexical" (offline) or any litellm model string; or Mastra's single argument
            `{"model": ..., "options": {...}}`.
        options: the scorer's options and the judge's (see `make_judge`) as a mapping.
        **keywords: the same, as keywords. The scorer's are `context` or `context_extractor`
            (as `ContextPrecisionScorer` takes them), `scale`, `reason` and
            `contexts_per_call` (`ScoringSettings`; None or absent: the default).

    Raises:
        ConfigError: an unknown name, or one given twice.
    """
    model, options = _model_and_options(model, options)
    merged = _snake_case(options, "options")
    for name, value in _snake_case(keywords, "keywords").items():
        if name in merged:
            raise ConfigError(f"option {name!r} is given twice (as a keyword and in options)")
        merged[name] = value
    scorer_options = {name: merged.pop(name) for name in SCORER_OPTIONS & set(merged)}
    scoring = {name: scorer_options.get(name) for name in SCORING_OPTIONS}
    given = {name: value for name, value in scoring.items() if value is not None}
    # The scale is checked by make_judge first, then by the scorer's settings.
    judge = make_judge(model, scale=given.get("scale"), **merged)
    return ContextPrecisionScorer(
        judge,
        context=scorer_options.get("context"),
        context_extractor=scorer_options.get("context_extractor"),
        settings=ScoringSettings(**given),
    )
