"""Published runs written directly, for the tests of the tools that read them (compare, report).

A run is described compactly, one `Query` per query_id (its verdicts in position order, its
status, reason, error); `publish` writes what `jobs.engine.publish.publisher.publish_run` would have
published for it, without Ray or a judge:

    scores, verdicts, summary   Parquet at RunLocation.table_file(...), the same columns and
                                types as the job's tables
    manifest                    JSON at RunLocation.manifest, the job's keys

The score of an ok query is `scorer_core.precision.context_precision` of its verdicts (a
verdict of None counts as not relevant, as in the job's aggregation), its reason is the
scorer's `template_reason`, and the summary is `jobs.engine.publish.aggregate.summarize` of the
tables.
`test_real_job_publishes_what_the_support_module_writes` in tests/integration/test_real_runs.py
checks the columns against a run published by the real job.

`base_and_candidate` writes the two runs the tests of compare and report share;
`segmented_runs` two runs that carry a `retriever` column and are summarised by it, where one
retriever got worse; `two_causes` two runs where the retriever reordered some queries'
passages and the judge changed a verdict on others; `run_compare` and `run_report` run those
commands on published runs as `ctxprec` parses them.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl
import pyarrow as pa

from jobs.core.run_layout import TABLES, RunLocation
from jobs.core.run_manifest import ErrorRateRecord, ResponseFormatRecord
from jobs.core.schema import (
    PUBLISHED_SCORES,
    PUBLISHED_VERDICTS,
    CarriedColumn,
    RunSchema,
    context_hash,
)
from jobs.core.storage import Store, open_store
from jobs.engine.publish import aggregate
from jobs.engine.publish.aggregate import SummarySpec
from scorer_core.precision import context_precision
from scorer_core.prompt import PROMPT_VERSION
from scorer_core.reasons import template_reason
from scorer_core.types import ContextVerdict, Status

RUN_DATE = dt.date(2026, 1, 2)

# Usage the tables report per judged context (any fixed numbers do; these look like a model's).
PROMPT_TOKENS_PER_CONTEXT = 180
COMPLETION_TOKENS_PER_CONTEXT = 12


@dataclass(frozen=True)
class Query:
    """One input item of a run, as the job would have scored it.

    `verdicts` has one entry per retrieved context: True / False, or None where the judge
    gave no verdict. An "unscored" item has contexts but no verdicts (all None); an "error"
    item (a row the job could not read) has no contexts at all.
    """

    query_id: str
    verdicts: Sequence[bool | None] = ()
    status: Status = "ok"
    reason: str | None = None  # None: the scorer's template reason (ok) or "" (otherwise)
    error: str | None = None
    judge_reasons: Sequence[str] | None = None  # per position; None: "relevant" / "not relevant"
    contexts: Sequence[str] | None = None  # per position the passage's id; None: doc-<position>
    carried: Mapping[str, Any] = field(default_factory=dict)  # carried column -> value

    def __post_init__(self) -> None:
        if self.status == "ok" and self.error is not None:
            raise ValueError(f"{self.query_id}: an ok item has no error")
        if self.status != "ok" and self.error is None:
            raise ValueError(f"{self.query_id}: a {self.status} item needs its error")
        if self.status != "ok" and any(v is not None for v in self.verdicts):
            raise ValueError(f"{self.query_id}: a {self.status} item has no verdicts")
        if self.status == "error" and self.verdicts:
            raise ValueError(f"{self.query_id}: an error item has no contexts")
        if self.judge_reasons is not None and len(self.judge_reasons) != len(self.verdicts):
            raise ValueError(f"{self.query_id}: one judge reason per context")
        if self.contexts is not None and len(self.contexts) != len(self.verdicts):
            raise ValueError(f"{self.query_id}: one context id per context")

    @property
    def flags(self) -> list[bool]:
        return [bool(v) for v in self.verdicts]

    def score(self, scale: float) -> float | None:
        return context_precision(self.flags, scale) if self.status == "ok" else None


def _score_row(
    query: Query, where: tuple[str, int], model: str, scale: float, tables: RunSchema
) -> dict[str, Any]:
    contexts = len(query.verdicts)
    score = query.score(scale)
    judged = [
        ContextVerdict(index=i, relevant=v) for i, v in enumerate(query.verdicts) if v is not None
    ]
    reason = query.reason
    if reason is None:
        reason = template_reason(judged, score, scale) if score is not None else ""
    base = PUBLISHED_SCORES.build_row(
        query_id=query.query_id,
        score=score,
        reason=reason,
        status=query.status,
        error=query.error,
        relevant_count=sum(query.flags),
        context_count=contexts,
        judge_model=model,
        calls=1 if contexts else 0,
        prompt_tokens=PROMPT_TOKENS_PER_CONTEXT * contexts,
        completion_tokens=COMPLETION_TOKENS_PER_CONTEXT * contexts,
        cache_hits=0,
        cached_prompt_tokens=0,
        cache_creation_tokens=0,
        source=where[0],
        row=where[1],
        truncated=False,
        duplicate_of=None,
    )
    return {**base, **{name: query.carried.get(name) for name in tables.names}}


def _ids(query: Query) -> list[str]:
    return list(query.contexts or [f"doc-{position}" for position in range(len(query.verdicts))])


def passage_text(query: Query, position: int) -> str:
    """The text of a query's passage (what its context_hash is of): "<its id> of <query_id>"."""
    return f"{_ids(query)[position]} of {query.query_id}"


