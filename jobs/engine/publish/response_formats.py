"""Which structured-output form a run's judge settled on, combined from its shards' reports
(`combine`): the weakest form any worker process confirmed, with every form the endpoint
rejected and its answer, for the manifest, the summary table and the report."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from scorer_core.response_format import RESPONSE_FORMATS, DroppedForm, ResponseFormat


@dataclass(frozen=True, slots=True)
class RunResponseFormat:
    """The structured-output form of a run's judge requests: `setting` (judge.response_format),
    `in_use` (the form sent at the end), `confirmed` (the endpoint answered one sent with it:
    not when the cache answered every item or every request failed), `dropped` (the forms the
    endpoint rejected, strongest first, with its answer), from `shards` shard reports."""

    endpoint: str
    setting: str
    in_use: str
    confirmed: bool
    dropped: tuple[DroppedForm, ...]
    shards: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible record (the manifest's `judge.response_format`)."""
        return {**asdict(self), "dropped": [asdict(dropped) for dropped in self.dropped]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResponseFormat:
        """The record `to_dict` wrote (read back from a manifest)."""
        return cls(
            endpoint=str(data.get("endpoint", "")),
            setting=str(data.get("setting", "")),
            in_use=str(data.get("in_use", "")),
            confirmed=bool(data.get("confirmed", False)),
            dropped=tuple(
                DroppedForm(form=_form(d["form"]), reason=str(d.get("reason", "")))
                for d in data.get("dropped", ())
            ),
            shards=int(data.get("shards", 0)),
        )

    def describe(self, max_reason_chars: int | None = None) -> str:
        """One line: "json_object (json_schema rejected: <the server's answer, cut>)"."""
        form = self.in_use if self.confirmed else f"{self.in_use} (not confirmed)"
        if not self.dropped:
            return form
        rejected = "; ".join(
            f"{d.form} rejected: {_cut(d.reason, max_reason_chars)}" for d in self.dropped
        )
        return f"{form} ({rejected})"


def _cut(text: str, limit: int | None) -> str:
    return text if limit is None else textwrap.shorten(text, limit, placeholder="...")


def _form(value: object) -> ResponseFormat:
    """`value` as a form name; ValueError naming it when it is none."""
    if value in RESPONSE_FORMATS:
        return value
    raise ValueError(f"unknown response format {value!r}; expected one of {RESPONSE_FORMATS}")


def _strength(form: str) -> int:
    """0 for the strongest form; unknown forms count as weakest."""
    return RESPONSE_FORMATS.index(form) if form in RESPONSE_FORMATS else len(RESPONSE_FORMATS)


def combine(reports: Iterable[Mapping[str, Any] | None]) -> RunResponseFormat | None:
    """One record from the shards' negotiation summaries (None entries are shards that
    negotiated nothing); None when no shard reported one."""
    summaries = [summary for summary in reports if summary is not None]
    if not summaries:
        return None
    confirmed = [s for s in summaries if s.get("confirmed")]
    in_use = max((str(s["in_use"]) for s in confirmed or summaries), key=_strength)
    dropped: dict[str, DroppedForm] = {}
    for summary in summaries:
        for entry in summary.get("dropped", ()):
            form = _form(entry["form"])
            if form not in dropped:
                dropped[form] = DroppedForm(form=form, reason=str(entry.get("reason", "")))
    first = summaries[0]
    return RunResponseFormat(
        endpoint=str(first.get("endpoint", "")),
        setting=str(first.get("setting", "")),
        in_use=in_use,
        confirmed=any(s["in_use"] == in_use for s in confirmed),
        dropped=tuple(sorted(dropped.values(), key=lambda d: _strength(d.form))),
        shards=len(summaries),
    )
