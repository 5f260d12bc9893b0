"""`Validated.with_changes`, the one way a config or manifest record is copied with changes: the
copy is validated as a new one is, and keeps which fields were set (what a manifest writes)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobs.core.config import parse_config
from jobs.core.run_manifest import RunManifest


def test_a_copy_with_an_invalid_change_is_refused_naming_the_field() -> None:
    config = parse_config({"input": {"path": "x.jsonl"}})
    with pytest.raises(ValidationError, match="max_reasks"):
        config.judge.with_changes(max_reasks=99)
    with pytest.raises(ValidationError, match="rate_limit"):
        config.with_changes(rate_limit={"concurrency_floor": 9, "concurrency_ceiling": 8})


def test_a_copy_is_checked_as_a_whole_not_field_by_field() -> None:
    config = parse_config({"input": {"path": "x.jsonl"}})
    # each value is valid alone; together they break a rule of the whole config
    with pytest.raises(ValidationError, match=r"judge\.mode batch needs an LLM judge\.model"):
        config.with_changes(judge=config.judge.with_changes(mode="batch"))


def test_the_fields_set_stay_set_and_the_changed_are_set() -> None:
    manifest = RunManifest(run_id="r", run_date="2026-12-01", shards=3)
    changed = manifest.with_changes(status="complete")
    assert changed.model_fields_set == {"run_id", "run_date", "shards", "status"}
    assert changed.to_json() == manifest.model_copy(update={"status": "complete"}).to_json()
