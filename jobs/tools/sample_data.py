"""Writes a synthetic, labelled sample dataset, so the job runs offline on a fresh machine.

Every item asks about one attribute of an invented place, person or product; its retrieved
contexts mix passages that answer it with passages about other attributes or other entities,
in a seeded random order. `relevance` holds the generator's own ground truth per context.
`--markers` adds the words RELEVANT / IRRELEVANT to each passage, which is what the fake judge
server used by the tests keys on. Streaming and seeded: 1M items take seconds, same seed same
bytes.

    python -m jobs.tools.sample_data --out data/sample.jsonl --items 500
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

_SYLLABLES = ["ka", "lo", "ven", "dri", "mar", "tus", "el", "qua", "ri", "son", "bel", "tor"]
_KINDS: dict[str, list[tuple[str, str, list[str]]]] = {
    # attribute, question template, answer vocabulary
    "city": [
        ("river", "Which river flows through {e}?", ["Amber", "Silverrun", "Kessel", "Orva"]),
        ("founded", "In which year was {e} founded?", ["1204", "1688", "1791", "1902"]),
        ("mayor", "Who is the mayor of {e}?", ["Ines Marl", "Otto Brenn", "Sula Veit"]),
    ],
    "person": [
        ("born", "Where was {e} born?", ["Harlow", "Quenby", "Marisport", "Dunmere"]),
        ("field", "What did {e} study?", ["botany", "glaciology", "cartography", "acoustics"]),
        ("prize", "Which prize did {e} win?", ["Orrin Medal", "Lumen Prize", "Vale Award"]),
    ],
    "product": [
        ("maker", "Which company makes the {e}?", ["Norvik", "Pellham Works", "Astrel"]),
        ("battery", "How long does the {e} battery last?", ["9 hours", "14 hours", "2 days"]),
        ("weight", "How much does the {e} weigh?", ["340 grams", "1.2 kilograms", "95 grams"]),
    ],
}
_FACTS = {  # a passage that states an attribute's value
    "river": "The {v} river flows through {e}, dividing its old town.",
    "founded": "{e} was founded in {v} by merchants from the coast.",
    "mayor": "{v} was elected mayor of {e} after a close race.",
    "born": "{e} was born in {v}, a small port town.",
    "field": "{e} studied {v} at the university for six years.",
    "prize": "{e} won the {v} for work published early in their career.",
    "maker": "The {e} is made by {v}, which designs it in-house.",
    "battery": "The {e} battery lasts about {v} on a single charge.",
    "weight": "The {e} weighs {v}, lighter than its predecessor.",
}
_FILLER = [
    "Local archives describe a long period of trade and slow growth.",
    "Visitors often mention the mild weather in spring.",
    "Several studies have compared it with neighbouring examples.",
    "The name has been spelled in a number of ways over the years.",
    "Critics and supporters have debated its reputation for decades.",
]


def _entity(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _marked(text: str, relevant: bool) -> str:
    """The passage with the word the tests' fake judge keys on."""
    if relevant:
        return f"{text} RELEVANT"
    return f"{text} IRRELEVANT"


def generate(
    items: int, seed: int = 7, markers: bool = False, segments: int = 0
) -> Iterator[dict[str, Any]]:
    """Yield `items` synthetic items; with `segments`, a `retriever` column (n % segments) that
    leaves the rest of each item as it is without it."""
    rng = random.Random(seed)
    for number in range(items):
        kind = rng.choice(list(_KINDS))
        attribute, template, answers = rng.choice(_KINDS[kind])
        entity = _entity(rng)
        answer = rng.choice(answers)
        question = template.format(e=entity)
        fact = _FACTS[attribute].format(e=entity, v=answer)
        contexts = [(f"{fact} {rng.choice(_FILLER)}", True) for _ in range(rng.choice([1, 1, 2]))]
        for _ in range(rng.randint(2, 7)):
            if rng.random() < 0.5:
                others = [other for other in _KINDS[kind] if other[0] != attribute]
                other_attr, _, other_answers = rng.choice(others)
                text = _FACTS[other_attr].format(e=entity, v=rng.choice(other_answers))
            else:
                text = _FACTS[attribute].format(e=_entity(rng), v=rng.choice(answers))
            contexts.append((f"{text} {rng.choice(_FILLER)}", False))
        rng.shuffle(contexts)
        if markers:
            contexts = [(_marked(text, relevant), relevant) for text, relevant in contexts]
        row = {
            "id": f"q{number:07d}",
            "question": question,
            "answer": f"{answer}." if rng.random() < 0.5 else f"It is {answer}.",
            "ground_truth": answer,
            "contexts": [text for text, _ in contexts],
            "relevance": [int(relevant) for _, relevant in contexts],
        }
        if segments:
            row["retriever"] = f"retriever-{number % segments:03d}"
        yield row


def write_jsonl(path: Path, rows: Iterator[dict[str, Any]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def write_parquet(path: Path, rows: Iterator[dict[str, Any]], batch: int = 50_000) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    chunks = iter(lambda: list(itertools.islice(rows, batch)), [])
    first = pa.Table.from_pylist(next(chunks, []))
    count: int = first.num_rows
    with pq.ParquetWriter(path, first.schema, compression="zstd") as writer:
        writer.write_table(first, row_group_size=10_000)
        for chunk in chunks:
            writer.write_table(pa.Table.from_pylist(chunk), row_group_size=10_000)
            count += len(chunk)
    return count


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.tools.sample_data", description=__doc__)
    parser.add_argument("--out", default="data/sample.jsonl", help=".jsonl or .parquet")
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--markers", action="store_true", help="add RELEVANT/IRRELEVANT words")
    parser.add_argument(
        "--segments", type=int, default=0, help="add a `retriever` column with this many values"
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    rows = generate(args.items, args.seed, args.markers, args.segments)
    count = write_parquet(out, rows) if out.suffix == ".parquet" else write_jsonl(out, rows)
    print(f"wrote {count} items to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
