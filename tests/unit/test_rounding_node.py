"""Differential test: our score against Mastra's arithmetic run by node, bit for bit.

node evaluates Mastra's generateScore step (sort by context_index, sum relevant_so_far/(i+1),
divide by the relevant count, times `scale ?? 1`, `Math.round((x + Number.EPSILON) * 100) /
100`, an empty list scores 0) over tens of thousands of verdict lists and scales, including
every exact tie we can construct. Skipped when node is not installed.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from fractions import Fraction

import pytest

from scorer_core import average_precision, context_precision
from tests.support.exact import exact_average_precision

NODE = shutil.which("node")
pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not installed"),
    pytest.mark.timeout(300),
]

MASTRA_SCORE_JS = r"""
const roundToTwoDecimals = (num) => Math.round((num + Number.EPSILON) * 100) / 100;
function generateScore(verdicts, scale) {
  if (verdicts.length === 0) return 0;
  const sorted = verdicts.sort((a, b) => a.context_index - b.context_index);
  let sumPrecision = 0;
  let relevantCount = 0;
  for (let i = 0; i < sorted.length; i++) {
    if (sorted[i].verdict.toLowerCase().trim() === 'yes') {
      relevantCount++;
      sumPrecision += relevantCount / (i + 1);
    }
  }
  if (relevantCount === 0) return 0;
  const map = sumPrecision / relevantCount;
  return roundToTwoDecimals(map * (scale ?? 1));
}
const cases = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const scores = cases.map(([flags, scale]) => generateScore(
  flags.map((f, i) => ({ context_index: i, verdict: f ? 'yes' : 'no', reason: '' })).reverse(),
  scale,
));
process.stdout.write(JSON.stringify(scores));
"""


def mastra_scores(cases: list[tuple[list[int], float | None]]) -> list[float]:
    assert NODE is not None
    done = subprocess.run(
        [NODE, "-e", MASTRA_SCORE_JS],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    scores = json.loads(done.stdout)
    assert isinstance(scores, list) and len(scores) == len(cases)
    return [float(s) for s in scores]


def is_exact_tie(flags: list[int], scale: float | None) -> bool:
    """True when AP * scale, computed exactly, is a whole number of thousandths ending in 5."""
    if not any(flags):
        return False
    value = exact_average_precision(flags) * Fraction(1 if scale is None else scale) * 100
    return value.denominator == 2


def build_cases(rng: random.Random) -> list[tuple[list[int], float | None]]:
    cases: list[tuple[list[int], float | None]] = [([], 1), ([], 10), ([0, 0], 1), ([1], None)]
    cases.append(([1, 1, 0, 1, 1], 6))  # the example: Mastra 5.32
    # Every list up to 9 long at scales where exact ties are common.
    for length in range(1, 10):
        for mask in range(1 << length):
            flags = [(mask >> i) & 1 for i in range(length)]
            for scale in (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 0.5, 0.25):
                cases.append((flags, scale))
    # Random lists and scales, plus scales chosen to put AP * scale on a tie.
    while len(cases) < 60_000:
        flags = [int(rng.random() < rng.random()) for _ in range(rng.randint(1, 40))]
        pick = rng.random()
        scale: float | None
        if pick < 0.25:
            scale = rng.randint(0, 100)
        elif pick < 0.5:
            scale = rng.uniform(0, 20)
        elif pick < 0.6:
            scale = rng.choice([None, 0, 1, 0.1, 0.25, 2.5, 7.5, 1000])
        else:
            ap = average_precision(flags)
            target = (rng.randint(0, 2000) + 0.5) / 100
            scale = target / ap if ap else 1.0
        cases.append((flags, scale))
    return cases


def test_scores_agree_with_mastra_bit_for_bit() -> None:
    cases = build_cases(random.Random(20261130))
    theirs = mastra_scores(cases)
    ours = [context_precision(flags, scale) for flags, scale in cases]
    mismatches = [
        (flags, scale, mine, expected)
        for (flags, scale), mine, expected in zip(cases, ours, theirs, strict=True)
        if mine != expected
    ]
    assert mismatches == [], f"{len(mismatches)} mismatches, e.g. {mismatches[:5]}"
    ties = sum(is_exact_tie(flags, scale) for flags, scale in cases)
    assert ties >= 500, f"only {ties} exact ties were tested"
    assert context_precision([1, 1, 0, 1, 1], 6) == 5.32
