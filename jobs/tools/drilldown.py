"""`ctxprec show RUN QUERY_ID [--baseline RUN]`: one item as the judge saw it, each passage's
verdict and reason beside the baseline's, the changed ones marked. Only the asked query's rows
are read (a filter on query_id, pushed down to the Parquet). The published tables keep a hash
of each passage, not its text: the text is read back from the run's input (`source`, `row`)
with the run's own input settings, and shown only where its hash is the one judged.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TextIO

import polars as pl

from jobs.core import formatting as fmt
from jobs.core.config import parse_config
from jobs.core.formatting import Column, table
from jobs.core.schema import context_hash
from jobs.inputs import ItemRecord, Shard, list_input_files
from jobs.inputs.records import ItemReader
from jobs.tools.comparison import moved_queries
from jobs.tools.published_runs import PublishedRun, load_run
from jobs.tools.tool_options import ShowOptions
from scorer_core.errors import ConfigError, CtxPrecError

TERMINAL_CHARS = 100  # a text's length in the terminal view (the JSON has it whole)
_VERDICT_COLUMNS = ("query_id", "position", "context_id", "context_hash", "relevant")


class QueryNotFound(ConfigError):
    """No scores row with the asked query_id in the run (a wrong argument: exit 2)."""


@dataclass(frozen=True)
class Passage:
    """One retrieved passage in either run; the side a run lacks is null."""

    position: int | None
    context_id: str | None
    text: str | None  # None: not readable from the input as it was judged
    verdict: str | None  # "yes", "no", or None (not judged)
    reason: str | None
    baseline_position: int | None = None
    baseline_verdict: str | None = None
    change: str = ""  # with a baseline: "moved", "flipped", "moved, flipped", "added", "removed"


@dataclass(frozen=True)
class ItemView:
    """What `ctxprec show` prints of one query (and the report opens onto)."""

    query_id: str
    run_id: str
    status: str | None
    score: float | None
    query: str | None  # the query, answer and reference the judge saw (judge.against)
    answer: str | None
    reference: str | None
    contexts: tuple[Passage, ...]
    texts: str  # why some texts are missing ("" when none is)
    baseline_run: str | None = None
    baseline_score: float | None = None
    moved: str | None = None  # as `ctxprec compare` says it: "retrieval", "judge" or None

    def to_json(self) -> dict[str, Any]:
        head = {name: getattr(self, name) for name in ("query_id", "score", "baseline_score")}
        rest = asdict(self) | {"texts": self.texts or None}
        return head | {"contexts": [asdict(p) for p in self.contexts]} | rest


def _rows(run: PublishedRun, query_ids: Sequence[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The first scores row of each query (a repeat is an error row) and its verdict rows."""
    asked = pl.col("query_id").is_in(list(query_ids))
    scores = run.scores().filter(asked & pl.col("duplicate_of").is_null()).collect()
    verdicts = run.verdicts().filter(asked).select(*_VERDICT_COLUMNS, "judge_reason")
    return scores.unique("query_id", keep="first"), verdicts.sort("position").collect()


def input_item(run: PublishedRun, source: str, row: int) -> ItemRecord | str:
    """The run's input row at `source` / `row` read as the run read it, or why it cannot be."""
    try:
        recorded = run.manifest.config if run.manifest else {}
        section = dict(recorded.get("input") or {})
        if section.get("format") == "otlp":
            return "the run read traces (input.format otlp): its assembled items are gone"
        section.pop("otlp", None)  # the manifest records defaults too: it would read as set
        reader = ItemReader.for_config(parse_config(recorded | {"input": section}, "its config"))
        kept = {k: v for k, v in reader.spec.storage_options.items() if v != "***"}
        spec = replace(reader.spec, path=source, storage_options=kept)
        reader = replace(reader, spec=spec)
        [info] = list_input_files(spec)
        start, end = (0, info.size) if info.compression else (row, row + 1)
        shard = Shard("show", info.path, info.format, start, end, info.compression)
        found = next((r for r in reader.read(shard) if r.row == row), None)
    except CtxPrecError as exc:
        return f"the run's input cannot be read ({exc})"
    if found is None:
        return f"{source} has no row {row} any more"
    return found if isinstance(found, ItemRecord) else f"{source} row {row} is unreadable"


