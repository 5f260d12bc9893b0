"""Benchmark of the verdict store (jobs.core.verdict_store, jobs.engine.pairs.lookahead).

    python -m bench.store_bench --store 10000000 --runs 100000 1000000 [--journal-items 20000]

1. A store of `--store` verdicts is generated directly as the store's files (one Parquet file
   per partition, random pair keys, as a compacted store holds them).
2. For each run size, in a fresh process with its own local Ray (2 CPUs): Ray tasks make the
   run's pair keys (5 per item, 2,000 items a shard; 80% of them taken from the store, 20% new)
   and the driver spills them by partition as it spills `shard_keys`' in production; then the
   look-ahead's production steps (`Lookahead.join_store`: Ray tasks of packed keys; `share`;
   `stage`: needs spilled by block of shards, one staged file per shard) run against the
   store. Measured: the join's wall time, the hit rate, the driver's peak memory from the
   first keys to the last staged file and the peak of the Ray worker processes. (Computing
   the keys from the input is measured apart: `shard_keys` per item, in one process.)
3. Journaling's cost on the zero-latency throughput: `bench.job_bench`'s overhead run (http
   transport, 2 workers) with the cache off, then on (a new store: every verdict judged and
   journaled); with `--baseline DIR` (the code before the store, `git archive`d there) also
   that code's run with its cache on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from bench.common import header, load_average, write_section
from jobs.core.storage import open_store
from jobs.core.verdict_store import PARTITIONS, VerdictStore
from jobs.engine.ray_runtime import RAY_ENV

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, **RAY_ENV}
PAIRS_PER_ITEM = 5
ITEMS_PER_SHARD = 2000
HIT_SHARE = 0.8
REASON = "The passage states the fact the query asks about."


def _keys(partition: int, count: int, seed: int) -> pl.Series:
    """`count` random pair keys of one partition (32 hex digits, the first two its number),
    made without a Python string each (a generator's leftovers would be measured as the
    lookup's: the Ray workers that make the run's keys also run its join)."""
    import random

    import pyarrow as pa

    raw = pa.py_buffer(random.Random(seed).randbytes(15 * count))
    array = pa.FixedSizeBinaryArray.from_buffers(pa.binary(15), count, [None, raw])
    digits = pl.Series(array.cast(pa.binary())).bin.encode("hex")
    return (f"{partition:02x}" + digits).alias("pair_key")


def generate(folder: Path, verdicts: int) -> float:
    """Write a store of `verdicts` verdicts under `folder` (store root); seconds taken."""
    started = time.monotonic()
    store = VerdictStore(store=open_store(str(folder)), folder="_cache/bench")
    per = verdicts // PARTITIONS
    written_at = int(time.time())
    for partition in range(PARTITIONS):
        keys = _keys(partition, per, seed=partition)
        frame = pl.DataFrame(
            {
                "pair_key": keys,
                "relevant": [n % 3 == 0 for n in range(per)],
                "judge_reason": [REASON] * per,
                "written_at": [written_at] * per,
            }
        )
        store.write(store.partition_folder(partition), "bench", frame)
    return time.monotonic() - started


def _memory_mib(process: Any) -> tuple[float, float]:
    """(RSS, private: RSS less shared pages) of a psutil process, in MiB. The Ray object
    store is shared memory mapped into every process that reads or writes an object: its
    pages count in RSS, but they are the object store's (bounded by its size), not the
    process's own."""
    info = process.memory_info()
    return info.rss / 2**20, (info.rss - info.shared) / 2**20


def _ray_workers_mib(exclude: frozenset[int] = frozenset()) -> tuple[float, float]:
    """The largest (RSS, private) among this process's Ray worker processes but `exclude`."""
    import psutil

    rss = private = 0.0
    for process in psutil.Process().children(recursive=True):
        try:
            if process.pid in exclude:
                continue
            if " ".join(process.cmdline()).startswith("ray::"):
                r, p = _memory_mib(process)
                rss, private = max(rss, r), max(private, p)
        except psutil.Error:
            continue
    return rss, private


