"""The fake judge behaves like a real provider under load: a heavy-tailed reply latency, a
tokens-per-minute limit counted from each request, and both limits' x-ratelimit-* headers."""

from __future__ import annotations

import random
import statistics
from typing import Any

import httpx
import pytest

from tests.fake_judge import FakeJudgeServer, FaultPlan
from tests.fake_judge.server import build_verdict_prompt_for_tests, lognormal_parameters


def test_latency_is_lognormal_with_the_asked_mean_and_p99() -> None:
    plan = FaultPlan(latency_s=1.0, latency_p99_s=5.0)
    rng = random.Random(3)
    draws = sorted(plan.draw_latency(rng) for _ in range(40_000))
    assert statistics.fmean(draws) == pytest.approx(1.0, rel=0.03)
    assert draws[int(0.99 * len(draws))] == pytest.approx(5.0, rel=0.06)
    assert draws[len(draws) // 2] < 1.0  # a heavy tail: the median is below the mean
    # Without a p99 the latency is the fixed mean, as before.
    assert FaultPlan(latency_s=0.3).draw_latency(rng) == 0.3


def test_impossible_tails_are_refused() -> None:
    with pytest.raises(ValueError, match="too far"):
        lognormal_parameters(1.0, 100.0)
    with pytest.raises(ValueError):
        FaultPlan(latency_s=2.0, latency_p99_s=1.0)


def _body(contexts: list[str], max_tokens: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "fake",
        "messages": [
            {"role": "system", "content": "judge"},
            {"role": "user", "content": build_verdict_prompt_for_tests("q?", "a.", contexts)},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "context_precision_verdicts", "schema": {}},
        },
    }
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def test_a_token_limit_counts_prompt_and_completion_and_says_so_in_headers() -> None:
    with FakeJudgeServer(tpm=1000, window_s=60.0) as server, httpx.Client(timeout=10) as client:
        first = client.post(f"{server.url}/chat/completions", json=_body(["RELEVANT x", "y"]))
        assert first.status_code == 200
        usage = first.json()["usage"]
        spent = usage["prompt_tokens"] + usage["completion_tokens"]
        assert first.headers["x-ratelimit-limit-tokens"] == "1000"
        assert int(first.headers["x-ratelimit-remaining-tokens"]) == 1000 - spent
        assert server.stats()["tokens_admitted"] == spent
        # A request's max_tokens is what it reserves, whatever the reply then uses.
        reserved = client.post(f"{server.url}/chat/completions", json=_body(["a"], max_tokens=300))
        assert reserved.status_code == 200
        assert server.stats()["tokens_admitted"] == (
            spent + reserved.json()["usage"]["prompt_tokens"] + 300
        )
        # Until the window has room again, everything is refused with a token 429.
        statuses = []
        refused: httpx.Response | None = None
        for _ in range(20):
            reply = client.post(f"{server.url}/chat/completions", json=_body(["b"] * 8))
            statuses.append(reply.status_code)
            if reply.status_code == 429:
                refused = reply
                break
        assert refused is not None, statuses
        assert refused.headers["x-ratelimit-remaining-tokens"].isdigit()
        assert refused.headers["x-ratelimit-reset-tokens"].endswith("s")
        assert int(refused.headers["retry-after"]) >= 1
        stats = server.stats()
        assert stats["tokens_admitted"] <= 1000
        assert stats["rate_limited_by_window"] == 1


def test_a_request_limit_sends_its_headers_on_every_reply() -> None:
    with FakeJudgeServer(rpm=3, window_s=60.0) as server, httpx.Client(timeout=10) as client:
        replies = [
            client.post(f"{server.url}/chat/completions", json=_body(["x"])) for _ in range(4)
        ]
    assert [r.status_code for r in replies] == [200, 200, 200, 429]
    assert [r.headers["x-ratelimit-remaining-requests"] for r in replies[:3]] == ["2", "1", "0"]
    assert replies[3].headers["x-ratelimit-remaining-requests"] == "0"
    assert "x-ratelimit-limit-tokens" not in replies[0].headers
