"""The verdict store and the workers' journal (jobs.core.verdict_store), on real Parquet files in a
local store: found by pair key whatever wrote it, safe with two writers at once, retention,
compaction, and a crash at every step of journaling, folding and compacting losing nothing
that was flushed. Clocks are fakes; nothing sleeps."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pytest

from jobs.core.storage import Store, open_store
from jobs.core.verdict_store import PARTITIONS, SECONDS_PER_DAY, Journal, VerdictStore


def partition_of(key: str) -> int:
    """The store partition of a pair key: its first two hex digits."""
    return int(key[:2], 16)


def key(n: int) -> str:
    """A pair key like `jobs.core.verdict_cache.pair_key`'s: 32 hex digits of a sha256."""
    return hashlib.sha256(str(n).encode()).hexdigest()[:32]


@dataclass
class Clock:
    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def store_at(tmp_path: Path) -> Store:
    return open_store(str(tmp_path / "out"))


def lookup_all(verdicts: VerdictStore, keys: list[str]) -> dict[str, tuple[bool, str]]:
    """Every verdict the store holds for `keys`, partition by partition, as a run looks up."""
    found: dict[str, tuple[bool, str]] = {}
    by_partition: dict[int, list[str]] = {}
    for k in keys:
        by_partition.setdefault(partition_of(k), []).append(k)
    for partition, wanted in by_partition.items():
        rows = verdicts.lookup(partition, pl.Series(wanted))
        assert rows["pair_key"].is_unique().all()
        for pair, relevant, reason, _ in rows.iter_rows():
            found[pair] = (relevant, reason)
    return found


def test_a_flushed_verdict_is_found_by_its_key_after_the_journal_is_folded(
    tmp_path: Path,
) -> None:
    clock = Clock()
    verdicts = VerdictStore(store=store_at(tmp_path), folder="_cache/fp", clock=clock)
    journal = Journal(verdicts, "run1.worker-0", interval_s=2.0)
    for n in range(300):
        journal.add(key(n), n % 3 == 0, f"reason {n}")
    assert verdicts.journal_files() == []  # nothing is written before a flush
    journal.flush()
    assert len(verdicts.journal_files()) == 1 and journal.flushed == 300
    assert verdicts.fold_journal() == 300
    assert verdicts.journal_files() == []
    found = lookup_all(verdicts, [key(n) for n in range(400)])
    assert found == {key(n): (n % 3 == 0, f"reason {n}") for n in range(300)}
    # every verdict sits in the partition its key names
    for partition in range(PARTITIONS):
        for path in verdicts.partition_files(partition):
            keys = verdicts.read_file(path)["pair_key"].to_list()
            assert {partition_of(k) for k in keys} == {partition}


def test_two_writers_at_once_in_the_same_millisecond_lose_nothing(tmp_path: Path) -> None:
    clock = Clock()  # frozen: both writers name their files at the same millisecond
    verdicts = VerdictStore(store=store_at(tmp_path), folder="_cache/fp", clock=clock)
    first = Journal(verdicts, "run-a.worker-0")
    second = Journal(verdicts, "run-a.worker-0")  # even the same writer name
    for n in range(100):
        first.add(key(n), True, "a")
        second.add(key(n + 50), False, "b")  # 50 keys judged by both
    first.flush()
    second.flush()
    assert len(verdicts.journal_files()) == 2
    # two runs fold at once: both read the same journal files and write partition files
    other = VerdictStore(store=verdicts.store, folder="_cache/fp", clock=clock)
    listed = verdicts.journal_files()
    verdicts.fold_journal("run-a.fold")
    assert other.journal_files() == []
    for path in listed:  # the second fold had listed them too: deleting is idempotent
        other.store.rm(path)
    found = lookup_all(verdicts, [key(n) for n in range(150)])
    assert len(found) == 150
    assert all(found[key(n)] == (True, "a") for n in range(50))
    assert all(found[key(n)] == (False, "b") for n in range(100, 150))


class WritesDuringCompaction(Store):
    """A store where another run writes a new file while a compaction deletes its inputs."""

    def __init__(self, base: Store, write: Callable[[], None]) -> None:
        super().__init__(fs=base.fs, root=base.root, protocol=base.protocol)
        self._write = write
        self.done = False

    def rm(self, path: str, recursive: bool = False) -> None:
        if not self.done:
            self.done = True
            self._write()
        super().rm(path, recursive)


def test_a_verdict_written_while_a_partition_is_compacted_is_kept(tmp_path: Path) -> None:
    clock = Clock()
    base = store_at(tmp_path)
    writer = VerdictStore(store=base, folder="_cache/fp", clock=clock)
    keys = [k for k in (key(n) for n in range(5000)) if partition_of(k) == 7][:6]
    for k in keys[:4]:
        writer.write(writer.partition_folder(7), "old", writer.rows([(k, True, "old")]))
    late = keys[4]
    store = WritesDuringCompaction(
        base,
        lambda: writer.write(writer.partition_folder(7), "late", writer.rows([(late, False, "x")])),
    )
    compacting = VerdictStore(store=store, folder="_cache/fp", clock=clock)
    assert compacting.compact(7) == (4, 0)
    assert store.done
    assert len(writer.partition_files(7)) == 2  # the merged file and the late one
    assert lookup_all(writer, keys) == {
        **{k: (True, "old") for k in keys[:4]},
        late: (False, "x"),
    }


