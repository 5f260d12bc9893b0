"""The context-precision scorer: contexts in, verdicts from a judge, score and reason out.

`create_context_precision_scorer` takes Mastra's `createContextPrecisionScorer` options, in
snake_case or Mastra's camelCase, as keywords or in `options={...}`: static `context` or a
`context_extractor(input, output)` (which wins when both are given), `scale`, and how the reason
is produced. Judge options (`api_base`, `timeout`, `response_format`, ...) go beside them. A
keyword that is neither is a `ConfigError` naming it: nothing unknown reaches a provider.

`run`/`arun` accept Mastra's call shapes (see `scorer_core.run_shapes`). Long context lists
are judged in slices of `contexts_per_call` contexts, concurrently.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence, Set
from typing import Any, Protocol, runtime_checkable

from scorer_core.errors import (
    ConfigError,
    FatalJudgeError,
    InputError,
    JudgeError,
    MalformedReply,
    TransportError,
)
from scorer_core.precision import check_scale, context_precision, score_band
from scorer_core.protocols import Judge
from scorer_core.reasons import template_reason
from scorer_core.run_shapes import resolve_call
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

SCORER_ID = "context-precision-scorer"
SCORER_NAME = "Context Precision Scorer"
SCORER_DESCRIPTION = (
    "A scorer that evaluates the relevance and precision of retrieved context nodes for "
    "generating expected outputs"
)

# Mastra's spelling -> ours. Both are accepted wherever an option is.
CAMEL_CASE = {
    "contextExtractor": "context_extractor",
    "contextsPerCall": "contexts_per_call",
    "apiBase": "api_base",
    "apiKey": "api_key",
    "maxTokens": "max_tokens",
    "maxRetries": "max_retries",
    "maxReasks": "max_reasks",
    "maxInFlight": "max_in_flight",
    "responseFormat": "response_format",
    "maxConnections": "max_connections",
    "proxyFromEnv": "proxy_from_env",
    "requestOptions": "request_options",
}
SCORER_OPTIONS = frozenset({"context", "context_extractor", "scale", "reason", "contexts_per_call"})
LLM_JUDGE_OPTIONS = frozenset(
    {
        "api_base",
        "api_key",
        "timeout",
        "temperature",
        "max_tokens",
        "max_retries",
        "max_reasks",
        "retry",
        "limiter",
        "sleep",
        "max_in_flight",
        "transport",
        "client",
        "response_format",
        "negotiation",
        "first_alone",
        "token_counter",
        "completion_budget",
    }
)
_TRANSPORT_OPTIONS = {
    "litellm": frozenset({"request_options"}),
    "http": frozenset({"max_connections", "proxy_from_env"}),
}


def _snake_case(options: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`options` with Mastra's camelCase names mapped to ours; a name given both ways is an
    error."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise ConfigError(f"{where}: option names must be strings, got {key!r}")
        name = CAMEL_CASE.get(key, key)
        if name in out:
            raise ConfigError(f"{where}: option {name!r} is given twice ({key!r} and {name!r})")
        out[name] = value
    return out


def _unknown(names: set[str], allowed: Set[str], what: str) -> ConfigError:
    listed = ", ".join(sorted(names))
    return ConfigError(
        f"unknown option{'s' if len(names) > 1 else ''} {listed} for {what}; known: "
        f"{', '.join(sorted(allowed))}"
    )


def validate_item(item: ScoringItem) -> None:
    """Raise `InputError` naming the field when an item cannot be scored.

    An empty output with no reference is a retrieval-only item: it is judged against the
    query alone."""
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


@runtime_checkable
class ShowsReasonPrompt(Protocol):
    """A judge that sends a prompt for the reason and can say what it is."""

    def reason_prompt(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> str: ...


_MISSING: Any = object()


class ContextPrecisionScorer:
    """Scores items with a `Judge`; see `create_context_precision_scorer`.

    `id`, `name` and `description` are Mastra's, so results can be filed next to its scorers.
    """

    id = SCORER_ID
    name = SCORER_NAME
    description = SCORER_DESCRIPTION

    def __init__(
        self,
        judge: Judge,
        *,
        context: Sequence[str] | None = None,
        context_extractor: ContextExtractor | None = None,
        scale: float | None = 1,
        reason: ReasonMode = "llm",
        contexts_per_call: int = 16,
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
        if reason not in REASON_MODES:
            raise ConfigError(f"reason must be one of {', '.join(REASON_MODES)}, got {reason!r}")
        if isinstance(contexts_per_call, bool) or not isinstance(contexts_per_call, int):
            raise ConfigError(f"contexts_per_call must be an integer, got {contexts_per_call!r}")
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

    def run(
        self,
        input: Any = _MISSING,
        output: Any = _MISSING,
        expected_output: Any = None,
        **mastra_names: Any,
    ) -> ScoreResult:
        """Score one item synchronously (not from inside a running event loop: use `arun`).

        `input`/`output` are strings, message lists or Mastra run shapes; or pass one run
        object `{"input", "output", "groundTruth"}`. `groundTruth=` is accepted for
        `expected_output`."""
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
        """Score one item. Raises `InputError` for unusable input, `FatalJudgeError` when the
        judge cannot work at all; any other judge failure is reported in the result."""
        for key in mastra_names:
            if key not in ("groundTruth", "ground_truth"):
                raise ConfigError(f"run() got an unknown keyword {key!r}")
        if mastra_names:
            if expected_output is not None or len(mastra_names) > 1:
                raise ConfigError("run() got the reference twice (expected_output/groundTruth)")
            expected_output = next(iter(mastra_names.values()))
        if input is _MISSING:
            raise InputError("run() needs an input (or a run object)")
        single = output is _MISSING
        call = resolve_call(
            input, None if single else output, expected_output, single_argument=single
        )
        item = ScoringItem(
            input=call.input,
            output=call.output,
            # The extractor sees what the caller passed, as in Mastra: strings stay strings,
            # message lists and run shapes stay as they were.
            contexts=self._contexts_for(call.raw_input, call.raw_output),
            expected_output=call.expected_output,
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
        prompts: list[str] = []
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
            if outcome.prompt:
                prompts.append(outcome.prompt)
            if outcome.unscored_reason is not None:
                problems.append(f"contexts [{part[0]}..{part[-1]}]: {outcome.unscored_reason}")
            verdicts.extend(outcome.verdicts)
        sent = tuple(prompts)
        if failure is not None:
            return ScoreResult(
                None, "", tuple(verdicts), "error", str(failure), usage, analyze_prompts=sent
            )
        if problems:
            return ScoreResult(
                None,
                "",
                tuple(verdicts),
                "unscored",
                "; ".join(problems),
                usage,
                analyze_prompts=sent,
            )
        ordered = tuple(sorted(verdicts, key=lambda v: v.index))
        score = context_precision(as_verdict_flags(ordered), self.scale)
        reason, reason_usage, reason_prompt = await self._reason(item, ordered, score)
        return ScoreResult(
            score,
            reason,
            ordered,
            "ok",
            None,
            usage + reason_usage,
            band=score_band(score, self.scale),
            analyze_prompts=sent,
            reason_prompt=reason_prompt,
        )

    async def _reason(
        self, item: ScoringItem, verdicts: tuple[ContextVerdict, ...], score: float
    ) -> tuple[str, Usage, str | None]:
        if self.reason_mode == "none":
            return "", Usage(), None
        if self.reason_mode == "template":
            return template_reason(verdicts, score, self.scale), Usage(), None
        prompt = (
            self.judge.reason_prompt(item, verdicts, score)
            if isinstance(self.judge, ShowsReasonPrompt)
            else None
        )
        try:
            text, usage = await self.judge.explain(item, verdicts, score)
        except (TransportError, MalformedReply) as exc:
            # The score stands on the verdicts alone; only the prose is missing.
            fallback = template_reason(verdicts, score, self.scale)
            return f"{fallback} (LLM reason unavailable: {exc})", Usage(), prompt
        return text, usage, prompt


def make_judge(model: str, **options: Any) -> Judge:
    """A judge for `model`: "lexical" (offline) or any litellm model string.

    Options for an LLM judge: `api_base`, `api_key`, `timeout`, `temperature`, `max_tokens`,
    `max_retries`, `max_reasks` (or a `retry` policy), a shared `limiter`, `sleep`,
    `max_in_flight` (a number or a shared gate), `first_alone`, `token_counter`,
    `completion_budget`, `transport` ("auto", "litellm" or "http"; see
    `scorer_core.transports`), a ready `client`, `response_format`
    ("auto", "json_schema", "json_object" or "prompt") or a shared `negotiation`; with
    transport "litellm" also `request_options` (extra litellm arguments, sent as given), with
    "http" `max_connections` and `proxy_from_env`. The lexical judge takes its own options
    (`threshold`, ...). `scale` is for the reason prompt. Anything else is a `ConfigError`."""
    options = _snake_case(options, "make_judge")
    scale = check_scale(options.pop("scale", 1.0))
    if model == "lexical":
        from scorer_core.lexical import LexicalJudge

        allowed = set(inspect.signature(LexicalJudge).parameters)
        unknown = set(options) - allowed
        if unknown:
            raise _unknown(unknown, allowed, "the lexical judge")
        return LexicalJudge(**options)
    from scorer_core.judge import LLMJudge
    from scorer_core.litellm_client import LiteLLMClient
    from scorer_core.response_format import check_response_format
    from scorer_core.retry import RetryPolicy, real_sleep
    from scorer_core.transports import resolve_transport

    setting = options.pop("transport", "auto")
    if setting == "auto":
        # Options that only one client takes decide for it.
        for name, names in _TRANSPORT_OPTIONS.items():
            if set(options) & names:
                setting = name
    transport = resolve_transport(setting, model, options.get("api_base"))
    llm_allowed = LLM_JUDGE_OPTIONS | _TRANSPORT_OPTIONS[transport]
    unknown = set(options) - llm_allowed
    if unknown:
        other = {name for names in _TRANSPORT_OPTIONS.values() for name in names}
        if unknown <= other:
            raise ConfigError(
                f"option{'s' if len(unknown) > 1 else ''} {', '.join(sorted(unknown))} "
                f"do{'' if len(unknown) > 1 else 'es'} not apply to transport {transport!r}"
            )
        raise _unknown(unknown, llm_allowed, f"an LLM judge (transport {transport!r})")
    retry = options.pop("retry", None) or RetryPolicy(
        max_retries=options.pop("max_retries", 6), max_reasks=options.pop("max_reasks", 2)
    )
    options.pop("max_retries", None)
    options.pop("max_reasks", None)
    limiter = options.pop("limiter", None)
    sleep = options.pop("sleep", real_sleep)
    max_in_flight = options.pop("max_in_flight", None)
    flow_options = {
        name: options.pop(name)
        for name in ("first_alone", "token_counter", "completion_budget")
        if name in options
    }
    response_format = check_response_format(options.pop("response_format", "auto"))
    negotiation = options.pop("negotiation", None)
    client = options.pop("client", None)
    if client is None and transport == "http":  # lean aiohttp client, OpenAI-compatible servers
        from scorer_core.openai_http import OPENAI_API_BASE, OpenAIHTTPClient

        options["api_base"] = options.get("api_base") or OPENAI_API_BASE
        client = OpenAIHTTPClient(model, **options)
    elif client is None:
        client = LiteLLMClient(model, **options)
    return LLMJudge(
        client,
        retry=retry,
        limiter=limiter,
        sleep=sleep,
        scale=scale,
        max_in_flight=max_in_flight,
        response_format=response_format,
        negotiation=negotiation,
        **flow_options,
    )


def create_context_precision_scorer(
    model: str | Mapping[str, Any] | None = None,
    *,
    context: Sequence[str] | None = None,
    context_extractor: ContextExtractor | None = None,
    scale: float | None = None,
    reason: ReasonMode | None = None,
    contexts_per_call: int | None = None,
    options: Mapping[str, Any] | None = None,
    **judge_options: Any,
) -> ContextPrecisionScorer:
    """A scorer whose `run(input, output, expected_output=None)` returns a `ScoreResult`.

    `model` is "lexical" (offline, deterministic) or any litellm model string such as
    "openai/gpt-4o-mini"; Mastra's single argument `{"model": ..., "options": {...}}` works
    too. Scorer options (`context`, `context_extractor`, `scale` (None means 1), `reason`
    "llm" | "template" | "none", `contexts_per_call`) and judge options (see `make_judge`) may
    be given as keywords or in `options={...}`, in snake_case or camelCase (`contextExtractor`).
    An unknown name, or one given twice, is a `ConfigError`.
    """
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
    given = {
        name: value
        for name, value in (
            ("context", context),
            ("context_extractor", context_extractor),
            ("scale", scale),
            ("reason", reason),
            ("contexts_per_call", contexts_per_call),
        )
        if value is not None
    }
    merged = _snake_case(dict(options or {}), "options")
    for name, value in {**given, **_snake_case(judge_options, "keywords")}.items():
        if name in merged:
            raise ConfigError(f"option {name!r} is given twice (as a keyword and in options)")
        merged[name] = value
    scorer_options = {k: merged.pop(k) for k in SCORER_OPTIONS & set(merged)}
    final_scale = check_scale(scorer_options.get("scale"))
    judge = make_judge(model, scale=final_scale, **merged)
    return ContextPrecisionScorer(
        judge,
        context=scorer_options.get("context"),
        context_extractor=scorer_options.get("context_extractor"),
        scale=final_scale,
        reason=scorer_options.get("reason", "llm"),
        contexts_per_call=scorer_options.get("contexts_per_call", 16),
    )
