"""`input.format: phoenix`: the window's spans pulled from Phoenix's `spans/otlpv1`, a page
at a time, each page written as an OTLP JSON file under the run's staging area, which
`jobs.inputs.traces` then assembles as it assembles any OTLP file."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
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


def otlp_json(value: Any) -> Any:
    """Phoenix's OTLP in snake_case with null members as OTLP JSON (camelCase, none null)."""
    if isinstance(value, list):
        return [otlp_json(item) for item in value]
    if not isinstance(value, dict):
        return value
    camel = {re.sub(r"_([a-z])", lambda m: m[1].upper(), k): v for k, v in value.items()}
    return {key: otlp_json(item) for key, item in camel.items() if item is not None}


def _filters(output_from: str) -> list[tuple[str, dict[str, Any]]]:
    """(file prefix, query) of each pull: retrievals, then what the answer comes from."""
    pulls: list[tuple[str, dict[str, Any]]] = [("retriever", {"attribute": f"{_KIND}:RETRIEVER"})]
    if output_from == "root":
        pulls.append(("root", {"parent_id": "null"}))
    elif output_from == "next_llm":
        pulls.append(("llm", {"attribute": f"{_KIND}:LLM"}))
    return pulls


def window(source: PhoenixInputConfig, now: dt.datetime) -> dict[str, str]:
    """The start/end query of the configured window (`last_hours`: the hours up to `now`)."""
    start, end = source.start, source.end
    if source.last_hours is not None:
        start, end = now - dt.timedelta(hours=source.last_hours), now
    found = {"start_time": start, "end_time": end}
    return {key: when.isoformat() for key, when in found.items() if when is not None}


def _get(client: httpx.Client, source: PhoenixInputConfig, path: str, **query: Any) -> Any:
    where = f"Phoenix at {source.endpoint} (project {source.project!r})"
    try:
        answer = client.get(path, params=query)
    except httpx.TransportError as exc:
        raise InputError(f"input.phoenix: {where} unreachable: {exc}") from None
    if answer.status_code in (401, 403, 404):
        why = "no such project" if answer.status_code == 404 else "check input.phoenix.api_key_env"
        raise InputError(f"input.phoenix: {where} answered {answer.status_code}: {why}")
    if answer.status_code != 200:
        raise InputError(f"input.phoenix: {where} {path}: HTTP {answer.status_code}")
    return answer.json()


def pull_spans(
    source: PhoenixInputConfig, output_from: str, store: Store, folder: str, now: dt.datetime
) -> str:
    """Write the window's spans under `folder`/spans (one file a page), then a DONE marker; a
    folder with the marker is read again, Phoenix not asked. The spans' folder."""
    spans, done = store.join(folder, "spans"), store.join(folder, "DONE.json")
    if store.exists(done):
        logger.info(f"phoenix: spans pulled before: {store.read_bytes(done).decode()}")
        return spans
    store.rm(spans, recursive=True)
    spans = f"{folder}/spans"
    headers = dict(source.headers)
    if key := os.environ.get(source.api_key_env):
        headers["Authorization"] = f"Bearer {key}"
    counts: dict[str, int] = {}
    project = quote(source.project, safe="")
    with httpx.Client(base_url=source.endpoint, headers=headers, timeout=120.0) as client:
        _get(client, source, f"/v1/projects/{project}")
        for prefix, query in _filters(output_from):
            cursor, pages = None, 0
            while pages == 0 or cursor:
                query |= {
                    "limit": PAGE,
                    **window(source, now),
                    **({"cursor": cursor} if cursor else {}),
                }
                page = _get(client, source, f"/v1/projects/{project}/spans/otlpv1", **query)
                found = [s for s in page["data"] if prefix != "root" or _kind(s) != "RETRIEVER"]
                export = {
                    "resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": otlp_json(found)}]}]
                }
                name = store.join(spans, f"{prefix}-{pages:06d}.json")
                store.write_bytes_atomic(name, json.dumps(export).encode())
                counts[prefix] = counts.get(prefix, 0) + len(found)
                cursor, pages = page.get("next_cursor"), pages + 1
    store.write_bytes_atomic(done, json.dumps(counts).encode())
    logger.info(f"phoenix: pulled {counts} span(s) from {source.endpoint}")
    return store.join(spans)


def _kind(span: dict[str, Any]) -> str | None:
    for attribute in span.get("attributes") or []:
        if attribute.get("key") == _KIND:
            return str((attribute.get("value") or {}).get("string_value"))
    return None
