"""The single-item CLI, as a user runs it: `python -m scorer_core` and `ctxprec score`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from scorer_core.testing import FakeJudgeServer

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def run(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
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


def test_ctxprec_score_against_an_openai_compatible_server() -> None:
    item = {"input": "q", "output": "o", "context": ["a RELEVANT", "b", "c RELEVANT", "d"]}
    with FakeJudgeServer(require_api_key="sk-cli-test") as server:
        env = {**ENV, "MY_JUDGE_KEY": "sk-cli-test"}
        done = run(
            "-c",
            "import sys; from jobs.cli import main; sys.exit(main())",
            "score",
            "--model",
            "openai/fake-judge",
            "--api-base",
            server.url,
            "--api-key-env",
            "MY_JUDGE_KEY",
            "--json",
            stdin=json.dumps(item),
            env=env,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["score"] == 0.83
        assert server.stats()["total_requests"] == 1