def run_keys(partition: int, items: int, store_size: int) -> pl.DataFrame:
    """One partition's share of a run's pair keys (`KEYS`): the first `HIT_SHARE` taken from
    the store's keys of that partition, the rest new; their shards spread over the run. A Ray
    task body: the driver receives the keys as it receives `shard_keys`' in production."""
    from jobs.engine.pairs.store_join import KEYS

    per_partition = items * PAIRS_PER_ITEM // PARTITIONS
    hits_per = int(per_partition * HIT_SHARE)
    known = _keys(partition, store_size // PARTITIONS, seed=partition).head(hits_per)
    new = _keys(partition, per_partition - hits_per, seed=10_000 + partition)
    base = partition * per_partition
    pairs_per_shard = ITEMS_PER_SHARD * PAIRS_PER_ITEM
    return pl.DataFrame(
        {
            "shard": pl.int_range(base, base + per_partition, eager=True) // pairs_per_shard,
            "pair_key": pl.concat([known, new]),
        },
        schema=KEYS,
    )


def run_keys_task(partition: int, items: int, store_size: int) -> tuple[int, pl.DataFrame]:
    """`run_keys` and the process that made them (excluded from the join's measure)."""
    return os.getpid(), run_keys(partition, items, store_size)


class _Peaks:
    """The driver's and the largest Ray worker's memory peaks, sampled every 50 ms."""

    def __init__(self, exclude: frozenset[int] = frozenset()) -> None:
        import psutil

        self._exclude = exclude
        self._me = psutil.Process()
        self.before = _memory_mib(self._me)
        self.peaks = {"driver": 0.0, "driver_private": 0.0, "workers": 0.0, "workers_private": 0.0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            for name, (rss, private) in (
                ("driver", _memory_mib(self._me)),
                ("workers", _ray_workers_mib(self._exclude)),
            ):
                self.peaks[name] = max(self.peaks[name], rss)
                self.peaks[f"{name}_private"] = max(self.peaks[f"{name}_private"], private)
            self._stop.wait(0.05)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return self.peaks


def lookup(folder: Path, items: int, store_size: int) -> dict[str, Any]:
    """One run's look-ahead against the store under `folder`, from the keys arriving on the
    driver to the staged needs (the store join, the search for shared pairs, the staging)."""
    import ray

    from jobs.core.config import parse_config
    from jobs.engine.pairs.lookahead import Lookahead, ShardKeys
    from jobs.engine.pairs.repeats import KEYS as ID_KEYS
    from jobs.engine.ray_runtime import ray_map

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    store = open_store(str(folder))
    verdicts = VerdictStore(store=store, folder="_cache/bench")
    shards = -(-items // ITEMS_PER_SHARD)
    shard_ids = [f"{n:06d}" for n in range(shards)]
    scratch = Path(tempfile.mkdtemp(prefix="store-bench-"))
    config = parse_config(
        {"input": {"path": "x"}, "ray": {"num_cpus_per_task": 0.5, "max_task_retries": 0}}
    )
    # The generator's tasks in workers of their own (another runtime env), left out of the
    # workers measured: what they keep is the bench's, not the job's.
    generate_keys = ray_map(
        config.ray, in_flight=4, runtime_env={"env_vars": {"STORE_BENCH_ROLE": "keys"}}
    )
    list(generate_keys(run_keys_task, [(0, 1, store_size)]))  # the workers started first
    peaks = _Peaks()
    before = peaks.before[1]
    started = time.monotonic()
    look = Lookahead(scratch, shard_ids, ids=False)
    generators: set[int] = set()
    no_ids = pl.DataFrame(schema=ID_KEYS)
    calls = ((p, items, store_size) for p in range(PARTITIONS))
    for pid, frame in generate_keys(run_keys_task, calls):
        generators.add(pid)
        look.add(ShardKeys(no_ids, frame))
    keyed = time.monotonic()
    keys_peak = peaks.stop()
    peaks = _Peaks(exclude=frozenset(generators))
    look.join_store(verdicts, ray_map(config.ray, in_flight=4))
    look.share()
    looked = look.stage(store, f"_staging/run_id=bench-{items}")
    seconds = time.monotonic() - keyed
    peak = peaks.stop()
    peak["driver_private"] = max(peak["driver_private"], keys_peak["driver_private"])
    peak["driver"] = max(peak["driver"], keys_peak["driver"])
    ray.shutdown()
    return {
        "items": items,
        "pairs": look.keys.rows,
        "hits": look.hits,
        "hit_rate": look.hits / look.keys.rows,
        "shards_staged": len(looked.with_pairs),
        "shards_awaiting": len(looked.owners),
        "keys_seconds": keyed - started,
        "seconds": seconds,
        "driver_before_mib": before,
        **{f"{name}_peak_mib": value for name, value in peak.items()},
    }


def key_rate(items: int = 10_000) -> float:
    """Items per second `shard_keys` keys (read, checked, 5 pair keys an item)."""
    from bench.job_bench import base_config
    from jobs.core.config import parse_config
    from jobs.core.schema import RunSchema
    from jobs.engine.pairs.lookahead import KeyReading, shard_keys
    from jobs.inputs import list_input_files, plan_shards
    from jobs.inputs.records import ItemReader
    from jobs.inputs.shard_read import RunRows
    from jobs.tools.sample_data import generate as sample_items
    from jobs.tools.sample_data import write_jsonl

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "in.jsonl"
        write_jsonl(data, sample_items(items))
        config = parse_config(base_config(data, Path(tmp) / "out"))
        reader = ItemReader.for_config(config)
        shards = plan_shards(reader.spec, list_input_files(reader.spec), 2000)
        started = time.monotonic()
        reading = KeyReading(rows=RunRows(reader=reader, tables=RunSchema()), fingerprint="fp")
        shard_keys(reading, list(enumerate(shards)), ids=True)
        return items / (time.monotonic() - started)


def journaling(items: int, baseline: Path | None, repeats: int = 3) -> list[dict[str, Any]]:
    """The zero-latency overhead run with the cache off, then on (a new store: every verdict
    journaled); and, given `baseline` (a copy of the code before the store, e.g.
    `git archive <commit> | tar -x -C DIR`), that code's run with its cache on. Each
    `repeats` times, interleaved (the machine's load drifts): the medians, and the spread."""
    from bench import job_bench
    from bench.job_bench import base_config, fake_judge, fake_judge_section, write_input

    trees: list[tuple[str, Path, bool]] = [("this", ROOT, False), ("this", ROOT, True)]
    if baseline is not None:
        trees.insert(1, ("baseline", baseline, True))
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in range(len(trees))}
    with fake_judge() as url, tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "in.jsonl"
        write_input(data, items, markers=True)
        for attempt in range(repeats):
            for n, (_, tree, cache) in enumerate(trees):
                out = Path(tmp) / f"out-{attempt}-{n}"
                judge = fake_judge_section(url, transport="http")
                config = base_config(data, out, judge=judge, ray__workers=2)
                config["rate_limit"] = {"max_concurrency": 128}
                config["cache"] = {"enabled": cache}
                # the job's processes (driver, Ray workers) import the tree's code first
                job_bench.ROOT, job_bench.ENV = tree, {**job_bench.ENV, "PYTHONPATH": str(tree)}
                try:
                    result = job_bench.run_job(config)
                finally:
                    job_bench.ROOT, job_bench.ENV = (
                        ROOT,
                        dict(ENV, BENCH_JUDGE_KEY="bench-not-a-secret"),
                    )
                timings = result["manifest"]["timings_s"]
                runs[n].append(
                    {
                        "fan_out": timings["fan_out"],
                        "lookup": timings.get("lookahead", 0.0),
                        "wall": result["wall_s"],
                    }
                )
    results = []
    for n, (name, _, cache) in enumerate(trees):
        fan_outs = sorted(run["fan_out"] for run in runs[n])
        results.append(
            {
                "code": name,
                "cache": cache,
                "fan_out": statistics.median(fan_outs),
                "fan_out_range": (fan_outs[0], fan_outs[-1]),
                "lookup": statistics.median(run["lookup"] for run in runs[n]),
                "wall": statistics.median(run["wall"] for run in runs[n]),
                "items_per_s": items / statistics.median(fan_outs),
                "repeats": repeats,
            }
        )
    return results


def _growth(runs: list[dict[str, Any]]) -> str:
    """How the peaks change from the first run size to each larger one, and why they stay."""
    first = runs[0]

    def ratio(run: dict[str, Any], name: str) -> str:
        return f"x{run[f'{name}_private_peak_mib'] / first[f'{name}_private_peak_mib']:.2f}"

    ratios = "; ".join(
        f"{r['items']:,} items: driver {ratio(r, 'driver')}, workers {ratio(r, 'workers')}"
        for r in runs[1:]
    )
    return (
        f"Private peaks against the {first['items']:,}-item run: {ratios}. What a process "
        "holds does not follow the run: the driver spills keys and hits with one writer at a "
        "time (8 MiB buffered) and hands on 32,768 keys a task; a task matches 2,048 keys of a "
        "partition at a time against that partition's files (their size is the store's, not "
        "the run's); hits are staged 8 shards at a time. The search for pairs several shards "
        "hold reads one partition's keys at a time on the driver: a 256th of the run's (1.2 MB "
        "at 1M items), the one part that follows the run. Before these (one open zstd writer "
        "per bucket, a task per partition, Arrow on mimalloc) the driver went from 206 to "
        "254 MiB and the workers from 107 to 121 MiB between 100k and 1M items."
    )


def section(
    store_size: int,
    generated_s: float,
    runs: list[dict[str, Any]],
    keys_per_s: float,
    journal: list[dict[str, Any]],
    command: str,
) -> str:
    rows = [
        f"| {r['items']:,} | {r['pairs']:,} | {r['hit_rate']:.1%} | {r['shards_staged']:,} | "
        f"{r['seconds']:.1f} s | {r['driver_private_peak_mib']:.0f} MiB "
        f"({r['driver_before_mib']:.0f} before the lookup; RSS {r['driver_peak_mib']:.0f}) | "
        f"{r['workers_private_peak_mib']:.0f} MiB (RSS {r['workers_peak_mib']:.0f}) |"
        for r in runs
    ]
    off, on = journal[0], journal[-1]
    cost = 1 - on["items_per_s"] / off["items_per_s"]
    base = next((r for r in journal if r["code"] == "baseline"), None)
    return "\n".join(
        [
            "## Verdict store: lookup and journaling",
            "",
            header(command),
            "",
            f"A store of {store_size:,} verdicts (generated as one Parquet file per partition, "
            f"{PARTITIONS} partitions, in {generated_s:.0f} s). Each run has {PAIRS_PER_ITEM} "
            f"pairs an item, {ITEMS_PER_SHARD:,} items a shard, {HIT_SHARE:.0%} of its pairs "
            "in the store. Ray tasks hand the run's keys to the driver, which spills them by "
            "store partition (`jobs.engine.pairs.spill.Spill`, as it spills `shard_keys`' in "
            "production); lookup time = the look-ahead's production steps (`jobs.engine.pairs."
            "lookahead.Lookahead.join_store`: Ray tasks of 32,768 keys packed across "
            "partitions, each reading its partitions' files; hits spilled by block of shards, "
            "one staged file per shard) and the search for pairs several shards hold "
            "(`Lookahead.share`, on the driver, a partition's keys at a time; the run's keys are "
            "all distinct here, so no shard awaits another), in a fresh process with a local "
            "Ray of 2 CPUs and Arrow on jemalloc "
            "(`RAY_ENV`); peaks sampled every 50 ms: the driver's from the first keys to the "
            "last staged file, the largest Ray worker process's during the join. Private = "
            "RSS less shared pages: the Ray object store is shared "
            "memory mapped into each process that passes objects through it (bounded by the "
            "store's size), so RSS grows with the objects passed, private memory with what a "
            "process holds.",
            "",
            "| run items | pairs | hit rate | shards staged | lookup time | driver peak, private "
            "| largest Ray worker peak, private |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            _growth(runs),
            "",
            f"Computing the pair keys from the input (step 2, Ray tasks over the shards): "
            f"{keys_per_s:,.0f} items/s on one core (`shard_keys`: read, check and hash "
            "5 contexts an item), so about "
            f"{1_000_000 / keys_per_s / 2:,.0f} s for 1M items on 2 cores.",
            "",
            "Journaling's cost on the zero-latency throughput (`bench.job_bench overhead`, http "
            f"transport, 2 workers, {journal[0]['items_per_s'] * journal[0]['fan_out']:,.0f} "
            "items; cache on = the lookup before the fan-out, every verdict journaled; each "
            f"configuration run {journal[0]['repeats']} times, interleaved: medians, and the "
            "range of the fan-out times):",
            "",
            "| code | cache | throughput (fan-out) | fan-out time (range) | lookup before it "
            "| wall |",
            "|---|---|---|---|---|---|",
            *(
                f"| {r['code']} | {'on' if r['cache'] else 'off'} | {r['items_per_s']:,.0f} "
                f"items/s | {r['fan_out']:.1f} s ({r['fan_out_range'][0]:.1f}-"
                f"{r['fan_out_range'][1]:.1f}) | {r['lookup']:.1f} s | {r['wall']:.1f} s |"
                for r in journal
            ),
            "",
            f"Throughput with the store and its journal: {-cost:+.1%} against the cache off"
            + (
                f", {on['items_per_s'] / base['items_per_s'] - 1:+.1%} against the code before "
                "the store with its cache on (baseline: per-region cache files written at each "
                "shard's commit, no journal)."
                if base is not None
                else "."
            ),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--journal-items", type=int, default=20_000)
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a copy of the code before the store (git archive <commit> | tar -x -C DIR): its "
        "zero-latency run with the cache on is the journaling baseline",
    )
    parser.add_argument("--lookup", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--folder", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.lookup is not None:  # one run's lookup, in its own process
        print(json.dumps(lookup(Path(args.folder), args.lookup, args.store)))
        return 0
    command = (
        f"python -m bench.store_bench --store {args.store} --runs "
        + " ".join(str(n) for n in args.runs)
        + f" --journal-items {args.journal_items}"
        + (" --baseline DIR" if args.baseline else "")
    )
    with tempfile.TemporaryDirectory(prefix="store-bench-") as tmp:
        generated = generate(Path(tmp), args.store)
        print(f"store of {args.store:,} verdicts generated in {generated:.1f} s", flush=True)
        runs = []
        for items in args.runs:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.store_bench",
                    "--store",
                    str(args.store),
                    "--lookup",
                    str(items),
                    "--folder",
                    tmp,
                ],
                cwd=ROOT,
                env=ENV,
                check=True,
                capture_output=True,
                text=True,
            )
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(runs[-1], flush=True)
    keys_per_s = key_rate()
    print(f"keys: {keys_per_s:,.0f} items/s", flush=True)
    journal = journaling(args.journal_items, args.baseline)
    print(journal, flush=True)
    text = section(args.store, generated, runs, keys_per_s, journal, command)
    print(text)
    if args.write:
        write_section("## Verdict store: lookup and journaling", text)
    print(f"load average: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
