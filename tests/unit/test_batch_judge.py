"""Batch mode's pure parts, without Ray or HTTP: request lines, the batch judge answering from
replies through the online judge's code, ingesting output and error files, cutting requests
into batches, and the round state's JSON.

Replies come from the fake judge's own logic (`FakeJudgeServer.answer_body`, the code that
answers online requests in every other test): a context is relevant iff it says RELEVANT.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from jobs.core.config import JobConfig, parse_config
from jobs.core.verdict_cache import CachingJudge, VerdictCache
from jobs.engine.batch.batch_judge import BatchJudge, RecordedRequest, ReplayClient, Reply
from jobs.engine.batch.ingest import ingest_batch, missing_reason
from jobs.engine.batch.requests import (
    ENDPOINT,
    RequestLines,
    batch_provider,
    custom_id,
    item_key,
    judge_tag,
)
from jobs.engine.batch.state import BatchRecord, RoundState, split_batches
from scorer_core import context_precision
from scorer_core.errors import ConfigError
from scorer_core.openai_http import OpenAIHTTPClient
from scorer_core.prompt import VERDICTS_SCHEMA_NAME, verdict_messages, verdicts_schema
from scorer_core.protocols import RequestSettings
from scorer_core.scoring import ScoringSettings, score_item
from scorer_core.types import ScoreResult, ScoringItem, Usage
from tests.fake_judge import FakeJudgeServer, FaultPlan

ITEMS = [
    ScoringItem(
        input="Which river flows through Kalo?",
        output="The Amber river.",
        contexts=("The Amber flows through Kalo. RELEVANT", "Kalo has mild springs. IRRELEVANT"),
    ),
    ScoringItem(
        input="Who founded Venmar?",
        output="Merchants.",
        contexts=tuple(
            f"passage {n} {'RELEVANT' if n % 3 == 0 else 'IRRELEVANT'}" for n in range(7)
        ),
        expected_output="Merchants from the coast.",
    ),
]
TRUTH = [context_precision(["RELEVANT" in c.split() for c in item.contexts]) for item in ITEMS]


def config(**judge: Any) -> JobConfig:
    return parse_config(
        {
            "input": {"path": "unused.jsonl"},
            "judge": {"model": "openai/fake-judge", "mode": "batch", **judge},
            "scorer": {"reason": "template"},
        }
    )


KEYS = {item: item_key(3, n) for n, item in enumerate(ITEMS)}


def rid(request: str) -> str:
    """The custom_id of `request` ("<shard>-<item>-<slice>-<attempt>") under `config()`."""
    return f"{request}-{judge_tag(config())}"


def judge_pass(
    replies: dict[str, Reply], *, max_reasks: int = 2, reason: str = "template", **judge: Any
) -> tuple[list[ScoreResult], ReplayClient]:
    """One pass over ITEMS (contexts_per_call 3): results and what the client recorded."""
    client = ReplayClient(RequestLines.for_config(config(**judge)), replies)
    judge = BatchJudge(client, KEYS, max_reasks=max_reasks, scale=1.0)
    settings = ScoringSettings(reason=reason, contexts_per_call=3)  # type: ignore[arg-type]

    async def run() -> list[ScoreResult]:
        return list(await asyncio.gather(*(score_item(judge, item, settings) for item in ITEMS)))

    return asyncio.run(run()), client


def answer(
    fake: FakeJudgeServer, recorded: Sequence[RecordedRequest], replies: dict[str, Reply]
) -> None:
    """What a batch would answer to the recorded lines (the fake judge's own logic)."""
    for request in recorded:
        line = json.loads(request.line)
        status, body = fake.answer_body(line["body"])
        assert status == 200, body
        usage = body["usage"]
        replies[request.custom_id] = Reply(
            text=body["choices"][0]["message"]["content"],
            usage=Usage(
                prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"]
            ),
        )


# -- request lines ---------------------------------------------------------------------------


def test_a_line_is_the_online_request_in_openai_batch_format() -> None:
    lines = RequestLines.for_config(config(temperature=0.3, max_tokens=200))
    item, positions = ITEMS[1], [3, 4, 5]
    messages = verdict_messages(item, positions)
    schema = verdicts_schema(positions)
    data, tokens = lines.line("7-2-v3-0", messages, VERDICTS_SCHEMA_NAME, schema)
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    line = json.loads(data)
    assert line["custom_id"] == "7-2-v3-0"
    assert line["method"] == "POST" and line["url"] == ENDPOINT == "/v1/chat/completions"
    online = OpenAIHTTPClient("openai/fake-judge", RequestSettings(temperature=0.3, max_tokens=200))
    assert line["body"] == online.request_body(
        messages, schema_name=VERDICTS_SCHEMA_NAME, schema=schema, response_format="json_schema"
    )
    assert line["body"]["model"] == "fake-judge"
    assert line["body"]["response_format"]["type"] == "json_schema"
    assert tokens == sum(len(m["content"]) for m in messages) // 4 + 1


def test_auto_means_json_schema_and_an_explicit_form_is_kept() -> None:
    assert RequestLines.for_config(config()).form == "json_schema"
    lines = RequestLines.for_config(config(response_format="json_object"))
    assert lines.form == "json_object"
    messages = verdict_messages(ITEMS[0], [0, 1])
    data, _ = lines.line("0-0-v0-0", messages, VERDICTS_SCHEMA_NAME, verdicts_schema([0, 1]))
    assert json.loads(data)["body"]["response_format"]["type"] == "json_object"
    plain, _ = RequestLines.for_config(config(response_format="prompt")).line(
        "0-0-v0-0", messages, VERDICTS_SCHEMA_NAME, verdicts_schema([0, 1])
    )
    assert "response_format" not in json.loads(plain)["body"]


def test_custom_ids_name_shard_item_slice_attempt_and_judge() -> None:
    tag = judge_tag(config())
    request_id = custom_id(item_key(123456, 4_294_967_295), "v4080", 10, tag)
    assert request_id == f"123456-4294967295-v4080-10-{tag}"
    assert len(request_id) <= 64
    with pytest.raises(ValueError, match="longer than 64"):
        RequestLines.for_config(config()).line("x" * 65, [], VERDICTS_SCHEMA_NAME, {})


def test_the_judge_tag_changes_with_the_endpoint_provider_and_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = judge_tag(config())
    assert base == judge_tag(config()) and len(base) == 8
    others = [
        judge_tag(config(api_base="http://10.0.0.1:8000/v1")),
        judge_tag(config(api_base="http://10.0.0.2:8000/v1")),
        judge_tag(config(model="openai/other")),
        judge_tag(config(batch={"provider": "hosted_vllm"})),
        judge_tag(config(model="azure/deployment-a")),
        judge_tag(config(model="azure/deployment-b")),
    ]
    assert len({base, *others}) == 1 + len(others)
    # litellm takes an Azure deployment's resource from the environment when no api_base
    monkeypatch.setenv("AZURE_API_BASE", "https://resource-one.openai.azure.com")
    one = judge_tag(config(model="azure/deployment-a"))
    monkeypatch.setenv("AZURE_API_BASE", "https://resource-two.openai.azure.com")
    assert judge_tag(config(model="azure/deployment-a")) != one


def test_the_batch_provider_comes_from_the_model_or_the_config() -> None:
    assert batch_provider(config()) == "openai"
    assert batch_provider(config(model="azure/my-deployment")) == "azure"
    assert batch_provider(config(model="gpt-4o-mini")) == "openai"
    assert batch_provider(config(model="my-gw/x", batch={"provider": "litellm_proxy"})) == (
        "litellm_proxy"
    )
    with pytest.raises(ConfigError, match=r"judge\.batch\.provider"):
        batch_provider(config(model="anthropic/claude"))


def test_batch_mode_needs_an_llm_judge() -> None:
    with pytest.raises(ConfigError, match=r"judge\.mode batch needs an LLM"):
        parse_config({"input": {"path": "x"}, "judge": {"model": "lexical", "mode": "batch"}})


# -- the batch judge -------------------------------------------------------------------------


def test_first_pass_records_every_request_then_replies_give_the_online_scores() -> None:
    fake = FakeJudgeServer()
    results, client = judge_pass({})
    # Item 0: one slice of 2; item 1: slices [0..2], [3..5], [6]: every request recorded once.
    assert sorted(r.custom_id for r in client.recorded) == [
        rid("3-0-v0-0"),
        rid("3-1-v0-0"),
        rid("3-1-v3-0"),
        rid("3-1-v6-0"),
    ]
    assert all(result.status == "error" for result in results)  # nothing answered yet
    replies: dict[str, Reply] = {}
    answer(fake, client.recorded, replies)
    results, client = judge_pass(replies)
    assert client.recorded == []
    assert [r.status for r in results] == ["ok", "ok"]
    assert [r.score for r in results] == [round(t, 2) for t in TRUTH]
    assert [r.usage.calls for r in results] == [1, 3]
    assert all(r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0 for r in results)


def test_a_reply_that_breaks_the_contract_is_reasked_with_the_problem_named() -> None:
    fake = FakeJudgeServer(fault_plan=FaultPlan(malformed_json=1.0))
    _, client = judge_pass({})
    replies: dict[str, Reply] = {}
    answer(fake, client.recorded, replies)  # every first reply is broken JSON
    results, client = judge_pass(replies)
    assert {r.custom_id.split("-")[3] for r in client.recorded} == {"1"}  # attempt 1
    note = json.loads(client.recorded[0].line)["body"]["messages"][1]["content"]
    assert "Your previous reply could not be used" in note
    fake.set_fault_plan(FaultPlan())
    answer(fake, client.recorded, replies)
    results, client = judge_pass(replies)
    assert client.recorded == []
    assert [r.status for r in results] == ["ok", "ok"]
    assert [r.score for r in results] == [round(t, 2) for t in TRUTH]
    assert [(r.usage.calls, r.usage.reasks) for r in results] == [(2, 1), (6, 3)]


def test_replies_broken_every_time_end_unscored_after_the_reasks() -> None:
    fake = FakeJudgeServer(fault_plan=FaultPlan(malformed_json=1.0))
    replies: dict[str, Reply] = {}
    results, client = judge_pass(replies, max_reasks=1)
    for _ in range(2):
        answer(fake, client.recorded, replies)
        results, client = judge_pass(replies, max_reasks=1)
    assert client.recorded == []
    assert [r.status for r in results] == ["unscored", "unscored"]
    assert all("unusable after 2 attempt(s)" in (r.error or "") for r in results)


def test_an_error_reply_makes_the_item_an_error_saying_why() -> None:
    fake = FakeJudgeServer()
    _, client = judge_pass({})
    replies: dict[str, Reply] = {}
    answer(fake, client.recorded, replies)
    replies[rid("3-1-v3-0")] = Reply.failed("batch batch_1: HTTP 500: server_error: boom")
    results, client = judge_pass(replies)
    assert client.recorded == []
    assert results[0].status == "ok"
    assert results[1].status == "error"
    assert results[1].error == "batch batch_1: HTTP 500: server_error: boom"


def test_llm_reasons_come_in_the_next_round() -> None:
    fake = FakeJudgeServer()
    replies: dict[str, Reply] = {}
    _, client = judge_pass(replies, reason="llm")
    answer(fake, client.recorded, replies)
    _, client = judge_pass(replies, reason="llm")
    assert sorted(r.custom_id for r in client.recorded) == [rid("3-0-r-0"), rid("3-1-r-0")]
    answer(fake, client.recorded, replies)
    results, client = judge_pass(replies, reason="llm")
    assert client.recorded == []
    assert [r.status for r in results] == ["ok", "ok"]
    for result in results:
        assert result.reason.startswith(f"The score is {result.score:g} because")
        assert result.reason_prompt is not None


def test_a_failed_reason_request_falls_back_to_the_template() -> None:
    fake = FakeJudgeServer()
    replies: dict[str, Reply] = {}
    _, client = judge_pass(replies, reason="llm")
    answer(fake, client.recorded, replies)
    replies[rid("3-0-r-0")] = Reply.failed("batch b: expired before this request was answered")
    replies[rid("3-1-r-0")] = Reply.failed("batch b: expired before this request was answered")
    results, client = judge_pass(replies, reason="llm")
    assert client.recorded == []
    assert [r.status for r in results] == ["ok", "ok"]
    assert all("LLM reason unavailable: batch b: expired" in r.reason for r in results)


def test_online_reasks_go_out_at_once_and_are_kept() -> None:
    fake = FakeJudgeServer(fault_plan=FaultPlan(malformed_json=1.0))
    _, client = judge_pass({})
    replies: dict[str, Reply] = {}
    answer(fake, client.recorded, replies)
    fake.set_fault_plan(FaultPlan())
    sent: list[str] = []

    async def online(
        messages: Sequence[dict[str, str]], name: str, schema: dict[str, Any], verdicts: int
    ) -> Any:
        from scorer_core.protocols import ChatReply

        sent.append(messages[1]["content"])
        status, body = fake.answer_body(
            {
                "messages": list(messages),
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": name, "schema": schema},
                },
            }
        )
        assert status == 200
        tokens = Usage(prompt_tokens=10, completion_tokens=5)
        reply = ChatReply(body["choices"][0]["message"]["content"], tokens)
        return reply, Usage(calls=2, prompt_tokens=10, completion_tokens=5, retries=1)

    client = ReplayClient(RequestLines.for_config(config()), replies, reask=online)
    judge = BatchJudge(client, KEYS, max_reasks=2, scale=1.0)
    settings = ScoringSettings(reason="template", contexts_per_call=3)

    async def run() -> list[ScoreResult]:
        return list(await asyncio.gather(*(score_item(judge, item, settings) for item in ITEMS)))

    results = asyncio.run(run())
    assert client.recorded == []
    assert len(sent) == 4 and all("could not be used" in text for text in sent)
    assert sorted(client.online_replies) == [
        rid("3-0-v0-1"),
        rid("3-1-v0-1"),
        rid("3-1-v3-1"),
        rid("3-1-v6-1"),
    ]
    assert [r.status for r in results] == ["ok", "ok"]
    assert [r.score for r in results] == [round(t, 2) for t in TRUTH]
    # Item 0: one batch call + one online re-ask that took two calls (a retry).
    assert (results[0].usage.calls, results[0].usage.retries, results[0].usage.reasks) == (
        3,
        1,
        1,
    )