def _readable(run: PublishedRun, score: dict[str, Any], verdicts: pl.DataFrame) -> ItemRecord | str:
    """The item read back when it is the one judged (its id, every passage's hash), else why not."""
    if score.get("source") is None:
        return "the scores row names no input"
    item = input_item(run, score["source"], score["row"])
    if isinstance(item, str):
        return item
    judged = set(verdicts["context_hash"])
    if item.query_id != score["query_id"] or not judged <= {context_hash(c) for c in item.contexts}:
        return f"the input at {score['source']} row {score['row']} changed since run {run.run_id}"
    return item


def _word(relevant: bool | None) -> str | None:
    return None if relevant is None else "yes" if relevant else "no"


def _passage(
    ours: dict[str, Any] | None,
    theirs: dict[str, Any] | None,
    texts: dict[str, str],
    compared: bool,
) -> Passage:
    row = ours or theirs or {}
    marks: tuple[tuple[str, bool], ...] = ()
    if compared and ours is not None and theirs is not None:  # a null verdict counts as "no"
        flipped = bool(ours["relevant"]) != bool(theirs["relevant"])
        marks = (("moved", ours["position"] != theirs["position"]), ("flipped", flipped))
    change = ", ".join(word for word, differs in marks if differs)
    if compared and (ours is None or theirs is None):
        change = "added" if theirs is None else "removed"
    return Passage(
        position=ours["position"] if ours else None,
        context_id=row["context_id"],
        text=texts.get(row["context_hash"]),
        verdict=_word(ours["relevant"]) if ours else None,
        reason=ours["judge_reason"] if ours else None,
        baseline_position=theirs["position"] if theirs else None,
        baseline_verdict=_word(theirs["relevant"]) if theirs else None,
        change=change,
    )


def passages(
    ours: list[dict[str, Any]], theirs: list[dict[str, Any]] | None, texts: dict[str, str]
) -> tuple[Passage, ...]:
    """Ours in order, each beside the baseline's same passage (matched as `moved_queries`
    matches: by context_id when both runs give every one, else by hash), then the baseline's
    passages we lack."""
    if theirs is None:
        return tuple(_passage(v, None, texts, False) for v in ours)
    by_id = all(v["context_id"] is not None for v in ours + theirs)
    key = "context_id" if by_id else "context_hash"
    left: dict[str, list[dict[str, Any]]] = {}
    for v in theirs:
        left.setdefault(v[key], []).append(v)
    found = [
        _passage(v, left[v[key]].pop(0) if left.get(v[key]) else None, texts, True) for v in ours
    ]
    return (*found, *(_passage(None, v, texts, True) for rows in left.values() for v in rows))


@dataclass(frozen=True)
class _Side:
    """One run's rows of the asked queries: scores and verdicts by query_id, items read back."""

    run: PublishedRun
    scores: dict[str, dict[str, Any]]
    verdicts: pl.DataFrame
    items: dict[str, ItemRecord | str]

    @classmethod
    def read(cls, run: PublishedRun, query_ids: Sequence[str]) -> _Side:
        scores, verdicts = _rows(run, query_ids)
        rows = {row["query_id"]: row for row in scores.iter_rows(named=True)}
        judged = verdicts.partition_by("query_id", as_dict=True)
        items = {
            query_id: _readable(run, row, judged.get((query_id,), verdicts.clear()))
            for query_id, row in rows.items()
        }
        return cls(run, rows, verdicts, items)

    def listed(self, query_id: str) -> list[dict[str, Any]]:
        return self.verdicts.filter(pl.col("query_id") == query_id).to_dicts()

    def texts(self, query_id: str) -> dict[str, str]:
        item = self.items.get(query_id)
        return {context_hash(c): c for c in item.contexts} if isinstance(item, ItemRecord) else {}


def _moved(ours: _Side, theirs: _Side) -> dict[str, str | None]:
    """`ctxprec compare`'s `moved` of each query both runs have."""
    both = [q for q in ours.scores if q in theirs.scores]
    score = {q: (theirs.scores[q]["score"], ours.scores[q]["score"]) for q in both}
    delta = [None if None in score[q] else round(score[q][1] - score[q][0], 6) for q in both]
    status = {
        f"status_{x}": [s.scores[q]["status"] for q in both]
        for x, s in (("a", theirs), ("b", ours))
    }
    columns = {"query_id": both, **status, "delta": delta}
    frame = pl.LazyFrame(columns, schema=dict.fromkeys(columns, pl.String) | {"delta": pl.Float64})
    moved = moved_queries(frame, theirs.verdicts.lazy(), ours.verdicts.lazy()).collect()
    return dict(moved.iter_rows())


