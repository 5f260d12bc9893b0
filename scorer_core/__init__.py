"""scorer_core: context precision for RAG retrieval, judged by an LLM or offline.

The pure library: prompts, verdict parsing, the precision maths and the judge interface. It
imports no Ray, fsspec or Polars, and litellm only when an LLM judge is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scorer_core.capabilities import JudgeCapabilities as JudgeCapabilities
    from scorer_core.capabilities import capabilities_of as capabilities_of
    from scorer_core.capabilities import judge_capabilities as judge_capabilities
    from scorer_core.errors import ConfigError as ConfigError
    from scorer_core.errors import ConnectionFailed as ConnectionFailed
    from scorer_core.errors import CtxPrecError as CtxPrecError
    from scorer_core.errors import FatalJudgeError as FatalJudgeError
    from scorer_core.errors import InputError as InputError
    from scorer_core.errors import JudgeError as JudgeError
    from scorer_core.errors import JudgeTimeout as JudgeTimeout
    from scorer_core.errors import MalformedReply as MalformedReply
    from scorer_core.errors import RateLimited as RateLimited
    from scorer_core.errors import RequestRejected as RequestRejected
    from scorer_core.errors import ResponseFormatRejected as ResponseFormatRejected
    from scorer_core.errors import ServerError as ServerError
    from scorer_core.errors import TransportError as TransportError
    from scorer_core.fake_chat import FakeChatClient as FakeChatClient
    from scorer_core.judge_spec import JudgeSpec as JudgeSpec
    from scorer_core.judge_spec import build_judge as build_judge
    from scorer_core.parsing import parse_reason as parse_reason
    from scorer_core.parsing import parse_verdicts as parse_verdicts
    from scorer_core.precision import BANDS as BANDS
    from scorer_core.precision import average_precision as average_precision
    from scorer_core.precision import context_precision as context_precision
    from scorer_core.precision import round_half_up as round_half_up
    from scorer_core.precision import round_score as round_score
    from scorer_core.precision import score_band as score_band
    from scorer_core.prompt import PROMPT_VERSION as PROMPT_VERSION
    from scorer_core.prompt import REASON_SCHEMA_NAME as REASON_SCHEMA_NAME
    from scorer_core.prompt import VERDICTS_SCHEMA_NAME as VERDICTS_SCHEMA_NAME
    from scorer_core.protocols import ChatClient as ChatClient
    from scorer_core.protocols import ChatReply as ChatReply
    from scorer_core.protocols import Judge as Judge
    from scorer_core.protocols import Limiter as Limiter
    from scorer_core.protocols import NoLimit as NoLimit
    from scorer_core.reasons import template_reason as template_reason
    from scorer_core.response_format import RESPONSE_FORMATS as RESPONSE_FORMATS
    from scorer_core.response_format import ResponseFormatNegotiation as ResponseFormatNegotiation
    from scorer_core.response_format import shared_negotiation as shared_negotiation
    from scorer_core.retry import RetryPolicy as RetryPolicy
    from scorer_core.scorer import ContextPrecisionScorer as ContextPrecisionScorer
    from scorer_core.scorer import (
        create_context_precision_scorer as create_context_precision_scorer,
    )
    from scorer_core.scorer import make_judge as make_judge
    from scorer_core.scorer import validate_item as validate_item
    from scorer_core.scoring import score_item as score_item
    from scorer_core.types import Band as Band
    from scorer_core.types import ContextVerdict as ContextVerdict
    from scorer_core.types import ScoreResult as ScoreResult
    from scorer_core.types import ScoringItem as ScoringItem
    from scorer_core.types import Usage as Usage
    from scorer_core.types import VerdictBatch as VerdictBatch

# Imported on first use: a process that needs one light module (the run's coordinator, which
# unpickles `Usage` in shard reports) must not import the scorer, the judges and litellm's
# client through this package. tests/unit/test_exports.py keeps this and the imports above equal.
_EXPORTS = {
    "capabilities": "JudgeCapabilities capabilities_of judge_capabilities",
    "errors": "ConfigError ConnectionFailed CtxPrecError FatalJudgeError InputError JudgeError "
    "JudgeTimeout MalformedReply RateLimited RequestRejected ResponseFormatRejected ServerError "
    "TransportError",
    "fake_chat": "FakeChatClient",
    "judge_spec": "JudgeSpec build_judge",
    "parsing": "parse_reason parse_verdicts",
    "precision": "BANDS average_precision context_precision round_half_up round_score score_band",
    "prompt": "PROMPT_VERSION REASON_SCHEMA_NAME VERDICTS_SCHEMA_NAME",
    "protocols": "ChatClient ChatReply Judge Limiter NoLimit",
    "reasons": "template_reason",
    "response_format": "RESPONSE_FORMATS ResponseFormatNegotiation shared_negotiation",
    "retry": "RetryPolicy",
    "scorer": "ContextPrecisionScorer create_context_precision_scorer make_judge validate_item",
    "scoring": "score_item",
    "types": "Band ContextVerdict ScoreResult ScoringItem Usage VerdictBatch",
}
_WHERE = {
    name: f"scorer_core.{module}" for module, names in _EXPORTS.items() for name in names.split()
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'scorer_core' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
