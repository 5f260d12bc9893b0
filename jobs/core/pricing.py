"""What judge tokens cost, from litellm's bundled price map: online at the model's price, batch
at its batch price, else half the online price ASSUMED (`price_basis` says which)."""

from __future__ import annotations

import math
from typing import Any

from scorer_core.capabilities import capabilities_of

BATCH_DISCOUNT_ASSUMED = 0.5
"""The share of the online price a batch request is assumed to cost when litellm has no batch
price for the model (OpenAI, Azure OpenAI, Vertex and Bedrock all charge about half)."""


def _model_info(model: str) -> dict[str, Any] | None:
    from scorer_core.litellm_client import import_litellm

    try:
        info = import_litellm().get_model_info(model=model)
    except Exception:  # litellm raises several types for an unknown model; none are fatal here
        return None
    return dict(info) if info else None


def _rate(info: dict[str, Any], key: str) -> float | None:
    value = info.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _batch_rates(model: str) -> tuple[float, float, bool] | None:
    """(input, output price per token, whether litellm knows them) in batch mode; None when
    there is no price at all."""
    info = _model_info(model)
    if info is None:
        return None
    batch_in = _rate(info, "input_cost_per_token_batches")
    batch_out = _rate(info, "output_cost_per_token_batches")
    if batch_in is not None and batch_out is not None:
        return batch_in, batch_out, True
    online_in = _rate(info, "input_cost_per_token")
    online_out = _rate(info, "output_cost_per_token")
    if online_in is None or online_out is None or not (online_in or online_out):
        return None
    return online_in * BATCH_DISCOUNT_ASSUMED, online_out * BATCH_DISCOUNT_ASSUMED, False


def estimate_cost_usd(
    model: str, prompt_tokens: int, completion_tokens: int, *, batch: bool = False
) -> float | None:
    """Cost in USD from litellm's bundled price map (at the batch price when `batch`); None
    for the offline judge or a model without a price."""
    if not model or not capabilities_of(model).priced:
        return None
    if batch:
        rates = _batch_rates(model)
        if rates is None:
            return None
        cost = prompt_tokens * rates[0] + completion_tokens * rates[1]
        return cost if math.isfinite(cost) else None
    from scorer_core.litellm_client import import_litellm

    try:
        prompt_cost, completion_cost = import_litellm().cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
        cost = float(prompt_cost) + float(completion_cost)
    except Exception:  # litellm raises several types for an unknown model; none are fatal here
        return None
    return cost if math.isfinite(cost) else None


def price_basis(model: str, *, batch: bool) -> str:
    """How `estimate_cost_usd` priced `model`, in words for the summary and `estimate`."""
    if not model or not capabilities_of(model).priced:
        return f"{model or 'no'} judge: offline, no API cost"
    if not batch:
        if estimate_cost_usd(model, 1, 1) is None:
            return f"unknown: litellm has no price for {model}"
        return f"at litellm's price for {model}"
    rates = _batch_rates(model)
    if rates is None:
        return f"unknown: litellm has no price for {model}"
    if rates[2]:
        return f"at litellm's batch price for {model}"
    return (
        f"ASSUMED: half of litellm's online price for {model} (litellm has no batch price for it)"
    )
