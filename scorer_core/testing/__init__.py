"""A fake OpenAI-compatible LLM judge for tests, benchmarks and the soak test.

    from scorer_core.testing import FakeJudgeServer, FaultPlan

    with FakeJudgeServer(rpm=100, window_s=10, fault_plan=FaultPlan(server_error=0.1)) as s:
        ...  # point the judge at s.url; inspect s.stats() afterwards

Run it as its own process with `python -m scorer_core.testing --help`.
"""

from scorer_core.testing.server import (
    CONTENT_FAULTS,
    FAULT_KINDS,
    REASON_SCHEMA_NAME,
    RESPONSE_FORM_NAMES,
    STATUS_FAULTS,
    VALID_CONTENT_FAULTS,
    VERDICTS_SCHEMA_NAME,
    WRAPPED_CONTENT_FAULTS,
    Arrival,
    FakeJudgeServer,
    FaultPlan,
    build_verdict_prompt_for_tests,
    default_verdict_fn,
)

__all__ = [
    "CONTENT_FAULTS",
    "FAULT_KINDS",
    "REASON_SCHEMA_NAME",
    "RESPONSE_FORM_NAMES",
    "STATUS_FAULTS",
    "VALID_CONTENT_FAULTS",
    "VERDICTS_SCHEMA_NAME",
    "WRAPPED_CONTENT_FAULTS",
    "Arrival",
    "FakeJudgeServer",
    "FaultPlan",
    "build_verdict_prompt_for_tests",
    "default_verdict_fn",
]
