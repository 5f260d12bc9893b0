"""Scores the bench's items with DeepEval's ContextualPrecisionMetric; runs in the peers venv only.

    /tmp/peers-venv/bin/python bench/peers/deepeval_driver.py --data items.jsonl \
        --base-url http://127.0.0.1:PORT/v1 --out result.json

DeepEval's batch entry point, `deepeval.evaluate(test_cases, [metric])`, with its default
`AsyncConfig` (run_async, max_concurrent=20, no throttle) and the metric's defaults
(include_reason=True: a verdict call and a reason call per item). The judge is DeepEval's
`LocalModel`, its documented model for any OpenAI-compatible endpoint (base_url + a key; a
dummy key here). Progress bar and result printing are off (DisplayConfig), so the terminal costs
nothing. Writes {"items", "settings"} as JSON before scoring, then adds {"scores", "seconds",
"import_s", "version"} (`bench.peers.result_file`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# The drivers run as scripts in the peers' venv: the repo's root on the path for bench.peers.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.peers.result_file import announce, finish

_started = time.perf_counter()
import deepeval  # noqa: E402  (timed: the import is part of what a user pays)
from deepeval import evaluate  # noqa: E402
from deepeval.evaluate.configs import AsyncConfig, DisplayConfig  # noqa: E402
from deepeval.metrics import ContextualPrecisionMetric  # noqa: E402
from deepeval.models import LocalModel  # noqa: E402
from deepeval.test_case import LLMTestCase  # noqa: E402

_IMPORT_S = time.perf_counter() - _started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="judge")
    args = parser.parse_args()
    with open(args.data, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    cases = [
        LLMTestCase(
            input=row["input"],
            actual_output=row["output"],
            expected_output=row["expected_output"],
            retrieval_context=row["context"],
            name=row["query_id"],
        )
        for row in rows
    ]
    model = LocalModel(model=args.model, base_url=args.base_url, api_key="bench-dummy-key")
    metric = ContextualPrecisionMetric(model=model)
    config = AsyncConfig()
    announce(
        args.out,
        len(cases),
        f"deepeval.evaluate(), AsyncConfig(run_async={config.run_async}, "
        f"max_concurrent={config.max_concurrent}, throttle_value={config.throttle_value})"
        ", ContextualPrecisionMetric defaults (include_reason=True), LocalModel",
    )
    started = time.perf_counter()
    result = evaluate(
        cases,
        [metric],
        async_config=config,
        display_config=DisplayConfig(show_indicator=False, print_results=False),
    )
    seconds = time.perf_counter() - started
    scores: dict[str, float | None] = {}
    for test in result.test_results:
        data = test.metrics_data[0] if test.metrics_data else None
        scores[test.name] = data.score if data is not None and data.error is None else None
    finish(
        args.out,
        {
            "scores": scores,
            "seconds": seconds,
            "import_s": _IMPORT_S,
            "version": deepeval.__version__,
        },
    )


if __name__ == "__main__":
    main()
