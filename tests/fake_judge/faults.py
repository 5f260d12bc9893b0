"""The fake judge's faults: which ones exist, how often a `FaultPlan` injects them, one seeded
draw per request (`FaultDraws`), reply latency, and how a content fault damages a reply.

A status fault (429, 5xx, a slow reply) changes the HTTP answer of any request; a content fault
changes the content of a verdict reply only. Every draw comes from one `random.Random(seed)`, so
a run with the same plan and the same requests meets the same faults.
"""

from __future__ import annotations

import bisect
import json
import math
import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

from tests.fake_judge.wire import VERDICTS_SCHEMA_NAME

# Faults that change the HTTP answer; they apply to verdict and reason requests alike.
STATUS_FAULTS: tuple[str, ...] = (
    "rate_limit_429",
    "rate_limit_429_no_header",
    "server_error",
    "slow",
)
# Faults that change the content of a 200 reply; only verdict requests get them.
CONTENT_FAULTS: tuple[str, ...] = (
    "malformed_json",
    "truncated_json",
    "code_fence",
    "text_around",
    "wrong_count",
    "unknown_verdict_word",
    "duplicate_index",
    "out_of_range_index",
    "shuffled",
    "case_and_space",
)
FAULT_KINDS: tuple[str, ...] = STATUS_FAULTS + CONTENT_FAULTS
# Replies that are valid under the contract: the client maps verdicts by index and normalises
# the verdict word, so these must be scored exactly like a clean reply.
VALID_CONTENT_FAULTS: frozenset[str] = frozenset({"shuffled", "case_and_space"})
# Correct verdicts wrapped in extra text: a lenient parser may recover them, a strict one re-asks.
WRAPPED_CONTENT_FAULTS: frozenset[str] = frozenset({"code_fence", "text_around"})

_MALFORMED_CONTENT = '{"verdicts": [ {"i": 0, "v'


_Z99 = 2.3263478740408408  # the standard normal's 99th percentile


def lognormal_parameters(mean: float, p99: float) -> tuple[float, float]:
    """(mu, sigma) of the lognormal with this mean and 99th percentile.

    mean = exp(mu + sigma^2 / 2) and p99 = exp(mu + z99 sigma), so sigma solves
    sigma^2 / 2 - z99 sigma + ln(p99 / mean) = 0 (the smaller root: the tail the p99 names).
    """
    if not 0 < mean < p99:
        raise ValueError(f"a latency tail needs 0 < mean < p99, got mean {mean}, p99 {p99}")
    gap = math.log(p99 / mean)
    discriminant = _Z99 * _Z99 - 2 * gap
    if discriminant < 0:
        raise ValueError(f"p99 {p99} is too far above the mean {mean} for a lognormal (<= ~15x)")
    sigma = _Z99 - math.sqrt(discriminant)
    return math.log(mean) - sigma * sigma / 2, sigma


@dataclass(frozen=True)
class FaultPlan:
    """How often each fault is injected (probabilities, 0..1, summing to at most 1).

    Every chat request makes one draw from `random.Random(seed)`; the draw picks at most one
    fault, so a retried request draws again and may succeed. Content faults drawn for a reason
    request are not applied (the reply is clean and nothing is counted).
    """

    rate_limit_429: float = 0.0  # 429 with a Retry-After header (`retry_after_s`)
    rate_limit_429_no_header: float = 0.0  # 429 without Retry-After
    server_error: float = 0.0  # 500, 502 or 503 with an error body
    slow: float = 0.0  # sleep `slow_s`, then answer correctly (the client should time out)
    malformed_json: float = 0.0  # content is broken JSON
    truncated_json: float = 0.0  # a correct reply cut at a random point
    code_fence: float = 0.0  # correct JSON inside ```json ... ```
    text_around: float = 0.0  # correct JSON with prose before and after
    wrong_count: float = 0.0  # one verdict dropped, or one extra added
    unknown_verdict_word: float = 0.0  # one verdict is "maybe"
    duplicate_index: float = 0.0  # two entries share a passage number
    out_of_range_index: float = 0.0  # one entry names a context that was not asked for
    shuffled: float = 0.0  # VALID: correct verdicts in another list order
    case_and_space: float = 0.0  # VALID: verdict words like " Yes " / "NO"
    slow_s: float = 30.0
    retry_after_s: int = 1  # Retry-After sent with an injected 429
    latency_s: float = 0.0  # added to every admitted request (the mean, with latency_p99_s)
    latency_jitter_s: float = 0.0  # plus uniform(0, jitter)
    # > latency_s: each reply's latency is drawn from a lognormal with mean `latency_s` and
    # this 99th percentile (a real judge's heavy tail); at most ~15x the mean.
    latency_p99_s: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for kind in FAULT_KINDS:
            rate = getattr(self, kind)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"FaultPlan.{kind} must be within 0..1, got {rate}")
        total = sum(self.rates().values())
        if total > 1.0 + 1e-9:
            raise ValueError(f"FaultPlan rates sum to {total:.3f}; they must sum to at most 1")
        if min(self.slow_s, self.latency_s, self.latency_jitter_s, self.latency_p99_s) < 0 or (
            self.retry_after_s < 0
        ):
            raise ValueError("FaultPlan durations must not be negative")
        if self.latency_p99_s:
            lognormal_parameters(self.latency_s, self.latency_p99_s)  # raises when impossible

    def draw_latency(self, rng: random.Random) -> float:
        """One reply's latency under this plan (before any `slow` fault)."""
        delay = self.latency_s
        if self.latency_p99_s > self.latency_s > 0:
            mu, sigma = lognormal_parameters(self.latency_s, self.latency_p99_s)
            delay = rng.lognormvariate(mu, sigma)
        if self.latency_jitter_s > 0:
            delay += rng.uniform(0.0, self.latency_jitter_s)
        return delay

    def rates(self) -> dict[str, float]:
        """The non-zero fault rates by kind."""
        return {k: float(getattr(self, k)) for k in FAULT_KINDS if getattr(self, k) > 0}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FaultPlan:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown FaultPlan fields: {sorted(unknown)}")
        return cls(**data)

    @classmethod
    def mixed(
        cls,
        total: float,
        *,
        kinds: Iterable[str] = FAULT_KINDS,
        seed: int = 0,
        **overrides: Any,
    ) -> FaultPlan:
        """A plan with `total` fault probability spread evenly over `kinds`."""
        chosen = list(kinds)
        bad = set(chosen) - set(FAULT_KINDS)
        if bad:
            raise ValueError(f"unknown fault kinds: {sorted(bad)}")
        share = total / len(chosen) if chosen else 0.0
        rates: dict[str, Any] = {k: share for k in chosen}
        return cls(**rates, seed=seed, **overrides)