def item_views(
    run: PublishedRun, query_ids: Sequence[str], baseline: PublishedRun | None = None
) -> list[ItemView]:
    """The view of each of `query_ids` that `run` has, in that order, beside `baseline`'s."""
    ours = _Side.read(run, query_ids)
    theirs = _Side.read(baseline, query_ids) if baseline is not None else None
    moved = _moved(ours, theirs) if theirs is not None else {}
    views = []
    for query_id in (q for q in dict.fromkeys(query_ids) if q in ours.scores):
        item, row = ours.items[query_id], ours.scores[query_id]
        texts = ours.texts(query_id) | (theirs.texts(query_id) if theirs else {})
        sides = [
            (run.run_id, item),
            *([(theirs.run.run_id, theirs.items.get(query_id))] if theirs else []),
        ]
        notes = [f"run {run_id}: {why}" for run_id, why in sides if isinstance(why, str)]
        record = item if isinstance(item, ItemRecord) else None
        views.append(
            ItemView(
                query_id=query_id,
                run_id=run.run_id,
                status=row["status"],
                score=row["score"],
                query=record.input if record else None,
                answer=record.output or None if record else None,
                reference=record.expected_output if record else None,
                contexts=passages(
                    ours.listed(query_id), theirs.listed(query_id) if theirs else None, texts
                ),
                texts="; ".join(notes),
                baseline_run=theirs.run.run_id if theirs else None,
                baseline_score=(theirs.scores.get(query_id) or {}).get("score") if theirs else None,
                moved=moved.get(query_id),
            )
        )
    return views


_MOVED = {
    "retrieval": "moved: it returned other passages (added, removed or moved)",
    "judge": "moved: the judge gave another verdict on the same passages",
}


def _dash(value: object) -> object:
    return "-" if value is None else value


def format_view(view: ItemView, chars: int = TERMINAL_CHARS) -> str:
    """The terminal view: the item's fields, then a line per passage (texts cut to `chars`)."""
    score = f"{view.status}, score {fmt.number(view.score)}"
    if view.baseline_run is not None:
        score += f"; baseline {view.baseline_run}: {fmt.number(view.baseline_score)}"
    lines = [f"query {view.query_id} in run {view.run_id} ({score})"]
    lines += [_MOVED[view.moved]] if view.moved else []
    fields = ("query", view.query), ("answer", view.answer), ("reference", view.reference)
    lines += [f"{name}: {fmt.cut(text, chars)}" for name, text in fields if text is not None]
    lines += [f"texts unavailable: {view.texts}"] if view.texts else []
    compared = view.baseline_run is not None
    columns = [Column("pos"), Column("context_id", "<", limit=24), Column("verdict", "<")]
    columns += [Column("base pos"), Column("base", "<"), Column("change", "<")] if compared else []
    columns += [Column("text", "<", limit=chars), Column("reason", "<", limit=chars)]
    rows = []
    for p in view.contexts:
        base = (p.baseline_position, p.baseline_verdict, p.change) if compared else ()
        text = "(unavailable)" if p.text is None else p.text
        rows.append(
            [_dash(v) for v in (p.position, p.context_id, p.verdict, *base, text, p.reason)]
        )
    return "\n".join([*lines, table(columns, rows) if rows else "no passages judged"])


def run(options: ShowOptions, out: TextIO | None = None) -> int:
    """`ctxprec show`: print the query's view (or its JSON); returns 0."""
    out = out if out is not None else sys.stdout
    store = options.root.store()
    published = load_run(store, options.run)
    baseline = load_run(store, options.baseline) if options.baseline else None
    views = item_views(published, [options.query_id], baseline)
    if not views:
        raise QueryNotFound(
            f"query_id {options.query_id!r} not found in run {published.run_id} "
            f"(its scores table has no such row)"
        )
    text = json.dumps(views[0].to_json()) if options.as_json else format_view(views[0])
    out.write(text + "\n")
    return 0
