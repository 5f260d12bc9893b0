"""Small fakes shared by the tests (the fake judge server lives in scorer_core/testing)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scorer_core.testing import FakeJudgeServer, FaultPlan


class RecordingSleep:
    """Injected instead of asyncio.sleep: records the waits, waits for nothing."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture(scope="module")
def shared_judge_server() -> Iterator[FakeJudgeServer]:
    """One fake judge for a test module."""
    with FakeJudgeServer() as running:
        yield running


@pytest.fixture
def server(shared_judge_server: FakeJudgeServer) -> FakeJudgeServer:
    """The module's fake judge, with no faults and fresh statistics for this test."""
    shared_judge_server.set_fault_plan(FaultPlan())
    shared_judge_server.reset_stats()
    return shared_judge_server
