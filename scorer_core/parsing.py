"""Judge replies to verdicts and reasons, strictly, by the wire contract.

A reply holds a JSON object (bare, fenced, or in prose) whose "verdicts" list has exactly one
entry per context asked about, `{"i": <position>, "v": "yes"|"no"}`; anything else raises
`MalformedReply` saying precisely what was wrong, which the judge sends back when it re-asks.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from typing import Any

from scorer_core.errors import MalformedReply
from scorer_core.precision import format_score
from scorer_core.types import ContextVerdict

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_VERDICT_WORDS = {"yes": True, "no": False}
_MAX_QUOTED = 120


def _quote(text: str) -> str:
    text = text.strip()
    return repr(text if len(text) <= _MAX_QUOTED else text[:_MAX_QUOTED] + "...")


def writable(text: str) -> str:
    """`text` with any character UTF-8 cannot encode (a lone surrogate, which a JSON reply can
    hold as `\\udc00`) written as its escape: a reason must not make its shard unwritable."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def extract_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in `text`: bare, fenced, or surrounded by prose."""
    fenced = [match.group(1).strip() for match in _FENCE.finditer(text)]
    for candidate in [text.strip(), *fenced]:
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(candidate)
            if isinstance(value, dict):
                return value
    # Prose around the JSON: try decoding from each opening brace.
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        with contextlib.suppress(json.JSONDecodeError):
            value, _ = decoder.raw_decode(text, match.start())
            if isinstance(value, dict):
                return value
    if not text.strip():
        raise MalformedReply("the reply was empty")
    raise MalformedReply(f"the reply is not a JSON object: {_quote(text)}")


def _parse_index(raw: object) -> int:
    # JSON numbers like 3.0 or "3" are a common slip of small models; accept exact integers.
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if (isinstance(raw, float) and raw.is_integer()) or (
        isinstance(raw, str) and raw.strip().isdecimal()
    ):
        return int(raw)
    raise MalformedReply(f'"i" (the passage number) must be an integer, got {json.dumps(raw)}')


def parse_verdicts(text: str, positions: Sequence[int]) -> tuple[ContextVerdict, ...]:
    """The verdicts in a reply's `text` to a request about the contexts at `positions`, one
    per position in position order; `MalformedReply` says what is wrong (no JSON object, a
    missing or extra verdict, ...)."""
    payload = extract_json_object(text)
    entries = payload.get("verdicts")
    if not isinstance(entries, list):
        raise MalformedReply('the reply has no "verdicts" list')
    expected = set(positions)
    if len(entries) != len(expected):
        raise MalformedReply(f"expected {len(expected)} verdicts, got {len(entries)}")
    by_index: dict[int, ContextVerdict] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise MalformedReply(f"each verdict must be an object, got {_quote(str(entry))}")
        if "i" not in entry:
            raise MalformedReply('a verdict has no "i" (its passage number)')
        index = _parse_index(entry["i"])
        if index not in expected:
            raise MalformedReply(
                f"passage {index} is not one of the passages asked about "
                f"({min(expected)}..{max(expected)})"
            )
        if index in by_index:
            raise MalformedReply(f"passage {index} appears twice")
        word = entry.get("v")
        if not isinstance(word, str) or word.strip().lower() not in _VERDICT_WORDS:
            raise MalformedReply(
                f'verdict for context {index} must be "yes" or "no", got {json.dumps(word)}'
            )
        reason = entry.get("reason", "")
        reason = writable(reason) if isinstance(reason, str) else ""
        by_index[index] = ContextVerdict(index, _VERDICT_WORDS[word.strip().lower()], reason)
    return tuple(by_index[position] for position in sorted(expected))


_REASON_START = re.compile(r"^\s*The score is\s+(-?[0-9]+(?:\.[0-9]+)?)\s+because\b", re.IGNORECASE)


def parse_reason(text: str, score: float | None = None) -> str:
    """The reason in a reply's `text`; given a `score`, it must begin "The score is <score>
    because" (any decimal spelling of that value: the model may not restate another score),
    spelled then as `reason_start` spells it. `MalformedReply` says what is wrong."""
    payload = extract_json_object(text)
    reason = payload.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise MalformedReply('the reply has no non-empty "reason" string')
    reason = writable(reason.strip())
    if score is not None:
        start = _REASON_START.match(reason)
        expected = f"The score is {format_score(score)} because"
        if start is None or float(start.group(1)) != score:
            raise MalformedReply(f"the reason must begin with {expected!r}, got {_quote(reason)}")
        # One spelling for every reason, whatever case or number format the model used.
        reason = expected + reason[start.end() :]
    return reason
