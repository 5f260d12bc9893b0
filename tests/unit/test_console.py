"""The commands' console (`jobs.core.console`): message-only lines, the progress line drawn in
place on a terminal and every few seconds in a log, the level from the environment, other
libraries' chatter turned down."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from jobs.core.console import ConsoleHandler, configure_logging, progress_extra
from jobs.engine.control.progress import ProgressLine


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    """A logger of our own, its records to nobody else; the root's handlers restored after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    log = logging.getLogger("jobs.test_console")
    yield log
    log.handlers.clear()
    root.handlers[:] = handlers
    root.setLevel(level)
    for name in ("jobs", "scorer_core", "ray", "httpx"):
        logging.getLogger(name).setLevel(logging.NOTSET)


def attach(log: logging.Logger, handler: ConsoleHandler) -> None:
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


def test_a_terminal_redraws_the_progress_line_in_place(logger: logging.Logger) -> None:
    screen = Terminal()
    attach(logger, ConsoleHandler(screen))
    logger.info("run r1: 1 file(s)")
    logger.info("10 items", extra=progress_extra())
    logger.info("20 items", extra=progress_extra())
    logger.info("verdict journal: a warning")  # starts a line of its own
    logger.info("30 items", extra=progress_extra(final=True))
    text = screen.getvalue()
    assert text.startswith("run r1: 1 file(s)\n\r10 items")
    assert "\r20 items" in text and "\n".join(["", "verdict journal: a warning", ""]) in text
    assert text.endswith("\r" + "30 items".ljust(120) + "\n")


def test_a_log_gets_a_plain_progress_line_every_few_seconds_and_the_last(
    logger: logging.Logger,
) -> None:
    now = [0.0]
    log = io.StringIO()
    attach(logger, ConsoleHandler(log, plain_every_s=10.0, clock=lambda: now[0]))
    for step in range(25):
        now[0] = float(step)
        logger.info(f"{step} items", extra=progress_extra())
    logger.info("25 items", extra=progress_extra(final=True))
    assert log.getvalue().splitlines() == ["0 items", "10 items", "20 items", "25 items"]
    assert "\r" not in log.getvalue()


def test_the_engine_progress_line_reaches_the_console(logger: logging.Logger) -> None:
    screen = Terminal()
    configure_logging(stream=screen)
    line = ProgressLine({"a": 50, "b": 50}, exact=True, clock=lambda: 1.0)
    line.shard_done("a", 50)
    line.counts = {"items": 50}
    line.draw()
    assert screen.getvalue().startswith("\r[############............] 50/100 items | shards 1/2")


def test_the_level_comes_from_the_environment_and_others_stay_quiet(
    logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = io.StringIO()
    monkeypatch.setenv("CTXPREC_LOG_LEVEL", "debug")
    configure_logging(stream=log)
    configure_logging(stream=log)  # again: still one handler
    logging.getLogger("jobs.engine.x").debug("a detail")
    logging.getLogger("ray").info("Started a local Ray instance.")
    logging.getLogger("httpx").info("HTTP Request: POST ...")
    logging.getLogger("somebody").warning("a warning")
    assert log.getvalue().splitlines() == ["a detail", "a warning"]
    assert sum(isinstance(h, ConsoleHandler) for h in logging.getLogger().handlers) == 1
    configure_logging("WARNING", stream=log)
    logging.getLogger("jobs.engine.x").info("not shown")
    assert "not shown" not in log.getvalue()
