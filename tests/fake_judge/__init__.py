"""The fake OpenAI-compatible judge every HTTP test speaks to, with faults, limits and a fake
Files + Batches API; benchmarks start it as a process (`python -m tests.fake_judge --help`).

    with FakeJudgeServer(rpm=100, window_s=10, fault_plan=FaultPlan(server_error=0.1)) as s:
        ...  # point the judge at s.url; inspect s.stats() afterwards

`FaultyChatClient` is the same judge in-process, with the same faults, for unit tests that
need no socket. Modules: `wire` (requests and replies), `faults`, `limits` (rate windows),
`chat` (the answering rules every face shares), `server` (HTTP), `client` (in-process),
`batches` (Files + Batches API), `llama_server` (a real small model).
"""

from tests.fake_judge.batches import BatchPlan, FakeBatchAPI
from tests.fake_judge.client import FaultyChatClient
from tests.fake_judge.faults import (
    CONTENT_FAULTS,
    FAULT_KINDS,
    STATUS_FAULTS,
    VALID_CONTENT_FAULTS,
    WRAPPED_CONTENT_FAULTS,
    FaultPlan,
)
from tests.fake_judge.server import Arrival, FakeJudgeServer
from tests.fake_judge.wire import (
    REASON_SCHEMA_NAME,
    RESPONSE_FORM_NAMES,
    VERDICTS_SCHEMA_NAME,
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
    "BatchPlan",
    "FakeBatchAPI",
    "FakeJudgeServer",
    "FaultPlan",
    "FaultyChatClient",
    "build_verdict_prompt_for_tests",
    "default_verdict_fn",
]
