"""Which structured-output form a run's judge settled on, combined from its shards' reports
(`combine`): the weakest form any worker process confirmed, with every form the endpoint
rejected and its answer, for the manifest, the summary table and the report."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from jobs.core.run_manifest import DroppedFormRecord, ResponseFormatRecord
from scorer_core.response_format import RESPONSE_FORMATS


def _form(value: object) -> str:
    """`value` as a form name; ValueError naming it when it is none."""
    if value in RESPONSE_FORMATS:
        return str(value)
    raise ValueError(f"unknown response format {value!r}; expected one of {RESPONSE_FORMATS}")


def _strength(form: str) -> int:
    """0 for the strongest form; unknown forms count as weakest."""
    return RESPONSE_FORMATS.index(form) if form in RESPONSE_FORMATS else len(RESPONSE_FORMATS)


def combine(reports: Iterable[Mapping[str, Any] | None]) -> ResponseFormatRecord | None:
    """One record from the shards' negotiation summaries (None entries are shards that
    negotiated nothing); None when no shard reported one."""
    summaries = [summary for summary in reports if summary is not None]
    if not summaries:
        return None
    confirmed = [s for s in summaries if s.get("confirmed")]
    in_use = max((str(s["in_use"]) for s in confirmed or summaries), key=_strength)
    dropped: dict[str, DroppedFormRecord] = {}
    for summary in summaries:
        for entry in summary.get("dropped", ()):
            form = _form(entry["form"])
            if form not in dropped:
                dropped[form] = DroppedFormRecord(form=form, reason=str(entry.get("reason", "")))
    first = summaries[0]
    return ResponseFormatRecord(
        endpoint=str(first.get("endpoint", "")),
        setting=str(first.get("setting", "")),
        in_use=in_use,
        confirmed=any(s["in_use"] == in_use for s in confirmed),
        dropped=sorted(dropped.values(), key=lambda d: _strength(d.form)),
        shards=len(summaries),
    )
