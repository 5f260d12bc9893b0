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
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TextIO

import polars as pl

from jobs.core import formatting as fmt
from jobs.core.config import TRACES, parse_config
from jobs.core.formatting import Column, table
from jobs.core.schema import context_hash
from jobs.inputs import ItemRecord, Shard, list_input_files
from jobs.inputs.records import ItemReader
from jobs.tools.published_runs import PublishedRun, load_run
from jobs.tools.tool_options import ShowOptions
from scorer_core.errors import ConfigError, CtxPrecError

TERMINAL_CHARS = 100  # a text's length in the terminal view (the JSON has it whole)
_WORDS: dict[Any, str] = {True: "yes", False: "no"}  # a verdict as shown; None: not judged


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
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


Row = dict[str, Any]  # a published row, column by column


def input_item(run: PublishedRun, source: str, row: int) -> ItemRecord | str:
    """The run's input row at `source` / `row` read as the run read it, or why it cannot be."""
    try:
        recorded = run.manifest.config if run.manifest else {}
        section = dict(recorded.get("input") or {})
        traces = section.get("format")
        if traces in TRACES:
            return (
                f"the run read traces (input.format {traces}), whose items publishing removed: "
                "only the verdicts, reasons and the passages' hashes are kept"
            )
        section.pop("otlp", None)  # the manifest records defaults too: it would read as set
        config = parse_config(
            recorded | {"input": section}, f"run {run.run_id}'s recorded config (its manifest)"
        )
        reader = ItemReader.for_config(config)
        kept = {key: value for key, value in reader.spec.storage_options.items() if value != "***"}
        reader = replace(reader, spec=replace(reader.spec, path=source, storage_options=kept))
        [info] = list_input_files(reader.spec)
        if info.compression:  # a compressed file is read whole
            start, end = 0, info.size
        else:
            start, end = row, row + 1
        shard = Shard(
            shard_id="show",
            path=info.path,
            format=info.format,
            start=start,
            end=end,
            compression=info.compression,
        )
        found = next((record for record in reader.read(shard) if record.row == row), None)
    except (CtxPrecError, OSError, ValueError) as exc:  # ValueError: a glob matched 2 files
        return f"the run's input cannot be read ({exc})"
    if found is None:
        return f"{source} has no row {row} any more"
    if isinstance(found, ItemRecord):
        return found
    return f"the row is no longer a valid item: {found.message}"  # the message says where


def _readable(run: PublishedRun, score: Row, judged: list[Row]) -> ItemRecord | str:
    """The item read back when it is the one judged (its id, every passage's hash), else why not."""
    if score["source"] is None:
        return "the scores row names no input file (source is null)"
    item = input_item(run, score["source"], score["row"])
    if isinstance(item, str):
        return item
    hashes = {verdict["context_hash"] for verdict in judged}
    read = {context_hash(context) for context in item.contexts}
    if item.query_id == score["query_id"] and hashes <= read:
        return item
    return f"the input at {score['source']} row {score['row']} changed since run {run.run_id}"


def _change(ours: Row | None, theirs: Row | None) -> str:
    """How a passage changed from the baseline: "added", "removed", or "moved" and "flipped"
    as they apply ("" for neither); a null verdict counts as "no", as in the score."""
    if theirs is None:
        return "added"
    if ours is None:
        return "removed"
    marks = []
    if ours["position"] != theirs["position"]:
        marks.append("moved")
    if bool(ours["relevant"]) != bool(theirs["relevant"]):
        marks.append("flipped")
    return ", ".join(marks)


def _passage(
    ours: Row | None, theirs: Row | None, texts: dict[str, str], compared: bool
) -> Passage:
    """A passage from its verdict row in this run (`ours`) and in the baseline (`theirs`),
    None where a run lacks it; `compared`: whether there is a baseline at all."""
    row = ours if ours is not None else theirs
    assert row is not None, "a passage is in at least one of the runs"
    mine = ours or {}
    base = theirs or {}
    return Passage(
        position=mine.get("position"),
        context_id=row["context_id"],
        text=texts.get(row["context_hash"]),
        verdict=_WORDS.get(mine.get("relevant")),
        reason=mine.get("judge_reason"),
        baseline_position=base.get("position"),
        baseline_verdict=_WORDS.get(base.get("relevant")),
        change=_change(ours, theirs) if compared else "",
    )


