"""What the commands show on stderr: logging configured once (`configure_logging`), and the
progress line, which `ConsoleHandler` redraws in place on a terminal and writes as a plain
line every `plain_every_s` seconds otherwise.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from typing import IO

LEVEL_ENV = "CTXPREC_LOG_LEVEL"
PROGRESS = "progress"
"""A record attribute (`extra={PROGRESS: "update"}` or `"final"`) marking the progress line."""
PACKAGES = ("jobs", "scorer_core")
# Loggers whose INFO lines would drown ours: Ray's start-up lines, a line per HTTP request.
QUIET = ("ray", "httpx", "httpcore", "LiteLLM", "urllib3", "filelock", "asyncio")
_WIDTH = 120


def progress_extra(final: bool = False) -> dict[str, str]:
    """The `extra` of a progress line's record (`final`: the last one, kept on screen)."""
    return {PROGRESS: "final" if final else "update"}


class ConsoleHandler(logging.Handler):
    """Writes each record as a line; a progress line redrawn on a terminal, else plain."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        plain_every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))
        self._stream = stream
        self._plain_every_s = plain_every_s
        self._clock = clock
        self._last_plain = float("-inf")
        self._drawn = False  # a progress line is on screen without its newline

    @property
    def stream(self) -> IO[str]:
        return self._stream if self._stream is not None else sys.stderr

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._write(self.format(record), getattr(record, PROGRESS, None))
        except Exception:
            self.handleError(record)

    def _write(self, text: str, progress: str | None) -> None:
        stream = self.stream
        tty = hasattr(stream, "isatty") and stream.isatty()
        if progress is None:
            stream.write(("\n" if self._drawn else "") + text + "\n")
            self._drawn = False
        elif tty:
            final = progress == "final"
            stream.write("\r" + (text if final else text[:200]).ljust(_WIDTH) + "\n" * final)
            self._drawn = not final
        elif progress == "final" or self._clock() - self._last_plain >= self._plain_every_s:
            stream.write(text + "\n")
            self._last_plain = self._clock()
        stream.flush()


def configure_logging(level: str | int | None = None, stream: IO[str] | None = None) -> None:
    """Send our packages' records at `level` (else `CTXPREC_LOG_LEVEL`, else INFO), and
    everyone's warnings, to one `ConsoleHandler`. Calling it again replaces the handler.

    Args:
        level: a `logging` level or its name ("DEBUG", "INFO", ...).
        stream: where the lines go; None: `sys.stderr` at the time of each line.
    """
    chosen = level or os.environ.get(LEVEL_ENV) or logging.INFO
    if isinstance(chosen, str):
        chosen = chosen.upper()
    root = logging.getLogger()
    for handler in [handler for handler in root.handlers if isinstance(handler, ConsoleHandler)]:
        root.removeHandler(handler)
    root.addHandler(ConsoleHandler(stream))
    root.setLevel(logging.WARNING)
    for name in PACKAGES:
        logging.getLogger(name).setLevel(chosen)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
