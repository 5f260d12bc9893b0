"""The typed manifest: written strictly, read back whatever version wrote it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from jobs.core.run_manifest import (
    FlowSnapshot,
    JudgeRecord,
    RunManifest,
    SummaryRecord,
    TracesRecord,
)
from tests.support.paths import REPO

# A manifest as the version before the typed model wrote it (issue 11's batch run), with a
# flow snapshot from before `budget_max` existed and a key this version no longer knows.
OLD_MANIFEST = {
    "run_id": "20261130-abc",
    "run_date": "2026-11-30",
    "judge_model": "openai/judge",
    "prompt_version": "v3",
    "config": {"judge": {"model": "openai/judge"}},
    "shards": 3,
    "seconds": 12.5,
    "timings_s": {"plan": 0.1, "fan_out": 9.0, "publish": 1.2},
    "shards_reused": 1,
    "flow": {"budget": 64, "max_in_flight": 40, "latency_p50_s": 0.2, "retired_counter": 7},
    "judge": {
        "transport": "http",
        "response_format": {
            "endpoint": "http://127.0.0.1:1/v1",
            "setting": "auto",
            "in_use": "json_object",
            "confirmed": True,
            "dropped": [{"form": "json_schema", "reason": "HTTP 500"}],
            "shards": 3,
        },
    },
    "status": "complete",
    "summary": {"items": 10, "mean": 0.5},
    "duplicates": 0,
    "published_at": "2026-11-30T07:00:00+00:00",
    "tables": {"scores": "/out/scores/x.parquet"},
    "no_longer_written": {"a": 1},
}


def test_an_older_manifest_reads_with_its_renamed_and_retired_keys() -> None:
    manifest = RunManifest.read(json.dumps(OLD_MANIFEST))
    assert manifest.run_id == "20261130-abc" and manifest.shards_reused == 1
    # the budget before budget_max existed
    assert manifest.flow.in_flight_budget == 64
    assert manifest.judge.response_format is not None
    assert manifest.judge.response_format.dropped[0].form == "json_schema"
    assert manifest.nodes == {}  # a field the old version did not write: its default
    assert manifest.summary.model_dump(exclude_unset=True) == {"items": 10, "mean": 0.5}


def test_a_mistyped_key_fails_when_the_record_is_made() -> None:
    with pytest.raises(ValidationError, match="budgt"):
        FlowSnapshot.model_validate({"budgt": 3})
    with pytest.raises(ValidationError, match="transprt"):
        JudgeRecord.model_validate({"transprt": "http"})
    with pytest.raises(ValidationError):
        RunManifest.model_validate({"run_id": "x"})  # no run_date


def test_a_manifest_damaged_beyond_unknown_keys_is_an_error() -> None:
    damaged = {**OLD_MANIFEST, "shards": "three"}
    with pytest.raises(ValidationError, match="shards"):
        RunManifest.read(damaged)


def test_written_and_read_back_unchanged_keeping_only_what_the_run_recorded() -> None:
    manifest = RunManifest(
        run_id="r1",
        run_date="2026-12-01",
        flow=FlowSnapshot.model_validate({"budget": 8.0, "budget_max": 16.0}),
        judge=JudgeRecord(transport="http"),
    )
    written = json.loads(manifest.to_json())
    assert written["flow"] == {"budget": 8.0, "budget_max": 16.0}
    assert written["judge"] == {"transport": "http"}
    again = RunManifest.read(manifest.to_json())
    assert again == manifest
    assert again.flow.in_flight_budget == 16.0


# Manifests written by version 0.2.0 (main before issue 42, when `summary` and `traces` were
# plain dicts): an online run with the verdict store and a batch-mode run, as published.
WRITTEN_BY_0_2_0 = sorted((REPO / "tests" / "support" / "manifests").glob("*-0.2.0.json"))


@pytest.mark.parametrize("path", WRITTEN_BY_0_2_0, ids=lambda path: path.stem)
def test_a_manifest_of_the_version_before_typed_summaries_reads_and_writes_back_the_same(
    path: Path,
) -> None:
    raw = path.read_bytes()
    manifest = RunManifest.read(raw)
    assert isinstance(manifest.summary, SummaryRecord)
    assert manifest.summary.items == 2000
    assert manifest.summary.bands and manifest.summary.position_rates
    assert manifest.to_json() == raw  # nothing lost, nothing added


def test_the_summary_and_traces_sections_are_typed_and_refuse_a_mistyped_key() -> None:
    traces = {"files": 2, "spans": 40, "items": 10, "items_path": "s3://b/out/items"}
    segment = {"by": "retriever", "value": "bm25", "summary": {"items": 4, "mean": 0.25}}
    manifest = RunManifest.read(
        OLD_MANIFEST | {"summary": {"items": 10, "segments": [segment]}, "traces": traces}
    )
    assert manifest.traces is not None and manifest.traces.spans == 40
    assert manifest.summary.segments[0].summary.mean == 0.25
    with pytest.raises(ValidationError, match="itmes"):
        SummaryRecord.model_validate({"itmes": 10})
    with pytest.raises(ValidationError, match="spnas"):
        TracesRecord.model_validate({"spnas": 40})