class FaultDraws:
    """The plan in force and its seeded generator: one fault draw per request. Not locked: the
    fake judge that owns it draws under its own lock."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self._cumulative: list[float] = []
        self._kinds: list[str] = []
        acc = 0.0
        for kind, rate in plan.rates().items():
            acc += rate
            self._cumulative.append(acc)
            self._kinds.append(kind)

    def draw(self, schema: str) -> str | None:
        """The fault for one request, or None. A content fault drawn for a reason request is
        not applied (None)."""
        if not self._cumulative:
            return None
        u = self.rng.random()
        i = bisect.bisect_right(self._cumulative, u)
        if i >= len(self._kinds):
            return None
        kind = self._kinds[i]
        if kind in CONTENT_FAULTS and schema != VERDICTS_SCHEMA_NAME:
            return None
        return kind


_CASE_VARIANTS = {"yes": (" Yes ", "YES", "Yes", " yes"), "no": (" No ", "NO", "No", "no ")}


def apply_content_fault(fault: str, verdicts: list[dict[str, Any]], rng: random.Random) -> str:
    """Serialise `verdicts` damaged (or harmlessly altered) as `fault` says. The caller holds
    the lock that guards the shared generator."""
    indices = [v["i"] for v in verdicts]
    if fault == "malformed_json":
        return _MALFORMED_CONTENT
    if fault == "truncated_json":
        full = json.dumps({"verdicts": verdicts})
        return full[: rng.randint(1, len(full) - 1)]
    if fault == "code_fence":
        return "```json\n" + json.dumps({"verdicts": verdicts}) + "\n```"
    if fault == "text_around":
        return (
            "Sure! Here are the verdicts you asked for:\n"
            + json.dumps({"verdicts": verdicts})
            + "\nLet me know if you need anything else."
        )
    if fault == "wrong_count":
        if verdicts and rng.random() < 0.5:
            del verdicts[rng.randrange(len(verdicts))]
        else:
            extra = max(indices, default=-1) + 1
            verdicts.append({"i": extra, "v": "no", "reason": "Extra."})
    elif fault == "unknown_verdict_word":
        if verdicts:
            verdicts[rng.randrange(len(verdicts))]["v"] = "maybe"
        else:
            verdicts.append({"i": 0, "v": "maybe", "reason": "Unsure."})
    elif fault == "duplicate_index":
        if len(verdicts) >= 2:
            i, j = rng.sample(range(len(verdicts)), 2)
            verdicts[j]["i"] = verdicts[i]["i"]
        elif verdicts:
            verdicts.append(dict(verdicts[0]))
        else:
            verdicts += [{"i": 0, "v": "no", "reason": "Dup."}] * 2
    elif fault == "out_of_range_index":
        bad = rng.choice((-1, max(indices, default=0) + 1000))
        if verdicts:
            verdicts[rng.randrange(len(verdicts))]["i"] = bad
        else:
            verdicts.append({"i": bad, "v": "no", "reason": "Out of range."})
    elif fault == "shuffled":
        if len(verdicts) >= 2:
            original = list(verdicts)
            rng.shuffle(verdicts)
            if verdicts == original:  # make sure the order really changed
                verdicts.append(verdicts.pop(0))
    elif fault == "case_and_space":
        for v in verdicts:
            v["v"] = rng.choice(_CASE_VARIANTS[v["v"]])
    else:
        raise ValueError(f"unknown content fault {fault!r}")
    return json.dumps({"verdicts": verdicts})
