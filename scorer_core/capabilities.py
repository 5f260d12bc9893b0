"""What a judge can do (needs a key? worth caching? batchable? priced?). A judge says it itself
(`Judge.capabilities`); code that has only a config's model string asks `capabilities_of(model)`,
so nothing else compares a model string with "lexical"."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

OFFLINE_JUDGE = "lexical"  # the offline judge's model string, spelled only here


@dataclass(frozen=True, kw_only=True)
class JudgeCapabilities:
    """What a judge is and can do.

    offline: answers in-process at no cost: cheaper to recompute than to cache, never paced.
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


OFFLINE_CAPABILITIES = JudgeCapabilities(
    offline=True, needs_api_key=False, supports_batch=False, negotiates_format=False, priced=False
)
LLM_CAPABILITIES = JudgeCapabilities(
    offline=False, needs_api_key=True, supports_batch=True, negotiates_format=True, priced=True
)

#: The judges named by a model string of their own, with what each can do; every other model
#: string names an LLM judge. Another kind of judge (an embedded relevance model) is a row here.
NAMED_JUDGES: Mapping[str, JudgeCapabilities] = {OFFLINE_JUDGE: OFFLINE_CAPABILITIES}


def capabilities_of(model: str) -> JudgeCapabilities:
    """What the judge `model` names can do: a named judge's (the lexical judge), else an LLM
    judge's."""
    return NAMED_JUDGES.get(model, LLM_CAPABILITIES)


def is_offline(model: str) -> bool:
    """Whether `model` names an offline judge (no network, no cost, nothing to cache)."""
    return capabilities_of(model).offline