def test_retention_hides_old_verdicts_and_compaction_deletes_them(tmp_path: Path) -> None:
    clock = Clock()
    verdicts = VerdictStore(
        store=store_at(tmp_path), folder="_cache/fp", max_age_days=30, clock=clock
    )
    old = [key(n) for n in range(40)]
    new = [key(n) for n in range(40, 80)]
    journal = Journal(verdicts, "w")
    for k in old:
        journal.add(k, True, "old")
    journal.flush()
    clock.now += 31 * SECONDS_PER_DAY
    for k in new:
        journal.add(k, False, "new")
    journal.flush()
    verdicts.fold_journal()
    assert set(lookup_all(verdicts, old + new)) == set(new)  # the old ones are expired
    forever = VerdictStore(store=verdicts.store, folder="_cache/fp", clock=clock)
    assert set(lookup_all(forever, old + new)) == set(old + new)  # no retention: all found
    kept, dropped = verdicts.compact_all()
    assert (kept, dropped) == (40, 40)
    assert set(lookup_all(forever, old + new)) == set(new)  # deleted for good
    assert all(len(verdicts.partition_files(p)) <= 1 for p in range(PARTITIONS))


def test_compaction_merges_a_partitions_files_keeping_each_keys_newest(tmp_path: Path) -> None:
    clock = Clock()
    verdicts = VerdictStore(store=store_at(tmp_path), folder="_cache/fp", clock=clock)
    keys = [k for k in (key(n) for n in range(5000)) if partition_of(k) == 3][:5]
    for round_number in range(4):  # four nights judged the same pairs
        clock.now += 60
        rows = verdicts.rows((k, round_number % 2 == 0, f"night {round_number}") for k in keys)
        verdicts.write(verdicts.partition_folder(3), f"night{round_number}", rows)
    assert len(verdicts.partition_files(3)) == 4
    assert verdicts.compact(3) == (5, 15)
    (merged,) = verdicts.partition_files(3)
    assert verdicts.read_file(merged).height == 5
    assert lookup_all(verdicts, keys) == {k: (False, "night 3") for k in keys}
    assert verdicts.compact(3) == (5, 0)  # one clean file: left as it is
    assert verdicts.partition_files(3) == [merged]


def test_unreadable_or_vanished_files_cost_hits_never_a_run(tmp_path: Path) -> None:
    clock = Clock()
    verdicts = VerdictStore(store=store_at(tmp_path), folder="_cache/fp", clock=clock)
    k = key(1)
    path = verdicts.write(
        verdicts.partition_folder(partition_of(k)), "w", verdicts.rows([(k, True, "r")])
    )
    Path(path).write_bytes(b"not parquet")
    assert lookup_all(verdicts, [k]) == {}
    assert verdicts.read_file(path + ".gone").is_empty()


def test_a_retried_worker_takes_over_what_its_dead_attempt_journaled(tmp_path: Path) -> None:
    clock = Clock()
    verdicts = VerdictStore(store=store_at(tmp_path), folder="_cache/fp", clock=clock)
    dead = Journal(verdicts, "run1.worker-1")
    neighbour = Journal(verdicts, "run1.worker-10")
    for n in range(10):
        dead.add(key(n), True, "dead")
        neighbour.add(key(100 + n), True, "other")
    dead.flush()
    neighbour.flush()
    dead.add(key(99), True, "never flushed")  # the process died before this flush
    retried = Journal(verdicts, "run1.worker-1")
    assert retried.take_over() == 10
    assert {k for k in retried.recent} == {key(n) for n in range(10)}
    assert retried.get(key(3)) == (True, "dead") and retried.pending == 0


def test_the_journals_memory_is_bounded() -> None:
    journal = Journal(VerdictStore(store=None, folder="x"), "w", memory=100)  # type: ignore[arg-type]
    for n in range(1000):
        journal.add(key(n), True, "")
    assert len(journal.recent) == 100 and journal.get(key(999)) is not None
    assert journal.get(key(0)) is None and journal.pending == 1000


class Crash(Exception):
    """The process died here."""