# -- ingesting a batch's files ---------------------------------------------------------------


def _line(request_id: str, status: int, body: dict[str, Any] | None, error: Any = None) -> bytes:
    response = None if body is None else {"status_code": status, "request_id": "r", "body": body}
    data = {"id": "batch_req_1", "custom_id": request_id, "response": response, "error": error}
    return json.dumps(data).encode()


def _completion(text: str) -> dict[str, Any]:
    return {
        "choices": [{"message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3},
    }


def test_every_request_sent_gets_exactly_one_reply_whatever_came_back() -> None:
    record = BatchRecord(
        name="r000-b0000", parts=(("s", 0, 6),), requests=6, bytes=0, tokens=0, batch_id="batch_9"
    )
    record = BatchRecord(**{**record.__dict__, "status": "expired"})
    output = b"\n".join(
        [
            _line("a", 200, _completion('{"verdicts": []}')),
            _line("a", 200, _completion("second line for a: ignored")),
            _line("stranger", 200, _completion("not ours")),
            b"{not json",
        ]
    )
    errors = b"\n".join(
        [
            _line("b", 500, {"error": {"message": "boom", "type": "server_error"}}),
            _line("c", 0, None, {"code": "batch_expired", "message": "too late"}),
            _line("d", 200, {"unexpected": True}),
        ]
    )
    ingested = ingest_batch(record, [output, errors], ["a", "b", "c", "d", "e", "f"])
    replies = ingested.replies
    assert set(replies) == {"a", "b", "c", "d", "e", "f"}
    tokens = Usage(prompt_tokens=11, completion_tokens=3)
    assert replies["a"] == Reply(text='{"verdicts": []}', usage=tokens)
    assert replies["b"].text is None and "HTTP 500: server_error: boom" in str(replies["b"].error)
    assert replies["c"].error == "batch batch_9: batch_expired: too late"
    assert "not a chat completion" in str(replies["d"].error)
    assert (
        replies["e"].error
        == replies["f"].error
        == ("batch batch_9 expired before this request was answered")
    )
    assert (ingested.unknown, ingested.unreadable) == (1, 1)


@pytest.mark.parametrize(
    ("status", "errors", "words"),
    [
        ("completed", None, "ended completed without a line for this request"),
        ("cancelled", None, "was cancelled before this request was answered"),
        ("failed", "duplicate_custom_id: custom_id 3 repeats (line 2)", "failed validation: dup"),
    ],
)
def test_missing_lines_say_what_happened_to_their_batch(
    status: str, errors: str | None, words: str
) -> None:
    record = BatchRecord(
        name="n",
        parts=(),
        requests=1,
        bytes=0,
        tokens=0,
        batch_id="batch_x",
        status=status,
        errors=errors,
    )
    assert words in missing_reason(record)


# -- cutting into batches, and the round state ------------------------------------------------


def test_requests_are_cut_by_count_bytes_and_tokens_keeping_shard_order() -> None:
    shards = [("s0", [10] * 5, [1] * 5), ("s1", [10] * 4, [1] * 4)]
    by_count = split_batches(0, shards, max_requests=4, max_bytes=10**6, max_tokens=0)
    assert [b.parts for b in by_count] == [
        (("s0", 0, 4),),
        (("s0", 4, 5), ("s1", 0, 3)),
        (("s1", 3, 4),),
    ]
    assert [b.requests for b in by_count] == [4, 4, 1]
    assert [b.name for b in by_count] == ["r000-b0000", "r000-b0001", "r000-b0002"]
    by_bytes = split_batches(2, shards, max_requests=100, max_bytes=45, max_tokens=0)
    assert [b.bytes for b in by_bytes] == [40, 40, 10]
    assert by_bytes[0].name == "r002-b0000"
    by_tokens = split_batches(0, shards, max_requests=100, max_bytes=10**6, max_tokens=6)
    assert [b.tokens for b in by_tokens] == [6, 3]
    assert by_tokens[1].parts == (("s1", 1, 4),)
    everything = split_batches(0, shards, max_requests=100, max_bytes=10**6, max_tokens=0)
    assert [b.parts for b in everything] == [(("s0", 0, 5), ("s1", 0, 4))]
    with pytest.raises(ValueError, match="request 2 of shard s9"):
        split_batches(
            0, [("s9", [1, 1, 99], [1, 1, 1])], max_requests=9, max_bytes=50, max_tokens=0
        )


def test_round_state_round_trips_through_json() -> None:
    state = RoundState(
        round=1,
        batches=(
            BatchRecord(
                name="r001-b0000",
                parts=(("s0", 0, 3),),
                requests=3,
                bytes=300,
                tokens=30,
                file_id="file-1",
            ),
            BatchRecord(
                name="r001-b0001",
                parts=(("s0", 3, 4), ("s1", 0, 2)),
                requests=3,
                bytes=200,
                tokens=20,
            ),
        ),
    )
    back = RoundState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert back == state
    done = state.replace(
        BatchRecord(**{**state.batches[0].__dict__, "status": "completed", "ingested": True})
    )
    assert done.batches[0].final and not done.batches[1].final
    assert done.counts() == {"total": 6, "completed": 0, "failed": 0}


def test_a_pair_repeated_in_a_shard_asks_the_same_requests_in_every_pass() -> None:
    """Online, a verdict judged moments before answers a repeat of its pair; in batch mode
    that would make a shard's requests depend on the order replies arrive in."""
    shared = "The Amber flows through Kalo. RELEVANT"
    first = ScoringItem(
        input="Which river?", output="Amber.", contexts=(shared, "Mild springs. IRRELEVANT")
    )
    second = ScoringItem(
        input="Which river?", output="Amber.", contexts=("Old town. IRRELEVANT", shared)
    )
    keys = {first: item_key(0, 0), second: item_key(0, 1)}
    fake = FakeJudgeServer()

    def one_pass(replies: dict[str, Reply]) -> tuple[list[ScoreResult], ReplayClient]:
        client = ReplayClient(RequestLines.for_config(config()), replies)
        judge = CachingJudge(
            BatchJudge(client, keys, max_reasks=2, scale=1.0),
            VerdictCache(),
            "fingerprint",
            fresh_hits=False,
        )
        settings = ScoringSettings(reason="template")

        async def run() -> list[ScoreResult]:
            # The first item's verdicts are in the cache before the second is judged.
            return [
                await score_item(judge, first, settings),
                await score_item(judge, second, settings),
            ]

        return asyncio.run(run()), client

    _, client = one_pass({})
    assert sorted(r.custom_id for r in client.recorded) == [rid("0-0-v0-0"), rid("0-1-v0-0")]
    replies: dict[str, Reply] = {}
    answer(fake, client.recorded, replies)
    results, client = one_pass(replies)
    assert client.recorded == []
    assert [(r.status, r.score, r.usage.cache_hits) for r in results] == [
        ("ok", 1.0, 0),
        ("ok", 0.5, 0),
    ]
