"""A judge described by typed data (`JudgeSpec`) and built from it (`build_judge`).

A spec is everything about a judge that can be written down (a job derives it from its config);
what exists only at run time (a shared limiter, an in-flight gate: `JudgeRuntime`; a ready
client) goes to `build_judge` beside it. `scorer_core.scorer.make_judge` is the keyword front
door to both.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from scorer_core.capabilities import JudgeCapabilities, capabilities_of
from scorer_core.errors import ConfigError
from scorer_core.judge import JudgeRuntime, LLMJudge, LLMJudgeSettings
from scorer_core.protocols import ChatClient, Judge, RequestSettings
from scorer_core.response_format import check_response_format
from scorer_core.retry import RetryPolicy
from scorer_core.transports import Transport, resolve_transport

#: Options only one transport's client takes: given under transport "auto", they choose it.
TRANSPORT_ONLY_OPTIONS: Mapping[Transport, frozenset[str]] = {
    "litellm": frozenset({"request_options"}),
    "http": frozenset({"max_connections", "proxy_from_env"}),
}
ANY_TRANSPORT_ONLY = frozenset[str]().union(*TRANSPORT_ONLY_OPTIONS.values())


@dataclass(frozen=True, kw_only=True)
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

    def llm_settings(self, retry: RetryPolicy | None = None) -> LLMJudgeSettings:
        """What the LLM judge takes from this spec; `retry` in place of its `max_retries` and
        `max_reasks`."""
        return LLMJudgeSettings(
            retry=retry or RetryPolicy(max_retries=self.max_retries, max_reasks=self.max_reasks),
            scale=self.scale,
            response_format=check_response_format(self.response_format),
            completion_budget=self.completion_budget,
            verdict_reasons=self.verdict_reasons,
        )

    def request_settings(self) -> RequestSettings:
        """How the judge's client sends each request."""
        return RequestSettings(
            api_base=self.api_base,
            api_key=self.api_key,
            timeout=self.timeout,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )

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
    runtime: JudgeRuntime | None = None,
    *,
    client: ChatClient | None = None,
    retry: RetryPolicy | None = None,
) -> Judge:
    """The `LLMJudge` (or, for model "lexical", the `LexicalJudge`) `spec` describes, sharing
    `runtime`'s limiter, in-flight bound and negotiation; `retry` replaces the spec's
    `max_retries` and `max_reasks`, a ready `client` its endpoint and request settings.

    Raises:
        ConfigError: an option the judge or its transport does not take.
    """
    if spec.capabilities.offline:
        return _lexical_judge(spec)
    if spec.lexical:
        raise ConfigError(f"lexical options apply to the lexical judge only, not {spec.model}")
    transport = spec.resolved_transport()
    misplaced = spec.given_transport_options() - TRANSPORT_ONLY_OPTIONS[transport]
    if misplaced:
        raise not_for_transport(misplaced, transport)
    return LLMJudge(
        client or _chat_client(spec, transport),
        settings=spec.llm_settings(retry),
        runtime=runtime,
    )


def _lexical_judge(spec: JudgeSpec) -> Judge:
    """The lexical judge with the spec's `lexical` options, each checked by name."""
    from scorer_core.lexical import LexicalJudge

    allowed = frozenset(inspect.signature(LexicalJudge).parameters)
    unknown = set(spec.lexical) - allowed
    if unknown:
        raise unknown_options(unknown, allowed, "the lexical judge")
    return LexicalJudge(**spec.lexical)


def unknown_options(names: set[str], allowed: Set[str], what: str) -> ConfigError:
    """The error for option `names` that `what` does not take, listing those it does."""
    noun = "options" if len(names) > 1 else "option"
    listed = ", ".join(sorted(names))
    known = ", ".join(sorted(allowed))
    return ConfigError(f"unknown {noun} {listed} for {what}; known: {known}")


def not_for_transport(names: set[str], transport: str) -> ConfigError:
    """The error for transport-only options given for the other transport."""
    listed = ", ".join(sorted(names))
    if len(names) > 1:
        return ConfigError(f"options {listed} do not apply to transport {transport!r}")
    return ConfigError(f"option {listed} does not apply to transport {transport!r}")


def _chat_client(spec: JudgeSpec, transport: Transport) -> ChatClient:
    """The client of `transport` for the spec's endpoint and request settings, with the
    transport-only options the spec sets (the client's defaults for the others)."""
    own_options = {name: getattr(spec, name) for name in spec.given_transport_options()}
    if transport == "http":  # lean aiohttp client, OpenAI-compatible servers
        from scorer_core.openai_http import OpenAIHTTPClient

        return OpenAIHTTPClient(spec.model, spec.request_settings(), **own_options)
    from scorer_core.litellm_client import LiteLLMClient

    return LiteLLMClient(spec.model, spec.request_settings(), **own_options)
