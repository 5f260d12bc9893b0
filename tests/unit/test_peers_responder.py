"""Tests of the side-by-side benchmark's judge (bench.peers.responder), over real HTTP.

`bench.peers_bench` trusts it to answer our requests exactly as the fake judge does and
DeepEval's and RAGAS's prompts in the shapes those tools parse. The peer prompts below are
abridged copies of deepeval 4.3.1's ContextualPrecisionMetric templates and ragas 0.4.3's
ContextPrecisionPrompt as rendered (those tools are not installed in the project's venv).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from bench.peers.responder import PeersJudgeServer
from tests.fake_judge import VERDICTS_SCHEMA_NAME, build_verdict_prompt_for_tests

pytestmark = pytest.mark.timeout(60)

DEEPEVAL_VERDICTS = """Given the input, expected output, and retrieval context, please generate \
a list of JSON objects to determine whether each node in the retrieval context was remotely \
useful in arriving at the expected output.

**
IMPORTANT: Please make sure to only return in JSON format, with the 'verdicts' key as a list of \
JSON. These JSON only contain the `verdict` key that outputs only 'yes' or 'no', and a `reason` \
key to justify the verdict.
Example Retrieval Context: ["Einstein won the Nobel Prize", "He won it in 1968.", "A cat."]
Example Input: "Who won the Nobel Prize in 1968 and for what?"
**

Input:
Which river flows through Kalo?

Expected output:
Amber

Retrieval Context  (3 documents):
['The Amber river flows through Kalo. RELEVANT', "Kalo's mayor is \\"Otto\\". IRRELEVANT", \
'It was founded in 1204. NOT RELEVANT, but the word counts']

JSON:
"""

DEEPEVAL_REASON = """Given the input, retrieval contexts, and contextual precision score, \
provide a CONCISE summary for the score.
**
IMPORTANT: Please make sure to only return in JSON format, with the 'reason' key providing the \
reason.
Example JSON:
{
  "reason": "The score is <contextual_precision_score> because <your_reason>."
}
**

Contextual Precision Score:
0.50

Input:
Which river flows through Kalo?

Retrieval Contexts:
[{'verdict': 'no', 'reason': 'x'}, {'verdict': 'yes', 'reason': 'y'}]

