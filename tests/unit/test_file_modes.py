"""Files the team shares get the umask's mode (issue 31, point 7): every file the store's atomic
writes, the verdict store and a tool's output (the report page) write, under umask 022 and 027.
A temp file made private (tempfile.mkstemp: 0600) and renamed into place would keep 0600."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.core.storage import open_store
from jobs.core.verdict_store import Journal, VerdictStore
from jobs.tools.published_runs import write_file


@pytest.fixture(params=[0o022, 0o027], ids=["umask022", "umask027"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield int(request.param)
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}


def test_every_file_the_store_and_the_report_write_has_the_umasks_mode(
    tmp_path: Path, umask: int
) -> None:
    root = tmp_path / "out"
    store = open_store(str(root))
    store.write_bytes_atomic(store.join("manifests", "manifest.json"), b"{}")
    store.write_parquet_atomic(store.join("scores", "part-0.parquet"), pa.table({"x": [1]}))
    local = tmp_path / "summary.parquet"
    local.write_bytes(b"PAR1")
    local.chmod(0o600)  # a private source: the copy gets the umask's mode, not the source's
    store.upload_file_atomic(str(local), store.join("summary", "part-0.parquet"))
    verdicts = VerdictStore(store=store, folder="_cache/fp")
    journal = Journal(verdicts, "run1.worker-0", interval_s=2.0)
    journal.add("0" * 32, True, "a reason")
    journal.flush()
    assert verdicts.fold_journal() == 1
    write_file(store, None, "reports/run1.html", b"<html></html>", {})
    found = modes(root)
    assert {"manifests/manifest.json", "reports/run1.html"} <= set(found)
    assert any(name.startswith("_cache/fp/") and name.endswith(".parquet") for name in found)
    files = {name for name in found if (root / name).is_file()}
    assert {name: found[name] for name in files} == dict.fromkeys(files, 0o666 & ~umask)
    folders = set(found) - files
    assert {name: found[name] for name in folders} == dict.fromkeys(folders, 0o777 & ~umask)
