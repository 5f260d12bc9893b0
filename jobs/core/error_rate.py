"""A run's error rate against `run.max_error_rate`, and its commonest error (compared without
the row position): what the manifest records and what makes `ctxprec run` exit 1."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl

from jobs.core.text_safety import terminal_safe

# "<file> line at byte 123: " or "<file> row 7: ": the position a row's error message starts with
_POSITION = r"^.*? (?:line at byte|row) \d+: "


@dataclass(frozen=True)
class ErrorRate:
    """`errors` of `items` were errors; `limit` is run.max_error_rate (None: not checked)."""

    items: int
    errors: int
    limit: float | None = None
    commonest: str | None = None
    commonest_items: int = 0

    @property
    def rate(self) -> float:
        return self.errors / self.items if self.items else 0.0

    @property
    def exceeded(self) -> bool:
        return self.limit is not None and self.rate > self.limit

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rate": round(self.rate, 6), "exceeded": self.exceeded}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ErrorRate:
        fields = ("items", "errors", "limit", "commonest", "commonest_items")
        return cls(**{name: data[name] for name in fields if name in data})

    def describe(self) -> str:
        """One line: the share of errors, against the limit, and the commonest error."""
        text = f"{self.errors:,} of {self.items:,} items are errors ({self.rate:.1%})"
        if self.limit is not None:
            word = "over" if self.exceeded else "within"
            text += f", {word} run.max_error_rate {self.limit:g}"
        if self.commonest:
            text += (
                f"; commonest error ({self.commonest_items:,} items): "
                f"{terminal_safe(self.commonest)[:300]}"
            )
        return text


def measure(scores: Path | str, items: int, errors: int, limit: float | None) -> ErrorRate:
    """The error rate of a run whose scores table (local Parquet) is `scores`."""
    if not errors:
        return ErrorRate(items, errors, limit)
    top = (
        pl.scan_parquet(scores)
        .filter(pl.col("status") == "error")
        .select(pl.col("error").fill_null("").str.replace(_POSITION, ""))
        .group_by("error")
        .len()
        .sort(["len", "error"], descending=[True, False])
        .head(1)
        .collect()
    )
    if top.height == 0:
        return ErrorRate(items, errors, limit)
    return ErrorRate(items, errors, limit, str(top["error"][0]), int(top["len"][0]))
