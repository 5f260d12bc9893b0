"""Which client carries an LLM judge's requests: the lean HTTP client or litellm.

"auto" takes `scorer_core.openai_http` wherever the endpoint speaks OpenAI chat completions (a
fraction of the CPU) and litellm for every provider whose wire format litellm translates.
"""

from __future__ import annotations

from typing import Literal

from scorer_core.errors import ConfigError

Transport = Literal["litellm", "http"]
TRANSPORTS: tuple[str, ...] = ("auto", "litellm", "http")

# litellm's prefixes of plain OpenAI chat completions at `api_base` (dropped on the wire).
OPENAI_STYLE_PREFIXES = ("openai/", "hosted_vllm/", "lm_studio/")


def resolve_transport(setting: str, model: str, api_base: str | None) -> Transport:
    """The transport for `setting`; "auto" is http for "openai/..." models, and for
    "hosted_vllm/..." or "lm_studio/..." at an `api_base`."""
    if setting not in TRANSPORTS:
        raise ConfigError(f"transport must be one of {', '.join(TRANSPORTS)}, got {setting!r}")
    if setting != "auto":
        return "http" if setting == "http" else "litellm"
    if model.startswith("openai/") or (api_base and model.startswith(OPENAI_STYLE_PREFIXES)):
        return "http"
    return "litellm"


def litellm_endpoint(model: str) -> str:
    """How an endpoint litellm picks from the model string alone is named in messages."""
    return f"{model.split('/', 1)[0]} (litellm's default endpoint)"