@dataclass
class CrashingStore(Store):
    """A local store whose `crash_at`-th change (a write or a delete) kills the process: a write
    leaves its torn temp file behind, as a SIGKILL inside `write_bytes_atomic` does."""

    crash_at: int = -1
    changes: int = field(default=0)

    def _step(self) -> bool:
        self.changes += 1
        return self.changes == self.crash_at

    def write_bytes_atomic(self, path: str, data: bytes) -> None:
        if self._step():
            folder, name = path.rsplit("/", 1)
            Path(folder).mkdir(parents=True, exist_ok=True)
            Path(folder, f".{name}.tmp-crash").write_bytes(data[: len(data) // 2])
            raise Crash(path)
        super().write_bytes_atomic(path, data)

    def rm(self, path: str, recursive: bool = False) -> None:
        if self._step():
            raise Crash(path)
        super().rm(path, recursive)


# The night's keys fall in 4 partitions: every store change is a step to crash at.
FEW = [k for k in (key(n) for n in range(20_000)) if partition_of(k) < 4][:80]


def _night(verdicts: VerdictStore, clock: Clock, durable: dict[str, tuple[bool, str]]) -> None:
    """Journal three flushes of verdicts (a key judged twice), fold, judge more, compact.
    `durable` gets each flush's verdicts once the flush returned."""
    journal = Journal(verdicts, "run.worker-0")
    for flush in range(3):
        batch = {FEW[n]: (n % 2 == 0, f"f{flush} n{n}") for n in range(flush * 20, flush * 20 + 30)}
        for k, (relevant, reason) in batch.items():
            journal.add(k, relevant, reason)
        clock.now += journal.interval_s
        journal.flush()
        durable.update(batch)
        if flush == 1:
            verdicts.fold_journal("run.fold")
    verdicts.compact_all()


def test_a_crash_at_every_step_loses_nothing_that_was_flushed(tmp_path: Path) -> None:
    """Run the night once whole to count its store changes, then again crashing at each of
    them in turn; after each crash a rerun's fold and lookup find every flushed verdict, once,
    with the value of its latest flush."""
    clock = Clock()
    base = store_at(tmp_path / "whole")
    counting = CrashingStore(fs=base.fs, root=base.root, protocol=base.protocol)
    whole: dict[str, tuple[bool, str]] = {}
    _night(VerdictStore(store=counting, folder="_cache/fp", clock=clock), clock, whole)
    steps = counting.changes
    assert steps > 10
    wanted = FEW
    assert lookup_all(VerdictStore(store=base, folder="_cache/fp"), wanted) == whole
    for crash_at in range(1, steps + 1):
        root = store_at(tmp_path / f"crash{crash_at}")
        store = CrashingStore(fs=root.fs, root=root.root, protocol=root.protocol, crash_at=crash_at)
        clock = Clock()
        durable: dict[str, tuple[bool, str]] = {}
        with pytest.raises(Crash):
            _night(VerdictStore(store=store, folder="_cache/fp", clock=clock), clock, durable)
        rerun = VerdictStore(
            store=root, folder="_cache/fp", clock=clock
        )  # the rerun: same files, no crash
        rerun.fold_journal("rerun.fold")
        found = lookup_all(rerun, wanted)
        assert {k: found.get(k) for k in durable} == durable, f"crash at change {crash_at}"
        assert set(found) <= set(whole)


def test_ctxprec_cache_compact_folds_merges_expires_and_removes_old_region_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobs.cli import main as ctxprec

    out = tmp_path / "out"
    config = tmp_path / "job.yaml"
    config.write_text(
        f"input: {{path: {tmp_path / 'in.jsonl'}}}\noutput: {{path: {out}}}\n"
        "cache: {max_age_days: 30}\n"
    )
    clock = Clock(now=time.time())
    verdicts = VerdictStore(store=store_at(tmp_path), folder="_cache/fp1", clock=clock)
    expired = [key(n) for n in range(10)]
    fresh = [key(n) for n in range(10, 30)]
    old = Journal(verdicts, "night1.worker-0")
    clock.now -= 40 * SECONDS_PER_DAY
    for k in expired:
        old.add(k, True, "old")
    old.flush()
    clock.now += 40 * SECONDS_PER_DAY
    verdicts.fold_journal()
    for n in range(2):  # two journal files of a later night, the same verdicts in both
        journal = Journal(verdicts, f"night2.worker-{n}")
        for k in fresh:
            journal.add(k, False, "new")
        journal.flush()
    legacy = out / "_cache" / "fp1" / "00000"
    legacy.mkdir()
    (legacy / "00000001.parquet").write_bytes(b"old per-region cache file")

    assert ctxprec(["cache", "compact", "--config", str(config)]) == 0
    printed = capsys.readouterr().out
    assert "20 verdict(s) kept, 30 dropped (expired or duplicate)" in printed
    assert "1 old per-region folder(s) deleted" in printed
    assert verdicts.journal_files() == [] and not legacy.exists()
    forever = VerdictStore(store=verdicts.store, folder="_cache/fp1")
    assert lookup_all(forever, expired + fresh) == {k: (False, "new") for k in fresh}
    files = [verdicts.partition_files(p) for p in range(PARTITIONS)]
    assert all(len(f) <= 1 for f in files)
