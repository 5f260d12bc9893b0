"""Parsing judge replies: every malformed shape is rejected with a message that names it."""

from __future__ import annotations

import json

import pytest

from scorer_core import MalformedReply, parse_reason, parse_verdicts
from scorer_core.types import ContextVerdict


def reply(*entries: tuple[object, object]) -> str:
    return json.dumps({"verdicts": [{"i": i, "v": v, "reason": f"r{i}"} for i, v in entries]})


def test_well_formed_reply() -> None:
    verdicts = parse_verdicts(reply((0, "yes"), (1, "no")), [0, 1])
    assert verdicts == (ContextVerdict(0, True, "r0"), ContextVerdict(1, False, "r1"))


def test_verdict_words_are_case_and_space_insensitive() -> None:
    verdicts = parse_verdicts(reply((0, " YES "), (1, "No"), (2, "\tyes\n")), [0, 1, 2])
    assert [v.relevant for v in verdicts] == [True, False, True]


def test_verdicts_are_mapped_by_index_not_by_list_order() -> None:
    verdicts = parse_verdicts(reply((2, "yes"), (0, "no"), (1, "no")), [0, 1, 2])
    assert [(v.index, v.relevant) for v in verdicts] == [(0, False), (1, False), (2, True)]


def test_global_positions_of_a_slice() -> None:
    verdicts = parse_verdicts(reply((17, "yes"), (16, "no")), [16, 17])
    assert [(v.index, v.relevant) for v in verdicts] == [(16, False), (17, True)]


@pytest.mark.parametrize(
    "text",
    [
        "```json\n" + reply((0, "yes")) + "\n```",
        "```\n" + reply((0, "yes")) + "```",
        "Sure! Here is my answer:\n" + reply((0, "yes")) + "\nHope that helps.",
    ],
)
def test_json_in_code_fences_or_prose_is_accepted(text: str) -> None:
    assert parse_verdicts(text, [0])[0].relevant is True


@pytest.mark.parametrize(
    ("text", "positions", "message"),
    [
        ("", [0], "empty"),
        ("not json at all", [0], "not a JSON object"),
        ('{"verdicts": [{"i": 0, "v', [0], "not a JSON object"),
        ("[1, 2]", [0], "not a JSON object"),
        ('{"answers": []}', [0], 'no "verdicts" list'),
        ('{"verdicts": "yes"}', [0], 'no "verdicts" list'),
        (reply((0, "yes")), [0, 1], "expected 2 verdicts, got 1"),
        (reply((0, "yes"), (1, "no"), (2, "no")), [0, 1], "expected 2 verdicts, got 3"),
        (reply((0, "yes"), (0, "no")), [0, 1], "passage 0 appears twice"),
        (reply((0, "yes"), (5, "no")), [0, 1], "passage 5 is not one of"),
        (reply((-1, "yes")), [0], "passage -1 is not one of"),
        (reply((0, "maybe")), [0], 'must be "yes" or "no", got "maybe"'),
        (reply((0, True)), [0], 'must be "yes" or "no", got true'),
        (reply((0, None)), [0], 'must be "yes" or "no", got null'),
        (reply(("zero", "yes")), [0], "(the passage number) must be an integer"),
        (reply((True, "yes")), [0], "(the passage number) must be an integer"),
        ('{"verdicts": [{"v": "yes"}]}', [0], 'no "i" (its passage number)'),
        ('{"verdicts": ["yes"]}', [0], "each verdict must be an object"),
    ],
)
def test_malformed_replies_raise_with_a_specific_message(
    text: str, positions: list[int], message: str
) -> None:
    with pytest.raises(MalformedReply) as caught:
        parse_verdicts(text, positions)
    assert message in str(caught.value)


def test_integral_float_and_numeric_string_indices_are_accepted() -> None:
    text = json.dumps(
        {
            "verdicts": [
                {"i": 0.0, "v": "yes", "reason": ""},
                {"i": "1", "v": "no", "reason": ""},
            ]
        }
    )
    assert [v.index for v in parse_verdicts(text, [0, 1])] == [0, 1]


def test_missing_reason_is_tolerated_as_empty() -> None:
    text = json.dumps({"verdicts": [{"i": 0, "v": "yes"}]})
    assert parse_verdicts(text, [0])[0].reason == ""


def test_reason_reply() -> None:
    assert parse_reason('{"reason": " Two relevant passages lead. "}') == (
        "Two relevant passages lead."
    )
    with pytest.raises(MalformedReply, match="reason"):
        parse_reason('{"reason": ""}')
    with pytest.raises(MalformedReply, match="reason"):
        parse_reason('{"why": "x"}')


@pytest.mark.parametrize(
    ("text", "score", "expected"),
    [
        ('{"reason": "The score is 0.83 because [0] leads."}', 0.83, "The score is 0.83 because"),
        ('{"reason": "the score is 1.0 because all fit."}', 1.0, "The score is 1 because all"),
        ('{"reason": "The score is 10.00 because x."}', 10.0, "The score is 10 because x."),
    ],
)
def test_reason_must_begin_with_the_score(text: str, score: float, expected: str) -> None:
    assert parse_reason(text, score).startswith(expected)


@pytest.mark.parametrize(
    "text",
    [
        '{"reason": "The score is 0.9 because it is high."}',  # a different score
        '{"reason": "Two relevant passages lead."}',
        '{"reason": "Because the score is 0.83 ..."}',
    ],
)
def test_a_reason_that_restates_another_score_or_none_is_malformed(text: str) -> None:
    with pytest.raises(MalformedReply, match=r"must begin with 'The score is 0\.83 because'"):
        parse_reason(text, 0.83)


def test_a_reason_with_a_lone_surrogate_is_written_escaped() -> None:
    # valid JSON ("\udc00" escapes a lone surrogate); the reason must stay writable as UTF-8
    text = '{"verdicts": [{"i": 0, "v": "yes", "reason": "odd \\udc00 a\\\\b"}]}'
    (verdict,) = parse_verdicts(text, [0])
    assert verdict.reason == "odd \\udc00 a\\b"
    verdict.reason.encode("utf-8")
    reason = parse_reason('{"reason": "The score is 1.00 because \\ud800."}', 1.0)
    assert reason.endswith(" because \\ud800.")
    reason.encode("utf-8")
