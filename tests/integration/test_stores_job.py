"""The job on every object store the docs name: S3 (moto), Google Cloud Storage (the GCS
emulator) and Azure Blob (Azurite), each a real server on 127.0.0.1 started once for this
module, the same scenarios on each (tests.support.stores):

- a run with its input, its output and its verdict store on the store, read back from the store
  by DuckDB and by Polars, equal to a local run of the same input, with no credential in its
  manifest or its log;
- the same items moved (shuffled into two new files): found in the store's verdict store, the
  judge asked nothing;
- a second driver on the same run id while the first runs: refused, naming the run's lock file
  on the store;
- `ctxprec show` and `ctxprec report` reading the run from the store.

The run each store publishes first (`night_one`) is shared by the tests that read it. The fake
judge answers over real HTTP; every item is one verdict request, so its count is the bill.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from jobs.cli import main as ctxprec
from jobs.core.config import JobConfig
from jobs.core.run_layout import RunLocation
from jobs.engine.driver import RunOutcome
from jobs.engine.run_lock import RunLocked
from jobs.run.job import run_job
from jobs.tools.sample_data import generate
from tests.fake_judge import FakeJudgeServer
from tests.support.hooks import HoldRequests
from tests.support.job import (
    KEY_ENV,
    KEY_VALUE,
    config_for,
    scores_frame,
    truth,
    verdict_requests,
    verdicts_frame,
    write_items,
)
from tests.support.processes import lean_judge, run_in_thread
from tests.support.store_runs import (
    RUN_COLUMNS,
    duckdb_scores,
    files_under,
    read_manifest,
    read_table,
    store_config,
    table_url,
    upload_rows,
)
from tests.support.stores import ObjectStore

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("ray_local")]

ITEMS = 60
SEED = 71


@pytest.fixture(scope="module", params=["s3", "gs", "az"])
def store(request: pytest.FixtureRequest) -> ObjectStore:
    """Each store in turn (the tests of one store run together: its server starts once)."""
    fixture = {"s3": "s3_store", "gs": "gcs_store", "az": "azure_store"}[request.param]
    found: ObjectStore = request.getfixturevalue(fixture)
    return found


@pytest.fixture(scope="module")
def judge() -> Iterator[FakeJudgeServer]:
    """One fake judge for the module: the tests count its requests from where they start."""
    with FakeJudgeServer() as server:
        yield server


@pytest.fixture(scope="module")
def key_in_env() -> Iterator[None]:
    """The judge's key in its variable for the module's runs (`judge_key` is per test)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, KEY_VALUE)
        yield


class Published(NamedTuple):
    """A run published on the store: where, of what, what it cost, what it logged."""

    store: ObjectStore
    source: str  # the input's URL on the store
    out: str  # the output's URL on the store
    rows: list[dict[str, Any]]
    config: JobConfig
    outcome: RunOutcome
    calls: int  # the judge's verdict requests for it
    log: str  # every record logged while it ran, at every level, by every logger


class LocalRun(NamedTuple):
    scores: pl.DataFrame
    verdicts: pl.DataFrame


def sections(judge: FakeJudgeServer, run_id: str) -> dict[str, Any]:
    return {
        "judge": lean_judge(judge),
        "ray": {"shard_size": 20, "workers": 2},
        "run": {"id": run_id, "date": "2026-12-06"},
    }


@pytest.fixture(scope="module")
def local_run(
    judge: FakeJudgeServer, key_in_env: None, tmp_path_factory: pytest.TempPathFactory
) -> LocalRun:
    """The same input run with a local input and output: what every store must give back."""
    folder = tmp_path_factory.mktemp("local")
    source, out = folder / "items.jsonl", folder / "out"
    write_items(source, ITEMS, seed=SEED)
    run_job(config_for(source, out, **sections(judge, "night-one")))
    return LocalRun(scores_frame(out), verdicts_frame(out))


