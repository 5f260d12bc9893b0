"""What a judge can do, asked of the judge's model string instead of comparing names.

The job and its tools decide many things by the judge's nature: whether it needs an API key,
whether its verdicts are worth caching, whether a provider batch API can carry it, whether its
workers pace requests against a provider's limit. Those questions are answered here, once, so
the rest of the code asks `capabilities_of(model).offline` rather than `model == "lexical"`.
"""

from __future__ import annotations

from dataclasses import dataclass

# The offline judge's model string: the one place outside its own module that spells it.
OFFLINE_JUDGE = "lexical"


@dataclass(frozen=True)
class JudgeCapabilities:
    """What a judge is and can do.

    offline: answers in-process, makes no network call and costs nothing; its verdicts are
        cheaper to recompute than to cache, and no rate limit or budget applies to it.
    needs_api_key: sends requests to a provider that may want a key.
    supports_batch: can be asked through a provider's Files + Batches API (judge.mode batch).
    negotiates_format: negotiates a structured-output form with its endpoint.
    priced: its calls cost money at a provider's price (litellm's price map).
    """

    offline: bool
    needs_api_key: bool
    supports_batch: bool
    negotiates_format: bool
    priced: bool


_OFFLINE = JudgeCapabilities(
    offline=True,
    needs_api_key=False,
    supports_batch=False,
    negotiates_format=False,
    priced=False,
)
_LLM = JudgeCapabilities(
    offline=False,
    needs_api_key=True,
    supports_batch=True,
    negotiates_format=True,
    priced=True,
)


def capabilities_of(model: str) -> JudgeCapabilities:
    """The capabilities of the judge `model` names: the offline lexical judge, or an LLM
    judge reached through litellm's model strings (any provider, any `api_base`)."""
    return _OFFLINE if model == OFFLINE_JUDGE else _LLM


def is_offline(model: str) -> bool:
    """Whether `model` names the offline judge (no network, no cost, nothing to cache)."""
    return capabilities_of(model).offline
