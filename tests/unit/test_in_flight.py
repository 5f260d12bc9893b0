"""A pair a worker is asking about right now answers its other items with the same pair
(`jobs.core.verdict_cache.InFlight` behind `CachingJudge`): a repeated item in flight at the same
time as
the first is not paid for twice, and a reply that brings no verdict hands the pair back."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from jobs.core.verdict_cache import CachingJudge, InFlight, VerdictCache
from scorer_core.capabilities import LLM_CAPABILITIES
from scorer_core.types import ContextVerdict, ScoringItem, Usage, VerdictBatch

QUERY, OUTPUT = "Who wrote Dune?", "Frank Herbert wrote Dune."


@dataclass
class HeldJudge:
    """Relevant when the context mentions Herbert; each call waits for `release` and is
    recorded with the contexts it was asked about. `unscored`/`fail`: what the first call does."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    unscored: bool = False
    fail: bool = False

    @property
    def model(self) -> str:
        return "held"

    capabilities = LLM_CAPABILITIES
    asker = None

    def reason_prompt(self, *_: object) -> None:
        return None

    async def judge(self, item: ScoringItem, positions: Sequence[int]) -> VerdictBatch:
        self.calls.append(tuple(item.contexts[p] for p in positions))
        first = len(self.calls) == 1
        await self.release.wait()
        if first and self.fail:
            raise RuntimeError("the provider went away")
        usage = Usage(calls=1)
        if first and self.unscored:
            return VerdictBatch(verdicts=(), usage=usage, unscored_reason="the reply was not JSON")
        verdicts = tuple(
            ContextVerdict(p, "Herbert" in item.contexts[p], f"about {item.contexts[p]}")
            for p in positions
        )
        return VerdictBatch(verdicts=verdicts, usage=usage, prompt=f"prompt {len(self.calls)}")

    async def explain(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> tuple[str, Usage]:
        return "", Usage()


def item(*contexts: str) -> ScoringItem:
    return ScoringItem(input=QUERY, output=OUTPUT, contexts=contexts)


async def judge_both(
    inner: HeldJudge, first: ScoringItem, second: ScoringItem, *, fresh_hits: bool = True
) -> tuple[VerdictBatch | BaseException, VerdictBatch]:
    """Both items through one worker's cache, the second sent while the first is in flight."""
    in_flight = InFlight()
    judges = [
        CachingJudge(inner, VerdictCache(in_flight=in_flight), "fp", fresh_hits=fresh_hits)
        for _ in range(2)
    ]  # two shards of one worker: their own caches, the worker's in-flight pairs
    one = asyncio.create_task(judges[0].judge(first, range(len(first.contexts))))
    while not inner.calls:
        await asyncio.sleep(0)
    two = asyncio.create_task(judges[1].judge(second, range(len(second.contexts))))
    for _ in range(5):  # let the second item reach its wait (or its own call)
        await asyncio.sleep(0)
    inner.release.set()
    done = await asyncio.gather(one, return_exceptions=True)
    return done[0], await two


def test_the_same_pairs_in_flight_are_asked_about_once() -> None:
    inner = HeldJudge()
    contexts = ("Herbert wrote Dune in 1965.", "Tolkien wrote The Hobbit.")
    first, second = asyncio.run(judge_both(inner, item(*contexts), item(*contexts)))
    assert inner.calls == [contexts]
    assert isinstance(first, VerdictBatch)
    assert second.verdicts == first.verdicts
    assert [v.relevant for v in second.verdicts] == [True, False]
    assert second.usage.cache_hits == 2 and second.usage.calls == 0
    assert first.usage.calls == 1 and first.usage.cache_hits == 0


def test_only_the_pairs_not_in_flight_are_asked_about() -> None:
    inner = HeldJudge()
    shared = "Herbert wrote Dune in 1965."
    _, second = asyncio.run(
        judge_both(inner, item(shared, "Tolkien wrote The Hobbit."), item("Dune is long.", shared))
    )
    assert inner.calls == [(shared, "Tolkien wrote The Hobbit."), ("Dune is long.",)]
    assert [(v.index, v.relevant) for v in second.verdicts] == [(0, False), (1, True)]
    assert second.usage.calls == 1 and second.usage.cache_hits == 1
    assert second.prompt == "prompt 2"


@pytest.mark.parametrize("how", ["unscored", "fail"])
def test_a_reply_without_verdicts_hands_the_pair_back(how: str) -> None:
    """The first item's call is unscored (or raises): the second asks about it itself."""
    inner = HeldJudge(unscored=how == "unscored", fail=how == "fail")
    contexts = ("Herbert wrote Dune in 1965.",)
    first, second = asyncio.run(judge_both(inner, item(*contexts), item(*contexts)))
    assert inner.calls == [contexts, contexts]
    if how == "fail":
        assert isinstance(first, RuntimeError)
    else:
        assert isinstance(first, VerdictBatch) and first.unscored_reason is not None
    assert second.unscored_reason is None
    assert [v.relevant for v in second.verdicts] == [True]
    assert second.usage.calls == 1 and second.usage.cache_hits == 0


def test_batch_mode_asks_for_every_item_as_it_did() -> None:
    """Batch passes must send the same requests every pass: no answers from other items."""
    inner = HeldJudge()
    contexts = ("Herbert wrote Dune in 1965.",)
    asyncio.run(judge_both(inner, item(*contexts), item(*contexts), fresh_hits=False))
    assert inner.calls == [contexts, contexts]


def test_nothing_stays_in_flight() -> None:
    async def run() -> InFlight:
        inner = HeldJudge()
        in_flight = InFlight()
        judge = CachingJudge(inner, VerdictCache(in_flight=in_flight), "fp")
        inner.release.set()
        await judge.judge(item("a", "b"), [0, 1])
        return in_flight

    assert len(asyncio.run(run())) == 0
