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
from jobs.tools.published_runs import PublishedRun, load_run
from jobs.tools.tool_options import ShowOptions
from scorer_core.errors import ConfigError, CtxPrecError

TERMINAL_CHARS = 100  # a text's length in the terminal view (the JSON has it whole)
_WORDS: dict[Any, str] = {True: "yes", False: "no"}  # a verdict as shown; None: not judged


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
    texts: str | None  # why some texts are missing
    baseline_run: str | None = None
    baseline_score: float | None = None
    moved: str | None = None  # as `ctxprec compare` says it: "retrieval", "judge" or None


def input_item(run: PublishedRun, source: str, row: int) -> ItemRecord | str:
    """The run's input row at `source` / `row` read as the run read it, or why it cannot be."""
    try:
        recorded = run.manifest.config if run.manifest else {}
        section = dict(recorded.get("input") or {})
        if section.get("format") == "otlp":
            return "the run read traces (input.format otlp), whose items publishing removed"
        section.pop("otlp", None)  # the manifest records defaults too: it would read as set
        reader = ItemReader.for_config(parse_config(recorded | {"input": section}, "its config"))
        kept = {k: v for k, v in reader.spec.storage_options.items() if v != "***"}
        reader = replace(reader, spec=replace(reader.spec, path=source, storage_options=kept))
        [info] = list_input_files(reader.spec)
        start, end = (0, info.size) if info.compression else (row, row + 1)
        shard = Shard(
            shard_id="show",
            path=info.path,
            format=info.format,
            start=start,
            end=end,
            compression=info.compression,
        )
        found = next((r for r in reader.read(shard) if r.row == row), None)
    except (CtxPrecError, OSError, ValueError) as exc:  # ValueError: a glob matched 2 files
        return f"the run's input cannot be read ({exc})"
    return found if isinstance(found, ItemRecord) else f"{source} has no readable row {row}"


def _readable(run: PublishedRun, score: dict[str, Any], judged: list[dict[str, Any]]) -> Any:
    """The item read back when it is the one judged (its id, every passage's hash), else why not."""
    item = input_item(run, score["source"], score["row"])
    hashes = {v["context_hash"] for v in judged}
    if isinstance(item, str) or (
        item.query_id == score["query_id"] and hashes <= {context_hash(c) for c in item.contexts}
    ):
        return item
    return f"the input at {score['source']} row {score['row']} changed since run {run.run_id}"


def _passage(ours: Any, theirs: Any, texts: dict[str, str], compared: bool) -> Passage:
    """A passage from its verdict rows in either run (dicts; None where a run lacks it)."""
    change = ""
    if compared and ours and theirs:  # a null verdict counts as "no", as in the score
        flipped = bool(ours["relevant"]) != bool(theirs["relevant"])
        marks = (("moved", ours["position"] != theirs["position"]), ("flipped", flipped))
        change = ", ".join(word for word, differs in marks if differs)
    elif compared:
        change = "added" if theirs is None else "removed"
    mine, base, row = ours or {}, theirs or {}, ours or theirs
    found = (row["context_id"], texts.get(row["context_hash"]), _WORDS.get(mine.get("relevant")))
    sides = (mine.get("judge_reason"), base.get("position"), _WORDS.get(base.get("relevant")))
    return Passage(mine.get("position"), *found, *sides, change)


def passages(
    ours: list[dict[str, Any]], theirs: list[dict[str, Any]] | None, texts: dict[str, str]
) -> tuple[Passage, ...]:
    """Ours in order, each beside the baseline's same passage (matched as `moved_queries`
    matches: by context_id when both runs give every one, else by hash), then the baseline's
    passages we lack."""
    compared, theirs = theirs is not None, theirs or []
    by_id = all(v["context_id"] is not None for v in ours + theirs)
    key = "context_id" if by_id else "context_hash"
    left: dict[str, list[Any]] = {}
    for v in theirs:
        left.setdefault(v[key], []).append(v)
    found = [_passage(v, (left.get(v[key]) or [None]).pop(0), texts, compared) for v in ours]
    return (*found, *(_passage(None, v, texts, True) for rows in left.values() for v in rows))


def _moved(view: ItemView, ours: dict[str, Any], theirs: dict[str, Any] | None) -> str | None:
    """`moved` as `ctxprec compare` says it (`moved_queries`), from the passages' changes."""
    both_ok = theirs is not None and ours["status"] == theirs["status"] == "ok"
    if not both_ok or abs(ours["score"] - theirs["score"]) <= 1e-9:  # type: ignore[index]
        return None
    return "retrieval" if {p.change for p in view.contexts} - {"", "flipped"} else "judge"


