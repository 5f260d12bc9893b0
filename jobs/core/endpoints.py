"""Which endpoint answers a judge config: what besides the model string decides the model
(keyed on by the verdict cache, batch request ids and the structured-output negotiation)."""

from __future__ import annotations

import os

from jobs.core.config import JobConfig
from scorer_core.capabilities import is_offline
from scorer_core.transports import litellm_endpoint, resolve_transport


def judge_endpoint(config: JobConfig) -> str:
    """The endpoint the LLM judge talks to, as its client names it (`Judge.endpoint`)."""
    judge_config = config.judge
    if judge_config.api_base:
        return judge_config.api_base.rstrip("/")
    transport = resolve_transport(judge_config.transport, judge_config.model, None)
    if transport == "http":
        from scorer_core.openai_http import OPENAI_API_BASE

        return OPENAI_API_BASE
    return litellm_endpoint(judge_config.model)


def endpoint_identity(config: JobConfig) -> str:
    """Whatever besides the model string decides which model answers (endpoint, batch provider)."""
    judge = config.judge
    parts = [judge_endpoint(config)]
    if judge.batch.provider:
        parts.append(f"batch provider {judge.batch.provider}")
    if not judge.api_base and not is_offline(judge.model):
        transport = resolve_transport(judge.transport, judge.model, None)
        if transport == "litellm":
            provider = judge.model.split("/", 1)[0].upper() if "/" in judge.model else "OPENAI"
            for name in (f"{provider}_API_BASE", f"{provider}_BASE_URL"):
                if os.environ.get(name):
                    parts.append(f"{name}={os.environ[name].rstrip('/')}")
    return " | ".join(parts)
