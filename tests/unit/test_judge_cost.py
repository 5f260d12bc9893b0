"""Issue 28, paying only for what a judgment needs: what a prompt carries (`judge.against`),
what the verdict store keys on, and replies without bought explanations."""

from __future__ import annotations

import pytest

from jobs.core.verdict_cache import pair_key
from jobs.inputs import ColumnMap, InputSpec, ItemRecord, RowError, to_item
from jobs.inputs.records import validate_record
from scorer_core.errors import InputError
from scorer_core.prompt import judged_item, verdict_messages
from scorer_core.types import ScoringItem
from tests.support.inputs import item, raw

BOTH = ScoringItem("who?", "It is Ada, I think.", ("Ada wrote it.", "Bob read it."), "Ada")


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
    no_reference = ScoringItem("who?", "Ada", ("Ada wrote it.",))
    assert judged_item(no_reference, "auto") == no_reference
    bare = ScoringItem("who?", "  ", ("Ada wrote it.",))
    assert judged_item(bare, "auto") == ScoringItem("who?", "", ("Ada wrote it.",))
    with pytest.raises(InputError, match="against is 'reference' but the item has no expected"):
        judged_item(no_reference, "reference")
    with pytest.raises(InputError, match="against is 'output' but the item has no output"):
        judged_item(bare, "output")


def test_the_key_changes_with_what_the_prompt_holds_and_nothing_else() -> None:
    reworded = ScoringItem(BOTH.input, "Ada, surely.", BOTH.contexts, BOTH.expected_output)
    for against, same in [("auto", True), ("reference", True), ("output", False), ("all", False)]:
        keys = [pair_key("fp", judged_item(i, against), 0) for i in (BOTH, reworded)]  # type: ignore[arg-type]
        assert (keys[0] == keys[1]) is same, against
    # the same text judged as the output or as the reference is two different prompts
    as_output = judged_item(ScoringItem("who?", "Ada", BOTH.contexts), "auto")
    as_reference = judged_item(ScoringItem("who?", "", BOTH.contexts, "Ada"), "auto")
    assert pair_key("fp", as_output, 0) != pair_key("fp", as_reference, 0)


def test_a_read_item_keeps_only_what_it_is_judged_against() -> None:
    spec = InputSpec("x", columns=ColumnMap(expected_output="ref"))
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