JSON:
"""


def ragas_prompt(context: str) -> str:
    example = {"question": "Who won?", "context": "England won. RELEVANT", "answer": "England"}
    final = {"question": "Which river?", "context": context, "answer": "Amber"}
    return (
        "Given question, answer and context verify if the context was useful in arriving at "
        'the given answer. Give verdict as "1" if useful and "0" if not with json output.\n'
        "--------EXAMPLES-----------\nExample 1\nInput: "
        + json.dumps(example, indent=4)
        + '\nOutput: {\n    "reason": "r",\n    "verdict": 1\n}\n'
        "-----------------------------\n\nNow perform the same with the following input\n"
        "input: " + json.dumps(final, indent=4) + "\nOutput: "
    )


@pytest.fixture(scope="module")
def peers_server() -> Iterator[PeersJudgeServer]:
    running = PeersJudgeServer()
    running.start()
    try:
        yield running
    finally:
        running.stop()


def ask(peers_server: PeersJudgeServer, prompt: str, **extra: Any) -> httpx.Response:
    body = {"model": "judge", "messages": [{"role": "user", "content": prompt}], **extra}
    return httpx.post(f"{peers_server.url}/chat/completions", json=body, timeout=30)


def content(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return json.loads(response.json()["choices"][0]["message"]["content"])


def test_deepeval_verdicts_one_per_context_in_order(peers_server: PeersJudgeServer) -> None:
    reply = content(ask(peers_server, DEEPEVAL_VERDICTS))
    assert [v["verdict"] for v in reply["verdicts"]] == ["yes", "no", "yes"]
    assert all(isinstance(v["reason"], str) and v["reason"] for v in reply["verdicts"])


def test_deepeval_reason_restates_the_score(peers_server: PeersJudgeServer) -> None:
    reply = content(ask(peers_server, DEEPEVAL_REASON))
    assert reply["reason"].startswith("The score is 0.50 because")


@pytest.mark.parametrize(("context", "verdict"), [("Amber. RELEVANT", 1), ("IRRELEVANT", 0)])
def test_ragas_verdict_judges_the_last_input(
    peers_server: PeersJudgeServer, context: str, verdict: int
) -> None:
    # The example above the input is relevant: only the final input may decide.
    reply = content(
        ask(peers_server, ragas_prompt(context), response_format={"type": "json_object"})
    )
    assert reply["verdict"] == verdict
    assert isinstance(reply["reason"], str)


def test_our_requests_are_answered_by_the_fake(peers_server: PeersJudgeServer) -> None:
    prompt = build_verdict_prompt_for_tests("q", "a", ["x RELEVANT", "y"], start=4)
    schema = {"type": "object"}
    response = ask(
        peers_server,
        prompt,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": VERDICTS_SCHEMA_NAME, "schema": schema, "strict": True},
        },
    )
    verdicts = content(response)["verdicts"]
    assert [(v["i"], v["v"]) for v in verdicts] == [(4, "yes"), (5, "no")]


def test_unknown_prompt_is_a_400_and_counted(peers_server: PeersJudgeServer) -> None:
    peers_server.reset_stats()
    response = ask(peers_server, "Tell me a joke.")
    assert response.status_code == 400
    assert "not a DeepEval or RAGAS" in response.json()["error"]["message"]
    broken = DEEPEVAL_VERDICTS.replace("(3 documents)", "(4 documents)")
    assert ask(peers_server, broken).status_code == 400
    stats = peers_server.stats()
    assert stats["peer_requests"] == {"unrecognised": 2}
    assert stats["by_status"] == {"400": 2}


def test_stats_count_each_kind_and_reset_forgets(peers_server: PeersJudgeServer) -> None:
    peers_server.reset_stats()
    content(ask(peers_server, DEEPEVAL_VERDICTS))
    content(ask(peers_server, DEEPEVAL_REASON))
    content(ask(peers_server, ragas_prompt("RELEVANT")))
    stats = httpx.get(f"{peers_server.base_url}/stats", timeout=30).json()
    assert stats["peer_requests"] == {
        "deepeval_verdicts": 1,
        "deepeval_reason": 1,
        "ragas_verdict": 1,
    }
    assert stats["peer_contexts_judged"] == {
        "deepeval_verdicts": 3,
        "deepeval_reason": 0,
        "ragas_verdict": 1,
    }
    assert stats["total_requests"] == 3
    assert stats["request_span_s"] > 0
    peers_server.reset_stats()
    assert peers_server.stats()["peer_requests"] == {}
    assert peers_server.stats()["request_span_s"] == 0


def test_with_count_tokens_every_answered_request_is_billed_alike() -> None:
    from bench.peers.responder import billed_tokens

    ours = build_verdict_prompt_for_tests("q", "a", ["x RELEVANT", "y"], start=0)
    schema = {"type": "object", "properties": {"verdicts": {"type": "array"}}}
    form = {"type": "json_schema", "json_schema": {"name": VERDICTS_SCHEMA_NAME, "schema": schema}}
    with PeersJudgeServer(count_tokens=True) as server:
        asked = [
            (ours, {"response_format": form}),
            (DEEPEVAL_VERDICTS, {}),
            (ragas_prompt("RELEVANT"), {"response_format": {"type": "json_object"}}),
        ]
        expected = [0, 0]
        for prompt, extra in asked:
            response = ask(server, prompt, **extra)
            body = {"model": "judge", "messages": [{"role": "user", "content": prompt}], **extra}
            billed = billed_tokens(body, response.json()["choices"][0]["message"]["content"])
            expected = [total + part for total, part in zip(expected, billed, strict=True)]
        ask(server, "Tell me a joke.")  # refused: nothing billed
        stats = server.stats()
    assert [stats["billed_prompt_tokens"], stats["billed_reply_tokens"]] == expected
    # our schema is billed with our prompt: the same prompt without it costs less
    bare = billed_tokens({"messages": [{"role": "user", "content": ours}]}, "")[0]
    assert (
        bare
        < billed_tokens(
            {"messages": [{"role": "user", "content": ours}], "response_format": form}, ""
        )[0]
    )
