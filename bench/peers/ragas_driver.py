"""Scores the bench's items with RAGAS's context precision; runs in the peers venv only.

    /tmp/peers-venv/bin/python bench/peers/ragas_driver.py --entry collections \
        --data items.jsonl --base-url http://127.0.0.1:PORT/v1 --out result.json

Two entry points, both RAGAS's own batch ones, both judging against the reference:

- `collections` (RAGAS 0.4's recommended API): `ragas.metrics.collections.ContextPrecision`
  on `llm_factory(model, client=AsyncOpenAI(base_url=..., api_key=...))` (instructor, JSON
  mode), all items through `metric.abatch_score(...)` (one asyncio.gather, no limit of its own;
  the openai client's connection pool is the only bound). One request per context.
- `evaluate` (the older API, deprecated in 0.4 but still the documented batch evaluation):
  `ragas.evaluate(dataset, [LLMContextPrecisionWithReference()], llm=LangchainLLMWrapper(
  ChatOpenAI(base_url=..., api_key=...)))` with the default RunConfig (max_workers=16). One
  request per context.

Writes {"items", "settings"} as JSON before scoring, then adds {"scores", "seconds", "import_s",
"version"} (`bench.peers.result_file`); a score is null when RAGAS gave none (NaN).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

# The drivers run as scripts in the peers' venv: the repo's root on the path for bench.peers.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.peers.result_file import announce, finish

_started = time.perf_counter()
import ragas  # noqa: E402  (timed: the import is part of what a user pays)

_IMPORT_S = time.perf_counter() - _started


def _clean(value: object) -> float | None:
    number = float(value)  # type: ignore[arg-type]
    return None if math.isnan(number) else number


def run_collections(rows: list[dict[str, Any]], base_url: str, model: str, out: str) -> list[Any]:
    from openai import AsyncOpenAI
    from ragas.llms import llm_factory
    from ragas.metrics.collections import ContextPrecision

    client = AsyncOpenAI(base_url=base_url, api_key="bench-dummy-key")
    metric = ContextPrecision(llm=llm_factory(model, client=client))
    inputs = [
        {
            "user_input": row["input"],
            "reference": row["expected_output"],
            "retrieved_contexts": row["context"],
        }
        for row in rows
    ]
    announce(
        out,
        len(rows),
        "ContextPrecision (ragas.metrics.collections) on llm_factory(AsyncOpenAI(base_url, "
        "key)), metric.abatch_score(all items): unbounded gather",
    )
    results = asyncio.run(metric.abatch_score(inputs))
    return [_clean(result.value) for result in results]


def run_evaluate(rows: list[dict[str, Any]], base_url: str, model: str, out: str) -> list[Any]:
    from langchain_openai import ChatOpenAI
    from ragas import EvaluationDataset, RunConfig, evaluate
    from ragas.llms import LangchainLLMWrapper
    from ragas.metrics import LLMContextPrecisionWithReference

    dataset = EvaluationDataset.from_list(
        [
            {
                "user_input": row["input"],
                "response": row["output"],
                "reference": row["expected_output"],
                "retrieved_contexts": row["context"],
            }
            for row in rows
        ]
    )
    llm = LangchainLLMWrapper(ChatOpenAI(model=model, base_url=base_url, api_key="bench-dummy-key"))
    config = RunConfig()
    announce(
        out,
        len(rows),
        "ragas.evaluate() with LLMContextPrecisionWithReference, LangchainLLMWrapper(ChatOpenAI("
        f"base_url, key)), RunConfig(max_workers={config.max_workers}, "
        f"max_retries={config.max_retries}, timeout={config.timeout})",
    )
    result = evaluate(
        dataset,
        metrics=[LLMContextPrecisionWithReference()],
        llm=llm,
        run_config=config,
        show_progress=False,
    )
    values = result.to_pandas()["llm_context_precision_with_reference"].tolist()
    return [_clean(value) for value in values]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entry", choices=("collections", "evaluate"), required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="judge")
    args = parser.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)  # evaluate() warns on every call
    with open(args.data, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    run = run_collections if args.entry == "collections" else run_evaluate
    started = time.perf_counter()
    values = run(rows, args.base_url, args.model, args.out)
    seconds = time.perf_counter() - started
    finish(
        args.out,
        {
            "scores": {row["query_id"]: value for row, value in zip(rows, values, strict=True)},
            "seconds": seconds,
            "import_s": _IMPORT_S,
            "version": ragas.__version__,
        },
    )


if __name__ == "__main__":
    main()
