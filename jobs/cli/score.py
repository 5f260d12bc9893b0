"""`ctxprec score [ITEM.json]`: one item scored in this process (`scorer_core.cli`)."""

from __future__ import annotations

from jobs.cli.arguments import Command
from scorer_core.cli import add_score_arguments, run_score

COMMAND = Command(
    "score", "score one item given as JSON (a file, or stdin)", add_score_arguments, run_score
)
