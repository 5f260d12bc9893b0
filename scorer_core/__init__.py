"""scorer_core: context precision for RAG retrieval, judged by an LLM or offline.

The pure library: prompts, verdict parsing, the precision maths and the judge interface.
It imports no Ray, fsspec or Polars, and litellm only when an LLM judge is used.

    >>> from scorer_core import context_precision
    >>> context_precision([True, False, True, False])
    0.83
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scorer_core.capabilities import JudgeCapabilities, capabilities_of, judge_capabilities
    from scorer_core.errors import (
        ConfigError,
        ConnectionFailed,
        CtxPrecError,
        FatalJudgeError,
        InputError,
        JudgeError,
        JudgeTimeout,
        MalformedReply,
        RateLimited,
        RequestRejected,
        ResponseFormatRejected,
        ServerError,
        TransportError,
    )
    from scorer_core.judge_spec import JudgeSpec, build_judge
    from scorer_core.parsing import parse_reason, parse_verdicts
    from scorer_core.precision import (
        BANDS,
        average_precision,
        context_precision,
        round_half_up,
        round_score,
        score_band,
    )
    from scorer_core.prompt import PROMPT_VERSION, REASON_SCHEMA_NAME, VERDICTS_SCHEMA_NAME
    from scorer_core.protocols import ChatClient, ChatReply, Judge, Limiter, NoLimit
    from scorer_core.reasons import template_reason
    from scorer_core.response_format import (
        RESPONSE_FORMATS,
        ResponseFormatNegotiation,
        shared_negotiation,
    )
    from scorer_core.retry import RetryPolicy
    from scorer_core.scorer import (
        ContextPrecisionScorer,
        create_context_precision_scorer,
        make_judge,
        validate_item,
    )
    from scorer_core.scoring import score_item
    from scorer_core.types import (
        Band,
        ContextVerdict,
        ScoreResult,
        ScoringItem,
        Usage,
        VerdictBatch,
    )

# Imported on first use: a process that needs one light module (the run's coordinator, which
# unpickles `Usage` in shard reports) must not import the scorer, the judges and litellm's
# client through this package.
_WHERE = {
    "BANDS": "scorer_core.precision",
    "Band": "scorer_core.types",
    "ChatClient": "scorer_core.protocols",
    "ChatReply": "scorer_core.protocols",
    "ConfigError": "scorer_core.errors",
    "ConnectionFailed": "scorer_core.errors",
    "ContextPrecisionScorer": "scorer_core.scorer",
    "ContextVerdict": "scorer_core.types",
    "CtxPrecError": "scorer_core.errors",
    "FatalJudgeError": "scorer_core.errors",
    "InputError": "scorer_core.errors",
    "Judge": "scorer_core.protocols",
    "JudgeCapabilities": "scorer_core.capabilities",
    "JudgeError": "scorer_core.errors",
    "JudgeSpec": "scorer_core.judge_spec",
    "JudgeTimeout": "scorer_core.errors",
    "Limiter": "scorer_core.protocols",
    "MalformedReply": "scorer_core.errors",
    "NoLimit": "scorer_core.protocols",
    "PROMPT_VERSION": "scorer_core.prompt",
    "REASON_SCHEMA_NAME": "scorer_core.prompt",
    "RESPONSE_FORMATS": "scorer_core.response_format",
    "RateLimited": "scorer_core.errors",
    "RequestRejected": "scorer_core.errors",
    "ResponseFormatNegotiation": "scorer_core.response_format",
    "ResponseFormatRejected": "scorer_core.errors",
    "RetryPolicy": "scorer_core.retry",
    "ScoreResult": "scorer_core.types",
    "ScoringItem": "scorer_core.types",
    "ServerError": "scorer_core.errors",
    "TransportError": "scorer_core.errors",
    "Usage": "scorer_core.types",
    "VERDICTS_SCHEMA_NAME": "scorer_core.prompt",
    "VerdictBatch": "scorer_core.types",
    "average_precision": "scorer_core.precision",
    "build_judge": "scorer_core.judge_spec",
    "capabilities_of": "scorer_core.capabilities",
    "context_precision": "scorer_core.precision",
    "create_context_precision_scorer": "scorer_core.scorer",
    "judge_capabilities": "scorer_core.capabilities",
    "make_judge": "scorer_core.scorer",
    "parse_reason": "scorer_core.parsing",
    "parse_verdicts": "scorer_core.parsing",
    "round_half_up": "scorer_core.precision",
    "round_score": "scorer_core.precision",
    "score_band": "scorer_core.precision",
    "score_item": "scorer_core.scoring",
    "shared_negotiation": "scorer_core.response_format",
    "template_reason": "scorer_core.reasons",
    "validate_item": "scorer_core.scorer",
}

__all__ = [
    "BANDS",
    "PROMPT_VERSION",
    "REASON_SCHEMA_NAME",
    "RESPONSE_FORMATS",
    "VERDICTS_SCHEMA_NAME",
    "Band",
    "ChatClient",
    "ChatReply",
    "ConfigError",
    "ConnectionFailed",
    "ContextPrecisionScorer",
    "ContextVerdict",
    "CtxPrecError",
    "FatalJudgeError",
    "InputError",
    "Judge",
    "JudgeCapabilities",
    "JudgeError",
    "JudgeSpec",
    "JudgeTimeout",
    "Limiter",
    "MalformedReply",
    "NoLimit",
    "RateLimited",
    "RequestRejected",
    "ResponseFormatNegotiation",
    "ResponseFormatRejected",
    "RetryPolicy",
    "ScoreResult",
    "ScoringItem",
    "ServerError",
    "TransportError",
    "Usage",
    "VerdictBatch",
    "average_precision",
    "build_judge",
    "capabilities_of",
    "context_precision",
    "create_context_precision_scorer",
    "judge_capabilities",
    "make_judge",
    "parse_reason",
    "parse_verdicts",
    "round_half_up",
    "round_score",
    "score_band",
    "score_item",
    "shared_negotiation",
    "template_reason",
    "validate_item",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'scorer_core' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
