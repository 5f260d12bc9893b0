"""scorer_core: context precision for RAG retrieval, judged by an LLM or offline.

The pure library: prompts, verdict parsing, the precision maths and the judge interface.
It imports no Ray, fsspec or Polars, and litellm only when an LLM judge is used.

    >>> from scorer_core import context_precision
    >>> context_precision([True, False, True, False])
    0.83
"""

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
