"""A row at each stage: `RawRow` as a reader yields it, then `ItemRecord` (ready to judge) or
`RowError` (cannot be scored)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from scorer_core.types import ScoringItem


@dataclass(frozen=True, slots=True)
class RawRow:
    """One input row as read, before validation: `data` or else `error` is set. `row` is the
    row number in a Parquet file (`unit` "row") or the byte offset of the line in the
    (decompressed) JSONL file (`unit` "offset")."""

    source: str
    row: int
    data: dict[str, Any] | None = None
    error: str | None = None
    unit: Literal["row", "offset"] = "row"

    @property
    def where(self) -> str:
        """Position for messages: "s3://b/f.parquet row 12" or "f.jsonl line at byte 345"."""
        unit = "line at byte" if self.unit == "offset" else "row"
        return f"{self.source} {unit} {self.row}"


@dataclass(frozen=True, slots=True)
class ItemRecord:
    """A validated item, normalized, with where it came from. `contexts_cut` and
    `contexts_dropped` count what truncation did; `context_ids`: one id (or None) per context
    (None without the column); `carried`: the run's carried values (`RunSchema.carried`)."""

    query_id: str
    input: str
    output: str
    expected_output: str | None
    contexts: tuple[str, ...]
    source: str
    row: int
    truncated: bool = False
    contexts_cut: int = 0
    contexts_dropped: int = 0
    where: str = ""  # position for messages, as RawRow.where
    context_ids: tuple[str | None, ...] | None = None
    carried: tuple[Any, ...] = ()

    def to_scoring_item(self) -> ScoringItem:
        return ScoringItem(
            input=self.input,
            output=self.output,
            contexts=self.contexts,
            expected_output=self.expected_output,
        )


@dataclass(frozen=True, slots=True)
class RowError:
    """A row that cannot be scored; `message` names the position and the field. `carried`:
    the values of the carried columns that could be read (None where not), or () for none."""

    source: str
    row: int
    message: str
    query_id: str | None = None
    carried: tuple[Any, ...] = ()
