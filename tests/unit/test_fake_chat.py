"""`scorer_core.FakeChatClient`, the in-process client users test their code with: the example
in docs/library.md runs as written, the default answers as the fake server does, and a judge
on it sends exactly the bodies the HTTP client would."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from scorer_core import ChatClient, FakeChatClient, ScoringItem, create_context_precision_scorer
from scorer_core.fake_chat import asked_contexts
from scorer_core.judge import LLMJudge
from scorer_core.openai_http import OpenAIHTTPClient
from scorer_core.prompt import VERDICTS_SCHEMA_NAME, verdict_messages, verdicts_schema
from scorer_core.protocols import RequestSettings
from tests.support.paths import REPO


def test_the_example_in_the_library_guide_runs() -> None:
    page = (REPO / "docs" / "library.md").read_text(encoding="utf-8")
    section = page.split("## Testing your code without a model", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None
    exec(compile(code.group(1), "docs/library.md", "exec"), {})


def test_by_default_a_context_is_relevant_iff_it_holds_the_word_relevant() -> None:
    client = FakeChatClient()
    typed: ChatClient = client
    scorer = create_context_precision_scorer(
        "openai/x", context=["IRRELEVANT", "a RELEVANT one", "relevant"], client=typed
    )
    result = scorer.run("q", "a")
    assert [v.relevant for v in result.verdicts] == [False, True, False]
    assert result.score == 0.5
    assert result.reason.startswith("The score is 0.5 because")


def test_a_text_reply_is_sent_back_as_is_and_an_unusable_one_is_reasked() -> None:
    replies = iter(["not json", json.dumps({"verdicts": []}), "{}"])
    client = FakeChatClient(lambda body: next(replies))
    scorer = create_context_precision_scorer("openai/x", context=["a"], client=client)
    result = scorer.run("q", "a")
    assert result.status == "unscored"
    assert len(client.requests) == 3  # the request and two re-asks


def test_it_sends_the_body_the_http_client_would_and_reads_the_asked_contexts() -> None:
    item = ScoringItem(input="q", output="a", contexts=("zero", "one", "two RELEVANT"))
    client = FakeChatClient(model="openai/judge")
    judge = LLMJudge(client)
    batch = asyncio.run(judge.judge(item, [1, 2]))
    assert [(v.index, v.relevant) for v in batch.verdicts] == [(1, False), (2, True)]
    (body,) = client.requests
    assert asked_contexts(body) == {1: "one", 2: "two RELEVANT"}
    http = OpenAIHTTPClient("judge", RequestSettings(temperature=None))
    expected = http.request_body(
        verdict_messages(item, [1, 2]),
        schema_name=VERDICTS_SCHEMA_NAME,
        schema=verdicts_schema([1, 2]),
    )
    assert body == expected


def test_a_wrong_number_of_flags_is_an_error_not_a_guess() -> None:
    client = FakeChatClient(lambda body: [True])
    scorer = create_context_precision_scorer("openai/x", context=["a", "b"], client=client)
    with pytest.raises(ValueError):
        scorer.run("q", "a")
