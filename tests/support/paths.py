"""Where things are: the repository, and the labelled data shared beside it."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Human-labelled data (HotpotQA, TREC DL) kept next to the repository, not in it; tests that
# need it skip when it is absent.
SHARED_DATA = REPO.parent / "shared" / "data"
# The venv the tests run from (its `ray`, `duckdb` and `python`).
VENV_BIN = Path(sys.executable).parent
