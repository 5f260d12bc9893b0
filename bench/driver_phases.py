"""The job's driver with its peak memory measured per phase, for the memory benchmarks.

    python -m bench.driver_phases --config FILE [--set k=v ...]

Runs `ctxprec run` in this process and prints to stderr, at the end, one line

    PHASES start=<KiB> fan_out=<KiB> publish=<KiB> rss_before_publish=<KiB> peak=<KiB>

where each phase figure is the process's peak resident memory (VmHWM) during that phase:
`start` from the interpreter's start through the checks, planning and joining Ray; `fan_out`
until publishing begins; `publish` through publishing and the printed summary. The peak is
reset between phases (Linux: `/proc/self/clear_refs`, value 5), so a phase's figure is not
hidden under an earlier, larger one. `peak` is the largest of the three. Linux only.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_STATUS = Path("/proc/self/status")


def _kib(field: str) -> int:
    match = re.search(rf"{field}:\s+(\d+)", _STATUS.read_text())
    assert match is not None, field
    return int(match.group(1))


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def main(argv: Sequence[str] | None = None) -> int:
    from jobs import context_precision
    from jobs.engine import driver

    peaks: dict[str, int] = {}

    def ending(phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn`, with the phase before it closed when it is called."""

        def call(*args: Any, **kwargs: Any) -> Any:
            peaks[phase] = _kib("VmHWM")
            if phase == "fan_out":
                peaks["rss_before_publish"] = _kib("VmRSS")
            _reset_peak()
            return fn(*args, **kwargs)

        return call

    driver.start_ray = ending("start", driver.start_ray)  # type: ignore[attr-defined]
    driver.publish_run = ending("fan_out", driver.publish_run)  # type: ignore[attr-defined]
    code = context_precision.main(list(sys.argv[1:] if argv is None else argv))
    peaks["publish"] = _kib("VmHWM")
    peaks["peak"] = max(peaks.get(name, 0) for name in ("start", "fan_out", "publish"))
    print("PHASES " + " ".join(f"{k}={v}" for k, v in peaks.items()), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
