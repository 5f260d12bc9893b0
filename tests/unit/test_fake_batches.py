"""The fake Files + Batches API (tests.fake_judge.batches), through litellm as the job uses
it (jobs.engine.batch.provider): uploads, the lifecycle the test moves, partial error files,
expiry, cancellation, failed validation, shuffled and missing lines, and the counters that
prove a resumed run submitted nothing twice. Real HTTP on 127.0.0.1; no waiting: batches move
only when the test says so.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobs.engine.batch import provider as provider_module
from jobs.engine.batch.provider import BatchAccount, BatchInfo, LiteLLMBatches
from scorer_core.errors import FatalJudgeError
from tests.fake_judge import BatchPlan, FakeJudgeServer, build_verdict_prompt_for_tests
from tests.support.fakes import RecordingSleep

pytestmark = pytest.mark.timeout(120)

KEY = "sk-fake-batch-key"


@pytest.fixture
def api(server: FakeJudgeServer) -> LiteLLMBatches:
    """The job's client of the Batches API, pointed at this test's fake judge."""
    account = BatchAccount(
        provider="openai",
        model="openai/fake-judge",
        api_base=server.url,
        api_key=KEY,
        timeout_s=30,
        max_retries=2,
    )
    return LiteLLMBatches(account, sleep=RecordingSleep())


def request_line(request_id: str, contexts: list[str], **extra: Any) -> dict[str, Any]:
    prompt = build_verdict_prompt_for_tests("Which river?", "The Amber.", contexts)
    return {
        "custom_id": request_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": "fake-judge",
            "messages": [
                {"role": "system", "content": "grade"},
                {"role": "user", "content": prompt},
            ],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "context_precision_verdicts", "schema": {}},
            },
        },
        **extra,
    }


def write_file(tmp_path: Path, lines: list[dict[str, Any]], name: str = "in.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def submit(api: LiteLLMBatches, path: str) -> BatchInfo:
    async def go() -> BatchInfo:
        file_id = await api.upload("in.jsonl", path)
        return await api.create(file_id, {"ctxprec_run": "t"})

    return asyncio.run(go())


def lines_of(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def many(n: int) -> list[dict[str, Any]]:
    return [request_line(f"r{i}", [f"p{i} RELEVANT", "IRRELEVANT"]) for i in range(n)]


def test_lifecycle_moves_only_when_the_test_says_and_answers_with_the_fake_judge(
    server: FakeJudgeServer, api: LiteLLMBatches, tmp_path: Path
) -> None:
    server.batches.set_plan(BatchPlan(in_progress_steps=2))
    batch = submit(api, write_file(tmp_path, many(40)))
    assert batch.status == "validating"
    seen = []
    for _ in range(5):
        info = asyncio.run(api.retrieve(batch.id))
        seen.append((info.status, info.completed))
        server.batches.advance(batch_id=batch.id)
    assert seen == [
        ("validating", 0),
        ("in_progress", 0),
        ("in_progress", 20),
        ("finalizing", 40),
        ("completed", 40),
    ]
    info = asyncio.run(api.retrieve(batch.id))
    assert (info.total, info.completed, info.failed, info.error_file_id) == (40, 40, 0, None)
    assert info.output_file_id is not None
    output = lines_of(asyncio.run(api.content(info.output_file_id)))
    assert sorted(line["custom_id"] for line in output) == sorted(f"r{i}" for i in range(40))
    assert [line["custom_id"] for line in output] != [f"r{i}" for i in range(40)]  # shuffled
    for line in output:
        assert line["response"]["status_code"] == 200 and line["error"] is None
        verdicts = json.loads(line["response"]["body"]["choices"][0]["message"]["content"])
        assert [v["v"] for v in verdicts["verdicts"]] == ["yes", "no"]
    after = server.batches.stats()
    assert (after["uploads"], after["batches_created"]) == (1, 1)


def test_error_file_and_missing_lines(
    server: FakeJudgeServer, api: LiteLLMBatches, tmp_path: Path
) -> None:
    server.batches.set_plan(BatchPlan(error_rate=0.3, missing_rate=0.2, seed=3))
    batch = submit(api, write_file(tmp_path, many(200)))
    server.batches.finish_all()
    info = asyncio.run(api.retrieve(batch.id))
    assert info.status == "completed"
    assert info.output_file_id is not None and info.error_file_id is not None
    output = lines_of(asyncio.run(api.content(info.output_file_id)))
    errors = lines_of(asyncio.run(api.content(info.error_file_id)))
    assert all(line["response"]["status_code"] == 500 for line in errors)
    assert info.failed == len(errors)
    answered = {line["custom_id"] for line in output + errors}
    assert 20 < 200 - len(answered) < 60  # about 20% missing
    assert 30 < len(errors) < 90  # about 30% failed


def test_refused_lines_are_400s_with_a_reason(
    server: FakeJudgeServer, api: LiteLLMBatches, tmp_path: Path
) -> None:
    server.batches.set_plan(BatchPlan(bad_request_rate=0.5, seed=2))
    batch = submit(api, write_file(tmp_path, many(40)))
    server.batches.finish_all()
    info = asyncio.run(api.retrieve(batch.id))
    assert info.error_file_id is not None
    errors = lines_of(asyncio.run(api.content(info.error_file_id)))
    assert 5 < len(errors) < 35 and info.failed == len(errors)
    assert {line["response"]["status_code"] for line in errors} == {400}
    assert {line["response"]["body"]["error"]["code"] for line in errors} == {
        "content_policy_violation"
    }


def test_the_first_batches_of_a_plan_can_end_otherwise_and_a_batch_can_be_cancelled(
    server: FakeJudgeServer, api: LiteLLMBatches, tmp_path: Path
) -> None:
    server.batches.set_plan(BatchPlan(first_outcomes=("expired",)))
    first = submit(api, write_file(tmp_path, many(10)))
    second = submit(api, write_file(tmp_path, many(10)))
    server.batches.finish_all()
    assert server.batches.statuses() == {first.id: "expired", second.id: "completed"}
    third = submit(api, write_file(tmp_path, many(10)))
    info = asyncio.run(api.cancel(third.id))
    assert info.status == "cancelling" and server.batches.stats()["cancels"] == 1


def test_expired_batch_keeps_partial_output_and_lists_the_rest_as_expired(
    server: FakeJudgeServer, api: LiteLLMBatches, tmp_path: Path
) -> None:
    server.batches.set_plan(BatchPlan(outcome="expired", answered_share=0.25))
    batch = submit(api, write_file(tmp_path, many(20)))
    server.batches.finish_all()
    info = asyncio.run(api.retrieve(batch.id))
    assert (info.status, info.completed, info.failed) == ("expired", 5, 15)
    assert info.output_file_id is not None and info.error_file_id is not None
    errors = lines_of(asyncio.run(api.content(info.error_file_id)))
    assert {line["error"]["code"] for line in errors} == {"batch_expired"}
    assert len(lines_of(asyncio.run(api.content(info.output_file_id)))) == 5


def test_cancelled_batch_has_partial_output_and_no_lines_for_the_rest(
    server: FakeJudgeServer, api: LiteLLMBatches, tmp_path: Path
) -> None:
    server.batches.set_plan(BatchPlan(outcome="cancelled", answered_share=0.5))
    batch = submit(api, write_file(tmp_path, many(10)))
    statuses = []
    for _ in range(4):
        server.batches.advance(batch_id=batch.id)
        statuses.append(server.batches.statuses()[batch.id])
    assert statuses == ["in_progress", "cancelling", "cancelled", "cancelled"]
    info = asyncio.run(api.retrieve(batch.id))
    assert (info.completed, info.failed, info.error_file_id) == (5, 0, None)
    assert info.output_file_id is not None
    assert len(lines_of(asyncio.run(api.content(info.output_file_id)))) == 5


def test_cancel_endpoint_stops_a_running_batch(
    server: FakeJudgeServer, api: LiteLLMBatches, tmp_path: Path
) -> None:
    batch = submit(api, write_file(tmp_path, many(4)))
    server.batches.advance(batch_id=batch.id)
    response = httpx.post(f"{server.url}/batches/{batch.id}/cancel")
    assert response.json()["status"] == "cancelling"
    server.batches.advance(batch_id=batch.id)
    info = asyncio.run(api.retrieve(batch.id))
    assert (info.status, info.output_file_id, info.error_file_id) == ("cancelled", None, None)


@pytest.mark.parametrize(
    ("lines", "plan", "code"),
    [
        (
            [request_line("same", ["a"]), request_line("same", ["b"])],
            BatchPlan(),
            "duplicate_custom_id",
        ),
        ([request_line("x" * 65, ["a"])], BatchPlan(), "invalid_custom_id"),
        ([request_line("u", ["a"], url="/v1/embeddings")], BatchPlan(), "invalid_url"),
        (many(3), BatchPlan(max_requests=2), "too_many_requests"),
        (many(3), BatchPlan(max_bytes=100), "file_too_large"),
        (many(1), BatchPlan(outcome="failed"), "model_not_found"),
    ],
)
def test_failed_validation_says_why(
    server: FakeJudgeServer,
    api: LiteLLMBatches,
    tmp_path: Path,
    lines: list[dict[str, Any]],
    plan: BatchPlan,
    code: str,
) -> None:
    server.batches.set_plan(plan)
    batch = submit(api, write_file(tmp_path, lines))
    server.batches.advance(batch_id=batch.id)
    info = asyncio.run(api.retrieve(batch.id))
    assert info.status == "failed"
    assert info.errors is not None and info.errors.startswith(code)
    assert (info.output_file_id, info.error_file_id) == (None, None)


def test_each_retrieve_can_move_a_batch_on_by_itself(
    server: FakeJudgeServer, api: LiteLLMBatches, tmp_path: Path
) -> None:
    server.batches.set_plan(BatchPlan(steps_per_retrieve=1))
    batch = submit(api, write_file(tmp_path, many(3)))
    statuses = [asyncio.run(api.retrieve(batch.id)).status for _ in range(4)]
    assert statuses == ["in_progress", "finalizing", "completed", "completed"]


def test_find_looks_up_the_batch_made_from_a_file_across_pages(
    server: FakeJudgeServer,
    api: LiteLLMBatches,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(provider_module, "_LIST_PAGE", 2)
    path = write_file(tmp_path, many(1))
    target = submit(api, path)
    for _ in range(5):  # newer batches push it to the third page
        submit(api, path)
    found = asyncio.run(api.find(target.input_file_id))
    assert found is not None and found.id == target.id
    lonely = asyncio.run(api.upload("lonely.jsonl", path))
    assert asyncio.run(api.find(lonely)) is None


def test_wait_for_blocks_until_the_counters_say_so(
    server: FakeJudgeServer, api: LiteLLMBatches, tmp_path: Path
) -> None:
    path = write_file(tmp_path, many(1))
    assert not server.batches.wait_for(lambda s: s["batches_created"] > 0, timeout_s=0)
    # The batch is created from another thread while this one waits.
    submitter = threading.Thread(target=submit, args=(api, path))
    submitter.start()
    try:
        assert server.batches.wait_for(lambda s: s["batches_created"] == 1, timeout_s=60)
    finally:
        submitter.join()


def test_unknown_batch_is_fatal_and_the_key_never_shows(api: LiteLLMBatches) -> None:
    with pytest.raises(FatalJudgeError) as caught:
        asyncio.run(api.retrieve("batch_nope"))
    assert "retrieve a batch" in str(caught.value)
    assert KEY not in str(caught.value)


def test_admin_endpoints_for_a_fake_in_another_process(
    server: FakeJudgeServer, api: LiteLLMBatches, tmp_path: Path
) -> None:
    root = server.base_url
    assert httpx.post(f"{root}/admin/batches/plan", json={"outcome": "nope"}).status_code == 400
    plan = httpx.post(f"{root}/admin/batches/plan", json={"in_progress_steps": 3})
    assert plan.json()["plan"]["in_progress_steps"] == 3
    batch = submit(api, write_file(tmp_path, many(2)))
    moved = httpx.post(f"{root}/admin/batches/advance", json={"finish": True})
    assert moved.json()["statuses"][batch.id] == "completed"
    stats = httpx.get(f"{root}/admin/batches/stats").json()
    assert stats["by_status"]["completed"] >= 1


def test_an_upload_larger_than_an_ordinary_request_body_is_taken(
    server: FakeJudgeServer, api: LiteLLMBatches, tmp_path: Path
) -> None:
    """OpenAI takes batch files up to 200 MB; the fake's app takes them too (its chat
    requests stay small)."""
    path = tmp_path / "big.jsonl"
    line = json.dumps(request_line("r", ["x" * 1000])).encode() + b"\n"
    path.write_bytes(line * (70_000_000 // len(line) + 1))
    asyncio.run(api.upload("big.jsonl", str(path)))
    assert server.batches.stats()["uploaded_bytes"] == path.stat().st_size > 70_000_000
