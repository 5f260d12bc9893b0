"""A real judge: llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct, on 127.0.0.1.

`ctxprec score`, the job (real Ray) and `ctxprec calibrate` run against it. A 135M model's
verdicts are poor, so these tests assert the contract, not the verdicts: every item is one row,
ok or unscored with a reason, never an error; the server's refusal of `json_schema` costs no
item and the form the judge settled on (`json_object`) is recorded with the refusal; usage
(calls, tokens) and time are recorded.

Needs the `llm` extra (`make install-llm`); without it every test here is skipped with the
reason. The server starts once for the module and answers one request at a time, so the items
are few (4 contexts each) and the timeouts generous: a 4-context verdict takes about 10 s on a
quiet 2-core machine and over a minute on a loaded one.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from jobs import cli
from jobs.core.config import parse_config
from jobs.core.run_layout import RunLocation
from jobs.run.job import run_job
from jobs.run.outcome import print_outcome
from jobs.tools.calibration import calibrate
from tests.fake_judge.llama_server import LlamaServer, unavailable_reason
from tests.support.paths import REPO

MODEL = "smollm2"
_MISSING = unavailable_reason(MODEL)

pytestmark = [
    pytest.mark.llm,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(_MISSING is not None, reason=_MISSING or ""),
]

JUDGE_TIMEOUT_S = 900  # seconds per request: the server queues requests one at a time
MAX_TOKENS = 400  # a verdict reply for 4 contexts is ~120 tokens; a runaway reply stops here
REFUSED_FORM = "json_schema"  # llama-cpp-python's server takes only "text" and "json_object"


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    # One thread: under `make test` the other core is busy, and llama.cpp's second thread spun
    # waiting for it (the module took 1.4x as long with two).
    with LlamaServer(MODEL, n_threads=1, n_ctx=4096, startup_timeout_s=600) as server:
        yield server


def judge_section(server: LlamaServer, verdict_reasons: bool = True) -> dict[str, Any]:
    return {
        "model": f"openai/{server.alias}",
        "api_base": server.url,
        "transport": "http",
        "timeout_s": JUDGE_TIMEOUT_S,
        "max_tokens": MAX_TOKENS,
        "max_retries": 1,
        "verdict_reasons": verdict_reasons,
    }


def assert_settled_on_json_object(negotiated: dict[str, Any], server: LlamaServer) -> None:
    assert negotiated["endpoint"] == server.url
    assert (negotiated["in_use"], negotiated["confirmed"]) == ("json_object", True)
    (dropped,) = negotiated["dropped"]
    assert dropped["form"] == REFUSED_FORM
    assert "validation error" in dropped["reason"] and "response_format" in dropped["reason"]


# -- ctxprec score -----------------------------------------------------------------------------


def test_ctxprec_score_against_llama_cpp(
    llama: LlamaServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        [
            "score",
            str(REPO / "examples" / "item.json"),
            "--model",
            f"openai/{llama.alias}",
            "--api-base",
            llama.url,
            "--transport",
            "http",
            "--timeout",
            str(JUDGE_TIMEOUT_S),
            "--max-tokens",
            str(MAX_TOKENS),
            "--json",
        ]
    )
    done = capsys.readouterr()
    assert code in (0, 3), done.err  # scored, or unscored: never a failure
    result = json.loads(done.out)
    if code == 0:
        assert result["status"] == "ok" and result["error"] is None
        assert [v["index"] for v in result["verdicts"]] == [0, 1, 2, 3]
        assert result["band"] in ("none", "low", "moderate", "good", "excellent")
    else:
        assert result["status"] == "unscored" and result["error"]
    # The refused json_schema probe is one call; the item was then judged with json_object.
    assert result["response_format"].startswith(f"json_object ({REFUSED_FORM} rejected: ")
    usage = result["usage"]
    assert usage["calls"] >= 2
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert result["seconds"] > 0


# -- the job -----------------------------------------------------------------------------------

ITEMS = [
    {
        "query_id": "with-reference",
        "input": "Which river flows through the city where the Eiffel Tower stands?",
        "output": "The Seine flows through Paris.",
        "expected_output": "The Seine",
        "context": [
            "The Eiffel Tower is a wrought-iron lattice tower in Paris, France.",
            "The Danube flows through Vienna and Budapest.",
            "The Seine is a river that flows through Paris to the English Channel.",
            "Mount Fuji is the highest mountain in Japan.",
        ],
    },
    {
        "query_id": "output-only",
        "input": "What do bees make?",
        "output": "Bees make honey and wax.",
        "expected_output": None,
        "context": [
            "Honey bees produce honey from the nectar of flowers.",
            "The Pacific is the largest ocean on Earth.",
            "Bees secrete wax to build the combs of their hives.",
            "Copper conducts electricity well.",
        ],
    },
    {
        "query_id": "retrieval-only",
        "input": "how long does a flea live",
        "output": "",
        "expected_output": None,
        "context": [
            "A flea can live up to a year, depending on the availability of hosts.",
            "Fleas are wingless insects that feed on the blood of mammals and birds.",
            "The stock market closed higher on Friday.",
            "A flea's life cycle runs from 20 days to a year, egg to adult.",
        ],
    },
]


@pytest.mark.usefixtures("ray_local")
def test_the_job_against_llama_cpp(llama: LlamaServer, tmp_path: Path) -> None:
    source = tmp_path / "items.jsonl"
    source.write_text("".join(json.dumps(item) + "\n" for item in ITEMS), encoding="utf-8")
    out = tmp_path / "out"
    config = parse_config(
        {
            "input": {"path": str(source), "columns": {"expected_output": "expected_output"}},
            "output": {"path": str(out)},
            # verdicts alone: a reply a third as long (`ctxprec score` and calibrate ask for
            # the reasons too), and the module's longest test takes a third of the time
            "judge": judge_section(llama, verdict_reasons=False),
            "rate_limit": {"max_concurrency": 1},  # the server answers one request at a time
            "ray": {"shard_size": 10, "workers": 1},
        }
    )
    outcome = run_job(config)

    location = RunLocation(outcome.run_id, outcome.run_date)
    scores = pl.read_parquet(out / location.table_file("scores"))
    verdicts = pl.read_parquet(out / location.table_file("verdicts"))
    assert sorted(scores["query_id"]) == sorted(item["query_id"] for item in ITEMS)
    for row in scores.iter_rows(named=True):
        assert row["status"] in ("ok", "unscored"), row
        assert row["context_count"] == 4 and row["judge_model"] == f"openai/{llama.alias}"
        assert row["calls"] >= 1 and row["prompt_tokens"] > 0, row
        mine = verdicts.filter(pl.col("query_id") == row["query_id"]).sort("position")
        assert mine["position"].to_list() == [0, 1, 2, 3]
        if row["status"] == "ok":
            assert row["error"] is None and row["score"] is not None and row["reason"]
            assert mine["relevant"].null_count() == 0
            assert row["relevant_count"] == mine["relevant"].sum()
        else:
            assert row["error"] and row["score"] is None
            assert mine["relevant"].null_count() == 4
    summary = outcome.published.summary
    assert summary.items == 3 and summary.errors == 0
    assert summary.scored + summary.unscored == 3
    assert summary.prompt_tokens > 0 and summary.completion_tokens > 0
    assert summary.judge_calls >= 3

    recorded = json.loads((out / location.manifest).read_text())
    assert_settled_on_json_object(recorded["judge"]["response_format"], llama)
    assert recorded["judge"]["response_format"]["shards"] == 1
    assert recorded["judge"]["transport"] == "http"
    assert recorded["timings_s"]["fan_out"] > 0 and recorded["seconds"] > 0
    printed = io.StringIO()
    with redirect_stdout(printed):
        print_outcome(outcome, str(out))
    assert f"{REFUSED_FORM} rejected: " in printed.getvalue()


# -- ctxprec calibrate ---------------------------------------------------------------------------


def test_calibrate_against_llama_cpp(llama: LlamaServer, tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    rows = [
        {
            "row_id": item["query_id"],
            "query": item["input"],
            "expected_answer": item["expected_output"],
            "contexts": item["context"],
            "relevance": [1, 0, 1, 0],
        }
        for item in (ITEMS[0], ITEMS[2])  # one with a reference answer, one retrieval-only
    ]
    labels.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    config = parse_config(
        {
            "input": {"path": str(labels)},
            "judge": judge_section(llama),
            "rate_limit": {"max_concurrency": 1},
        }
    )
    result = calibrate(config, str(labels))
    items = result.items
    assert items.judged == 2 and items.error == 0
    assert items.ok + items.unscored == 2
    assert len(result.excluded_examples) == items.unscored
    assert result.per_context.contexts == 4 * items.ok
    assert result.response_format is not None
    assert_settled_on_json_object(result.response_format.model_dump(), llama)
    assert result.usage.calls >= 2 and result.usage.prompt_tokens > 0
    assert result.seconds > 0
