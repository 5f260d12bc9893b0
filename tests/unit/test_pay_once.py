"""The look-ahead (`jobs.engine.pairs.lookahead.look_ahead`) of a small run, in the driver,
without Ray: each shard read once; later occurrences of a query id, pairs the verdict store
holds and pairs another shard owns staged for the shards that have them; a resumed run keeps
its repeats and asks the store again."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs.core.config import parse_config
from jobs.core.run_layout import RunLocation, item_seq
from jobs.core.verdict_cache import CacheSpec, pair_key
from jobs.engine.pairs.lookahead import look_ahead, read_needs
from jobs.engine.plan import RunPlan
from jobs.inputs import Shard, list_input_files, plan_shards
from jobs.inputs import records as input_records
from jobs.inputs.spec import input_spec_of
from jobs.run.factory import run_parts
from scorer_core.types import ScoringItem

FINGERPRINT = "fp"


def row(query_id: str, topic: str) -> dict[str, Any]:
    return {"id": query_id, "q": f"about {topic}?", "a": topic, "ctx": [f"{topic} 1", f"{topic} 2"]}


def keys_of(topic: str) -> list[str]:
    item = ScoringItem(input=f"about {topic}?", output=topic, contexts=(f"{topic} 1", f"{topic} 2"))
    return [pair_key(FINGERPRINT, item, p) for p in range(2)]


# Shards of 2 rows: 0 = a, b; 1 = a (again, other contexts: a later occurrence), c; 2 = b under
# another id (its pairs are shard 0's), s (in the verdict store); 3 = d, a (once more).
ROWS = [
    row("a", "alps"),
    row("b", "baltic"),
    row("a", "andes"),
    row("c", "crete"),
    row("b2", "baltic"),
    row("s", "stored"),
    row("d", "danube"),
    row("a", "arctic"),
]


@pytest.fixture
def plan(tmp_path: Path) -> RunPlan:
    source = tmp_path / "in.jsonl"
    lines = [json.dumps(r) + "\n" for r in ROWS]
    source.write_text("".join(lines))
    columns = {"query_id": "id", "input": "q", "output": "a", "context": "ctx"}
    config = parse_config(
        {
            "input": {"path": str(source), "format": "jsonl", "columns": columns},
            "output": {"path": str(tmp_path / "out")},
            "judge": {"model": "lexical"},
            "ray": {"shard_size": 2, "workers": 1},
        }
    )
    spec = input_spec_of(config)
    # JSONL shards are byte ranges: cut exactly at every second line
    offsets = [0, *(sum(map(len, lines[: n + 1])) for n in range(len(lines)))]
    shards = [
        dataclasses.replace(
            plan_shards(spec, list_input_files(spec), 2)[0], start=offsets[n], end=offsets[n + 2]
        )
        for n in range(0, len(lines), 2)
    ]
    shards = [dataclasses.replace(s, shard_id=f"shard-{n}") for n, s in enumerate(shards)]
    location = RunLocation("pay-once", dt.date(2026, 12, 1))
    parts = dataclasses.replace(
        run_parts(config, location),
        find_duplicates_first=True,
        cache=CacheSpec(fingerprint=FINGERPRINT, folder="_cache"),
    )
    from jobs.core.storage import open_store

    return RunPlan(
        parts=parts,
        location=location,
        store=open_store(config.output.path),
        output=config.output,
        ray=config.ray,
        rate_limit=config.rate_limit,
        shards=shards,
    )


def store_verdicts(plan: RunPlan, topic: str, relevant: bool = True) -> None:
    """Verdicts for `topic`'s pairs, journaled as a run's worker journals them."""
    assert plan.parts.cache is not None
    verdicts = plan.parts.cache.verdict_store(plan.store)
    rows = verdicts.rows((key, relevant, f"{topic} reason") for key in keys_of(topic))
    verdicts.write(verdicts.journal_folder, f"earlier-{topic}", rows)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each shard's rows are read."""
    counts: Counter[str] = Counter()
    read_shard = input_records.read_shard

    def counting(spec: Any, shard: Shard, only: Any = None) -> Iterator[Any]:
        counts[shard.shard_id] += 1
        return read_shard(spec, shard, only)

    monkeypatch.setattr(input_records, "read_shard", counting)
    return counts


def test_one_read_of_each_shard_stages_repeats_stored_and_awaited_pairs(
    plan: RunPlan, reads: Counter[str], run_log: pytest.LogCaptureFixture
) -> None:
    store_verdicts(plan, "stored")
    todo = list(enumerate(plan.shards))
    staged = look_ahead(plan, todo, shared=True)

    assert reads == {shard.shard_id: 1 for shard in plan.shards}
    assert staged.with_repeats == {"shard-1", "shard-3"}
    assert staged.with_pairs == {"shard-2"}
    assert staged.owners == {"shard-2": frozenset({"shard-0"})}
    first = f"{plan.shards[0].path} line at byte 0"
    needs = {
        s.shard_id: read_needs(plan.store, plan.location.staging, s.shard_id, staged)
        for s in plan.shards
    }
    assert needs["shard-1"].later == {item_seq(1, 0): first}
    assert needs["shard-3"].later == {item_seq(3, 1): first}
    stored = keys_of("stored")
    assert needs["shard-2"].known == {key: (True, "stored reason") for key in stored}
    assert needs["shard-2"].awaits == {"shard-0": keys_of("baltic")}
    assert needs["shard-0"].later == {} and needs["shard-0"].awaits == {}
    # the later occurrences' pairs are keyed too (their rows are read before any is marked)
    log = run_log.text
    assert "2 later occurrence(s) of a query_id in 2 shard(s) will not be judged" in log
    assert "verdict store: 2 of 16 pair(s) already judged, found for 1 shard(s)" in log
    assert "1 shard(s) await pairs an earlier shard judges" in log


def test_batch_mode_awaits_nothing(plan: RunPlan) -> None:
    staged = look_ahead(plan, list(enumerate(plan.shards)), shared=False)
    assert staged.owners == {} and staged.with_pairs == frozenset()
    assert staged.with_repeats == {"shard-1", "shard-3"}


def test_a_resumed_run_keeps_its_repeats_and_asks_the_store_again(
    plan: RunPlan, reads: Counter[str]
) -> None:
    todo = list(enumerate(plan.shards))
    first = look_ahead(plan, todo, shared=True)
    assert first.with_pairs == {"shard-2"} and first.owners  # baltic, awaited from shard 0
    # the killed run staged shard 0 and journaled its verdicts (and crete's, in shard 1)
    store_verdicts(plan, "baltic", relevant=False)
    store_verdicts(plan, "crete")
    reads.clear()
    again = look_ahead(plan, todo[1:], shared=True)

    assert reads == {s.shard_id: 1 for s in plan.shards[1:]}  # the shards left, for their pairs
    assert again.with_repeats == first.with_repeats  # found once, by the first attempt
    assert again.with_pairs == {"shard-1", "shard-2"} and again.owners == {}
    staging = plan.location.staging
    assert read_needs(plan.store, staging, "shard-2", again).known == {
        key: (False, "baltic reason") for key in keys_of("baltic")
    }
    assert read_needs(plan.store, staging, "shard-3", again).later == {
        item_seq(3, 1): f"{plan.shards[0].path} line at byte 0"
    }
