"""What a finished run leaves on the machine: a whole run with an LLM judge in a driver process of
its own, then its report page, both under umask 027. Its files (scores, verdicts, summary,
manifest, the verdict store, the page) are group-readable and nothing more (issue 31, point 7),
and the driver stopped its own Ray at exit, without Ray's waits and without an error from its
exit handlers: no process of that Ray outlives it for long (issue 30)."""

from __future__ import annotations

import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.fakes import JudgeFactory
from tests.support.job import raw_config, sample_job
from tests.support.paths import REPO
from tests.support.processes import driver_env, lean_judge, ray_left_after, ray_processes

pytestmark = [pytest.mark.timeout(300)]


def under_umask(mask: str, args: list[str], ray_tmp: str) -> subprocess.CompletedProcess[str]:
    command = f"umask {mask} && exec {shlex.join(args)}"
    return subprocess.run(
        ["sh", "-c", command],
        cwd=REPO,
        env=driver_env(ray_tmp),
        capture_output=True,
        text=True,
        timeout=240,
        start_new_session=True,
    )


def test_a_run_and_its_report_leave_files_of_the_umasks_mode_and_no_process(
    tmp_path: Path, ray_tmp: str, fake_judge: JudgeFactory
) -> None:
    source, _, out = sample_job(tmp_path, 30, seed=5)
    raw = raw_config(source, out, judge=lean_judge(fake_judge()), run={"id": "modes"})
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(raw))
    job = [sys.executable, "-m", "jobs.context_precision", "--config", str(config)]
    page = [sys.executable, "-m", "jobs.cli.main", "report", "modes", "--output", str(out)]
    try:
        run = under_umask("027", job, ray_tmp)
        assert run.returncode == 0, run.stderr[-3000:]
        assert "Error in atexit" not in run.stderr and "Traceback" not in run.stderr
        left = ray_left_after(ray_tmp)
        assert left == [], f"processes of the finished driver's Ray still alive: {left}"
        report = under_umask("027", page, ray_tmp)
        assert report.returncode == 0, report.stderr[-3000:]
    finally:
        for other in ray_processes(ray_tmp):
            other.kill()
    found = {p.relative_to(out): stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*")}
    names = {str(path) for path in found}
    assert any(n.startswith("_cache/") and n.endswith(".parquet") for n in names), names
    assert {"reports/modes.html"} <= names
    assert any(n.endswith("manifest.json") for n in names), names
    files = {path: mode for path, mode in found.items() if (out / path).is_file()}
    assert files == dict.fromkeys(files, 0o640)
    folders = {path: mode for path, mode in found.items() if path not in files}
    assert folders == dict.fromkeys(folders, 0o750)
