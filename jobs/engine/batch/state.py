"""A round's batches as the driver records them (one JSON file per round, rewritten after
every change, so a killed driver's rerun polls what it submitted and creates nothing twice),
and the cutting of a round's requests into batches within the provider's limits."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: Statuses after which a batch changes no more (OpenAI's; litellm passes them through).
FINAL_STATUSES = frozenset({"completed", "expired", "cancelled", "failed"})

Part = tuple[str, int, int]
"""Lines [start, end) of one shard's requests file for the round."""


@dataclass(frozen=True, kw_only=True)
class BatchRecord:
    """One batch of a round."""

    name: str
    parts: tuple[Part, ...]
    requests: int
    bytes: int
    tokens: int
    file_id: str | None = None
    batch_id: str | None = None
    status: str | None = None
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: str | None = None
    ingested: bool = False
    submitted_at: str | None = None
    polled_at: str | None = None
    # Set at ingest: the requests that failed transiently, by reason (sent again in the next
    # round), and those that failed for good.
    retried: dict[str, int] = field(default_factory=dict)
    final_errors: int = 0
    # judge.batch.deadline neared while the batch ran (it was cancelled) or before it was
    # submitted: the driver waits for it no more, its requests go online.
    stopped: bool = False

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES or self.stopped

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchRecord:
        """From `RoundState.to_dict` (a round file of an older version lacks later fields)."""
        values = dict(data)
        values["parts"] = tuple(
            (str(shard_id), int(start), int(end)) for shard_id, start, end in values["parts"]
        )
        retried = values.get("retried") or {}
        values["retried"] = {str(reason): int(count) for reason, count in retried.items()}
        return cls(**values)


@dataclass(frozen=True, kw_only=True)
class RoundState:
    """The batches of one round, in submission order."""

    round: int
    batches: tuple[BatchRecord, ...]
    planned_at: str = field(default_factory=lambda: now_iso())
    # The round's pass went online (judge.batch.deadline neared): it has no batches.
    online: bool = False

    def replace(self, record: BatchRecord) -> RoundState:
        """This state with `record` in place of the batch of the same name."""
        batches = tuple(record if batch.name == record.name else batch for batch in self.batches)
        return dataclasses.replace(self, batches=batches)

    def counts(self) -> dict[str, int]:
        """Requests in the round: total, completed and failed as last polled."""
        return {
            "total": sum(batch.requests for batch in self.batches),
            "completed": sum(batch.completed for batch in self.batches),
            "failed": sum(batch.failed for batch in self.batches),
        }

    def retried(self) -> dict[str, int]:
        """The round's transient failures by reason (asked again after it), as ingested."""
        total: Counter[str] = Counter()
        for batch in self.batches:
            total += Counter(batch.retried)
        return dict(sorted(total.items()))

    def summary(self) -> dict[str, Any]:
        """The round for the manifest (`jobs.core.run_manifest.BatchRoundRecord`)."""
        counts = self.counts()
        return {
            "round": self.round,
            "batches": len(self.batches),
            "requests": counts["total"],
            "completed": counts["completed"],
            "failed": counts["failed"],
            "retried": self.retried(),
            "final_errors": sum(batch.final_errors for batch in self.batches),
            "stopped_at_deadline": sum(1 for batch in self.batches if batch.stopped),
            "online": self.online,
        }

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoundState:
        return cls(
            round=int(data["round"]),
            batches=tuple(BatchRecord.from_dict(batch) for batch in data["batches"]),
            planned_at=str(data.get("planned_at", "")),
            online=bool(data.get("online", False)),
        )


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class BatchPacker:
    """Cuts request lines into batches within the provider's limits (`max_tokens` 0: none),
    one line at a time (a shard's lines may span two batches); `close` after the last line."""

    def __init__(
        self, round_number: int, *, max_requests: int, max_bytes: int, max_tokens: int
    ) -> None:
        self._round = round_number
        self._max_requests = max_requests
        self._max_bytes = max_bytes
        self._max_tokens = max_tokens
        self.batches: list[BatchRecord] = []
        self._parts: list[Part] = []
        self._open: tuple[str, int] | None = None  # the part being filled: shard, first line
        self._last = 0
        self._count = self._bytes = self._tokens = 0

    def add(self, shard_id: str, index: int, nbytes: int, ntokens: int) -> None:
        """Line `index` of shard `shard_id`, in order; ValueError when it fits in no batch."""
        max_tokens = self._max_tokens
        if nbytes > self._max_bytes or (max_tokens and ntokens > max_tokens):
            raise ValueError(
                f"request {index} of shard {shard_id} ({nbytes} bytes, ~{ntokens} tokens) "
                f"is larger than one batch may be (judge.batch.max_bytes_per_batch "
                f"{self._max_bytes}, max_enqueued_tokens {max_tokens or 'unlimited'})"
            )
        if (
            self._count + 1 > self._max_requests
            or self._bytes + nbytes > self._max_bytes
            or (max_tokens and self._tokens + ntokens > max_tokens)
        ):
            self.close()
        if self._open is not None and self._open[0] != shard_id:
            self._end_part()
        if self._open is None:
            self._open = (shard_id, index)
        self._last = index
        self._count += 1
        self._bytes += nbytes
        self._tokens += ntokens

    def _end_part(self) -> None:
        if self._open is not None:
            self._parts.append((self._open[0], self._open[1], self._last + 1))
            self._open = None

    def close(self) -> None:
        """End the batch being filled."""
        self._end_part()
        if self._count:
            name = f"r{self._round:03d}-b{len(self.batches):04d}"
            batch = BatchRecord(
                name=name,
                parts=tuple(self._parts),
                requests=self._count,
                bytes=self._bytes,
                tokens=self._tokens,
            )
            self.batches.append(batch)
        self._parts = []
        self._count = self._bytes = self._tokens = 0


def split_batches(
    round_number: int,
    shards: Sequence[tuple[str, Sequence[int], Sequence[int]]],
    *,
    max_requests: int,
    max_bytes: int,
    max_tokens: int,
) -> list[BatchRecord]:
    """The round's requests cut into batches (`BatchPacker`), in shard order; `shards` are
    (shard id, bytes of each line, tokens of each line)."""
    packer = BatchPacker(
        round_number, max_requests=max_requests, max_bytes=max_bytes, max_tokens=max_tokens
    )
    for shard_id, line_bytes, line_tokens in shards:
        for index, (nbytes, ntokens) in enumerate(zip(line_bytes, line_tokens, strict=True)):
            packer.add(shard_id, index, nbytes, ntokens)
    packer.close()
    return packer.batches
