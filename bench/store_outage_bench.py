"""What a run sees when its object store goes away: Google Cloud Storage (gcp-storage-emulator)
and Azure Blob (Azurite) on 127.0.0.1, stopped mid-run.

    .venv/bin/python -m bench.store_outage_bench --items 40 --outage 5 --stores gs az

For each store (its emulator started as the tests start it, tests/support/stores.py; input,
output, staging and verdict store all on it; the fake judge over HTTP, one request an item;
Ray local, 2 CPUs), three runs of the same items, each into a fresh prefix:

1. no outage: the run's wall time;
2. the emulator stopped (SIGTERM) once two shards are committed, while requests are in
   flight, and started again `--outage` seconds later on the same port with the same data:
   wall time, calls, the warnings the run logs;
3. the emulator stopped at the same point and left down: how long until the run fails, and
   its error; then the emulator started again and the same run id run again: the calls of
   each attempt, and how many shards the rerun found done.

Writes its section of docs/benchmarks.md (`--no-write`: print it only).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import common
from jobs.core.run_layout import RunLocation
from jobs.engine.ray_runtime import RAY_ENV, set_env_defaults
from jobs.run.job import run_job
from jobs.tools.sample_data import generate

# tests/ is not type-checked (mypy checks jobs, scorer_core and bench)
stores: Any = importlib.import_module("tests.support.stores")
store_runs: Any = importlib.import_module("tests.support.store_runs")
fake: Any = importlib.import_module("tests.fake_judge")
hooks: Any = importlib.import_module("tests.support.hooks")
job_support: Any = importlib.import_module("tests.support.job")
processes: Any = importlib.import_module("tests.support.processes")

HEADING = "## An object store that goes away mid-run (issue 46)"
RUN_DATE = dt.date(2026, 12, 6)


class Warnings(logging.Handler):
    """The WARNING-and-above lines the run logs (every logger), as a user sees them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name}: {record.getMessage().splitlines()[0][:160]}")


def _committed(store: Any, out: str, location: RunLocation) -> int:
    try:
        return len(store.fs().find(store.path(f"{out}/{location.staging}/items")))
    except OSError:
        return 0


def _config(store: Any, source: str, out: str, server: Any, run_id: str) -> Any:
    return store_runs.store_config(
        store,
        source,
        out,
        judge=processes.lean_judge(server),
        rate_limit={"max_concurrency": 2},
        ray={"shard_size": 5, "workers": 2},
        run={"id": run_id, "date": RUN_DATE.isoformat()},
    )


def _run(
    store: Any, items: int, folder: Path, during: Callable[[Any], None] | None
) -> dict[str, Any]:
    """One run of `items` items on a fresh prefix; `during(emulator)` once two shards are
    committed and requests are held (it returns when the test's outage is set up)."""
    rows = list(generate(items, seed=67, markers=True))
    prefix = store.fresh_prefix()
    source, out = f"{prefix}/in/items.jsonl", f"{prefix}/out"
    store_runs.upload_rows(store, rows, source, folder)
    location = RunLocation("outage", RUN_DATE)
    gate = hooks.HoldRequests(when=lambda arrival: _committed(store, out, location) >= 2)
    server = fake.FakeJudgeServer(on_request=gate).start()
    config = _config(store, source, out, server, "outage")
    warnings = Warnings()
    logging.getLogger().addHandler(warnings)
    result: dict[str, Any] = {"items": items}
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = run_job(config)
        except Exception as exc:  # what the user sees
            outcome["error"] = exc

    started = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        if during is not None:
            gate.wait_held(1, timeout_s=300)
            result["stopped_after_s"] = time.monotonic() - started
            during(store.emulator)
    finally:
        gate.release()
    thread.join()
    result["seconds"] = time.monotonic() - started
    result["calls"] = job_support.verdict_requests(server)
    logging.getLogger().removeHandler(warnings)
    result["warnings"] = warnings.lines
    error = outcome.get("error")
    result["error"] = None if error is None else f"{type(error).__name__}: {error}"
    if error is not None:  # the store back, the same run id again
        if not store.emulator.reachable():
            store.emulator.start()
        before = job_support.verdict_requests(server)
        rerun = run_job(config)
        result["rerun_calls"] = job_support.verdict_requests(server) - before
        result["rerun_reused"] = f"{rerun.shards_skipped} of {rerun.shards_total}"
    server.stop()
    return result


def _outage(seconds: float) -> Callable[[Any], None]:
    def during(emulator: Any) -> None:
        emulator.stop()

        def back() -> None:
            time.sleep(seconds)
            emulator.start()

        threading.Thread(target=back, daemon=True).start()

    return during


def _down(emulator: Any) -> None:
    emulator.stop()


def _measure(scheme: str, items: int, outage: float, folder: Path) -> list[dict[str, Any]]:
    start = {"gs": stores.start_gcs, "az": stores.start_azurite}[scheme]
    (folder / scheme).mkdir()
    emulator, store = start(folder / scheme)
    try:
        runs = []
        for name, during in (
            ("no outage", None),
            (f"down {outage:.0f} s, then back", _outage(outage)),
            ("down for good (then back for the rerun)", _down),
        ):
            result = _run(store, items, folder, during)
            result["store"], result["case"] = scheme, name
            print(result, flush=True)
            runs.append(result)
        return runs
    finally:
        emulator.stop()


def _row(result: dict[str, Any]) -> str:
    rerun = ""
    if result["error"] is not None:
        rerun = f"{result['rerun_calls']} calls, {result['rerun_reused']} shards reused"
    warnings = sorted({line.split(": ", 1)[0] for line in result["warnings"]})
    cells = [
        f"`{result['store']}://`",
        result["case"],
        f"{result.get('stopped_after_s', 0):.1f}" if "stopped_after_s" in result else "",
        f"{result['seconds']:.1f}",
        f"{result['calls']} for {result['items']}",
        "completed" if result["error"] is None else f"`{result['error'][:300]}`",
        rerun,
        f"{len(result['warnings'])} ({', '.join(warnings)})" if warnings else "0",
    ]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--outage", type=float, default=5.0, help="seconds the store is down")
    parser.add_argument("--stores", nargs="+", default=["gs", "az"], choices=["gs", "az"])
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    args = parser.parse_args()
    set_env_defaults()
    import ray

    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": RAY_ENV})
    results = []
    with contextlib.ExitStack() as stack:
        stack.callback(ray.shutdown)
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="outage-")))
        os.environ[job_support.KEY_ENV] = job_support.KEY_VALUE  # the fake judge's key
        for scheme in args.stores:
            results += _measure(scheme, args.items, args.outage, folder)
    command = "python -m bench.store_outage_bench"
    command += f" --items {args.items} --outage {args.outage:g} --stores {' '.join(args.stores)}"
    lines = [
        "| store | case | stopped after s | run s | judge calls | what the run did | "
        "the rerun | warnings logged (by) |",
        "|---|---|---:|---:|---|---|---|---|",
        *(_row(result) for result in results),
    ]
    section = "\n".join([HEADING, "", common.header(command), "", *lines])
    print(section)
    if not args.no_write:
        common.write_section(HEADING, section)


if __name__ == "__main__":
    main()