def _side(run: PublishedRun, query_ids: Sequence[str]) -> tuple[dict[str, Any], ...]:
    """Per asked query `run` has: its first scores row (a repeat is an error row), its verdict
    rows and its item read back (or why not); only those rows are read (pushed down)."""
    asked = pl.col("query_id").is_in(list(query_ids))
    scores = run.scores().filter(asked & pl.col("duplicate_of").is_null()).collect()
    verdicts = run.verdicts().filter(asked).sort("position").collect()
    rows = {row["query_id"]: row for row in scores.iter_rows(named=True)}
    listed = {q: verdicts.filter(pl.col("query_id") == q).to_dicts() for q in rows}
    return rows, listed, {q: _readable(run, row, listed[q]) for q, row in rows.items()}


def item_views(
    run: PublishedRun, query_ids: Sequence[str], baseline: PublishedRun | None = None
) -> list[ItemView]:
    """The view of each of `query_ids` that `run` has, in that order, beside `baseline`'s."""
    rows, listed, items = _side(run, query_ids)
    base = _side(baseline, query_ids) if baseline is not None else ({}, {}, {})
    views = []
    for q in (q for q in dict.fromkeys(query_ids) if q in rows):
        sides = [(run.run_id, items[q]), (baseline.run_id if baseline else "", base[2].get(q))]
        why = "; ".join(f"run {r}: {why}" for r, why in sides if isinstance(why, str)) or None
        record = items[q] if isinstance(items[q], ItemRecord) else None
        read = [item for item in (items[q], base[2].get(q)) if isinstance(item, ItemRecord)]
        texts = {context_hash(c): c for item in read for c in item.contexts}
        view = ItemView(
            query_id=q,
            run_id=run.run_id,
            status=rows[q]["status"],
            score=rows[q]["score"],
            query=record.input if record else None,
            answer=record.output or None if record else None,
            reference=record.expected_output if record else None,
            contexts=passages(listed[q], base[1].get(q, []) if baseline else None, texts),
            texts=why,
            baseline_run=baseline.run_id if baseline else None,
            baseline_score=base[0].get(q, {}).get("score"),
        )
        views.append(replace(view, moved=_moved(view, rows[q], base[0].get(q))))
    return views


def format_view(view: ItemView, chars: int = TERMINAL_CHARS) -> str:
    """The terminal view: the item's fields, then a line per passage (texts cut to `chars`)."""
    compared = view.baseline_run is not None
    then = f"; baseline {view.baseline_run}: {fmt.number(view.baseline_score)}" if compared else ""
    score = f"{view.status}, score {fmt.number(view.score)}{then}"
    lines = [f"query {view.query_id} in run {view.run_id} ({score})"]
    if view.moved:
        other = "passages" if view.moved == "retrieval" else "verdicts on the same passages"
        lines.append(f"moved ({view.moved}): it got other {other}")
    fields = ("query", view.query), ("answer", view.answer), ("reference", view.reference)
    lines += [f"{name}: {fmt.cut(text, chars)}" for name, text in fields if text is not None]
    lines += [f"texts unavailable: {view.texts}"] if view.texts else []
    columns = [Column("pos"), Column("context_id", "<", limit=24), Column("verdict", "<")]
    columns += [Column("base pos"), Column("base", "<"), Column("change", "<")] if compared else []
    columns += [Column("text", "<", limit=chars), Column("reason", "<", limit=chars)]
    rows = []
    for p in view.contexts:
        base = (p.baseline_position, p.baseline_verdict, p.change) if compared else ()
        text = "(unavailable)" if p.text is None else p.text
        cells = (p.position, p.context_id, p.verdict, *base, text, p.reason)
        rows.append(["-" if v is None else v for v in cells])
    return "\n".join([*lines, table(columns, rows) if rows else "no passages judged"])


def run(options: ShowOptions, out: TextIO | None = None) -> int:
    """`ctxprec show`: print the query's view (or its JSON); returns 0."""
    out, store = out or sys.stdout, options.root.store()
    published = load_run(store, options.run)
    baseline = load_run(store, options.baseline) if options.baseline else None
    views = item_views(published, [options.query_id], baseline)
    if not views:
        raise ConfigError(f"query_id {options.query_id!r} not found in run {published.run_id}")
    out.write((json.dumps(asdict(views[0])) if options.as_json else format_view(views[0])) + "\n")
    return 0