def passages(
    ours: list[Row], theirs: list[Row] | None, texts: dict[str, str]
) -> tuple[Passage, ...]:
    """Ours in order, each beside the baseline's same passage (matched as `moved_queries`
    matches: by context_id when both runs give every one, else by hash), then the baseline's
    passages we lack. `theirs` None: no baseline to compare with."""
    compared = theirs is not None
    baseline = theirs if theirs is not None else []
    by_id = all(row["context_id"] is not None for row in [*ours, *baseline])
    key = "context_id" if by_id else "context_hash"
    unmatched: dict[str, list[Row]] = {}  # the baseline's rows not matched yet, in order
    for row in baseline:
        unmatched.setdefault(row[key], []).append(row)
    found = []
    for row in ours:
        same = unmatched.get(row[key])
        match = same.pop(0) if same else None
        found.append(_passage(row, match, texts, compared))
    for rows in unmatched.values():
        for row in rows:
            found.append(_passage(None, row, texts, compared=True))
    return tuple(found)


def _moved(contexts: tuple[Passage, ...], ours: Row, theirs: Row | None) -> str | None:
    """`moved` as `ctxprec compare` says it (`moved_queries`), from the passages' changes."""
    if theirs is None or not ours["status"] == theirs["status"] == "ok":
        return None
    if abs(ours["score"] - theirs["score"]) <= 1e-9:
        return None
    if {passage.change for passage in contexts} - {"", "flipped"}:
        return "retrieval"
    return "judge"


@dataclass(frozen=True, kw_only=True)
class _RunRows:
    """What `show` read of one run for the asked queries, by query id: its first scores row
    (a repeat is an error row), its verdict rows by position, its item read back (or why not)."""

    scores: dict[str, Row] = field(default_factory=dict)
    verdicts: dict[str, list[Row]] = field(default_factory=dict)
    items: dict[str, ItemRecord | str] = field(default_factory=dict)


def _read(run: PublishedRun, query_ids: Sequence[str]) -> _RunRows:
    """The asked queries' rows of `run`; only those rows are read (pushed down)."""
    asked = pl.col("query_id").is_in(list(query_ids))
    scores = run.scores().filter(asked & pl.col("duplicate_of").is_null()).collect()
    verdicts = run.verdicts().filter(asked).sort("position").collect()
    rows = {row["query_id"]: row for row in scores.iter_rows(named=True)}
    listed = {
        query_id: verdicts.filter(pl.col("query_id") == query_id).to_dicts() for query_id in rows
    }
    items = {query_id: _readable(run, row, listed[query_id]) for query_id, row in rows.items()}
    return _RunRows(scores=rows, verdicts=listed, items=items)


def _texts_by_hash(items: Sequence[ItemRecord]) -> dict[str, str]:
    """Every passage text of the items read back, by its hash."""
    texts = {}
    for item in items:
        for context in item.contexts:
            texts[context_hash(context)] = context
    return texts


def _unavailable(reads: Sequence[tuple[str, ItemRecord | str | None]]) -> str | None:
    """Why some texts are missing: each run's reason (run id, reason) its item was not read."""
    reasons = [f"run {run_id}: {item}" for run_id, item in reads if isinstance(item, str)]
    return "; ".join(reasons) or None


