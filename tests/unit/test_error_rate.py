"""run.max_error_rate: publishing measures the share of error items and their commonest error;
`ctxprec run` exits 1 over the limit (the run is published all the same); `ctxprec status`
and the printed summary say so (jobs.engine.publish.publisher.measure)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from jobs.core.config import parse_config
from jobs.core.run_manifest import ErrorRateRecord
from jobs.core.storage import open_store
from jobs.engine.driver import RunOutcome
from jobs.engine.publish.aggregate import SummarySpec
from jobs.engine.publish.publisher import PublishSpec, publish_run
from jobs.inputs import RowError
from jobs.run.outcome import exit_code_of, print_outcome
from jobs.tools.run_status import status_lines
from tests.support.job import manifest_of
from tests.unit.test_publish import LOCATION, SOURCE, Shard, where


def stage(store_root: Path, connection_errors: int, ok: int) -> None:
    store = open_store(str(store_root))
    shard = Shard(number=0, items=[], verdicts=[])
    for n in range(ok):
        shard.judged(f"ok{n}", n * 100, [True, False])
    offset = 10_000
    for n in range(connection_errors):
        offset += 100
        message = f"{where(offset)}: judge request failed: Cannot connect to host 127.0.0.1:9"
        shard.error(RowError(source=SOURCE, row=offset, message=message, query_id=f"e{n}"))
    shard.error(RowError(source=SOURCE, row=99_999, message=f"{where(99_999)}: invalid JSON"))
    shard.write(store)


def publish(root: Path, limit: float | None) -> RunOutcome:
    published = publish_run(
        open_store(str(root)),
        LOCATION,
        manifest_of(LOCATION),
        PublishSpec(summary=SummarySpec(model="lexical", scale=1.0), max_error_rate=limit),
    )
    return RunOutcome(
        run_id=LOCATION.run_id,
        run_date=LOCATION.run_date,
        published=published,
        shards_total=1,
        shards_skipped=0,
        seconds=1.0,
    )


def test_a_run_over_the_limit_is_published_and_exits_1_naming_the_commonest_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stage(tmp_path, connection_errors=6, ok=3)
    outcome = publish(tmp_path, 0.5)
    errors = outcome.published.error_rate
    assert errors is not None
    assert (errors.items, errors.errors, errors.exceeded) == (10, 7, True)
    # the position each message starts with is not part of the comparison
    assert errors.commonest == "judge request failed: Cannot connect to host 127.0.0.1:9"
    assert errors.commonest_items == 6
    assert (tmp_path / LOCATION.table_file("scores")).exists()  # published all the same
    manifest = json.loads((tmp_path / LOCATION.manifest).read_text())
    assert manifest["error_rate"]["exceeded"] is True and manifest["error_rate"]["rate"] == 0.7
    assert exit_code_of(outcome) == 1
    err = capsys.readouterr().err
    assert "7 of 10 items are errors (70.0%), over run.max_error_rate 0.5" in err
    assert "commonest error (6 items): judge request failed: Cannot connect" in err
    # the printed summary and `ctxprec status` show it
    printed = io.StringIO()
    with redirect_stdout(printed):
        print_outcome(outcome, str(tmp_path))
    assert "errors: 7 of 10 items are errors (70.0%), over run.max_error_rate 0.5" in (
        printed.getvalue()
    )
    status = "\n".join(status_lines(open_store(str(tmp_path)), LOCATION.run_id))
    assert "FAILED: 7 of 10 items are errors (70.0%), over run.max_error_rate 0.5" in status


def test_a_run_within_the_limit_exits_0(tmp_path: Path) -> None:
    stage(tmp_path, connection_errors=1, ok=8)
    outcome = publish(tmp_path, 0.5)
    assert outcome.published.error_rate is not None
    assert not outcome.published.error_rate.exceeded
    assert exit_code_of(outcome) == 0
    status = "\n".join(status_lines(open_store(str(tmp_path)), LOCATION.run_id))
    assert "2 of 10 items are errors (20.0%), within run.max_error_rate 0.5" in status


def test_the_limit_is_a_config_field_with_a_default() -> None:
    assert parse_config({"input": {"path": "x"}}).run.max_error_rate == 0.5
    assert (
        parse_config({"input": {"path": "x"}, "run": {"max_error_rate": 1}}).run.max_error_rate == 1
    )
    assert ErrorRateRecord.of(4, 4, 1.0).exceeded is False  # 1: never
    assert ErrorRateRecord.of(0, 0, 0.0).exceeded is False  # an empty run has no errors
    assert ErrorRateRecord.of(4, 1, 0.0).exceeded is True
    rate = ErrorRateRecord.of(4, 1, 0.2, "x", 1)
    assert ErrorRateRecord.model_validate(rate.model_dump()) == rate
