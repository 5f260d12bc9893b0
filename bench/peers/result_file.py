"""The peers' drivers' result file: announced before the run, completed after it.

A driver writes its settings and item count before it starts scoring (`announce`), so that a
contender stopped at the bench's time limit still says what it was running; `finish` adds the
scores and times. Standard library only: the drivers run in the peers' venv.
"""

from __future__ import annotations

import json
from typing import Any


def announce(path: str, items: int, settings: str) -> None:
    """Write what is about to run: the number of items and the settings, no scores yet."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"items": items, "settings": settings, "finished": False}, handle)


def finish(path: str, results: dict[str, Any]) -> None:
    """Add the run's results (scores, seconds, ...) to the announced file."""
    with open(path, encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    data.update(results, finished=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