def _write_input(path: Path, queries: Sequence[Query], with_ids: bool) -> list[tuple[str, int]]:
    """The run's input as JSON Lines at `path` (the job's default columns); each row's
    (source, byte offset)."""
    where, lines, offset = [], [], 0
    for query in queries:
        texts = [passage_text(query, p) for p in range(len(query.verdicts))]
        row = {"query_id": query.query_id, "input": f"question of {query.query_id}"}
        row |= {"output": f"answer of {query.query_id}", "context": texts, **query.carried}
        line = (
            json.dumps(row | ({"context_ids": _ids(query)} if with_ids else {})) + "\n"
        ).encode()
        where.append((str(path), offset))
        lines.append(line)
        offset += len(line)
    path.write_bytes(b"".join(lines))
    return where


def _verdict_rows(query: Query, tables: RunSchema, with_ids: bool) -> list[dict[str, Any]]:
    """The query's verdict rows; a passage's text (its hash) is `passage_text`."""
    reasons = query.judge_reasons or [
        "" if v is None else "relevant" if v else "not relevant" for v in query.verdicts
    ]
    ids = _ids(query)
    carried = {name: query.carried.get(name) for name in tables.verdict_names}
    return [
        {
            **PUBLISHED_VERDICTS.build_row(
                query_id=query.query_id,
                position=position,
                context_id=ids[position] if with_ids else None,
                context_hash=context_hash(passage_text(query, position)),
                relevant=verdict,
                judge_reason=reasons[position],
                cached=False,
            ),
            **carried,
        }
        for position, verdict in enumerate(query.verdicts)
    ]


