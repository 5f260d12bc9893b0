"""What judge tokens cost, from litellm's bundled price map: online at the model's price, batch
at its batch price, else half the online price ASSUMED (`price_basis` says which). The map is
read as the file litellm ships: importing litellm would cost the driver seconds."""

from __future__ import annotations

import functools
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

from scorer_core.capabilities import capabilities_of

BATCH_DISCOUNT_ASSUMED = 0.5
"""The share of the online price a batch request is assumed to cost when litellm has no batch
price for the model (OpenAI, Azure OpenAI, Vertex and Bedrock all charge about half)."""


@functools.cache
def _price_map() -> dict[str, Any]:
    spec = importlib.util.find_spec("litellm")  # the package's folder, without importing it
    folder = Path(spec.origin or "").parent if spec else Path()
    return dict(json.loads((folder / "model_prices_and_context_window_backup.json").read_text()))


def _model_info(model: str) -> dict[str, Any] | None:
    """The map's entry for `model`, as litellm finds it: the whole string, else the name after
    a provider prefix when the entry is that provider's."""
    provider, _, name = model.partition("/")
    info = _price_map().get(model)
    if info is None and name:
        info = _price_map().get(name)
        if info is not None and info.get("litellm_provider") != provider:
            return None
    return info if isinstance(info, dict) else None


_RATES = (
    *("input_cost_per_token", "output_cost_per_token"),
    *("cache_read_input_token_cost", "cache_creation_input_token_cost"),
)


def _rates(model: str, suffix: str = "") -> tuple[float, ...] | None:
    """(input, output, cache read, cache write) price per token of `model` (`suffix`
    "_batches": in batch mode); a cache rate the map does not have is the input rate."""
    info = _model_info(model) or {}
    found = [info.get(f"{name}{suffix}") for name in _RATES]
    rates = [float(rate) if isinstance(rate, int | float) else None for rate in found]
    if rates[0] is None or rates[1] is None:
        return None
    return tuple(rates[0] if rate is None else rate for rate in rates)


def _batch_rates(model: str) -> tuple[tuple[float, ...], bool] | None:
    """(the rates in batch mode, whether litellm knows them); None without any price."""
    batch = _rates(model, "_batches")
    if batch is not None:
        return batch, True
    online = _rates(model)
    if online is None or not any(online):
        return None
    return tuple(rate * BATCH_DISCOUNT_ASSUMED for rate in online), False


def estimate_cost_usd(
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    *,
    batch: bool = False,
    cached: tuple[int, int] = (0, 0),
) -> float | None:
    """Cost in USD from litellm's bundled price map (at the batch price when `batch`), the
    `cached` (read, written) part of `prompt_tokens` at the provider's cache rates; None for
    the offline judge or a model without a price."""
    if not model or not capabilities_of(model).priced:
        return None
    found = _batch_rates(model) if batch else (_rates(model), True)
    if found is None or found[0] is None:
        return None
    rates, (read, written) = found[0], cached
    tokens = (prompt_tokens - read - written, completion_tokens, read, written)
    cost = sum(count * rate for count, rate in zip(tokens, rates, strict=True))
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
    if rates[1]:
        return f"at litellm's batch price for {model}"
    return (
        f"ASSUMED: half of litellm's online price for {model} (litellm has no batch price for it)"
    )
