"""Structured-output negotiation over real HTTP, through both transports.

The fake judge imitates llama.cpp's server (no `json_schema`: HTTP 500 with a validation error
naming `response_format.type`) and an OpenAI-style server that answers 400; hand-written
servers give the deterministic rejections the fake judge never gives.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from aiohttp import web

from scorer_core import (
    FatalJudgeError,
    ResponseFormatNegotiation,
    create_context_precision_scorer,
    make_judge,
    shared_negotiation,
)
from scorer_core.errors import ConfigError
from scorer_core.judge import LLMJudge
from scorer_core.response_format import classify_rejection
from scorer_core.scorer import ContextPrecisionScorer
from tests.fake_judge import FakeJudgeServer
from tests.support.fakes import JudgeFactory, RecordingSleep
from tests.support.http import Handler, serving

pytestmark = pytest.mark.timeout(120)

MODEL = "openai/fake-judge"
CONTEXTS = ["alpha RELEVANT", "beta", "gamma RELEVANT", "delta"]  # 0.83


def scorer_for(url: str, transport: str, **options: Any) -> ContextPrecisionScorer:
    options.setdefault("sleep", RecordingSleep())
    return create_context_precision_scorer(
        MODEL,
        context=CONTEXTS,
        api_base=url,
        transport=transport,
        reason="template",
        **options,
    )


def judge_of(scorer: ContextPrecisionScorer) -> LLMJudge:
    assert isinstance(scorer.judge, LLMJudge)
    return scorer.judge


async def score_many(scorer: ContextPrecisionScorer, items: int) -> list[Any]:
    return await asyncio.gather(*(scorer.arun(f"q{i}", "out") for i in range(items)))


@pytest.fixture
def llama(fake_judge: JudgeFactory) -> FakeJudgeServer:
    """A server like llama.cpp's: no `json_schema` (HTTP 500 naming response_format.type)."""
    return fake_judge(accepted_response_formats={"json_object", "text"})


def test_auto_steps_down_once_even_with_many_concurrent_requests(
    llama: FakeJudgeServer, transport: str, sleep: RecordingSleep
) -> None:
    scorer = scorer_for(llama.url, transport, contexts_per_call=1, sleep=sleep)
    results = asyncio.run(score_many(scorer, 20))  # 80 verdict requests at once
    assert [r.score for r in results] == [0.83] * 20
    stats = llama.stats()
    assert stats["response_format_rejections"] == {"json_schema": 1}
    assert stats["by_response_format"] == {"json_schema": 1, "json_object": 80}
    assert sleep.waits == []  # a step-down is not a retry: nothing waited
    judge = judge_of(scorer)
    assert judge.response_format_in_use == "json_object"
    summary = judge.response_format.summary()
    assert summary["setting"] == "auto" and summary["in_use"] == "json_object"
    assert summary["endpoint"] == llama.url and summary["confirmed"] is True
    ((dropped),) = summary["dropped"]
    assert dropped["form"] == "json_schema"
    assert "validation error" in dropped["reason"] and "response_format" in dropped["reason"]
    assert "\n" not in dropped["reason"]
    # Only the first attempt of a request can meet the rejection: the calls add up.
    assert sum(r.usage.calls for r in results) == 81
    # Later runs of the same judge go straight to the form that works.
    llama.reset_stats()
    assert scorer.run("q", "out").score == 0.83
    assert llama.stats()["by_response_format"] == {"json_object": 4}


def test_auto_reaches_prompt_only_when_both_forms_are_refused(
    transport: str, fake_judge: JudgeFactory
) -> None:
    plain = fake_judge(accepted_response_formats={"text"})
    scorer = scorer_for(plain.url, transport, contexts_per_call=2)
    results = asyncio.run(score_many(scorer, 5))
    stats = plain.stats()
    assert [r.score for r in results] == [0.83] * 5
    assert stats["response_format_rejections"] == {"json_schema": 1, "json_object": 1}
    assert stats["by_response_format"] == {"json_schema": 1, "json_object": 1, "text": 10}
    summary = judge_of(scorer).response_format.summary()
    assert summary["in_use"] == "prompt"
    assert [d["form"] for d in summary["dropped"]] == ["json_schema", "json_object"]


def test_an_openai_style_400_naming_response_format_steps_down_too(
    transport: str, fake_judge: JudgeFactory
) -> None:
    strict = fake_judge(
        accepted_response_formats={"json_object", "text"}, response_format_rejection_status=400
    )
    result = scorer_for(strict.url, transport).run("q", "out")
    assert strict.stats()["by_status"] == {"400": 1, "200": 1}
    assert result.score == 0.83 and result.usage.calls == 2


def test_an_explicit_form_that_is_rejected_stops_at_once(
    llama: FakeJudgeServer, transport: str
) -> None:
    scorer = scorer_for(llama.url, transport, response_format="json_schema")
    with pytest.raises(FatalJudgeError) as caught:
        scorer.run("q", "out")
    message = str(caught.value)
    assert llama.url in message
    assert "rejects response_format 'json_schema'" in message
    assert "validation error" in message and '"auto"' in message
    assert llama.stats()["total_requests"] == 1