def _parquet(frame: pl.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.write_parquet(buffer, compression="zstd")
    return buffer.getvalue()


def publish(
    store: Store,
    run_id: str,
    queries: Sequence[Query],
    *,
    run_date: dt.date = RUN_DATE,
    model: str = "lexical",
    scale: float = 1.0,
    seconds: float = 12.5,
    carried: Sequence[CarriedColumn] = (),
    segment_by: Sequence[str] = (),
    response_format: ResponseFormatRecord | None = None,
    api_base: str | None = None,
    prompt_version: str = PROMPT_VERSION,
    error_rate: ErrorRateRecord | None = None,
    context_ids: bool = True,
    inputs: Path | None = None,
) -> RunLocation:
    """Write run `run_id` of `queries` under `store` as the job publishes one; its location.

    `carried`: the run's carried columns (values from each `Query.carried`); `segment_by`: the
    columns its summary is segmented by (`summary.by`); `response_format`: what the workers'
    judges would have settled on (the manifest's `judge.response_format`); `api_base`: the
    config's judge.api_base; `error_rate`: the manifest's (default: the summary's errors
    against a limit of 0.5, no commonest error); `context_ids`: False for a run whose input
    gave none (null context_id); `inputs`: where to write the run's input as JSON Lines (its
    passages' texts `passage_text`), which the scores rows then point to."""
    location = RunLocation(run_id=run_id, run_date=run_date)
    schema = RunSchema(carried)
    where = [("input.jsonl", row) for row in range(len(queries))]
    if inputs is not None:
        where = _write_input(inputs, queries, context_ids)
    scores = pl.DataFrame(
        [_score_row(q, at, model, scale, schema) for at, q in zip(where, queries, strict=True)],
        schema=schema.scores.polars,
        orient="row",
    )
    verdicts = pl.DataFrame(
        [row for q in queries for row in _verdict_rows(q, schema, context_ids)],
        schema=schema.verdicts.polars,
        orient="row",
    )
    summary = aggregate.summarize(
        scores,
        verdicts,
        SummarySpec(
            model=model, scale=scale, segment_by=segment_by, verdict_segments=schema.verdict_names
        ),
    )
    # The job's order: verdicts, summary, then scores (whose presence marks a complete run).
    tables = {"verdicts": verdicts, "summary": summary.to_frame(), "scores": scores}
    for table in TABLES:
        store.write_bytes_atomic(store.join(location.table_file(table)), _parquet(tables[table]))
    manifest = {
        "run_id": run_id,
        "run_date": run_date.isoformat(),
        "judge_model": model,
        "prompt_version": prompt_version,
        "config": {
            "input": {
                "path": str(inputs or "input.jsonl"),
                "columns": {"context_ids": "context_ids" if context_ids else None},
                "carry": schema.names,
                "carry_to_verdicts": schema.verdict_names,
            },
            "output": {"path": store.url(store.root)},
            "judge": {"model": model, "api_base": api_base},
            "scorer": {"scale": scale},
            "summary": {"by": list(segment_by)},
        },
        "shards": 1,
        "shards_reused": 0,
        "nodes": {"local": 1},
        "flow": {},
        "judge": {"response_format": response_format.model_dump()} if response_format else {},
        "seconds": seconds,
        "timings_s": {"plan": 0.2, "ray_start": 2.0, "fan_out": round(seconds - 2.2, 3)},
        "status": "complete",
        "summary": summary.to_dict(),
        "duplicates": 0,
        "error_rate": (
            error_rate or ErrorRateRecord.of(summary.items, summary.errors, 0.5)
        ).model_dump(),
        "published_at": f"{run_date.isoformat()}T06:00:00+00:00",
        "tables": {t: store.url(store.join(location.table_file(t))) for t in TABLES},
    }
    store.write_bytes_atomic(
        store.join(location.manifest),
        json.dumps(manifest, indent=2, sort_keys=True).encode(),
    )
    return location


# --------------------------------------------------------------------------------------------
# the two runs the tests of compare and report share

ITEMS = 60  # queries in the base run, including SCRIPT_ID and UNSCORED_ID; BAD_ID comes on top
BASE = "base"
CANDIDATE = "cand"
SCRIPT_ID = '0<script>alert("id")</script>'  # in both, scored 0 so it is among the worst
REMOVED_ID = "q0000005"  # in base only
ADDED_ID = "new-query"  # in cand only
UNSCORED_ID = "q0000007"  # ok in base, unscored in cand
BAD_ID = "bad-row"  # context null: status error in both
BAD_ROW_ERROR = "input.jsonl line at byte 4096: context (column 'contexts') is null"


def _sample(seed: int) -> list[Query]:
    """ITEMS queries q0000001.. with 3 to 8 contexts, about 40% of them relevant."""
    rng = random.Random(seed)
    return [
        Query(f"q{i:07d}", [rng.random() < 0.4 for _ in range(3 + i % 6)]) for i in range(1, ITEMS)
    ]


def _stricter(query: Query, rng: random.Random, index: int) -> Query:
    """The candidate's verdicts: about a third of the relevant ones lost (a stricter judge),
    and on every ninth query one context newly found relevant, so some queries improve."""
    flags = [bool(v) and rng.random() >= 0.35 for v in query.verdicts]
    if index % 9 == 0 and not all(flags):
        flags[flags.index(False)] = True
    return Query(query.query_id, flags)


def base_and_candidate(store: Store) -> tuple[str, str]:
    """Publish the "base" and "cand" runs under `store`; their run ids.

    base: SCRIPT_ID (hostile id, reason and judge reasons; nothing relevant), ITEMS - 1
    sample queries, BAD_ID (an unreadable row). cand: the same judged more strictly (scores
    fall, a few rise), without REMOVED_ID, with ADDED_ID, UNSCORED_ID unscored, BAD_ID again.
    """
    hostile = Query(
        SCRIPT_ID,
        [False, False],
        reason="Where was <script>alert(1)</script> born? None of the contexts answers it.",
        judge_reasons=[
            "Visitors often mention the mild weather.",
            "Fish swim in the <b>sea</b>.",
        ],
    )
    bad = Query(BAD_ID, status="error", error=BAD_ROW_ERROR)
    sample = _sample(seed=11)
    publish(store, BASE, [hostile, *sample, bad])

    rng = random.Random(12)
    candidate: list[Query] = [hostile]
    for index, query in enumerate(sample):
        if query.query_id == REMOVED_ID:
            continue
        if query.query_id == UNSCORED_ID:
            unscored = Query(
                UNSCORED_ID,
                [None] * len(query.verdicts),
                status="unscored",
                error="contexts [0..4]: judge reply unusable after 3 attempts",
            )
            candidate.append(unscored)
            continue
        candidate.append(_stricter(query, rng, index))
    candidate += [Query(ADDED_ID, [True, False, True]), bad]
    publish(store, CANDIDATE, candidate, seconds=9.75)
    return BASE, CANDIDATE


class Runs(NamedTuple):
    output: Path  # the output root both runs are published under
    base: str
    cand: str


def local_base_and_candidate(output: Path) -> Runs:
    """`base_and_candidate` under the local folder `output`."""
    base, cand = base_and_candidate(open_store(str(output)))
    return Runs(output, base, cand)


# --------------------------------------------------------------------------------------------
# two runs segmented by retriever, where one retriever got worse

RETRIEVERS = tuple(f"retriever-{n}" for n in range(10))
WORSE = "retriever-3"  # its first two contexts swapped in SEG_B
TINY = "tiny"  # 3 queries whose scores collapse: too few to fail the gate
PER_RETRIEVER = 40
SEG_A = "seg-a"
SEG_B = "seg-b"
RETRIEVER = CarriedColumn("retriever", pa.string(), into_verdicts=True)


def segmented_runs(store: Store) -> tuple[str, str]:
    """Publish SEG_A and SEG_B, each with PER_RETRIEVER queries per retriever of RETRIEVERS
    and 3 of TINY, carrying `retriever` (into the verdicts too), summarised by it. Every
    query's first context is relevant in SEG_A; in SEG_B only WORSE's first two contexts are
    swapped, passages and verdicts (and TINY's relevant ones vanish); the rest is as in SEG_A."""
    rng = random.Random(5)
    before: list[Query] = []
    after: list[Query] = []
    for retriever in (*RETRIEVERS, TINY):
        count = 3 if retriever == TINY else PER_RETRIEVER
        for n in range(count):
            flags = [rng.random() < 0.5 for _ in range(6)]
            flags[0] = True
            query_id = f"{retriever}/q{n:03d}"
            values = {"retriever": retriever}
            before.append(Query(query_id, flags, carried=values))
            ids = [f"doc-{position}" for position in range(len(flags))]
            if retriever == WORSE:  # the first two swapped
                flags, ids = [flags[1], flags[0], *flags[2:]], [ids[1], ids[0], *ids[2:]]
            elif retriever == TINY:
                flags = [False] * len(flags)
            after.append(Query(query_id, flags, carried=values, contexts=ids))
    for run_id, queries in ((SEG_A, before), (SEG_B, after)):
        publish(store, run_id, queries, carried=[RETRIEVER], segment_by=["retriever"])
    return SEG_A, SEG_B


# two runs of 400 queries: the retriever reordered 40 queries' passages, the judge flipped one
# verdict on 40 others

TWO_CAUSES = ("causes-a", "causes-b")
REORDERED = frozenset(range(0, 160, 4))  # query numbers: the first two passages swapped
FLIPPED = frozenset(range(200, 400, 5))  # a verdict flipped: every other one rises, the rest fall
CAUSE_SEGMENTS = {"low": range(100), "mid": range(100, 250), "high": range(250, 400)}


def two_causes(
    store: Store, context_ids: bool = True, inputs: Path | None = None
) -> tuple[str, str]:
    """Publish TWO_CAUSES, 400 queries "c000".. carrying `retriever` (its CAUSE_SEGMENTS name),
    5 passages each, the first relevant, the second not, the last relevant. In the second run,
    REORDERED's first two passages swap (verdicts with them), and FLIPPED get one verdict
    flipped on the same passages: the second passage found relevant (the score rises) when
    the query number is even, else the first one not (it falls). Every one of them changes.
    `inputs`: a folder to write each run's input to (`publish`)."""
    rng = random.Random(29)
    runs: tuple[list[Query], list[Query]] = ([], [])
    for segment, numbers in CAUSE_SEGMENTS.items():
        for n in numbers:
            flags = [True, False, *(rng.random() < 0.5 for _ in range(2)), True]
            ids = [f"doc-{n}-{position}" for position in range(5)]
            query = Query(f"c{n:03d}", flags, carried={"retriever": segment}, contexts=ids)
            runs[0].append(query)
            if n in REORDERED:
                flags, ids = [flags[1], flags[0], *flags[2:]], [ids[1], ids[0], *ids[2:]]
            elif n in FLIPPED:
                flags = [True, True, *flags[2:]] if n % 2 == 0 else [False, *flags[1:]]
            runs[1].append(Query(query.query_id, flags, carried=query.carried, contexts=ids))
    for run_id, queries in zip(TWO_CAUSES, runs, strict=True):
        publish(
            store,
            run_id,
            queries,
            carried=[RETRIEVER],
            segment_by=["retriever"],
            context_ids=context_ids,
            inputs=inputs / f"{run_id}.jsonl" if inputs is not None else None,
        )
    return TWO_CAUSES


# the commands on published runs


def run_compare(output: Path, *argv: str) -> tuple[int, str]:
    """`ctxprec compare RUN_A RUN_B [options] --output <output>`: (exit code, printed)."""
    from jobs.cli import build_parser, options_of
    from jobs.tools import comparison as compare
    from jobs.tools.tool_options import CompareOptions

    args = build_parser().parse_args(["compare", *argv[:2], "--output", str(output), *argv[2:]])
    out = io.StringIO()
    code = compare.run(options_of(CompareOptions, args), out=out)
    return code, out.getvalue()


def run_report(output: Path, *argv: str) -> tuple[str, str]:
    """`ctxprec report RUN [options] --output <output>`: (the page, printed)."""
    from jobs.cli import build_parser, options_of
    from jobs.tools import report
    from jobs.tools.tool_options import ReportOptions

    args = build_parser().parse_args(["report", *argv, "--output", str(output)])
    out = io.StringIO()
    assert report.run(options_of(ReportOptions, args), out=out) == 0
    printed = out.getvalue()
    page = Path(printed.removeprefix("report: ").strip())
    return page.read_text(encoding="utf-8"), printed
