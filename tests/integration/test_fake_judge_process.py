"""The fake judge as its own process (`python -m tests.fake_judge`), as the benchmarks and
the soak run it: it prints its URL, answers over real HTTP with the faults it was given, and
prints its statistics when it stops. (The server itself is tests/unit/test_fake_judge.py's.)"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from tests.fake_judge import VERDICTS_SCHEMA_NAME, build_verdict_prompt_for_tests
from tests.support.paths import REPO

pytestmark = pytest.mark.timeout(60)


def test_runs_as_its_own_process() -> None:
    args = ["--port", "0", "--max-seconds", "20", "--rpm", "600", "--fault", "shuffled=1.0"]
    contexts = ["a RELEVANT passage", "an IRRELEVANT one", "RELEVANT"]
    body = {
        "model": "fake-model-1",
        "messages": [
            {"role": "system", "content": "You grade retrieval."},
            {"role": "user", "content": build_verdict_prompt_for_tests("q?", "a.", contexts)},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": VERDICTS_SCHEMA_NAME, "schema": {"type": "object"}},
        },
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_judge", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        with httpx.Client(timeout=5.0) as client:
            response = client.post(f"{url}/chat/completions", json=body)
            assert response.status_code == 200, response.text
            content = response.json()["choices"][0]["message"]["content"]
            verdicts = json.loads(content)["verdicts"]
            assert {v["i"]: v["v"] for v in verdicts} == {
                0: "yes",
                1: "no",
                2: "yes",
            }
            stats = client.get(url.removesuffix("/v1") + "/stats").json()
        assert stats["faults"] == {"shuffled": 1} and stats["rpm"] == 600
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert json.loads(err.strip().splitlines()[-1])["total_requests"] == 1
