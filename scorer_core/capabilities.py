"""What a judge can do (needs a key? worth caching? batchable? priced?), asked of its model
string once here, so the rest of the code asks `capabilities_of(model).offline` rather than
`model == "lexical"`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OFFLINE_JUDGE = "lexical"  # the offline judge's model string, spelled only here


@dataclass(frozen=True)
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


def capabilities_of(model: str) -> JudgeCapabilities:
    """What the judge `model` names can do: the offline lexical judge, or an LLM judge."""
    return OFFLINE_CAPABILITIES if model == OFFLINE_JUDGE else LLM_CAPABILITIES


def is_offline(model: str) -> bool:
    """Whether `model` names the offline judge (no network, no cost, nothing to cache)."""
    return capabilities_of(model).offline


def judge_capabilities(judge: Any) -> JudgeCapabilities:
    """`judge.capabilities` (every judge of this library has one), else its model's."""
    own = getattr(judge, "capabilities", None)
    return own if isinstance(own, JudgeCapabilities) else capabilities_of(str(judge.model))
