"""A run id names one run in an output root: once published it is refused on any date (exit
2, naming the date it has), and a resumed run keeps the date it started with, across midnight.

Runs whose shards are all staged already (`staged_run`), so the driver never starts Ray; the
clock is injected (`wall_clock`), not waited for.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from jobs import cli
from jobs.core.config import JobConfig
from jobs.engine.clock import RunClock
from jobs.run.job import run_job
from jobs.run.outcome import print_outcome
from tests.unit.test_run_lock import staged_run

BEFORE_MIDNIGHT = dt.datetime(2026, 12, 1, 23, 59, 58, tzinfo=dt.UTC).timestamp()
AFTER_MIDNIGHT = BEFORE_MIDNIGHT + 4


def undated(config: JobConfig) -> JobConfig:
    return config.model_copy(update={"run": config.run.model_copy(update={"date": None})})


def test_a_published_run_id_is_refused_under_another_date(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _store, _ = staged_run(tmp_path)
    assert run_job(config).run_date == dt.date(2026, 11, 30)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_defaults=True)))

    for day in ("2026-12-01", "2026-11-30"):
        capsys.readouterr()
        code = cli.main(["run", "--config", str(path), "--set", f"run.date={day}"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "run staged is already published, for run.date 2026-11-30" in err
    assert [p.name for p in (tmp_path / "out" / "scores").iterdir()] == ["run_date=2026-11-30"]


def test_a_resumed_run_keeps_the_date_it_started_with_across_midnight(tmp_path: Path) -> None:
    config, _store, items_files = staged_run(tmp_path)
    config = undated(config)
    good = Path(items_files[1]).read_bytes()
    Path(items_files[1]).write_bytes(b"not parquet")  # the first attempt fails at publishing
    with pytest.raises(Exception):  # noqa: B017 (which error is publish's business)
        run_job(config, clock=RunClock(wall=lambda: BEFORE_MIDNIGHT))
    Path(items_files[1]).write_bytes(good)

    outcome = run_job(config, clock=RunClock(wall=lambda: AFTER_MIDNIGHT))
    assert outcome.run_date == dt.date(2026, 12, 1)
    assert [p.name for p in (tmp_path / "out" / "scores").iterdir()] == ["run_date=2026-12-01"]


def test_a_resumed_run_given_another_date_is_refused(tmp_path: Path) -> None:
    config, _store, items_files = staged_run(tmp_path)
    Path(items_files[1]).write_bytes(b"not parquet")
    with pytest.raises(Exception):  # noqa: B017
        run_job(config)
    moved = config.model_copy(
        update={"run": config.run.model_copy(update={"date": dt.date(2026, 12, 2)})}
    )
    with pytest.raises(Exception, match=r"run staged started as run\.date 2026-11-30"):
        run_job(moved)


def test_the_printed_summary_queries_the_runs_own_folder_and_counts_truncated_items(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _store, _ = staged_run(tmp_path, max_contexts=2)
    out = tmp_path / "out"
    print_outcome(run_job(config), str(out))
    printed = capsys.readouterr().out
    folder = f"{out}/scores/run_date=2026-11-30/run_id=staged/*.parquet"
    assert f"read_parquet('{folder}', hive_partitioning=true)" in printed
    cut = [line for line in printed.splitlines() if line.startswith("truncated: ")]
    assert len(cut) == 1 and int(cut[0].split()[1]) > 0, printed


def test_a_run_that_fails_its_checks_leaves_no_output_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _store, _ = staged_run(tmp_path)
    raw = config.model_dump(mode="json", exclude_defaults=True)
    raw["input"]["columns"]["input"] = "no_such_column"
    raw["output"]["path"] = str(tmp_path / "results")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert cli.main(["run", "--config", str(path)]) == 2
    assert "no_such_column" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_ctrl_c_before_the_run_began_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*_: object) -> JobConfig:
        raise KeyboardInterrupt  # as Ctrl-C lands while the config is read

    monkeypatch.setattr("jobs.run.job.load_config", interrupted)
    assert cli.main(["run", "--config", "job.yaml"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "stopped: by SIGINT before the run began; nothing was staged"
