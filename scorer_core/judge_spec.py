"""A judge described by typed data (`JudgeSpec`) and built from it (`build_judge`).

A spec is everything about a judge that can be written down (a job derives it from its config);
what exists only at run time (a shared limiter, an in-flight gate, a ready client) goes to
`build_judge` beside it. `scorer_core.scorer.make_judge` is the keyword front door to both.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from scorer_core.capabilities import JudgeCapabilities, capabilities_of
from scorer_core.errors import ConfigError
from scorer_core.judge import LLMJudge, TokenCounter, count_prompt_tokens
from scorer_core.protocols import ChatClient, Judge, Limiter, Sleeper
from scorer_core.response_format import ResponseFormatNegotiation, check_response_format
from scorer_core.retry import RetryPolicy, real_sleep
from scorer_core.transports import Transport, resolve_transport

#: Options only one transport's client takes: given under transport "auto", they choose it.
TRANSPORT_ONLY_OPTIONS: Mapping[Transport, frozenset[str]] = {
    "litellm": frozenset({"request_options"}),
    "http": frozenset({"max_connections", "proxy_from_env"}),
}
ANY_TRANSPORT_ONLY = frozenset[str]().union(*TRANSPORT_ONLY_OPTIONS.values())


@dataclass(frozen=True)
class JudgeSpec:
    """A judge as data. `model` is "lexical" (the offline judge, configured by `lexical`) or a
    litellm model string; every other field applies to an LLM judge only.

    transport: "auto", "litellm" or "http" (`scorer_core.transports`).
    timeout, temperature, max_tokens: each request's (None leaves it to the provider).
    completion_budget: the reply tokens a tokens-per-minute limiter reserves per request
        (None: a short reason per verdict).
    max_retries, max_reasks: transport retries and re-asks of unusable replies per request.
    response_format: "auto" or one structured-output form (`scorer_core.response_format`).
    scale: the score scale, for the reason prompt.
    verdict_reasons: False asks for verdicts without a reason each (a cheaper reply).
    max_connections, proxy_from_env: the HTTP client's (None: its defaults).
    request_options: extra `litellm.acompletion` arguments, sent as given (litellm only).
    """

    model: str
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    transport: str = "auto"
    timeout: float = 60.0
    temperature: float | None = 0.0
    max_tokens: int | None = None
    completion_budget: int | None = None
    max_retries: int = 6
    max_reasks: int = 2
    response_format: str = "auto"
    scale: float = 1.0
    verdict_reasons: bool = True
    max_connections: int | None = None
    proxy_from_env: bool | None = None
    request_options: Mapping[str, Any] | None = None
    lexical: Mapping[str, Any] = field(default_factory=dict)

    @property
    def capabilities(self) -> JudgeCapabilities:
        return capabilities_of(self.model)

    def given_transport_options(self) -> set[str]:
        """The transport-only options this spec sets (not left to the client's default)."""
        return {name for name in ANY_TRANSPORT_ONLY if getattr(self, name) is not None}

    def resolved_transport(self) -> Transport:
        """`resolve_transport`, but under "auto" an option only one client takes chooses it."""
        setting = self.transport
        if setting == "auto":
            for name, names in TRANSPORT_ONLY_OPTIONS.items():
                if self.given_transport_options() & names:
                    setting = name
        return resolve_transport(setting, self.model, self.api_base)


def build_judge(
    spec: JudgeSpec,
    *,
    limiter: Limiter | None = None,
    max_in_flight: int | contextlib.AbstractAsyncContextManager[None] | None = None,
    first_alone: bool = True,
    token_counter: TokenCounter | None = None,
    negotiation: ResponseFormatNegotiation | None = None,
    retry: RetryPolicy | None = None,
    sleep: Sleeper = real_sleep,
    client: ChatClient | None = None,
) -> Judge:
    """The `LLMJudge` (or, for model "lexical", the `LexicalJudge`) `spec` describes, wired
    to the run-time objects `LLMJudge` documents; `retry` replaces the spec's `max_retries` and
    `max_reasks`, a ready `client` its endpoint and request settings.

    Raises:
        ConfigError: an option the judge or its transport does not take.
    """
    if spec.capabilities.offline:
        from scorer_core.lexical import LexicalJudge

        allowed = frozenset(inspect.signature(LexicalJudge).parameters)
        if unknown := set(spec.lexical) - allowed:
            raise unknown_options(unknown, allowed, "the lexical judge")
        return LexicalJudge(**spec.lexical)
    if spec.lexical:
        raise ConfigError(f"lexical options apply to the lexical judge only, not {spec.model}")
    transport = spec.resolved_transport()
    if misplaced := spec.given_transport_options() - TRANSPORT_ONLY_OPTIONS[transport]:
        raise not_for_transport(misplaced, transport)
    return LLMJudge(
        client or _chat_client(spec, transport),
        retry=retry or RetryPolicy(max_retries=spec.max_retries, max_reasks=spec.max_reasks),
        limiter=limiter,
        sleep=sleep,
        scale=spec.scale,
        max_in_flight=max_in_flight,
        response_format=check_response_format(spec.response_format),
        negotiation=negotiation,
        first_alone=first_alone,
        token_counter=token_counter or count_prompt_tokens,
        completion_budget=spec.completion_budget,
        verdict_reasons=spec.verdict_reasons,
    )


def unknown_options(names: set[str], allowed: Set[str], what: str) -> ConfigError:
    """The error for option `names` that `what` does not take, listing those it does."""
    listed = ", ".join(sorted(names))
    return ConfigError(
        f"unknown option{'s' if len(names) > 1 else ''} {listed} for {what}; known: "
        f"{', '.join(sorted(allowed))}"
    )


def not_for_transport(names: set[str], transport: str) -> ConfigError:
    """The error for transport-only options given for the other transport."""
    return ConfigError(
        f"option{'s' if len(names) > 1 else ''} {', '.join(sorted(names))} "
        f"do{'' if len(names) > 1 else 'es'} not apply to transport {transport!r}"
    )


def _chat_client(spec: JudgeSpec, transport: Transport) -> ChatClient:
    """The client of `transport` for the spec's endpoint and request settings."""
    names = {"api_base", "api_key", "timeout", "temperature", "max_tokens"}
    options = {name: getattr(spec, name) for name in names | spec.given_transport_options()}
    if transport == "http":  # lean aiohttp client, OpenAI-compatible servers
        from scorer_core.openai_http import OpenAIHTTPClient

        return OpenAIHTTPClient(spec.model, **options)
    from scorer_core.litellm_client import LiteLLMClient

    return LiteLLMClient(spec.model, **options)
