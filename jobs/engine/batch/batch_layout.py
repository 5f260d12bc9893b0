"""Where batch mode keeps its work under the run's staging area (`batch/`: run.json, each
round's request lines and their index, the shards' frozen cache views, the rounds' batches,
the replies), written atomically through the output store, and how it is read back."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.core.run_layout import parquet_files
from jobs.core.schema import BATCH_REPLIES, BATCH_REQUESTS
from jobs.core.storage import Store
from jobs.core.verdict_cache import VerdictCache, decode_entries
from jobs.engine.batch.batch_judge import RecordedRequest, Reply
from scorer_core.types import Usage


@dataclass(frozen=True)
class BatchLayout:
    """The batch folder of one run in the output store."""

    store: Store
    staging: str  # the run's staging folder, relative to the store's root

    def path(self, *parts: str) -> str:
        return self.store.join(self.staging, "batch", *parts)

    @property
    def run_file(self) -> str:
        return self.path("run.json")

    def requests_file(self, round_number: int, shard_id: str) -> str:
        return self.path("requests", _round(round_number), f"{shard_id}.jsonl")

    def index_file(self, round_number: int, shard_id: str) -> str:
        return self.path("requests", _round(round_number), f"{shard_id}.parquet")

    def frozen_cache(self, shard_id: str) -> str:
        return self.path("cache", f"{shard_id}.parquet")

    def round_file(self, round_number: int) -> str:
        return self.path("rounds", f"{_round(round_number)}.json")

    def replies_file(self, shard_id: str, name: str) -> str:
        return self.path("replies", shard_id, f"{name}.parquet")

    def indexed_shards(self, round_number: int) -> set[str]:
        """The shards whose requests for `round_number` are complete (their index exists)."""
        folder = self.path("requests", _round(round_number))
        paths = parquet_files(self.store, folder)
        return {path.rsplit("/", 1)[-1].removesuffix(".parquet") for path in paths}

    def rounds_planned(self) -> list[int]:
        """The round numbers that have a round file, in order."""
        found = []
        for path in self.store.list(self.path("rounds")):
            name = path.rsplit("/", 1)[-1]
            if name.startswith("round=") and name.endswith(".json"):
                found.append(int(name.removeprefix("round=").removesuffix(".json")))
        return sorted(found)

    def rounds_built(self) -> list[int]:
        """The round numbers with request files, in order."""
        found = set()
        for path in self.store.list(self.path("requests")):
            folder = path.rsplit("/", 2)[-2]
            if folder.startswith("round="):
                found.add(int(folder.removeprefix("round=")))
        return sorted(found)

    def read_index(self, round_number: int, shard_id: str) -> pa.Table:
        return _read_parquet(self.store, self.index_file(round_number, shard_id))

    def read_request_lines(self, round_number: int, shard_id: str) -> list[bytes]:
        """The shard's request lines for the round, newline included, in index order."""
        data = self.store.read_bytes(self.requests_file(round_number, shard_id))
        return data.splitlines(keepends=True)

    def read_replies(self, shard_id: str) -> dict[str, Reply]:
        """Every reply of the shard so far, by custom_id (the best of several: `_better`)."""
        replies: dict[str, Reply] = {}
        for path in parquet_files(self.store, self.path("replies", shard_id)):
            for row in _read_parquet(self.store, path).to_pylist():
                reply = _reply_of_row(row)
                replies[row["custom_id"]] = _better(replies.get(row["custom_id"]), reply)
        return replies

    def read_frozen_cache(self, shard_id: str) -> VerdictCache | None:
        """The cache view the shard's first pass froze, if it did."""
        path = self.frozen_cache(shard_id)
        if not self.store.exists(path):
            return None
        return VerdictCache(known=decode_entries(self.store.read_bytes(path)))

    def online_round(self, round_number: int) -> bool:
        """Whether round `round_number`'s pass asks online (judge.batch.deadline neared)."""
        data = self.read_json(self.round_file(round_number))
        return bool(data and data.get("online"))

    def read_json(self, path: str) -> dict[str, Any] | None:
        return json.loads(self.store.read_bytes(path)) if self.store.exists(path) else None

    def write_requests(
        self, round_number: int, shard_id: str, requests: Sequence[RecordedRequest]
    ) -> None:
        """The lines first, their index last: the index marks the shard's pass as done."""
        lines = b"".join(request.line for request in requests)
        self.store.write_bytes_atomic(self.requests_file(round_number, shard_id), lines)
        index = pa.table(
            {
                "custom_id": [request.custom_id for request in requests],
                "bytes": [len(request.line) for request in requests],
                "tokens": [request.tokens for request in requests],
            },
            schema=BATCH_REQUESTS.arrow,
        )
        self.store.write_parquet_atomic(self.index_file(round_number, shard_id), index)

    def write_replies(self, shard_id: str, name: str, replies: Iterable[tuple[str, Reply]]) -> None:
        rows = [_row_of_reply(request_id, reply) for request_id, reply in replies]
        table = pa.Table.from_pylist(rows, schema=BATCH_REPLIES.arrow)
        self.store.write_parquet_atomic(self.replies_file(shard_id, name), table)

    def write_json(self, path: str, data: dict[str, Any]) -> None:
        self.store.write_bytes_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode())


def _row_of_reply(request_id: str, reply: Reply) -> dict[str, Any]:
    """A row of the replies table (`jobs.core.schema.BATCH_REPLIES`) for one reply."""
    usage = reply.usage
    return {
        "custom_id": request_id,
        "text": reply.text,
        "error": reply.error,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "retry": reply.retry,
        "cached_prompt_tokens": usage.cached_prompt_tokens,
        "cache_creation_tokens": usage.cache_creation_tokens,
    }


def _reply_of_row(row: dict[str, Any]) -> Reply:
    """The reply a row of the replies table holds (files of older versions lack the retry and
    cache columns); a transient failure read back counts one try."""
    usage = Usage(
        prompt_tokens=int(row["prompt_tokens"] or 0),
        completion_tokens=int(row["completion_tokens"] or 0),
        cached_prompt_tokens=int(row.get("cached_prompt_tokens") or 0),
        cache_creation_tokens=int(row.get("cache_creation_tokens") or 0),
    )
    retry = row.get("retry")
    tries = 1 if retry and row["text"] is None else 0
    return Reply(text=row["text"], error=row["error"], usage=usage, retry=retry, tries=tries)


def _better(kept: Reply | None, new: Reply) -> Reply:
    """The reply that answers a request seen twice: a text over any error, a final error over
    a transient one, else the first; transient failures add up their `tries`."""
    if kept is None:
        return new
    if kept.transient and new.transient:
        return dataclasses.replace(kept, tries=kept.tries + new.tries)
    if kept.transient or (kept.text is None and new.text is not None):
        return new
    return kept


def _round(round_number: int) -> str:
    return f"round={round_number:03d}"


def _read_parquet(store: Store, path: str) -> pa.Table:
    return pq.read_table(io.BytesIO(store.read_bytes(path)))