def _view(
    run_id: str, query_id: str, ours: _RunRows, theirs: _RunRows, baseline: PublishedRun | None
) -> ItemView:
    """Query `query_id`'s view from both runs' rows (`theirs` empty without a baseline)."""
    scores = ours.scores[query_id]
    item = ours.items[query_id]
    baseline_item = theirs.items.get(query_id)
    baseline_run = baseline.run_id if baseline is not None else None
    record = item if isinstance(item, ItemRecord) else None
    read = [found for found in (item, baseline_item) if isinstance(found, ItemRecord)]
    baseline_verdicts = theirs.verdicts.get(query_id, []) if baseline is not None else None
    contexts = passages(ours.verdicts[query_id], baseline_verdicts, _texts_by_hash(read))
    baseline_scores = theirs.scores.get(query_id)
    return ItemView(
        query_id=query_id,
        run_id=run_id,
        status=scores["status"],
        score=scores["score"],
        query=record.input if record else None,
        answer=(record.output or None) if record else None,
        reference=record.expected_output if record else None,
        contexts=contexts,
        texts=_unavailable([(run_id, item), (baseline_run or "", baseline_item)]),
        baseline_run=baseline_run,
        baseline_score=baseline_scores["score"] if baseline_scores else None,
        moved=_moved(contexts, scores, baseline_scores),
    )


def item_views(
    run: PublishedRun, query_ids: Sequence[str], baseline: PublishedRun | None = None
) -> list[ItemView]:
    """The view of each of `query_ids` that `run` has, in that order, beside `baseline`'s."""
    ours = _read(run, query_ids)
    theirs = _read(baseline, query_ids) if baseline is not None else _RunRows()
    views = []
    for query_id in dict.fromkeys(query_ids):
        if query_id in ours.scores:
            views.append(_view(run.run_id, query_id, ours, theirs, baseline))
    return views


def format_view(view: ItemView, chars: int = TERMINAL_CHARS) -> str:
    """The terminal view: the item's fields, then a line per passage (texts cut to `chars`)."""
    compared = view.baseline_run is not None
    then = f"; baseline {view.baseline_run}: {fmt.number(view.baseline_score)}" if compared else ""
    score = f"{view.status}, score {fmt.number(view.score)}{then}"
    lines = [f"query {view.query_id} in run {view.run_id} ({score})"]
    if view.moved == "retrieval":
        lines.append(
            "moved (retrieval): the retriever returned other passages (added, removed or moved)"
        )
    elif view.moved == "judge":
        lines.append("moved (judge): the judge gave another verdict on the same passages")
    fields = (("query", view.query), ("answer", view.answer), ("reference", view.reference))
    lines += [f"{name}: {fmt.cut(text, chars)}" for name, text in fields if text is not None]
    if view.texts:
        lines.append(f"texts unavailable: {view.texts}")
    columns = [
        Column(header="pos"),
        Column(header="context_id", align="<", limit=24),
        Column(header="verdict", align="<"),
    ]
    if compared:
        columns += [
            Column(header="base pos"),
            Column(header="base", align="<"),
            Column(header="change", align="<"),
        ]
    columns += [
        Column(header="text", align="<", limit=chars),
        Column(header="reason", align="<", limit=chars),
    ]
    rows = []
    for passage in view.contexts:
        cells: list[Any] = [passage.position, passage.context_id, passage.verdict]
        if compared:
            cells += [passage.baseline_position, passage.baseline_verdict, passage.change]
        cells.append("(unavailable)" if passage.text is None else passage.text)
        cells.append(passage.reason)
        rows.append(["-" if cell is None else cell for cell in cells])
    if not rows:
        return "\n".join([*lines, "no passages judged"])
    return "\n".join([*lines, table(columns, rows)])


def run(options: ShowOptions, out: TextIO | None = None) -> int:
    """`ctxprec show`: print the query's view (or its JSON); returns 0."""
    out = out or sys.stdout
    store = options.root.store()
    published = load_run(store, options.run)
    baseline = load_run(store, options.baseline) if options.baseline else None
    views = item_views(published, [options.query_id], baseline)
    if not views:
        raise ConfigError(
            f"query_id {options.query_id!r} not found in run {published.run_id} (its scores "
            "table has no such row)"
        )
    if options.as_json:
        out.write(json.dumps(asdict(views[0])) + "\n")
    else:
        out.write(format_view(views[0]) + "\n")
    return 0