def test_each_form_is_sent_as_asked(transport: str, server: FakeJudgeServer) -> None:
    for form in ("json_schema", "json_object", "prompt"):
        result = scorer_for(server.url, transport, response_format=form).run("q", "o")
        assert result.score == 0.83
    schema_body, object_body, prompt_body = server.requests()
    pinned = schema_body["response_format"]["json_schema"]["schema"]["properties"]["verdicts"]
    assert schema_body["response_format"]["json_schema"]["strict"] is True
    assert pinned["minItems"] == pinned["maxItems"] == 4
    assert pinned["items"]["properties"]["i"] == {
        "type": "integer",
        "enum": [0, 1, 2, 3],
    }
    assert object_body["response_format"]["type"] == "json_object"
    in_object = object_body["response_format"]["schema"]["properties"]["verdicts"]
    # the json_object form keeps the reason's cap (llama.cpp's grammar honours it)
    assert in_object["items"]["properties"]["reason"].pop("maxLength") == 60
    assert in_object == pinned
    assert "response_format" not in prompt_body
    assert "Reply with JSON only" in prompt_body["messages"][0]["content"]


def test_judges_sharing_a_negotiation_probe_the_endpoint_once(llama: FakeJudgeServer) -> None:
    negotiation = ResponseFormatNegotiation("auto", llama.url)
    scorers = [
        scorer_for(llama.url, "http", contexts_per_call=1, negotiation=negotiation)
        for _ in range(3)
    ]

    async def all_of_them() -> list[Any]:
        runs = [score_many(s, 5) for s in scorers]
        return [r for batch in await asyncio.gather(*runs) for r in batch]

    results = asyncio.run(all_of_them())
    assert {r.score for r in results} == {0.83}
    assert llama.stats()["response_format_rejections"] == {"json_schema": 1}
    assert shared_negotiation("http://a/v1") is shared_negotiation("http://a/v1")
    assert shared_negotiation("http://a/v1") is not shared_negotiation("http://b/v1")
    assert shared_negotiation("http://a/v1", "prompt").current == "prompt"


def test_threads_with_their_own_event_loops_share_one_probe(llama: FakeJudgeServer) -> None:
    negotiation = ResponseFormatNegotiation("auto", llama.url)
    results: list[Any] = []

    def worker() -> None:
        scorer = scorer_for(llama.url, "http", contexts_per_call=1, negotiation=negotiation)
        results.extend(asyncio.run(score_many(scorer, 4)))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == 16 and {r.score for r in results} == {0.83}
    assert llama.stats()["response_format_rejections"] == {"json_schema": 1}


def test_bad_setting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="response_format must be one of auto"):
        make_judge(MODEL, response_format="xml")
    with pytest.raises(ConfigError, match="response_format"):
        ResponseFormatNegotiation("json")


# ----------------------------------------------------------------------------------------------
# deterministic rejections: hand-written servers, counting what they receive


def answering(status: int, body: dict[str, Any], seen: list[int]) -> Handler:
    """A handler that answers `status` with `body`, counting the requests in `seen`."""

    async def handler(request: web.Request) -> web.Response:
        seen.append(1)
        return web.json_response(body, status=status)

    return handler


VALIDATION_500 = {
    "error": {
        "message": "1 validation error:\n  {'type': 'list_type', 'loc': ('body', 'messages'), "
        "'msg': 'Input should be a valid list'}",
        "type": "internal_server_error",
    }
}


@pytest.mark.parametrize(
    ("status", "body", "cause"),
    [
        (400, {"error": {"message": "This model's maximum context length is 8"}}, "context length"),
        (422, {"detail": [{"loc": ["body", "temperature"], "msg": "bad"}]}, "422"),
        (500, VALIDATION_500, "Input should be a valid list"),
    ],
)
def test_a_deterministic_rejection_is_not_retried_and_stops(
    transport: str, status: int, body: dict[str, Any], cause: str, sleep: RecordingSleep
) -> None:
    seen: list[int] = []

    async def go() -> str:
        async with serving(answering(status, body, seen)) as url:
            scorer = scorer_for(url, transport, sleep=sleep, max_retries=5)
            with pytest.raises(FatalJudgeError) as caught:
                await scorer.arun("q", "out")
            assert url in str(caught.value)
            return str(caught.value)

    message = asyncio.run(go())
    assert len(seen) == 1 and sleep.waits == []
    assert cause in message and "not retried" in message


def test_409_is_transient_and_retried(transport: str, sleep: RecordingSleep) -> None:
    seen: list[int] = []

    async def go() -> Any:
        async with serving(answering(409, {"error": {"message": "busy"}}, seen)) as url:
            return await scorer_for(url, transport, sleep=sleep, max_retries=2).arun("q", "o")

    result = asyncio.run(go())
    assert result.status == "error" and "gave up after 3 attempts" in (result.error or "")
    assert len(seen) == 3 and len(sleep.waits) == 2


@pytest.mark.parametrize(
    ("status", "text", "kind"),
    [
        (500, "1 validation error: loc ('body', 'response_format', 'type')", "response_format"),
        (400, "Invalid parameter: 'response_format' of type 'json_schema'", "response_format"),
        (422, "2 validation errors for ChatRequest messages", "request"),
        (500, "1 validation error for Request: messages", "request"),
        (400, "context length exceeded", "request"),
        (413, "too large", "request"),
        (429, "response_format validation error", None),
        (409, "conflict", None),
        (408, "timeout", None),
        (500, "CUDA out of memory", None),
        (503, "response_format temporarily unavailable", None),
        (None, "connection reset", None),
    ],
)
def test_classify_rejection(status: int | None, text: str, kind: str | None) -> None:
    assert classify_rejection(status, text) == kind
