"""A fake OpenAI-compatible LLM judge for tests, benchmarks and the soak test.

    from tests.fake_judge import FakeJudgeServer, FaultPlan

    with FakeJudgeServer(rpm=100, window_s=10, fault_plan=FaultPlan(server_error=0.1)) as s:
        ...  # point the judge at s.url; inspect s.stats() afterwards

It also serves a fake OpenAI Files + Batches API (`server.batches`, a `FakeBatchAPI`; see
`tests.fake_judge.batches`) whose batches move only when the test says so.

`FakeChatClient` is the same judge in-process, a `scorer_core.protocols.ChatClient` for unit
tests that need no socket (`tests.fake_judge.client`).

Run the server as its own process with `python -m tests.fake_judge --help`.

Modules: `wire` (requests and replies), `faults` (FaultPlan and its draws), `limits` (rate
windows), `chat` (the answering rules and statistics every face shares), `server` (HTTP),
`client` (in-process), `batches` (Files + Batches API), `llama_server` (a real small model).
"""

from tests.fake_judge.batches import BatchPlan, FakeBatchAPI
from tests.fake_judge.client import FakeChatClient
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
    "FakeChatClient",
    "FakeJudgeServer",
    "FaultPlan",
    "build_verdict_prompt_for_tests",
    "default_verdict_fn",
]
