"""Issue 28 point 4: the prompt tokens a provider's cache read (and wrote), from the judge's
reply over real HTTP in both transports and from batch result lines, priced at the provider's
cache rates; the static part of every request first and byte-stable."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from jobs.core.pricing import estimate_cost_usd
from jobs.core.storage import open_store
from jobs.engine.batch.batch_layout import BatchLayout
from jobs.engine.batch.ingest import reply_of_line
from jobs.engine.publish.aggregate import RunSummary
from jobs.engine.publish.summary_table import format_summary_table
from scorer_core.litellm_client import LiteLLMClient
from scorer_core.openai_http import OpenAIHTTPClient
from scorer_core.prompt import (
    VERDICT_INSTRUCTIONS,
    VERDICTS_SCHEMA_NAME,
    verdict_messages,
    verdicts_schema,
)
from scorer_core.protocols import ChatReply, RequestSettings
from scorer_core.types import ScoringItem, Usage
from tests.fake_judge import FakeJudgeServer

pytestmark = pytest.mark.timeout(120)

ITEMS = (
    ScoringItem(
        input="Alpha?",
        output="An answer.",
        contexts=("A RELEVANT passage.", "Another one."),
        expected_output="Alpha is A.",
    ),
    ScoringItem(
        input="Beta?",
        output="Other.",
        contexts=("Nothing here.", "B is RELEVANT."),
        expected_output="Beta is B.",
    ),
)


def _ask(client: Any, item: ScoringItem) -> ChatReply:
    messages = verdict_messages(item, [0, 1])
    schema = verdicts_schema([0, 1])
    reply: ChatReply = asyncio.run(
        client.complete(messages, schema_name=VERDICTS_SCHEMA_NAME, schema=schema)
    )
    return reply


@pytest.mark.parametrize("transport", [OpenAIHTTPClient, LiteLLMClient])
@pytest.mark.parametrize("style", ["openai", "anthropic"])
def test_cached_tokens_come_from_the_reply_in_both_transports(transport: Any, style: Any) -> None:
    instructions = len(VERDICT_INSTRUCTIONS[True]) // 4  # the fake's tokens: 4 characters each
    with FakeJudgeServer(prompt_cache=style, cache_min_tokens=16) as server:
        client = transport("openai/judge", RequestSettings(api_base=server.url))
        first, second = (_ask(client, item).usage for item in ITEMS)
        stats = server.stats()
    # The instructions are read from the cache once seen; Anthropic's usage also says the
    # first request wrote them.
    assert (first.cached_prompt_tokens, second.cached_prompt_tokens) == (0, instructions)
    written = instructions if style == "anthropic" else 0
    assert (first.cache_creation_tokens, second.cache_creation_tokens) == (written, 0)
    assert second.prompt_tokens > second.cached_prompt_tokens > 0
    assert stats["cached_prompt_tokens"] == instructions
    assert stats["cache_creation_tokens"] == written


def test_below_the_minimum_nothing_is_cached() -> None:
    with FakeJudgeServer(prompt_cache="openai") as server:  # 1,024 tokens, as OpenAI's
        client = OpenAIHTTPClient("openai/judge", RequestSettings(api_base=server.url))
        replies = [_ask(client, item) for item in ITEMS * 2]
    assert {reply.usage.cached_prompt_tokens for reply in replies} == {0}


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"prompt_tokens": 90, "prompt_tokens_details": {"cached_tokens": 64}}, (90, 0, 64, 0)),
        (
            {"prompt_tokens": 90, "cache_read_input_tokens": 40, "cache_creation_input_tokens": 30},
            (90, 0, 40, 30),
        ),
        ({"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": None}, (5, 2, 0, 0)),
        ({"prompt_tokens": "many", "prompt_tokens_details": {"cached_tokens": -3}}, (0, 0, 0, 0)),
        (None, (0, 0, 0, 0)),
    ],
)
def test_usage_shapes(usage: Any, expected: tuple[int, ...]) -> None:
    reply = ChatReply.from_usage("{}", usage)
    prompt, completion, cached, created = expected
    assert reply.usage == Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_prompt_tokens=cached,
        cache_creation_tokens=created,
    )


def test_a_batch_result_line_carries_its_cache_tokens_through_the_staged_replies(
    tmp_path: Path,
) -> None:
    usage = {"prompt_tokens": 200, "completion_tokens": 9, "cache_read_input_tokens": 128}
    body = {"choices": [{"message": {"content": "{}"}}], "usage": usage}
    line = {"custom_id": "a", "response": {"status_code": 200, "body": body}}
    reply = reply_of_line(line, "batch_1")
    assert (reply.usage.prompt_tokens, reply.usage.cached_prompt_tokens) == (200, 128)
    layout = BatchLayout(open_store(str(tmp_path)), "staging")
    layout.write_replies("s", "r000-b0000", [("a", reply)])
    tokens = Usage(prompt_tokens=200, completion_tokens=9, cached_prompt_tokens=128)
    assert layout.read_replies("s")["a"].chat() == ChatReply("{}", tokens)


@pytest.mark.parametrize("model", ["gpt-5-mini", "claude-haiku-4-5"])
def test_cached_tokens_are_priced_at_litellms_cache_rates(model: str) -> None:
    from litellm import cost_per_token

    prompt, completion, read, written = 10_000, 500, 6_000, 1_000
    ours = estimate_cost_usd(model, prompt, completion, cached=(read, written))
    theirs = sum(
        cost_per_token(
            model=model,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cache_read_input_tokens=read,
            cache_creation_input_tokens=written,
        )
    )
    assert ours == pytest.approx(theirs, rel=1e-9)
    full = estimate_cost_usd(model, prompt, completion)
    assert ours is not None and full is not None and ours < full


async def _recorded_bodies(items: tuple[ScoringItem, ...]) -> list[bytes]:
    """The bytes the lean HTTP transport sends for `items`, as a server receives them."""
    bodies: list[bytes] = []
    reply = {"choices": [{"message": {"content": "{}"}}], "usage": {}}

    async def handle(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        return web.json_response(reply)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = OpenAIHTTPClient(
        "openai/judge", RequestSettings(api_base=f"http://127.0.0.1:{port}/v1")
    )
    try:
        for item in items:
            messages = verdict_messages(item, [0, 1])
            await client.complete(
                messages, schema_name=VERDICTS_SCHEMA_NAME, schema=verdicts_schema([0, 1])
            )
    finally:
        await client.aclose()
        await runner.cleanup()
    return bodies


def test_two_items_requests_share_every_byte_up_to_the_first_item_specific_one() -> None:
    first, second = asyncio.run(_recorded_bodies(ITEMS))
    same = next(n for n, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    shared = first[:same]
    instructions = json.dumps(VERDICT_INSTRUCTIONS[True], ensure_ascii=False)
    assert instructions.encode() in shared  # the static part comes first, byte for byte
    # ... and the bytes part at the query's first character, the first thing the item sets
    assert shared.endswith(b'"content": "<query>\\n\\"')
    assert first[len(shared) : len(shared) + 1] == b"A"


def test_the_summary_prints_the_cache_the_cost_per_1000_items_and_tokens_per_item() -> None:
    summary = RunSummary(
        **dict.fromkeys(("mean", "median", "p10", "p90"), None),
        model="gpt-5-mini",
        scale=1.0,
        items=200,
        scored=200,
        unscored=0,
        errors=0,
        bands=(),
        position_rates=(),
        judge_calls=200,
        prompt_tokens=300_000,
        completion_tokens=10_000,
        cache_hits=0,
        cost_usd=0.25,
        cached_prompt_tokens=120_000,
    )
    lines = format_summary_table(summary, "/results").splitlines()
    assert any(line.split() == ["from", "prompt", "cache", "120,000"] for line in lines)
    assert any(line.split() == ["per", "1,000", "items", "$1.25"] for line in lines), lines
    assert any(line.split() == ["judge", "tokens", "per", "item", "1,550"] for line in lines)


def test_litellms_usage_of_an_anthropic_reply_reads_both_cache_counts() -> None:
    from litellm.types.utils import Usage as LiteLLMUsage

    # as litellm's Anthropic transformation builds it: cache tokens inside prompt_tokens
    usage = LiteLLMUsage(
        prompt_tokens=170,
        completion_tokens=12,
        cache_read_input_tokens=100,
        cache_creation_input_tokens=50,
    )
    reply = ChatReply.from_usage("{}", usage.model_dump())
    tokens = Usage(
        prompt_tokens=170, completion_tokens=12, cached_prompt_tokens=100, cache_creation_tokens=50
    )
    assert reply == ChatReply("{}", tokens)
