"""`ctxprec cache compact --config FILE`: keep the verdict store small and fast to look up.

For every judge fingerprint under the config's cache path (`cache.path`, else
`<output.path>/_cache`): the journal is folded into the partitions, then each partition's files
are merged into one without the verdicts older than `cache.max_age_days` and without duplicate
keys (`jobs.core.verdict_store.VerdictStore.compact_all`). The per-region cache files of earlier
versions (`<fingerprint>/<file index>/<slot>.parquet`), which nothing reads any more, are
deleted.

Safe while runs write to the store: compaction only deletes the files it merged (written
before it started), so verdicts written meanwhile are kept. Runs do not compact by themselves
(it rewrites the whole store): schedule this after the nightly run, or weekly.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import TextIO

from jobs.core.config import load_config
from jobs.core.storage import Store, open_store
from jobs.core.verdict_store import VerdictStore
from jobs.run import factory

_LEGACY_REGION = re.compile(r"^\d{5}$")
"""A folder of the per-region cache (one per input file index), replaced by the store."""


def fingerprints(store: Store, folder: str) -> list[str]:
    """The judge fingerprint folders under the cache folder."""
    root = store.join(folder)
    if not store.exists(root):
        return []
    entries = store.fs.ls(root, detail=True)
    return sorted(
        str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]
        for entry in entries
        if entry.get("type") == "directory"
    )


def compact_store(store: Store, folder: str, max_age_days: float | None, out: TextIO) -> None:
    """Compact every fingerprint's verdict store under `folder` (see the module's doc)."""
    found = fingerprints(store, folder)
    if not found:
        out.write(f"no verdict store at {store.url(store.join(folder))}\n")
    for fingerprint in found:
        sub = "/".join(part for part in (folder, fingerprint) if part)
        verdicts = VerdictStore(store, sub, max_age_days)
        kept, dropped = verdicts.compact_all()
        legacy = [name for name in fingerprints(store, sub) if _LEGACY_REGION.fullmatch(name)]
        for name in legacy:
            store.rm(store.join(sub, name), recursive=True)
        out.write(
            f"{store.url(store.join(sub))}: {kept:,} verdict(s) kept, {dropped:,} dropped "
            "(expired or duplicate)"
            + (f", {len(legacy)} old per-region folder(s) deleted" if legacy else "")
            + "\n"
        )


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The handler of `ctxprec cache` (its options are defined in jobs.cli)."""
    out = out or sys.stdout
    config = load_config(args.config, args.set)
    url, folder = factory.cache_url(config)
    store = open_store(url, config.output.storage_options)
    compact_store(store, folder, config.cache.max_age_days, out)
    return 0
