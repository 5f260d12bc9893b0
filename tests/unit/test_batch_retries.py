"""Batch failures asked again, without Ray or HTTP: which failed lines are transient (sent again
in the next round) and which are final, how the replies of several rounds add up, the batch
judge asking again until judge.batch.max_rounds and online in the deadline's round, the
deadline setting, and the rounds and their reasons in the manifest.

Replies come from the fake judge's own logic (`FakeJudgeServer.answer_body`): a context is
relevant iff it says RELEVANT.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from jobs.core.config import JobConfig, deadline_at, parse_config, parse_deadline
from jobs.core.run_layout import StagingArea
from jobs.core.run_manifest import RunManifest
from jobs.core.storage import open_store
from jobs.engine.batch.batch_judge import BatchJudge, RecordedRequest, ReplayClient, Reply
from jobs.engine.batch.batch_layout import BatchLayout
from jobs.engine.batch.ingest import ingest_batch
from jobs.engine.batch.requests import RequestLines, item_key
from jobs.engine.batch.state import BatchRecord, RoundState
from jobs.tools.run_status import status_lines
from scorer_core import context_precision
from scorer_core.errors import ConfigError
from scorer_core.protocols import ChatReply
from scorer_core.scoring import ScoringSettings, score_item
from scorer_core.types import ScoreResult, ScoringItem, Usage
from tests.fake_judge import FakeJudgeServer

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
            f"passage {n} {'RELEVANT' if n % 3 == 0 else 'IRRELEVANT'}" for n in range(5)
        ),
    ),
]
TRUTH = [context_precision(["RELEVANT" in c.split() for c in item.contexts]) for item in ITEMS]
KEYS = {item: item_key(0, n) for n, item in enumerate(ITEMS)}


def config(**batch: Any) -> JobConfig:
    return parse_config(
        {
            "input": {"path": "unused.jsonl"},
            "judge": {"model": "openai/fake-judge", "mode": "batch", "batch": batch},
            "scorer": {"reason": "template"},
        }
    )


def judge_pass(
    replies: dict[str, Reply], *, max_rounds: int = 3, online: Any = None, all_online: bool = False
) -> tuple[list[ScoreResult], ReplayClient]:
    """One pass over ITEMS (every item's contexts in one request)."""
    client = ReplayClient(
        RequestLines.for_config(config()),
        replies,
        reask=online,
        max_rounds=max_rounds,
        all_online=all_online,
    )
    judge = BatchJudge(client, KEYS, max_reasks=1, scale=1.0)
    settings = ScoringSettings(reason="template", contexts_per_call=8)

    async def run() -> list[ScoreResult]:
        return list(await asyncio.gather(*(score_item(judge, item, settings) for item in ITEMS)))

    return asyncio.run(run()), client


def good(fake: FakeJudgeServer, request: RecordedRequest) -> Reply:
    status, body = fake.answer_body(json.loads(request.line)["body"])
    assert status == 200
    usage = body["usage"]
    return Reply(
        text=body["choices"][0]["message"]["content"],
        usage=Usage(
            prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"]
        ),
    )


def line(request_id: str, status: int | None, body: Any = None, error: Any = None) -> bytes:
    response = None if status is None else {"status_code": status, "body": body}
    return json.dumps({"custom_id": request_id, "response": response, "error": error}).encode()


# -- which failures are transient ------------------------------------------------------------


def test_transient_failures_are_asked_again_and_a_400_is_final_with_its_reason() -> None:
    record = BatchRecord(
        name="r000-b0000", parts=(("s", 0, 7),), requests=7, bytes=0, tokens=0, batch_id="batch_7"
    )
    record = BatchRecord(**{**record.__dict__, "status": "expired"})
    refused = {"error": {"code": "content_policy_violation", "message": "refused"}}
    errors = b"\n".join(
        [
            line("a", 500, {"error": {"message": "boom", "type": "server_error"}}),
            line("b", 429, {"error": {"message": "slow down"}}),
            line("c", None, error={"code": "batch_expired", "message": "too late"}),
            line("d", None, error={"code": "batch_cancelled", "message": "cancelled"}),
            line("e", 400, refused),
            line("f", 404, {"error": {"message": "no such model"}}),
        ]
    )
    ingested = ingest_batch(record, [errors], ["a", "b", "c", "d", "e", "f", "g"])
    replies = ingested.replies
    assert {k: r.retry for k, r in replies.items()} == {
        "a": "HTTP 500",
        "b": "HTTP 429",
        "c": "batch_expired",
        "d": "batch_cancelled",
        "e": None,
        "f": None,
        "g": "missing (batch expired)",
    }
    assert replies["e"].error == "batch batch_7: HTTP 400: content_policy_violation: refused"
    assert ingested.retried == {
        "HTTP 500": 1,
        "HTTP 429": 1,
        "batch_expired": 1,
        "batch_cancelled": 1,
        "missing (batch expired)": 1,
    }
    assert ingested.final_errors == 2


@pytest.mark.parametrize("status", ["cancelled", "failed", "completed"])
def test_every_line_missing_from_a_batch_is_asked_again(status: str) -> None:
    record = BatchRecord(
        name="n", parts=(), requests=2, bytes=0, tokens=0, batch_id="batch_x", status=status
    )
    ingested = ingest_batch(record, [], ["a", "b"])
    assert ingested.retried == {f"missing (batch {status})": 2}


def test_a_batch_stopped_at_the_deadline_sends_every_request_online() -> None:
    record = BatchRecord(
        name="n",
        parts=(),
        requests=2,
        bytes=0,
        tokens=0,
        batch_id="batch_x",
        status="cancelling",
        stopped=True,
    )
    ingested = ingest_batch(record, [], ["a", "b"])
    assert record.final and ingested.retried == {"deadline": 2}
    assert "stopped at judge.batch.deadline" in str(ingested.replies["a"].error)


# -- replies over rounds ---------------------------------------------------------------------


def test_replies_of_several_rounds_add_up(tmp_path: Path) -> None:
    layout = BatchLayout(open_store(str(tmp_path)), "staging")
    failed = Reply.failed("batch b0: HTTP 500: boom", retry="HTTP 500")
    answer = Reply(text="ok", usage=Usage(prompt_tokens=5, completion_tokens=2))
    layout.write_replies("s", "r000-b0000", [("a", failed), ("b", failed), ("c", failed)])
    layout.write_replies(
        "s", "r001-b0000", [("a", answer), ("b", failed), ("c", Reply.failed("HTTP 400: no"))]
    )
    replies = layout.read_replies("s")
    assert replies["a"] == answer  # the answer of the second round
    assert replies["b"].transient and replies["b"].tries == 2  # failed in two rounds
    assert replies["c"] == Reply.failed("HTTP 400: no")  # a final error wins over a transient


# -- the batch judge --------------------------------------------------------------------------


def test_a_transient_failure_is_asked_again_until_max_rounds_then_says_so() -> None:
    fake = FakeJudgeServer()
    replies: dict[str, Reply] = {}
    _, client = judge_pass(replies)
    first, second = client.recorded
    replies[first.custom_id] = good(fake, first)
    replies[second.custom_id] = Reply.failed("batch b0: HTTP 503: busy", retry="HTTP 503", tries=1)
    results, client = judge_pass(replies)
    # The failed request is recorded again, with the same custom_id, for the next round.
    assert [r.custom_id for r in client.recorded] == [second.custom_id]
    assert results[0].status == "ok"
    replies[second.custom_id] = Reply.failed("batch b1: HTTP 503: busy", retry="HTTP 503", tries=3)
    results, client = judge_pass(replies)
    assert client.recorded == []
    assert [r.status for r in results] == ["ok", "error"]
    assert results[1].error == (
        "batch b1: HTTP 503: busy (failed transiently in 3 batch round(s), "
        "judge.batch.max_rounds 3)"
    )


def test_the_deadline_round_asks_every_unanswered_request_online() -> None:
    fake = FakeJudgeServer()
    asked: list[Sequence[dict[str, str]]] = []

    async def online(
        messages: Sequence[dict[str, str]], name: str, schema: dict[str, Any], count: int
    ) -> tuple[ChatReply, Usage]:
        asked.append(messages)
        request = RecordedRequest(
            "x", *RequestLines.for_config(config()).line("x", messages, name, schema)
        )
        reply = good(fake, request)
        assert reply.text is not None
        chat = ChatReply(reply.text, reply.usage)
        return chat, Usage(calls=1, prompt_tokens=reply.usage.prompt_tokens)

    replies: dict[str, Reply] = {}
    _, client = judge_pass(replies)
    first, second = client.recorded
    replies[first.custom_id] = Reply.failed("stopped", retry="deadline", tries=1)  # any tries
    results, client = judge_pass(replies, max_rounds=1, online=online, all_online=True)
    assert client.recorded == [] and len(asked) == 2  # nothing waits for a batch
    assert [r.status for r in results] == ["ok", "ok"]
    assert [r.score for r in results] == [round(t, 2) for t in TRUTH]
    assert set(client.online_replies) == {first.custom_id, second.custom_id}


# -- the deadline setting ---------------------------------------------------------------------


def test_a_deadline_is_a_time_of_day_or_a_duration() -> None:
    assert parse_deadline("06:30") == dt.time(6, 30)
    assert parse_deadline("8h") == dt.timedelta(hours=8)
    assert parse_deadline("90m") == dt.timedelta(minutes=90)
    evening = dt.datetime(2026, 3, 1, 22, 0, tzinfo=dt.UTC).timestamp()
    morning = dt.datetime(2026, 3, 2, 6, 30, tzinfo=dt.UTC).timestamp()
    assert deadline_at("06:30", evening) == morning  # the next 06:30 after the start
    assert deadline_at("23:00", evening) == evening + 3600  # later the same day
    assert deadline_at("8h", evening) == evening + 8 * 3600


@pytest.mark.parametrize("value", ["6.30", "25:00", "8", "0h", "tomorrow", "30d"])
def test_a_bad_deadline_is_a_config_error_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(deadline=value)
    assert "judge.batch.deadline" in str(caught.value)


# -- the manifest ------------------------------------------------------------------------------


def test_rounds_and_their_reasons_reach_the_manifest_and_old_manifests_still_read() -> None:
    state = RoundState(
        round=0,
        batches=(
            BatchRecord(
                name="b0",
                parts=(),
                requests=10,
                bytes=0,
                tokens=0,
                status="expired",
                completed=5,
                failed=5,
                retried={"batch_expired": 5},
            ),
            BatchRecord(
                name="b1",
                parts=(),
                requests=10,
                bytes=0,
                tokens=0,
                status="completed",
                completed=9,
                failed=1,
                retried={"HTTP 500": 1},
                final_errors=0,
            ),
        ),
    )
    assert RoundState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    data = {
        "run_id": "r1",
        "run_date": "2026-03-01",
        "judge": {"mode": "batch", "rounds": 2, "round_details": [state.summary()]},
    }
    manifest = RunManifest.read(json.dumps(data))
    (round0,) = manifest.judge.round_details
    assert round0.retried == {"HTTP 500": 1, "batch_expired": 5}
    assert (round0.requests, round0.completed, round0.failed) == (20, 14, 6)
    old = RunManifest.read(json.dumps({**data, "judge": {"mode": "batch", "rounds": 1}}))
    assert old.judge.round_details == [] and old.judge.max_rounds is None
    # A round file written before the retries were recorded reads too.
    older = state.to_dict()
    for batch in older["batches"]:
        del batch["retried"], batch["final_errors"], batch["stopped"]
    del older["online"]
    assert RoundState.from_dict(older).retried() == {}


def test_status_of_a_run_in_progress_shows_each_round_and_why_lines_were_asked_again(
    tmp_path: Path,
) -> None:
    store = open_store(str(tmp_path))
    staging = StagingArea.of_run(store, "night-1")
    layout = BatchLayout(store, staging.folder)
    layout.write_json(layout.run_file, {"shards": ["s0"], "model": "m", "provider": "openai"})
    expired = BatchRecord(
        name="r000-b0000",
        parts=(("s0", 0, 30),),
        requests=30,
        bytes=0,
        tokens=0,
        batch_id="batch_a",
        status="expired",
        completed=15,
        failed=15,
        ingested=True,
        retried={"batch_expired": 15, "HTTP 500": 2},
        final_errors=1,
    )
    stopped = BatchRecord(
        name="r001-b0000",
        parts=(("s0", 0, 17),),
        requests=17,
        bytes=0,
        tokens=0,
        batch_id="batch_b",
        status="cancelling",
        stopped=True,
    )
    layout.write_json(layout.round_file(0), RoundState(round=0, batches=(expired,)).to_dict())
    layout.write_json(layout.round_file(1), RoundState(round=1, batches=(stopped,)).to_dict())
    layout.write_json(layout.round_file(2), RoundState(round=2, batches=(), online=True).to_dict())
    status = "\n".join(status_lines(store, "night-1"))
    assert (
        "round 0: 1 batch(es), 30 requests: 15 completed, 15 failed; asked again: "
        "batch_expired 15, HTTP 500 2; 1 failed for good"
    ) in status
    assert (
        "round 1: 1 batch(es), 17 requests: 0 completed, 0 failed, 1 cancelled at the deadline"
        in status
    )
    assert "batch_b  cancelling, stopped at the deadline" in status
    assert "round 2: online (judge.batch.deadline neared)" in status


def test_reply_files_of_an_older_version_without_the_retry_column_still_read(
    tmp_path: Path,
) -> None:
    store = open_store(str(tmp_path))
    layout = BatchLayout(store, "staging")
    old = pa.table(
        {
            "custom_id": ["a", "b"],
            "text": ["ok", None],
            "error": [None, "batch b0: HTTP 500: boom"],
            "prompt_tokens": [3, 0],
            "completion_tokens": [1, 0],
        }
    )
    store.write_parquet_atomic(layout.replies_file("s", "r000-b0000"), old)
    replies = layout.read_replies("s")
    assert replies["a"] == Reply(text="ok", usage=Usage(prompt_tokens=3, completion_tokens=1))
    assert replies["b"] == Reply.failed("batch b0: HTTP 500: boom")  # final, as it was then
