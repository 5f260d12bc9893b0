"""`ctxprec` as a user runs it: `score` (and `python -m scorer_core`), every command's
`--help`, the exit-code policy, and the promise that the CLI itself stays light to import."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from jobs import cli, context_precision
from jobs.engine.ray_runtime import RAY_ENV
from jobs.tools.sample_data import generate, write_jsonl
from scorer_core.cli import EXIT_FAILED, EXIT_NO_SCORE, EXIT_USAGE
from tests.fake_judge import FaultPlan
from tests.support.fakes import JudgeFactory
from tests.support.job import COLUMNS
from tests.support.paths import REPO

ENV = {**os.environ, **RAY_ENV}
HEAVY = ("polars", "pyarrow", "fsspec", "ray", "litellm")
COMMANDS = (
    "score",
    "run",
    "estimate",
    "calibrate",
    "compare",
    "report",
    "show",
    "status",
    "cache",
    "export",
)


def run(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        input=stdin,
        capture_output=True,
        text=True,
        env=env or ENV,
        timeout=120,
    )


def test_python_m_scorer_core_scores_the_example_offline() -> None:
    done = run("-m", "scorer_core", "score", "examples/item.json", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "ok"
    flags = [v["relevant"] for v in result["verdicts"]]
    assert len(flags) == 4 and result["judge_calls"] == 0
    from scorer_core import context_precision

    assert result["score"] == context_precision(flags)
    assert result["reason"]


def test_stdin_aliases_and_human_output() -> None:
    item = {
        "query": "Which river flows through Paris?",
        "output": "The Seine.",
        "contexts": ["The Seine flows through Paris.", "Bananas are yellow."],
    }
    done = run("-m", "scorer_core", stdin=json.dumps(item))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("score:")
    assert "[0] yes" in done.stdout and "[1] no" in done.stdout


def test_bad_input_names_the_problem() -> None:
    done = run("-m", "scorer_core", "score", stdin='{"input": "q", "output": "o", "context": "x"}')
    assert done.returncode == 2
    assert "field 'context' must be a list of strings" in done.stderr
    missing = run("-m", "scorer_core", "score", "no/such/file.json")
    assert missing.returncode == 2 and "no/such/file.json" in missing.stderr


def score_from_stdin(
    item: dict[str, object], argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> int:
    """`ctxprec score ARGV` with `item` as JSON on stdin, in this process."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(item)))
    return cli.main(["score", *argv])


