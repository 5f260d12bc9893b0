"""An API key never leaks: not into outputs, manifests, logs, error messages or progress.

The key is a sentinel value; after a good run and a run refused for a wrong key, every file under
the output folder, every Ray log file of the session, everything the driver printed and every
error message is searched for it.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from jobs.context_precision import main
from jobs.core.config import parse_config
from jobs.run.job import run_job
from jobs.tools.sample_data import generate, write_jsonl
from scorer_core.errors import CtxPrecError
from tests.support.fakes import JudgeFactory
from tests.support.job import COLUMNS

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("ray_local")]

SENTINEL = "sk-SENTINEL-7f3a9c-do-not-leak"
KEY_ENV = "CTXPREC_SECRET_TEST_KEY"


def _files_containing(root: Path, needle: bytes) -> list[Path]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file():
            try:
                if needle in path.read_bytes():
                    hits.append(path)
            except OSError:
                continue
    return hits


def _ray_logs_dir() -> Path:
    import ray

    node = ray._private.worker.global_worker.node
    return Path(node.get_logs_dir_path())


def test_the_api_key_appears_nowhere(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_judge: JudgeFactory,
    run_log: pytest.LogCaptureFixture,
) -> None:
    data = tmp_path / "in.jsonl"
    write_jsonl(data, generate(40, seed=3, markers=True))
    monkeypatch.setenv(KEY_ENV, SENTINEL)
    out = tmp_path / "out"
    server = fake_judge(require_api_key=SENTINEL)
    job = {
        "input": {"path": str(data), "columns": COLUMNS},
        "output": {"path": str(out)},
        "judge": {"model": "openai/fake-judge", "api_base": server.url, "api_key_env": KEY_ENV},
        "ray": {"shard_size": 20, "workers": 2},
    }
    config_path = tmp_path / "job.yaml"
    config_path.write_text(
        json.dumps({**job, "scorer": {"reason": "llm"}, "run": {"id": "secret-ok"}})
    )
    printed = io.StringIO()
    with redirect_stdout(printed), redirect_stderr(printed):
        code = main(["--config", str(config_path)])
    assert code == 0, printed.getvalue()[-2000:]
    # The key really was used: the server only answers requests that carry it.
    assert server.authorization_headers() == {f"Bearer {SENTINEL}"}
    assert server.stats()["by_status"].get("200", 0) >= 80

    # A wrong key: the judge refuses, the run stops with an error that must not echo it.
    wrong = "sk-WRONG-SENTINEL-e41b"
    monkeypatch.setenv(KEY_ENV, wrong)
    config = parse_config(
        {
            **job,
            "run": {"id": "secret-refused"},
            # Cached verdicts from the first run would answer without asking the judge.
            "cache": {"enabled": False},
        }
    )
    with pytest.raises(CtxPrecError) as refused:
        run_job(config)
    assert "401" in str(refused.value) or "authentication" in str(refused.value).lower()

    texts = {
        "driver output": printed.getvalue() + run_log.text,
        "error message": str(refused.value) + repr(refused.value),
    }
    for what, text in texts.items():
        assert SENTINEL not in text, what
        assert wrong not in text, what
    assert (out / "manifests").exists()
    for needle in (SENTINEL, wrong):
        assert _files_containing(out, needle.encode()) == []
        assert _files_containing(_ray_logs_dir(), needle.encode()) == []
    manifest = next(out.glob("manifests/**/manifest.json")).read_text()
    assert KEY_ENV in manifest  # the variable's NAME is recorded, never its value
