"""`ctxprec cache compact --config FILE`: keep the verdict store small and fast to look up.

Per judge fingerprint: the journal folded, each partition's files merged without expired or
duplicate verdicts, old per-region folders deleted. Safe while runs write (docs/running.md).
"""

from __future__ import annotations

import posixpath
import re
import sys
from typing import TextIO

from jobs.core.storage import Store, open_store
from jobs.core.verdict_store import VerdictStore
from jobs.run import factory
from jobs.tools.tool_options import CacheOptions

_LEGACY_REGION = re.compile(r"^\d{5}$")  # a folder of the per-region cache before the store


def fingerprints(store: Store, folder: str) -> list[str]:
    root = store.join(folder)
    if not store.exists(root):
        return []
    listed = store.fs.ls(root, detail=True)
    folders = [entry["name"] for entry in listed if entry["type"] == "directory"]
    return sorted(posixpath.basename(name.rstrip("/")) for name in folders)


def run(options: CacheOptions, out: TextIO | None = None) -> int:
    """`ctxprec cache compact`: compact the verdict store, a line per fingerprint; returns 0."""
    out = out or sys.stdout
    config = options.config.load()
    url, folder = factory.cache_url(config)
    store = open_store(url, config.output.storage_options)
    found = fingerprints(store, folder)
    if not found:
        out.write(f"no verdict store at {store.url(store.join(folder))}\n")
    for fingerprint in found:
        sub = posixpath.join(folder, fingerprint)
        verdicts = VerdictStore(store=store, folder=sub, max_age_days=config.cache.max_age_days)
        kept, dropped = verdicts.compact_all()
        legacy = [name for name in fingerprints(store, sub) if _LEGACY_REGION.fullmatch(name)]
        for name in legacy:
            store.rm(store.join(sub, name), recursive=True)
        deleted = f", {len(legacy)} old per-region folder(s) deleted" if legacy else ""
        out.write(
            f"{store.url(store.join(sub))}: {kept:,} verdict(s) kept, {dropped:,} dropped "
            f"(expired or duplicate){deleted}\n"
        )
    return 0
