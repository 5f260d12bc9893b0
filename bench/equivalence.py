"""Behaviour kept across a refactor: the same runs, their published tables compared column by
column.

    python -m bench.equivalence produce --out DIR [--items 2000]
    python -m bench.equivalence compare DIR_BEFORE DIR_AFTER

`produce` runs, each in a fresh process with its own local Ray, against the fake judge over
real HTTP (its own process): an online run of a generated sample with the verdict store on, a
second run of the same sample (answered from the store), and a batch-mode run through the fake
Files + Batches API. Run ids and dates are fixed. `compare` reads every published table of
both folders and compares them column by column, rows sorted by their keys; columns that hold
times (seconds, written_at, the manifest's timings) are left out and listed. Exit 1 on any
difference.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from bench.common import ENV, KEY_ENV, serving
from tests.support.job import COLUMNS

ROOT = Path(__file__).resolve().parents[1]
# Columns that hold times or durations: they differ from run to run by nature.
TIMED = {"seconds", "written_at", "latency_s", "started_at", "finished_at", "published_at"}
# The summary's metrics that are times or rates over time.
TIMED_METRICS = ("seconds", "per_second", "latency", "wall", "duration")
RUNS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("online", "online-1", {}),
    ("online-again", "online-2", {}),
    ("batch", "batch-1", {"mode": "batch", "batch": {"poll_interval_s": 0.2}}),
)


def _fake_judge(module: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        module,
        "--port",
        "0",
        "--max-seconds",
        "3600",
        "--batch-steps-per-retrieve",
        "1",
    ]


def _config(source: Path, out: Path, url: str, judge: dict[str, Any]) -> dict[str, Any]:
    return {
        "input": {"path": str(source), "format": "jsonl", "columns": COLUMNS},
        "output": {"path": str(out)},
        "judge": {
            "model": "openai/fake-judge",
            "api_base": url,
            "api_key_env": KEY_ENV,
            "transport": "http",
            **judge,
        },
        "scorer": {"scale": 1, "reason": "template"},
        "ray": {"shard_size": 250, "workers": 2},
        "cache": {"enabled": True},
        "run": {"date": "2026-12-01"},
    }


def produce(out: Path, items: int, module: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    source = out / "items.jsonl"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.tools.sample_data",
            "--out",
            str(source),
            "--items",
            str(items),
            "--markers",
        ],
        cwd=ROOT,
        env=ENV,
        check=True,
    )
    with serving(_fake_judge(module), "fake judge", ENV) as url:
        for name, run_id, judge in RUNS:
            # the batch run writes to its own output with its own store
            target = out / ("published-batch" if judge else "published")
            config = _config(source, target, url, judge)
            if not judge:
                config["cache"]["path"] = str(out / "store")
            config_path = out / f"{name}.yaml"
            config_path.write_text(yaml.safe_dump(config))
            command = [sys.executable, "-m", "jobs.context_precision", "--config"]
            command += [str(config_path), "--set", f"run.id={run_id}"]
            done = subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True)
            (out / f"{name}.log").write_text(done.stdout + done.stderr)
            if done.returncode != 0:
                raise SystemExit(f"{name} exited {done.returncode}: see {out / (name + '.log')}")
            print(f"{name}: done", file=sys.stderr)


def _tables(root: Path) -> Iterator[tuple[str, pl.DataFrame]]:
    for folder in ("published", "published-batch"):
        for table in ("scores", "verdicts", "summary"):
            for run in sorted((root / folder / table).glob("run_date=*/run_id=*")):
                files = sorted(run.glob("*.parquet"))
                name = f"{folder}/{table}/{run.parent.name}/{run.name}"
                frame = pl.concat([pl.read_parquet(f) for f in files], how="diagonal")
                yield name, _normalised(frame, root)


def _normalised(frame: pl.DataFrame, root: Path) -> pl.DataFrame:
    """Paths relative to the run's folder; the fake judge's reason without the context number
    of the request that answered (a pair two concurrent items share is answered by whichever
    asked first)."""
    if "source" in frame.columns:
        frame = frame.with_columns(pl.col("source").str.replace(str(root), "", literal=True))
    if "judge_reason" in frame.columns:
        frame = frame.with_columns(pl.col("judge_reason").str.replace(r"Context \d+", "Context"))
    return frame


def _manifests(root: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(root.glob("published*/**/manifest.json")):
        yield str(path.relative_to(root)), json.loads(path.read_text())


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    keys = [c for c in ("query_id", "item_seq", "position", "metric", "segment") if c in frame]
    others = [c for c in frame.columns if c not in keys and frame[c].dtype != pl.Object]
    return frame.sort([*keys, *others], nulls_last=True)


def _without_times(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    dropped = [c for c in frame.columns if c in TIMED]
    frame = frame.drop(dropped)
    if "metric" in frame.columns:
        timed = pl.lit(False)
        for word in TIMED_METRICS:
            timed = timed | pl.col("metric").str.contains(word)
        frame = frame.filter(~timed)
    return frame, dropped


RELATIVE = 1e-9
"""Floats this close are the same number computed another way (say, scipy's t quantile)."""


def _close(a: pl.Series, b: pl.Series) -> bool:
    if not (a.dtype.is_float() and b.dtype.is_float()):
        return False
    same_nulls = a.is_null().equals(b.is_null())
    gap = ((a - b).abs() <= RELATIVE * b.abs().clip(lower_bound=1e-300)) | (a == b)
    return bool(same_nulls and gap.fill_null(True).all())


def compare(before: Path, after: Path) -> int:
    left, right = dict(_tables(before)), dict(_tables(after))
    failures = []
    if sorted(left) != sorted(right):
        failures.append(f"tables differ: {sorted(set(left) ^ set(right))}")
    for name in sorted(set(left) & set(right)):
        a, dropped = _without_times(left[name])
        b, _ = _without_times(right[name])
        if a.columns != b.columns or a.schema != b.schema:
            failures.append(f"{name}: columns {a.schema} != {b.schema}")
            continue
        a, b = _sorted(a), _sorted(b)
        if a.height != b.height:
            failures.append(f"{name}: {a.height} rows != {b.height}")
            continue
        differing = [c for c in a.columns if not a[c].equals(b[c], check_names=True)]
        close = [c for c in differing if _close(a[c], b[c])]
        differing = [c for c in differing if c not in close]
        if differing:
            failures.append(f"{name}: columns differ: {differing}")
        print(
            f"{name}: {a.height} rows x {len(a.columns)} columns "
            f"{'differ' if differing else 'equal'}"
            + (f" ({close} equal within {RELATIVE:g} relative)" if close else "")
            + (f" (left out: {dropped})" if dropped else "")
        )
    for (name, a_manifest), (_, b_manifest) in zip(
        _manifests(before), _manifests(after), strict=False
    ):
        keys = ("items", "shards", "judge_calls", "counts", "model", "prompt_version")
        for key in keys:
            if a_manifest.get(key) != b_manifest.get(key):
                failures.append(f"{name}: {key} {a_manifest.get(key)} != {b_manifest.get(key)}")
    for failure in failures:
        print("DIFFERENT:", failure)
    print("equal" if not failures else f"{len(failures)} difference(s)")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.equivalence")
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("produce")
    make.add_argument("--out", type=Path, required=True)
    make.add_argument("--items", type=int, default=2000)
    make.add_argument("--fake-judge-module", default="tests.fake_judge")
    check = commands.add_parser("compare")
    check.add_argument("before", type=Path)
    check.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "produce":
        with contextlib.suppress(KeyboardInterrupt):
            produce(args.out, args.items, args.fake_judge_module)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
