"""Duplicate query ids across shards, found before judging so that they are never judged.

Publishing marks every later occurrence of a query_id as a duplicate of its first
(`jobs.engine.pairs.repeats`), and a worker does not judge a repeat within its own shard; but a
repeat in another shard than its first occurrence would be judged (a worker sees one shard)
and then dropped at publication: calls paid for nothing. With `input.find_duplicates_first`
(auto: for an LLM judge), before the fan-out:

1. every shard's query ids are read by Ray tasks (`read_query_ids`: only the id column of
   Parquet input; a JSONL line is parsed whole), `_TASK_SHARDS` shards a task;
2. the driver feeds them to a `RepeatFinder` (memory: one partition of keys, not the run);
3. each shard that holds later occurrences gets a small file in the run's staging area,
   `duplicates/<shard id>.parquet` (item_seq, duplicate_of), which its worker reads to write
   those rows as duplicates instead of judging them (`jobs.engine.shards.worker`);
4. `duplicates/DONE.json`, written last, lists those shards: a resumed run reads it instead
   of looking again.

The cost is one more read of the input's ids: 0.8 s of CPU per 100,000 JSONL items here
(docs/benchmarks.md), spread over the workers, against one judged item per repeat. The
offline judge costs less than that read, so `auto` skips it there. Publishing still finds
every repeat itself, so a run is published right whether or not this ran.
"""

from __future__ import annotations

import io
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import polars as pl

from jobs.core.config import JobConfig
from jobs.core.run_layout import SEQ_SHIFT
from jobs.core.storage import Store
from jobs.engine.pairs.repeats import KEYS, RepeatFinder
from jobs.inputs import InputSpec, Shard
from jobs.inputs.records import read_query_ids

_TASK_SHARDS = 16
"""Shards whose ids one Ray task reads (tasks of a few ms each would cost more than they do)."""


def marks_path(store: Store, staging: str, shard_id: str) -> str:
    """The file of a shard's later occurrences (absent: none)."""
    return store.join(staging, "duplicates", f"{shard_id}.parquet")


def read_marks(store: Store, staging: str, shard_id: str) -> dict[int, str]:
    """A shard's later occurrences: item_seq -> where the first occurrence is."""
    frame = pl.read_parquet(io.BytesIO(store.read_bytes(marks_path(store, staging, shard_id))))
    return dict(zip(frame["item_seq"].to_list(), frame["duplicate_of"].to_list(), strict=True))


def shard_keys(spec: InputSpec, numbered: Sequence[tuple[int, Shard]]) -> pl.DataFrame:
    """The `KEYS` of every row of the given (shard number, shard) pairs, with the `item_seq`
    their workers will give them. A Ray task body."""
    query_ids: list[str] = []
    seqs: list[int] = []
    sources: list[str] = []
    rows: list[int] = []
    for number, shard in numbered:
        first = number << SEQ_SHIFT
        for index, (query_id, source, row) in enumerate(read_query_ids(spec, shard)):
            query_ids.append(query_id)
            seqs.append(first + index)
            sources.append(source)
            rows.append(row)
    return pl.DataFrame(
        {"query_id": query_ids, "item_seq": seqs, "source": sources, "row": rows}, schema=KEYS
    )


def find_duplicates_first(
    config: JobConfig,
    spec: InputSpec,
    store: Store,
    staging: str,
    shards: Sequence[Shard],
    out: TextIO,
) -> frozenset[str]:
    """Stage the later occurrences of each shard in the run's `staging` folder (see the
    module's doc); the ids of the shards that have some. Ray must be running."""
    done = store.join(staging, "duplicates", "DONE.json")
    if store.exists(done):
        found: dict[str, Any] = json.loads(store.read_bytes(done))
        return frozenset(found["shards"])
    import ray

    started = time.monotonic()
    task = ray.remote(shard_keys).options(
        num_cpus=config.ray.num_cpus_per_task,
        max_retries=config.ray.max_task_retries,
        scheduling_strategy="SPREAD",
    )
    numbered = list(enumerate(shards))
    groups = [numbered[i : i + _TASK_SHARDS] for i in range(0, len(numbered), _TASK_SHARDS)]
    # Enough tasks to keep the workers' CPUs busy, few enough that the keys waiting for the
    # driver stay small.
    in_flight = 2 * config.ray.workers
    with_marks: list[str] = []
    with (
        tempfile.TemporaryDirectory(prefix="ctxprec-duplicates-") as tmp,
        RepeatFinder(Path(tmp)) as finder,
    ):
        pending: list[Any] = []
        for group in groups:
            pending.append(task.remote(spec, group))
            if len(pending) >= in_flight:
                ready, pending = ray.wait(pending, num_returns=1)
                finder.add(ray.get(ready[0]))
        for ref in pending:
            finder.add(ray.get(ref))
        marks = finder.finish()
        for number, later in marks.by_shard():
            shard_id = shards[number].shard_id
            store.write_parquet_atomic(
                marks_path(store, staging, shard_id),
                later.select("item_seq", "duplicate_of").to_arrow(),
            )
            with_marks.append(shard_id)
    record = {"shards": with_marks, "later_occurrences": marks.count, "keys": finder.keys}
    store.write_bytes_atomic(done, json.dumps(record).encode())
    out.write(
        f"duplicates across shards: {marks.count} later occurrence(s) of a query_id in "
        f"{len(with_marks)} shard(s) will not be judged ({finder.keys:,} ids read in "
        f"{time.monotonic() - started:.1f}s)\n"
    )
    return frozenset(with_marks)