class LogRecords(logging.Handler):
    """Every record, formatted with its arguments and its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(scope="module")
def night_one(
    store: ObjectStore,
    judge: FakeJudgeServer,
    key_in_env: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Published:
    """ITEMS items published on the store: input, output and verdict store all there."""
    prefix = store.fresh_prefix()
    source, out = f"{prefix}/in/items.jsonl", f"{prefix}/out"
    rows = list(generate(ITEMS, seed=SEED, markers=True))
    upload_rows(store, rows, source, tmp_path_factory.mktemp("upload"))
    config = store_config(store, source, out, **sections(judge, "night-one"))
    records = LogRecords()
    root, ours = logging.getLogger(), logging.getLogger("jobs")
    levels = root.level, ours.level
    root.addHandler(records)
    root.setLevel(logging.INFO)  # every library's INFO lines (Azure's logs each request)
    ours.setLevel(logging.DEBUG)
    before = verdict_requests(judge)
    try:
        outcome = run_job(config)
    finally:
        root.removeHandler(records)
        root.setLevel(levels[0])
        ours.setLevel(levels[1])
    calls = verdict_requests(judge) - before
    log = "\n".join(records.lines)
    return Published(store, source, out, rows, config, outcome, calls, log)


def test_a_run_on_the_store_reads_back_as_the_local_run(
    night_one: Published, local_run: LocalRun
) -> None:
    store, out, outcome = night_one.store, night_one.out, night_one.outcome
    assert night_one.calls == ITEMS  # one verdict request per item: nothing judged twice
    assert outcome.published.scores_url == table_url(out, outcome, "scores")

    # DuckDB, through a filesystem of its own: one row per item, the local run's scores.
    by_duckdb = duckdb_scores(store, out)
    assert by_duckdb.height == ITEMS
    assert set(by_duckdb["run_id"]) == {"night-one"}
    assert set(by_duckdb["source"]) == {night_one.source}
    expected = local_run.scores.drop(RUN_COLUMNS).sort("query_id")
    assert_frame_equal(by_duckdb.drop(RUN_COLUMNS).sort("query_id"), expected)
    # Polars, the scores and the verdicts tables.
    scores = read_table(store, out, outcome, "scores")
    assert {r["query_id"]: r["score"] for r in scores.iter_rows(named=True)} == truth(
        night_one.rows
    )
    assert_frame_equal(scores.drop("source").sort("query_id"), expected)
    verdicts = read_table(store, out, outcome, "verdicts").sort("query_id", "position")
    local_verdicts = local_run.verdicts.drop("run_id", "run_date").sort("query_id", "position")
    assert_frame_equal(verdicts, local_verdicts)

    # The verdict store is on the store; the staging area is gone.
    assert files_under(store, f"{out}/_cache")
    location = RunLocation(outcome.run_id, outcome.run_date)
    assert files_under(store, f"{out}/{location.staging}") == []
    manifest = read_manifest(store, out, outcome)
    assert manifest["status"] == "complete" and manifest["summary"]["items"] == ITEMS
    assert manifest["tables"]["scores"] == outcome.published.scores_url


def test_no_credential_of_the_store_in_the_manifest_or_the_log(night_one: Published) -> None:
    store = night_one.store
    manifest = read_manifest(store, night_one.out, night_one.outcome)
    text = json.dumps(manifest)
    for secret in store.secrets:
        assert secret not in text
        assert secret not in night_one.log
    kept = manifest["config"]["output"]["storage_options"]
    for key, value in store.storage_options.items():
        redacted = any(word in key for word in ("key", "secret", "token", "connection_string"))
        assert kept[key] == ("***" if redacted else value), key
    assert "verdict store" in night_one.log  # the log is the run's, at every level


def test_moved_items_are_found_in_the_verdict_store_on_the_store(
    night_one: Published, judge: FakeJudgeServer, tmp_path: Path
) -> None:
    """Night two: the same items shuffled into two new files on the store. Every verdict is
    found in the verdict store night one filled there: the judge is asked nothing."""
    store, out = night_one.store, night_one.out
    shuffled = list(night_one.rows)
    random.Random(5).shuffle(shuffled)
    moved = night_one.source.rsplit("/", 2)[0] + "/moved"
    upload_rows(store, shuffled[:25], f"{moved}/a.jsonl", tmp_path)
    upload_rows(store, shuffled[25:], f"{moved}/b.jsonl", tmp_path)
    before = verdict_requests(judge)
    outcome = run_job(store_config(store, moved, out, **sections(judge, "night-two")))

    assert verdict_requests(judge) == before
    contexts = sum(len(row["contexts"]) for row in night_one.rows)
    assert outcome.published.summary.cache_hits == contexts
    scores = read_table(store, out, outcome, "scores")
    assert {r["query_id"]: r["score"] for r in scores.iter_rows(named=True)} == truth(shuffled)
    assert set(scores["calls"]) == {0}
    assert {r["source"] for r in scores.iter_rows(named=True)} == {
        f"{moved}/a.jsonl",
        f"{moved}/b.jsonl",
    }
    # Both nights are there, side by side, for DuckDB.
    both = duckdb_scores(store, out).group_by("run_id").len().sort("run_id")
    assert both.rows() == [("night-one", ITEMS), ("night-two", ITEMS)]


def test_a_second_driver_on_the_run_id_is_refused_naming_its_lock_on_the_store(
    store: ObjectStore, judge_key: str, fake_judge: Any, tmp_path: Path
) -> None:
    prefix = store.fresh_prefix()
    source, out = f"{prefix}/in/items.jsonl", f"{prefix}/out"
    rows = list(generate(12, seed=47, markers=True))
    upload_rows(store, rows, source, tmp_path)
    gate = HoldRequests()  # the first run cannot finish before the second is refused
    server = fake_judge(on_request=gate)
    config = store_config(
        store,
        source,
        out,
        judge=lean_judge(server),
        rate_limit={"max_concurrency": 2},
        ray={"shard_size": 4, "workers": 2},
        run={"id": "busy", "date": "2026-12-06"},
    )
    first = run_in_thread(lambda: run_job(config))
    try:
        gate.wait_held(1)  # the first run holds the run's lock and is judging
        with pytest.raises(RunLocked) as caught:
            run_job(config)
    finally:
        gate.release()
    outcome = first.result()

    message = str(caught.value)
    assert f"pid {os.getpid()} on {socket.gethostname()}" in message
    location = RunLocation("busy", outcome.run_date)
    assert f"lock file {out}/{location.staging}/LEASE.json" in message
    assert verdict_requests(server) == len(rows)  # the refused driver judged nothing
    scores = read_table(store, out, outcome, "scores")
    assert {r["query_id"]: r["score"] for r in scores.iter_rows(named=True)} == truth(rows)
    assert files_under(store, f"{out}/{location.staging}") == []


def test_show_and_report_read_the_run_from_the_store(
    night_one: Published, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a user runs them: the output's URL, the store's options on the command line (Azure:
    the connection string in AZURE_STORAGE_CONNECTION_STRING, not on the command line)."""
    store, out = night_one.store, night_one.out
    for name, value in store.environment.items():
        monkeypatch.setenv(name, value)
    row = night_one.rows[7]
    argv = ["show", "night-one", row["id"], "--output", out, "--json", *store.cli_options()]
    assert ctxprec(argv) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["score"] == truth([row])[row["id"]]
    assert [c["text"] for c in shown["contexts"]] == row["contexts"]  # read from the input
    relevant = [c["verdict"] == "yes" for c in shown["contexts"]]
    assert relevant == [bool(flag) for flag in row["relevance"]]

    assert ctxprec(["report", "night-one", "--output", out, *store.cli_options()]) == 0
    printed = capsys.readouterr().out
    page_url = f"{out}/reports/night-one.html"
    assert printed.strip() == f"report: {page_url}"
    page = store.fs().cat_file(store.path(page_url)).decode()
    assert "night-one" in page and f"{ITEMS}" in page
