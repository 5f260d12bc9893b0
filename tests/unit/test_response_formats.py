"""The job's side of structured-output negotiation: the judge `jobs.run.factory.build_judge` makes
(one shared negotiation per endpoint, named as its client names it),
`jobs.engine.publish.manifest_builder.combine` folding the shards' reports into the run's record,
and that record in the manifest's judge facts (`manifest_builder.judge_record`)."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.core.config import parse_config
from jobs.core.run_manifest import DroppedFormRecord, JudgeRecord, ResponseFormatRecord
from jobs.engine.messages import JudgeFacts, ShardReport
from jobs.engine.publish.manifest_builder import combine, judge_record
from jobs.run.factory import build_judge, judge_endpoint
from scorer_core.errors import ConfigError
from scorer_core.response_format import negotiation_summary

REFUSED = "HTTP 500: 1 validation error for Request ('body', 'response_format', 'type')"


def report(
    in_use: str = "json_schema",
    confirmed: bool = True,
    dropped: tuple[tuple[str, str], ...] = (),
    setting: str = "auto",
) -> dict[str, Any]:
    """A shard's report as `ResponseFormatNegotiation.summary()` writes it."""
    return {
        "endpoint": "http://127.0.0.1:9/v1",
        "setting": setting,
        "in_use": in_use,
        "confirmed": confirmed,
        "dropped": [{"form": form, "reason": reason} for form, reason in dropped],
    }


# -- the judge the job builds ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("judge", "endpoint"),
    [
        ({"api_base": "http://127.0.0.1:8000/v1/"}, "http://127.0.0.1:8000/v1"),
        ({"api_base": "http://127.0.0.1:8000/v1", "transport": "http"}, "http://127.0.0.1:8000/v1"),
        ({"transport": "http"}, "https://api.openai.com/v1"),
        ({}, "https://api.openai.com/v1"),  # auto: the http client for openai/... models
        ({"transport": "litellm"}, "openai (litellm's default endpoint)"),
    ],
)
def test_the_shared_negotiation_is_keyed_by_the_endpoint_the_judge_talks_to(
    judge: dict[str, Any], endpoint: str
) -> None:
    config = parse_config(
        {
            "input": {"path": "x.jsonl"},
            "judge": {"model": "openai/some-model", "response_format": "json_object", **judge},
        }
    )
    built = build_judge(config, None, api_key="k")
    assert judge_endpoint(config) == endpoint == built.endpoint
    summary = negotiation_summary(built)
    assert summary == {
        "endpoint": endpoint,
        "setting": "json_object",
        "in_use": "json_object",
        "confirmed": False,
        "dropped": [],
    }
    # Every judge of this process for the endpoint shares the negotiation (one probe).
    again = build_judge(config, None, api_key="k")
    assert again.response_format is built.response_format  # type: ignore[attr-defined]


def test_the_offline_judge_negotiates_nothing_and_the_setting_is_checked() -> None:
    lexical = build_judge(parse_config({"input": {"path": "x.jsonl"}}), None)
    assert negotiation_summary(lexical) is None
    with pytest.raises(ConfigError, match=r"judge\.response_format"):
        parse_config({"input": {"path": "x.jsonl"}, "judge": {"response_format": "xml"}})


# -- combining the shards' reports -----------------------------------------------------------


def test_nothing_reported_is_no_record() -> None:
    assert combine([]) is None
    assert combine([None, None]) is None


def test_shards_that_agree_give_their_form_and_each_rejection_once() -> None:
    dropped = (("json_schema", REFUSED),)
    combined = combine([report("json_object", dropped=dropped)] * 3 + [None])
    assert combined == ResponseFormatRecord(
        endpoint="http://127.0.0.1:9/v1",
        setting="auto",
        in_use="json_object",
        confirmed=True,
        dropped=[DroppedFormRecord(form="json_schema", reason=REFUSED)],
        shards=3,
    )
    assert combined.describe() == f"json_object (json_schema rejected: {REFUSED})"
    assert (
        combined.describe(max_reason_chars=20)
        == "json_object (json_schema rejected: HTTP 500: 1 valid...)"
    )
    assert ResponseFormatRecord.model_validate(combined.model_dump()) == combined


def test_processes_that_disagree_give_the_weakest_form_any_of_them_confirmed() -> None:
    combined = combine(
        [
            report("json_schema"),
            report("prompt", dropped=(("json_object", "no"), ("json_schema", "refused"))),
            # Never answered (all its items came from the cache): says nothing about the form.
            report("json_schema", confirmed=False),
        ]
    )
    assert combined is not None
    assert (combined.in_use, combined.confirmed) == ("prompt", True)
    assert [d.form for d in combined.dropped] == ["json_schema", "json_object"]  # strongest first


def test_a_form_never_answered_is_reported_unconfirmed() -> None:
    combined = combine([report("json_schema", confirmed=False)])
    assert combined is not None
    assert (combined.in_use, combined.confirmed) == ("json_schema", False)
    assert combined.describe() == "json_schema (not confirmed)"


def test_a_record_with_an_unknown_form_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="'xml'"):
        combine([report("json_object", dropped=(("xml", "?"),))])


# -- the run's record in the manifest --------------------------------------------------------


def test_the_manifest_records_the_combined_form_of_every_shard() -> None:
    dropped = (("json_schema", REFUSED),)
    reports = [
        ShardReport(shard_id="a", judge=JudgeFacts("http", report("json_object", dropped=dropped))),
        # Another worker process whose endpoint took json_schema, reporting last.
        ShardReport(shard_id="b", judge=JudgeFacts("http", report("json_schema"))),
        ShardReport(shard_id="c", skipped=True),  # staged by an earlier attempt: no judge facts
    ]
    facts = judge_record(reports)
    assert facts.transport == "http" and facts.mode is None
    combined = combine(r.judge.response_format for r in reports)
    assert combined is not None and combined.shards == 2
    # The weakest confirmed form, not whichever shard reported last.
    assert facts.response_format is not None
    assert facts.response_format == combined
    assert (combined.in_use, [d.form for d in combined.dropped]) == ("json_object", ["json_schema"])
    # The offline judge's reports carry no facts: the manifest records none.
    assert judge_record([ShardReport(shard_id="a"), ShardReport(shard_id="b")]) == JudgeRecord()
