"""Issue 28, paying only for what a judgment needs: what a prompt carries (`judge.against`),
what the verdict store keys on, and replies without bought explanations."""

from __future__ import annotations

import json

import pytest

from jobs.core.verdict_cache import pair_key
from jobs.engine.shards.shard_rows import verdict_rows
from jobs.inputs import ColumnMap, InputSpec, ItemRecord, RowError, to_item
from jobs.inputs.records import validate_record
from scorer_core import create_context_precision_scorer
from scorer_core.errors import InputError
from scorer_core.prompt import REASON_MAX_CHARS, judged_item, verdict_messages, verdicts_schema
from scorer_core.response_format import response_format_field
from scorer_core.types import ContextVerdict, ScoreResult, ScoringItem
from tests.fake_judge import FakeJudgeServer
from tests.support.inputs import item, raw

BOTH = ScoringItem(
    input="who?",
    output="It is Ada, I think.",
    contexts=("Ada wrote it.", "Bob read it."),
    expected_output="Ada",
)


@pytest.mark.parametrize(
    ("against", "output", "reference"),
    [
        ("all", BOTH.output, "Ada"),
        ("auto", "", "Ada"),
        ("reference", "", "Ada"),
        ("output", BOTH.output, None),
        ("query", "", None),
    ],
)
def test_the_prompt_carries_only_what_the_verdict_is_judged_against(
    against: str, output: str, reference: str | None
) -> None:
    judged = judged_item(BOTH, against)  # type: ignore[arg-type]
    assert (judged.output, judged.expected_output) == (output, reference)
    prompt = verdict_messages(judged, [0, 1])[-1]["content"]
    assert ("<output>" in prompt) == bool(output)
    assert ("<reference_answer>" in prompt) == bool(reference)
    assert ("I think" in prompt) == bool(output)


def test_auto_falls_back_to_the_output_then_the_query() -> None:
    no_reference = ScoringItem(input="who?", output="Ada", contexts=("Ada wrote it.",))
    assert judged_item(no_reference, "auto") == no_reference
    bare = ScoringItem(input="who?", output="  ", contexts=("Ada wrote it.",))
    assert judged_item(bare, "auto") == ScoringItem(
        input="who?", output="", contexts=("Ada wrote it.",)
    )
    with pytest.raises(InputError, match="against is 'reference' but the item has no expected"):
        judged_item(no_reference, "reference")
    with pytest.raises(InputError, match="against is 'output' but the item has no output"):
        judged_item(bare, "output")


def test_the_key_changes_with_what_the_prompt_holds_and_nothing_else() -> None:
    reworded = ScoringItem(
        input=BOTH.input,
        output="Ada, surely.",
        contexts=BOTH.contexts,
        expected_output=BOTH.expected_output,
    )
    for against, same in [("auto", True), ("reference", True), ("output", False), ("all", False)]:
        keys = [pair_key("fp", judged_item(i, against), 0) for i in (BOTH, reworded)]  # type: ignore[arg-type]
        assert (keys[0] == keys[1]) is same, against
    # the same text judged as the output or as the reference is two different prompts
    as_output = judged_item(ScoringItem(input="who?", output="Ada", contexts=BOTH.contexts), "auto")
    as_reference = judged_item(
        ScoringItem(input="who?", output="", contexts=BOTH.contexts, expected_output="Ada"), "auto"
    )
    assert pair_key("fp", as_output, 0) != pair_key("fp", as_reference, 0)


def test_a_read_item_keeps_only_what_it_is_judged_against() -> None:
    spec = InputSpec(path="x", columns=ColumnMap(expected_output="ref"))
    record = to_item(spec, raw(item(1, ref="the reference")))
    assert isinstance(record, ItemRecord)
    kept = validate_record(record, "auto")
    assert isinstance(kept, ItemRecord)
    assert (kept.output, kept.expected_output) == ("", "the reference")
    assert validate_record(record, "all") is record
    no_reference = to_item(spec, raw(item(2)))
    error = validate_record(no_reference, "reference")
    assert isinstance(error, RowError) and error.query_id == "q2"
    assert error.message == (
        "/data/f.parquet row 7: judge.against is 'reference' but the item has no expected_output"
    )


# -- verdicts without bought explanations --------------------------------------------------------


def test_without_reasons_the_schema_and_instructions_ask_for_verdicts_alone() -> None:
    for reasons in (True, False):
        entry = verdicts_schema([0, 1], reasons)["properties"]["verdicts"]["items"]
        system = verdict_messages(BOTH, [0, 1], reasons)[0]["content"]
        assert ("reason" in entry["properties"]) is reasons
        assert ('"reason"' in system) is reasons
    capped = verdicts_schema([0], True)
    reason = capped["properties"]["verdicts"]["items"]["properties"]["reason"]
    assert reason == {"type": "string", "maxLength": REASON_MAX_CHARS}
    # strict json_schema endpoints refuse maxLength: there the instructions cap the reason
    strict = response_format_field("json_schema", "n", capped)
    assert strict is not None and "maxLength" not in json.dumps(strict)
    assert "maxLength" in json.dumps(response_format_field("json_object", "n", capped))


@pytest.mark.parametrize("form", ["json_schema", "json_object", "prompt"])
def test_the_fake_judge_answers_as_a_model_would_under_each_schema(
    server: FakeJudgeServer, form: str
) -> None:
    replies = []
    for reasons in (True, False):
        server.reset_stats()
        created = create_context_precision_scorer(
            "openai/fake-judge",
            context=["alpha RELEVANT", "beta"],
            api_base=server.url,
            reason="none",
            response_format=form,
            verdict_reasons=reasons,
        )
        result = created.run("which letters?", "alpha")
        assert result.score == 1.0
        assert [bool(v.reason) for v in result.verdicts] == [reasons, reasons]
        assert all(len(v.reason) <= REASON_MAX_CHARS for v in result.verdicts)
        replies.append(server.stats())
    with_reasons, without = (s["reply_chars"] for s in replies)
    assert 0 < without < 0.6 * with_reasons  # two verdicts: 93 characters against 175


def test_a_verdict_without_a_reason_has_a_null_reason_row() -> None:
    record = to_item(InputSpec(path="x"), raw(item(1)))
    assert isinstance(record, ItemRecord)
    result = ScoreResult(
        score=1.0, reason="", verdicts=(ContextVerdict(0, True), ContextVerdict(1, False, "why"))
    )
    rows = verdict_rows(record, 0, result)
    assert [row["judge_reason"] for row in rows] == [None, "why"]
