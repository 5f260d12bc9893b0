"""`input.format: phoenix`: the window's spans pulled from Phoenix's `spans/otlpv1`, a page
at a time, each page written as an OTLP JSON file under the run's staging area, which
`jobs.inputs.traces` then assembles as it assembles any OTLP file."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from typing import Any
from urllib.parse import quote

import httpx

from jobs.core.config import PhoenixInputConfig
from jobs.core.storage import Store
from scorer_core.errors import InputError

logger = logging.getLogger(__name__)
PAGE = 1000  # spans a page (Phoenix's largest)
_KIND = "openinference.span.kind"
ANSWER_MARGIN_H = 1  # hours around the window in which the retrievals' answers are looked for


def otlp_json(value: Any) -> Any:
    """Phoenix's OTLP in snake_case with null members as OTLP JSON (camelCase, none null)."""
    if isinstance(value, list):
        return [otlp_json(item) for item in value]
    if not isinstance(value, dict):
        return value
    camel = {
        re.sub(r"_([a-z])", lambda match: match[1].upper(), key): item
        for key, item in value.items()
    }
    return {key: otlp_json(item) for key, item in camel.items() if item is not None}


def window(source: PhoenixInputConfig, now: dt.datetime, margin: float = 0) -> dict[str, str]:
    """The start/end query of the configured window (`last_hours`: the hours up to `now`),
    widened by `margin` hours on each side."""
    start, end = source.start, source.end
    if source.last_hours is not None:
        start, end = now - dt.timedelta(hours=source.last_hours), now
    wide = dt.timedelta(hours=margin)
    bounds = (("start_time", start and start - wide), ("end_time", end and end + wide))
    return {key: moment.isoformat() for key, moment in bounds if moment}


def _get(client: httpx.Client, source: PhoenixInputConfig, path: str, **query: Any) -> Any:
    where = f"input.phoenix: Phoenix at {source.endpoint} (project {source.project!r})"
    try:
        answer = client.get(path, params=query)
    except httpx.TransportError as exc:
        raise InputError(f"{where} unreachable: {exc}") from None
    if answer.status_code != 200:
        hint = _hint(answer.status_code, path)
        raise InputError(
            f"{where} answered {answer.status_code} to {path}: {answer.text[:200]}{hint}"
        )
    return answer.json()


def _hint(status: int, path: str) -> str:
    """What a refusal most likely means, said after Phoenix's own answer."""
    if status in (401, 403):
        return (
            "; check the API key: the variable input.phoenix.api_key_env names (default "
            "PHOENIX_API_KEY) must hold a key this Phoenix accepts"
        )
    if status == 404 and "/spans" not in path:  # the project itself was not found
        return "; no such project (input.phoenix.project)"
    return ""


_PULLS = {"retriever": {"attribute": f"{_KIND}:RETRIEVER"}, "root": {"parent_id": "null"}}
_PULLS["next_llm"] = {"attribute": f"{_KIND}:LLM"}  # what each pull asks Phoenix for


def pull_spans(source: PhoenixInputConfig, answers: str, store: Store, folder: str) -> str:
    """Pull the window's spans of `source`, a page a file under `folder`/spans, as OTLP files
    (once: a DONE marker there, a resumed run asks Phoenix nothing): the spans' URL, in
    `store`. `answers`: `input.otlp.output`, whose spans are pulled beside the retrievals."""
    spans = f"{folder}/spans"
    done = store.join(folder, "DONE.json")
    url = store.url(store.join(spans))
    if store.exists(done):
        logger.info(f"phoenix: spans pulled before: {store.read_bytes(done).decode()}")
        return url
    store.rm(store.join(spans), recursive=True)
    counts = dict.fromkeys([kind for kind in _PULLS if kind in ("retriever", answers)], 0)
    project, now = quote(source.project, safe=""), dt.datetime.now(dt.UTC)
    with httpx.Client(base_url=source.endpoint, headers=source.http_headers(), timeout=120) as http:
        _get(http, source, f"/v1/projects/{project}")
        for kind in counts:
            cursor: dict[str, str] | None = {}
            while cursor is not None:
                # a root starts before its retrieval, an LLM span after it ends: both may lie
                # outside the window that holds the retrieval
                span_window = window(source, now, 0 if kind == "retriever" else ANSWER_MARGIN_H)
                query = _PULLS[kind] | span_window | {"limit": PAGE} | cursor
                page = _get(http, source, f"/v1/projects/{project}/spans/otlpv1", **query)
                found = [
                    span for span in page["data"] if kind != "root" or _kind(span) != "RETRIEVER"
                ]
                export = {"resourceSpans": [{"scopeSpans": [{"spans": otlp_json(found)}]}]}
                name = store.join(spans, f"{kind}-{counts[kind]:012d}.json")
                store.write_bytes_atomic(name, json.dumps(export).encode())
                counts[kind] += len(found)
                cursor = {"cursor": page["next_cursor"]} if page.get("next_cursor") else None
    store.write_bytes_atomic(done, json.dumps(counts).encode())
    logger.info(f"phoenix: pulled {counts} span(s) from {source.endpoint}")
    return url


def _kind(span: dict[str, Any]) -> Any:
    found = [
        attribute.get("value") or {}
        for attribute in span.get("attributes") or []
        if attribute.get("key") == _KIND
    ]
    return found[0].get("string_value") if found else None
