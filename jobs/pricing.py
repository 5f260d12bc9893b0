"""What judge tokens cost: litellm's bundled price map, for `estimate` and the run summary."""

from __future__ import annotations

import math


def estimate_cost_usd(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """Cost in USD from litellm's bundled price map; None for "lexical" or an unknown model."""
    if not model or model == "lexical":
        return None
    from scorer_core.litellm_client import import_litellm

    try:
        prompt_cost, completion_cost = import_litellm().cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
        cost = float(prompt_cost) + float(completion_cost)
    except Exception:  # litellm raises several types for an unknown model; none are fatal here
        return None
    return cost if math.isfinite(cost) else None
