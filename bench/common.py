"""Shared by the benchmarks: machine description, writing one section of the results doc,
and the judge server processes they measure against."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
# What the benches that run the job in processes of its own give it: Ray on loopback, litellm's
# local price map, Arrow on jemalloc, and a judge key that is not a secret.
KEY_ENV = "BENCH_JUDGE_KEY"
ENV = {
    **os.environ,
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "RAY_USAGE_STATS_ENABLED": "0",
    "ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
    KEY_ENV: "bench-not-a-secret",
}


def machine() -> str:
    """nproc, RAM, CPU model, Python and kernel, for the record next to every number."""
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = "unknown RAM"
    try:
        match = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())
        if match:
            ram = f"{int(match.group(1)) / 1024**2:.1f} GiB RAM"
    except OSError:
        pass
    return (
        f"{os.cpu_count()} CPUs (nproc), {ram}, {cpu}; Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )


def load_average() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def header(command: str) -> str:
    return (
        f"Command: `{command}` · date {dt.date.today().isoformat()} · machine: {machine()} · "
        f"load average at the end (1/5/15 min): {load_average()}."
    )


def write_section(heading: str, section: str, path: Path = DOCS) -> None:
    """Put `section` (which starts with `heading`) in `path`, replacing only that section
    (up to the next `## ` heading); other sections are left as they are."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    start = text.find(heading + "\n")
    if start < 0 and text.endswith(heading):
        start = len(text) - len(heading)
    if start < 0:
        new = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    else:
        following = text.find("\n## ", start + len(heading))
        rest = "" if following < 0 else text[following + 1 :]
        new = text[:start] + section.rstrip("\n") + "\n" + ("\n" + rest if rest else "")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new, encoding="utf-8")


def average_precision(flags: Sequence[bool]) -> float:
    """Exact, unrounded average precision over the given order: the mean of precision@k over
    the relevant positions k (0.0 when none is relevant). Written out here rather than taken
    from `scorer_core.precision`, so the benchmarks' expected scores trust none of the scorers
    they check."""
    hits = 0
    total = 0.0
    for position, flag in enumerate(flags, start=1):
        if flag:
            hits += 1
            total += hits / position
    return total / hits if hits else 0.0


def fake_judge_command(max_seconds: str, *args: str) -> list[str]:
    """The command line of a fake judge server process (`tests.fake_judge`) on a free port,
    which prints its base URL (.../v1) first and stops by itself after `max_seconds`."""
    return [
        sys.executable,
        "-m",
        "tests.fake_judge",
        "--port",
        "0",
        "--max-seconds",
        max_seconds,
        *args,
    ]


@contextlib.contextmanager
def serving(command: list[str], what: str, env: Mapping[str, str]) -> Iterator[str]:
    """Run a server process that prints its URL on its first line; yield that URL, and stop
    the process after (RuntimeError naming `what` when it does not start)."""
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(env),
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"{what} did not start: {url!r}")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def missing_data(data_dir: Path, names: Sequence[str]) -> bool:
    """Whether any of the labelled data files `names` is missing from `data_dir` (said on
    stderr): the benchmarks on labelled data then exit 2."""
    missing = [name for name in names if not (data_dir / name).exists()]
    if missing:
        print(f"no labelled data in {data_dir} ({', '.join(missing)})", file=sys.stderr)
    return bool(missing)


def show_and_write(heading: str, section: str, path: Path, write: bool) -> None:
    """Print a benchmark's `section` and, when `write`, put it in the results doc at `path`."""
    print(section)
    if write:
        write_section(heading, section, path)
        print(f"(written to {path})", file=sys.stderr)