def test_ctxprec_score_against_an_openai_compatible_server(
    fake_judge: JudgeFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    item = {"input": "q", "output": "o", "context": ["a RELEVANT", "b", "c RELEVANT", "d"]}
    server = fake_judge(require_api_key="sk-cli-test")
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-cli-test")
    argv = ["--model", "openai/fake-judge", "--api-base", server.url, "--api-key-env"]
    code = score_from_stdin(item, [*argv, "MY_JUDGE_KEY", "--json"], monkeypatch)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    assert result["score"] == 0.83
    assert server.stats()["total_requests"] == 1
    # What the judge spent on the item, and how long it took.
    usage = result["usage"]
    assert usage["calls"] == result["judge_calls"] == 1
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert (usage["retries"], usage["reasks"]) == (0, 0)
    assert result["seconds"] > 0
    assert result["response_format"] == "json_schema"


def test_an_item_that_gets_no_score_exits_3(
    fake_judge: JudgeFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    item = {"input": "q", "output": "o", "context": ["a RELEVANT", "b"]}
    # Every reply is broken JSON: the judge re-asks, then gives the item up as unscored.
    server = fake_judge(fault_plan=FaultPlan(malformed_json=1.0))
    argv = ["--model", "openai/fake-judge", "--api-base", server.url, "--json"]
    code = score_from_stdin(item, argv, monkeypatch)
    captured = capsys.readouterr()
    assert code == EXIT_NO_SCORE, captured.err
    assert json.loads(captured.out)["status"] == "unscored"


def test_a_judge_that_cannot_work_exits_1(
    fake_judge: JudgeFactory, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CTXPREC_TEST_KEY", "sk-wrong")
    item = REPO / "examples" / "item.json"
    server = fake_judge(require_api_key="sk-right")
    args = ["--model", "openai/fake-judge", "--api-base", server.url, str(item)]
    code = cli.main(["score", "--api-key-env", "CTXPREC_TEST_KEY", *args])
    assert code == EXIT_FAILED
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "sk-wrong" not in err


# -- light imports -----------------------------------------------------------------------------


def heavy_modules_after(code: str) -> list[str]:
    """Run `code` in a fresh interpreter; the heavy top-level modules it ended up importing."""
    script = (
        "import sys\n"
        f"{code}\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))\n"
        "print(json.dumps(heavy))\n"
    )
    done = run("-c", "import json\n" + script)
    assert done.returncode == 0, done.stderr
    heavy: list[str] = json.loads(done.stdout.splitlines()[-1])
    return heavy


def test_importing_the_cli_and_scoring_one_item_load_nothing_heavy() -> None:
    assert heavy_modules_after("import scorer_core, jobs.cli") == []
    score = "import jobs.cli\nassert jobs.cli.main(['score', 'examples/item.json']) == 0"
    assert heavy_modules_after(score) == []


def test_the_ray_environment_and_the_engine_api_load_nothing_heavy_until_used() -> None:
    """conftest and the benchmarks read RAY_ENV before Ray may be imported."""
    assert heavy_modules_after("from jobs.engine.ray_runtime import RAY_ENV") == []
    assert heavy_modules_after("import jobs.engine") == []
    from jobs import engine
    from jobs.engine import driver

    assert (engine.run_job, engine.RunOutcome, engine.RunFailed) == (
        driver.run_job,
        driver.RunOutcome,
        driver.RunFailed,
    )


def test_every_help_loads_nothing_heavy() -> None:
    helps = "\n".join(
        f"try:\n    jobs.cli.main({argv!r})\nexcept SystemExit as e:\n    assert e.code == 0"
        for argv in [["--help"], *([name, "--help"] for name in COMMANDS)]
    )
    assert heavy_modules_after("import jobs.cli\n" + helps) == []


def test_the_check_sees_a_heavy_import() -> None:
    assert heavy_modules_after("import jobs.cli, fsspec") == ["fsspec"]


# -- the parser --------------------------------------------------------------------------------


def test_ctxprec_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert all(f"    {name} " in text or f"    {name}\n" in text for name in COMMANDS), text
    assert "exit codes: 0 success, 1 the command failed, 2 bad usage" in " ".join(text.split())


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main([name, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: ctxprec {name} ")


def test_every_command_dispatches_to_its_module() -> None:
    assert tuple(command.name for command in cli.COMMANDS) == COMMANDS
    for command in cli.COMMANDS:
        args = cli.build_parser().parse_args([command.name, *REQUIRED.get(command.name, [])])
        assert args.handler is command.run, command.name


# the arguments each command cannot do without
REQUIRED = {
    "run": ["--config", "c.yaml"],
    "estimate": ["--config", "c.yaml"],
    "calibrate": ["--config", "c.yaml", "--labels", "l.jsonl"],
    "compare": ["a", "b"],
    "report": ["r"],
    "show": ["r", "q"],
    "status": ["r"],
    "cache": ["compact", "--config", "c.yaml"],
    "export": ["phoenix", "r", "--endpoint", "http://127.0.0.1:6006", "--project", "p"],
}


# -- exit codes of the job and the run tools ---------------------------------------------------


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["run"])
    assert done.value.code == EXIT_USAGE
    assert "--config" in capsys.readouterr().err


def test_ctxprec_run_and_the_entrypoint_exit_alike_on_a_bad_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "missing.yaml")
    assert cli.main(["run", "--config", missing]) == EXIT_USAGE
    first = capsys.readouterr().err
    assert context_precision.main(["--config", missing]) == EXIT_USAGE
    assert capsys.readouterr().err == first
    assert first == f"error: {missing}: cannot read config (No such file or directory)\n"


def _job_config(tmp_path: Path) -> Path:
    data = tmp_path / "items.jsonl"
    write_jsonl(data, generate(20))
    path = tmp_path / "job.yaml"
    config = {
        "input": {"path": str(data), "columns": COLUMNS},
        "output": {"path": str(tmp_path / "out")},
        "judge": {"model": "lexical"},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_run_held_by_another_driver_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert socket.gethostname() != "elsewhere"
    config = _job_config(tmp_path)
    lease = tmp_path / "out" / "_staging" / "run_id=held" / "LEASE.json"
    lease.parent.mkdir(parents=True)
    holder = {"token": "theirs", "host": "elsewhere", "pid": 4242, "heartbeat": time.time()}
    lease.write_text(json.dumps(holder))
    code = cli.main(["run", "--config", str(config), "--set", "run.id=held"])
    assert code == EXIT_FAILED
    assert "being run by pid 4242 on elsewhere" in capsys.readouterr().err
    assert json.loads(lease.read_text()) == holder  # not taken, not removed


def test_an_unknown_run_id_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["compare", "nightly-1", "nightly-2", "--output", str(tmp_path)])
    assert code == EXIT_USAGE
    assert "'nightly-1' not found" in capsys.readouterr().err


def test_status_of_an_unknown_run_exits_2_and_of_a_staged_one_says_where_it_stands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["status", "nightly-9", "--output", str(tmp_path)]) == EXIT_USAGE
    assert "'nightly-9' not found" in capsys.readouterr().err
    items = tmp_path / "_staging" / "run_id=nightly-9" / "items"
    items.mkdir(parents=True)
    (items / "00000-a.parquet").write_bytes(b"staged")
    assert cli.main(["status", "nightly-9", "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "run nightly-9: not published; 1 shard(s) staged (an online run)" in out
    assert "no driver holds the run" in out


def test_score_without_its_key_exits_2_at_once_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CTXPREC_TEST_UNSET_KEY", raising=False)
    item = {"input": "q", "output": "o", "context": ["a", "b"]}
    argv = ["--model", "openai/gpt-4o-mini", "--api-key-env", "CTXPREC_TEST_UNSET_KEY"]
    code = score_from_stdin(item, [*argv, "--timeout", "2"], monkeypatch)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert "environment variable CTXPREC_TEST_UNSET_KEY is not set" in err
