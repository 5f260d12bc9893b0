"""A small run's fixed cost: the job's whole process against a bare Ray start and stop.

    python -m bench.fixed_cost [--rounds 3] [--items 600] [--code DIR ...] [--write]

Each round runs, one after the other in fresh interpreters: a bare `ray.init(num_cpus=2)` +
`ray.shutdown()`; then, for each checkout given by `--code` (default: this one), the job on
`--items` generated items through the fake judge over HTTP at zero latency (lean transport,
the verdict store on, a new output folder each run) and the offline sample of 2,000 items
(lexical judge). Reported: medians of the wall times and of each run's fixed cost (its wall
time less the bare Ray start of its round), with the phase timings the job's manifest records
when it has them. Interleaving the commands round by round keeps a machine's drift out of the
comparison.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.common import DOCS, ENV, KEY_ENV, header, serving, show_and_write
from tests.support.job import COLUMNS

ROOT = Path(__file__).resolve().parents[1]
BARE_RAY = "import ray; ray.init(num_cpus=2, include_dashboard=False); ray.shutdown()"


def _timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return seconds


def _label(code: Path) -> str:
    """The checkout as its commit (and "+changes" when its tree differs from it)."""
    git = ["git", "-C", str(code)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "diff", "--quiet", "HEAD"], capture_output=True).returncode
    return commit.stdout.strip() + (" +changes" if dirty else "")


def _config(source: Path, out: Path, judge: dict[str, Any]) -> dict[str, Any]:
    return {
        "input": {"path": str(source), "format": "jsonl", "columns": COLUMNS},
        "output": {"path": str(out)},
        "judge": judge,
        "scorer": {"scale": 1, "reason": "template"},
        "ray": {"shard_size": 500, "workers": 2},
    }


def _timings(out: Path) -> dict[str, float]:
    manifests = list(out.glob("**/manifest.json"))
    if not manifests:
        return {}
    timings = json.loads(manifests[0].read_text()).get("timings_s") or {}
    return {k: float(v) for k, v in timings.items() if isinstance(v, int | float)}


def measure(rounds: int, items: int, codes: list[Path], scratch: Path) -> dict[str, Any]:
    small, sample = scratch / "small.jsonl", scratch / "sample.jsonl"
    for path, count, markers in ((small, items, ["--markers"]), (sample, 2000, [])):
        command = [sys.executable, "-m", "jobs.tools.sample_data", "--out", str(path)]
        subprocess.run([*command, "--items", str(count), *markers], cwd=ROOT, env=ENV, check=True)
    fake = [sys.executable, "-m", "tests.fake_judge", "--port", "0", "--max-seconds", "7200"]
    results: dict[str, Any] = {"bare": [], "runs": {}}
    with serving(fake, "fake judge", ENV) as url:
        llm = {"model": "openai/fake-judge", "api_base": url, "api_key_env": KEY_ENV}
        llm["transport"] = "http"
        for round_number in range(rounds):
            bare = _timed([sys.executable, "-c", BARE_RAY], ROOT, ENV)
            results["bare"].append(bare)
            for code in codes:
                env = {**ENV, "PYTHONPATH": str(code)}
                for name, source, judge in (
                    ("fake judge", small, llm),
                    ("offline sample", sample, {"model": "lexical"}),
                ):
                    out = scratch / f"out-{round_number}-{code.name}-{name.split()[0]}"
                    config = scratch / f"{out.name}.yaml"
                    config.write_text(yaml.safe_dump(_config(source, out, judge)))
                    command = [sys.executable, "-m", "jobs.context_precision", "--config"]
                    wall = _timed([*command, str(config)], code, env)
                    key = f"{_label(code)} · {name}"
                    entry = results["runs"].setdefault(key, {"wall": [], "fixed": [], "phases": []})
                    entry["wall"].append(wall)
                    entry["fixed"].append(wall - bare)
                    entry["phases"].append(_timings(out))
                    print(f"round {round_number}: {key}: {wall:.1f}s (bare Ray {bare:.1f}s)")
    return results


def render(results: dict[str, Any], command: str) -> str:
    bare = statistics.median(results["bare"])
    lines = [
        "## A small run's fixed cost",
        "",
        header(command),
        "",
        f"Bare `ray.init(num_cpus=2)` + `ray.shutdown()` in a fresh interpreter: median "
        f"{bare:.1f} s (of {', '.join(f'{b:.1f}' for b in results['bare'])}).",
        "",
        "| code · run | wall time (median) | fixed cost: wall less bare Ray (median, range) |",
        "|---|---|---|",
    ]
    for key, entry in results["runs"].items():
        fixed = entry["fixed"]
        lines.append(
            f"| {key} | {statistics.median(entry['wall']):.1f} s | "
            f"{statistics.median(fixed):.1f} s ({min(fixed):.1f}-{max(fixed):.1f}) |"
        )
    phases = [
        (key, entry["phases"][-1]) for key, entry in results["runs"].items() if entry["phases"][-1]
    ]
    if phases:
        lines += ["", "Phase timings the manifest recorded (last round, seconds):", ""]
        for key, timing in phases:
            shown = ", ".join(f"{name} {value:.2f}" for name, value in timing.items())
            lines.append(f"- {key}: {shown}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fixed_cost")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=600)
    parser.add_argument("--code", type=Path, action="append", default=[])
    parser.add_argument("--write", action="store_true", help="write to docs/benchmarks.md")
    args = parser.parse_args(argv)
    codes = [path.resolve() for path in args.code] or [ROOT]
    with tempfile.TemporaryDirectory(prefix="ctxprec-fixed-") as scratch:
        results = measure(args.rounds, args.items, codes, Path(scratch))
    command = "python -m bench.fixed_cost " + " ".join(sys.argv[1:] if argv is None else argv)
    show_and_write("## A small run's fixed cost", render(results, command), DOCS, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
