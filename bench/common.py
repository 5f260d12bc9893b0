"""Shared by the benchmarks: machine description and writing one section of the results doc."""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


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
