"""`tests.fake_judge.FaultyChatClient`, the fake judge in-process: it answers as the socket
server answers (same bodies received, same verdicts, same seeded faults), and a judge on it
retries, steps down and times out as it does over HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from scorer_core import (
    ChatClient,
    JudgeTimeout,
    RateLimited,
    ScoringItem,
    ServerError,
    create_context_precision_scorer,
)
from scorer_core.judge import JudgeRuntime, LLMJudge
from scorer_core.prompt import VERDICTS_SCHEMA_NAME, verdict_messages, verdicts_schema
from scorer_core.retry import RetryPolicy
from scorer_core.scorer import ContextPrecisionScorer
from scorer_core.scoring import ScoringSettings, score_item
from tests.fake_judge import FAULT_KINDS, FakeJudgeServer, FaultPlan, FaultyChatClient
from tests.support.fakes import FakeClock, NoJitter, RecordingSleep

MODEL = "openai/fake-judge"
CONTEXTS = ["alpha RELEVANT", "beta", "gamma RELEVANT", "delta"]
ITEMS = [
    ScoringItem(
        input=f"query {n}?",
        output="an answer",
        contexts=tuple(CONTEXTS[n % 4 :] + CONTEXTS[: n % 4]),
    )
    for n in range(12)
]


def scorer(**options: Any) -> ContextPrecisionScorer:
    return create_context_precision_scorer(
        MODEL, context=["unused"], reason="llm", sleep=RecordingSleep(), **options
    )


def score_all(scoring: ContextPrecisionScorer) -> list[Any]:
    """Every item, one after another (so seeded faults meet the same requests)."""

    async def run() -> list[Any]:
        return [await scoring.score_item(item) for item in ITEMS]

    return asyncio.run(run())


def test_it_is_a_chat_client_answering_as_the_server_does(server: FakeJudgeServer) -> None:
    client = FaultyChatClient(MODEL)
    typed: ChatClient = client
    over_http = score_all(scorer(api_base=server.url, transport="http"))
    in_process = score_all(scorer(client=typed))
    assert in_process == over_http
    assert [r.score for r in in_process[:4]] == [0.83, 0.5, 0.83, 0.5]
    assert client.requests() == server.requests()  # byte for byte the bodies a server reads
    ours, theirs = client.stats(), server.stats()
    for key in ("by_status", "by_schema", "by_response_format", "contexts_judged"):
        assert ours[key] == theirs[key]


def test_seeded_faults_meet_the_same_requests_as_over_http(fake_judge: Any) -> None:
    # Every fault but a slow reply (which would take real seconds over HTTP).
    plan = FaultPlan.mixed(0.5, kinds=[k for k in FAULT_KINDS if k != "slow"], seed=11)
    server = fake_judge(fault_plan=plan)
    client = FaultyChatClient(MODEL, fault_plan=plan)
    retry = {"retry": RetryPolicy(max_retries=3, rng=NoJitter())}
    over_http = score_all(scorer(api_base=server.url, transport="http", **retry))
    in_process = score_all(scorer(client=client, **retry))
    assert [(r.status, r.score, r.verdicts, r.usage) for r in in_process] == [
        (r.status, r.score, r.verdicts, r.usage) for r in over_http
    ]
    assert {r.status for r in in_process} >= {"ok"}
    assert sum(r.usage.retries + r.usage.reasks for r in in_process) > 0
    ours, theirs = client.stats(), server.stats()
    assert ours["faults"] == theirs["faults"] and ours["by_status"] == theirs["by_status"]


def test_a_refused_form_makes_the_judge_step_down() -> None:
    client = FaultyChatClient(MODEL, accepted_response_formats={"text"})
    judge = LLMJudge(client, runtime=JudgeRuntime(sleep=RecordingSleep()))
    result = asyncio.run(score_item(judge, ITEMS[0], ScoringSettings(reason="template")))
    assert result.status == "ok" and result.score == 0.83
    assert judge.response_format_in_use == "prompt"
    assert client.stats()["response_format_rejections"] == {"json_schema": 1, "json_object": 1}
    assert "response_format" not in client.requests()[-1]


def ask(client: FaultyChatClient) -> Any:
    positions = range(len(ITEMS[0].contexts))
    return client.complete(
        verdict_messages(ITEMS[0], positions),
        schema_name=VERDICTS_SCHEMA_NAME,
        schema=verdicts_schema(positions),
    )


def test_the_rate_window_and_status_faults_raise_what_the_http_client_raises() -> None:
    clock = FakeClock()
    limited = FaultyChatClient(MODEL, rpm=1, window_s=30.0, clock=clock)
    asyncio.run(ask(limited))
    with pytest.raises(RateLimited) as refused:
        asyncio.run(ask(limited))
    assert refused.value.retry_after == 30.0
    clock.advance(30.0)
    assert asyncio.run(ask(limited)).text.startswith('{"verdicts"')
    failing = FaultyChatClient(MODEL, fault_plan=FaultPlan(server_error=1.0))
    with pytest.raises(ServerError, match=r"HTTP 50[023]"):
        asyncio.run(ask(failing))
    assert failing.stats()["in_flight"] == 0


def test_a_slow_reply_past_the_timeout_is_a_timeout_after_the_timeout() -> None:
    sleep = RecordingSleep()
    client = FaultyChatClient(
        MODEL, fault_plan=FaultPlan(slow=1.0, slow_s=5.0), timeout=2.0, sleep=sleep
    )
    with pytest.raises(JudgeTimeout, match="timed out after 2 s"):
        asyncio.run(ask(client))
    assert sleep.waits == [2.0]
    assert client.stats()["in_flight"] == 0
    client.set_fault_plan(FaultPlan(latency_s=0.5))
    asyncio.run(ask(client))
    assert sleep.waits == [2.0, 0.5]
