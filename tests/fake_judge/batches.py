"""A fake OpenAI Files + Batches API for tests and benchmarks, mounted on the fake judge's app.

Routes, in OpenAI's shapes (the `openai` SDK and litellm's `acreate_file`, `acreate_batch`,
`aretrieve_batch`, `alist_batches`, `acancel_batch` and `afile_content` talk to them as to
api.openai.com):

    POST /v1/files                  multipart `file` + `purpose`         -> file object
    GET  /v1/files/{id}             the file object
    GET  /v1/files/{id}/content     the file's bytes
    DELETE /v1/files/{id}
    POST /v1/batches                {input_file_id, endpoint, completion_window, metadata}
    GET  /v1/batches/{id}           the batch object
    GET  /v1/batches?limit&after    newest first, paginated
    POST /v1/batches/{id}/cancel

Every line of a batch is answered by the fake judge's own chat logic
(`FakeJudgeServer.answer_body`: the same verdicts, reasons and content faults as online).

**Time belongs to the test.** A batch moves only when `advance()` is called (or, with
`BatchPlan.steps_per_retrieve`, each time a client retrieves it), one state per step:
validating -> in_progress (for `in_progress_steps` steps, answering an even share of the lines
each) -> finalizing -> completed. `BatchPlan` decides how a batch ends instead: `expired`
(after `answered_share` of the lines; the rest go to the error file with code
`batch_expired`, as OpenAI does), `cancelled` (through cancelling; unanswered lines are simply
absent) or `failed` (validation refused the file; `errors.data` says why). A file that breaks
the batch rules (not JSONL, a duplicate or missing `custom_id`, a wrong `url`, more than
`max_requests` lines or `max_bytes` bytes) fails validation whatever the plan says.
`error_rate` sends a share of the lines to the error file as HTTP 500s, `bad_request_rate` as
HTTP 400s with a reason (`content_policy_violation`), `missing_rate` drops a share of them from
both files, and `shuffle` writes the output in a random order. `first_outcomes` ends the first
batches created under a plan differently from the later ones (say, the first batch expires and
the batches of re-asked lines complete).

Counters (`stats()`, `GET /admin/batches/stats`) say how many files were uploaded and batches
created, so a test can prove that a resumed run submitted nothing twice. `wait_for` blocks a
test thread until a condition on the counters holds (no polling, no sleeps).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from aiohttp import BodyPartReader, web

Answer = Callable[[Any], tuple[int, dict[str, Any]]]
"""Answers one chat-completions body: (HTTP status, JSON body)."""

Outcome = Literal["completed", "expired", "cancelled", "failed"]
ENDPOINT = "/v1/chat/completions"
#: OpenAI's limits per batch input file.
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1024 * 1024
MAX_CUSTOM_ID_CHARS = 64
FINAL_STATES = frozenset({"completed", "expired", "cancelled", "failed"})


@dataclass(frozen=True)
class BatchPlan:
    """How the batches created from now on behave (each batch keeps the plan it was created
    under)."""

    outcome: Outcome = "completed"
    in_progress_steps: int = 1
    # expired / cancelled: the share of lines answered before the batch stops.
    answered_share: float = 0.5
    error_rate: float = 0.0  # lines answered with HTTP 500 in the error file
    # lines answered with HTTP 400 (a request the provider refuses, with its reason)
    bad_request_rate: float = 0.0
    missing_rate: float = 0.0  # lines in neither file
    shuffle: bool = True
    # Each retrieve of a batch moves it this many steps (0: only `advance` moves batches).
    steps_per_retrieve: int = 0
    max_requests: int = MAX_REQUESTS
    max_bytes: int = MAX_BYTES
    seed: int = 0
    # The first batches created under this plan end so, in order; later ones with `outcome`.
    first_outcomes: tuple[Outcome, ...] = ()

    def __post_init__(self) -> None:
        for outcome in (self.outcome, *self.first_outcomes):
            if outcome not in ("completed", "expired", "cancelled", "failed"):
                raise ValueError(f"unknown batch outcome {outcome!r}")
        for name in ("answered_share", "error_rate", "missing_rate", "bad_request_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"BatchPlan.{name} must be within 0..1")
        if self.in_progress_steps < 1 or self.steps_per_retrieve < 0:
            raise ValueError("BatchPlan: in_progress_steps >= 1, steps_per_retrieve >= 0")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchPlan:
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown BatchPlan fields: {sorted(unknown)}")
        values = dict(data)
        if "first_outcomes" in values:  # a JSON list
            values["first_outcomes"] = tuple(values["first_outcomes"])
        return cls(**values)

    def for_batch(self, number: int) -> BatchPlan:
        """The plan of the `number`-th batch created under this one (0 first)."""
        if number >= len(self.first_outcomes):
            return replace(self, first_outcomes=())
        return replace(self, outcome=self.first_outcomes[number], first_outcomes=())


@dataclass
class _File:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
            "expires_at": None,
        }


@dataclass
class _Batch:
    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None
    plan: BatchPlan
    created_at: int
    rng: random.Random
    status: str = "validating"
    lines: list[dict[str, Any]] = field(default_factory=list)
    answered: int = 0
    steps_in_progress: int = 0
    outputs: list[str] = field(default_factory=list)
    error_lines: list[str] = field(default_factory=list)
    completed: int = 0
    failed: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    output_file_id: str | None = None
    error_file_id: str | None = None
    stamps: dict[str, int] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "in_progress_at": self.stamps.get("in_progress"),
            "expires_at": self.created_at + 24 * 3600,
            "finalizing_at": self.stamps.get("finalizing"),
            "completed_at": self.stamps.get("completed"),
            "failed_at": self.stamps.get("failed"),
            "expired_at": self.stamps.get("expired"),
            "cancelling_at": self.stamps.get("cancelling"),
            "cancelled_at": self.stamps.get("cancelled"),
            "request_counts": {
                "total": len(self.lines),
                "completed": self.completed,
                "failed": self.failed,
            },
            "metadata": self.metadata,
        }


def _error(status: int, message: str, code: str | None = None) -> web.Response:
    body = {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    }
    return web.json_response(body, status=status)


class FakeBatchAPI:
    """Files and batches held in memory; `answer` answers each line (see the module doc)."""

    def __init__(self, answer: Answer, plan: BatchPlan | None = None) -> None:
        self._answer = answer
        self._plan = plan or BatchPlan()
        self._under_plan = 0  # batches created under the current plan
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._files: dict[str, _File] = {}
        self._batches: dict[str, _Batch] = {}
        self._order: list[str] = []  # batch ids, oldest first
        self._counter = 0
        self._counts = dict.fromkeys(
            ("uploads", "batches_created", "retrievals", "lists", "downloads", "cancels"), 0
        )
        self._uploaded_bytes = 0
        self._answering_s = 0.0  # spent answering lines: the provider's work, not the client's

    # -- test control -------------------------------------------------------------------------

    def set_plan(self, plan: BatchPlan) -> None:
        """Batches created from now on follow `plan`."""
        with self._lock:
            self._plan = plan
            self._under_plan = 0

    def advance(self, steps: int = 1, batch_id: str | None = None) -> None:
        """Move every batch (or one) `steps` states on (final batches stay as they are)."""
        with self._changed:
            targets = [batch_id] if batch_id is not None else list(self._order)
            for _ in range(steps):
                for name in targets:
                    self._step(self._batches[name])
            self._changed.notify_all()

    def finish_all(self) -> None:
        """Advance every batch until it is in a final state."""
        with self._changed:
            for name in self._order:
                batch = self._batches[name]
                while batch.status not in FINAL_STATES:
                    self._step(batch)
            self._changed.notify_all()

    def uploaded_lines(self) -> list[dict[str, Any]]:
        """Every line of every uploaded batch input file, parsed, in upload order."""
        with self._lock:
            uploads = [f.data for f in self._files.values() if f.purpose == "batch"]
        return [json.loads(raw) for data in uploads for raw in data.splitlines() if raw.strip()]

    def statuses(self) -> dict[str, str]:
        with self._lock:
            return {name: self._batches[name].status for name in self._order}

    def stats(self) -> dict[str, Any]:
        """Counters: uploads, batches_created, retrievals, lists, downloads, cancels, and the
        batches by status."""
        with self._lock:
            return self._stats()

    def _stats(self) -> dict[str, Any]:
        by_status: dict[str, int] = {}
        for batch in self._batches.values():
            by_status[batch.status] = by_status.get(batch.status, 0) + 1
        return {
            **self._counts,
            "uploaded_bytes": self._uploaded_bytes,
            "answering_s": round(self._answering_s, 3),
            "files": len(self._files),
            "batches": len(self._batches),
            "by_status": by_status,
            "plan": asdict(self._plan),
        }

    def wait_for(self, condition: Callable[[dict[str, Any]], bool], timeout_s: float) -> bool:
        """Block until `condition(stats())` holds (re-checked whenever the API is used);
        False after `timeout_s`."""
        with self._changed:
            return self._changed.wait_for(lambda: condition(self._stats()), timeout_s)

    # -- routes -------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        for prefix in ("/v1", ""):
            app.router.add_post(f"{prefix}/files", self._create_file)
            app.router.add_get(f"{prefix}/files/{{file_id}}", self._get_file)
            app.router.add_get(f"{prefix}/files/{{file_id}}/content", self._file_content)
            app.router.add_delete(f"{prefix}/files/{{file_id}}", self._delete_file)
            app.router.add_post(f"{prefix}/batches", self._create_batch)
            app.router.add_get(f"{prefix}/batches", self._list_batches)
            app.router.add_get(f"{prefix}/batches/{{batch_id}}", self._get_batch)
            app.router.add_post(f"{prefix}/batches/{{batch_id}}/cancel", self._cancel_batch)
        app.router.add_post("/admin/batches/plan", self._admin_plan)
        app.router.add_post("/admin/batches/advance", self._admin_advance)
        app.router.add_get("/admin/batches/stats", self._admin_stats)

    def _new_id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter:06d}"

    async def _create_file(self, request: web.Request) -> web.Response:
        # Read part by part: a batch file may be far larger than aiohttp's body limit.
        reader = await request.multipart()
        purpose = ""
        filename = "upload.jsonl"
        chunks: list[bytes] = []
        while True:
            part = await reader.next()
            if part is None:
                break
            if not isinstance(part, BodyPartReader):
                continue
            if part.name == "purpose":
                purpose = (await part.text()).strip()
            elif part.name == "file":
                filename = part.filename or filename
                chunks.append(bytes(await part.read()))
        if purpose != "batch":
            return _error(400, f"purpose must be 'batch' here, got {purpose!r}")
        if not chunks:
            return _error(400, "no file part in the upload")
        with self._changed:
            file = _File(
                self._new_id("file-fake"), filename, purpose, b"".join(chunks), int(time.time())
            )
            self._files[file.id] = file
            self._counts["uploads"] += 1
            self._uploaded_bytes += len(file.data)
            self._changed.notify_all()
            return web.json_response(file.describe())

    async def _get_file(self, request: web.Request) -> web.Response:
        with self._lock:
            file = self._files.get(request.match_info["file_id"])
            if file is None:
                return _error(404, "No such file", "file_not_found")
            return web.json_response(file.describe())

    async def _file_content(self, request: web.Request) -> web.Response:
        with self._changed:
            file = self._files.get(request.match_info["file_id"])
            if file is None:
                return _error(404, "No such file", "file_not_found")
            self._counts["downloads"] += 1
            self._changed.notify_all()
            data = file.data
        return web.Response(body=data, content_type="application/octet-stream")

    async def _delete_file(self, request: web.Request) -> web.Response:
        with self._lock:
            file_id = request.match_info["file_id"]
            deleted = self._files.pop(file_id, None) is not None
        return web.json_response({"id": file_id, "object": "file", "deleted": deleted})

    async def _create_batch(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "body must be a JSON object")
        input_file_id = body.get("input_file_id")
        with self._changed:
            if input_file_id not in self._files:
                return _error(400, f"input_file_id {input_file_id!r} does not exist")
            plan = self._plan.for_batch(self._under_plan)
            self._under_plan += 1
            batch = _Batch(
                id=self._new_id("batch_fake"),
                input_file_id=str(input_file_id),
                endpoint=str(body.get("endpoint")),
                completion_window=str(body.get("completion_window")),
                metadata=body.get("metadata"),
                plan=plan,
                created_at=int(time.time()),
                rng=random.Random(plan.seed + self._counter),
            )
            self._batches[batch.id] = batch
            self._order.append(batch.id)
            self._counts["batches_created"] += 1
            self._changed.notify_all()
            return web.json_response(batch.describe())

    async def _get_batch(self, request: web.Request) -> web.Response:
        with self._changed:
            batch = self._batches.get(request.match_info["batch_id"])
            if batch is None:
                return _error(404, "No such batch", "batch_not_found")
            for _ in range(batch.plan.steps_per_retrieve):
                self._step(batch)
            self._counts["retrievals"] += 1
            self._changed.notify_all()
            return web.json_response(batch.describe())

    async def _list_batches(self, request: web.Request) -> web.Response:
        try:
            limit = max(1, min(100, int(request.query.get("limit", "20"))))
        except ValueError:
            return _error(400, "limit must be an integer")
        after = request.query.get("after")
        with self._changed:
            newest_first = list(reversed(self._order))
            if after is not None:
                if after not in self._batches:
                    return _error(400, f"unknown cursor {after!r}")
                newest_first = newest_first[newest_first.index(after) + 1 :]
            page = newest_first[:limit]
            self._counts["lists"] += 1
            self._changed.notify_all()
            data = [self._batches[name].describe() for name in page]
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "first_id": page[0] if page else None,
                "last_id": page[-1] if page else None,
                "has_more": len(newest_first) > len(page),
            }
        )

    async def _cancel_batch(self, request: web.Request) -> web.Response:
        with self._changed:
            batch = self._batches.get(request.match_info["batch_id"])
            if batch is None:
                return _error(404, "No such batch", "batch_not_found")
            if batch.status in ("validating", "in_progress", "finalizing"):
                self._enter(batch, "cancelling")
            self._counts["cancels"] += 1
            self._changed.notify_all()
            return web.json_response(batch.describe())

    async def _admin_plan(self, request: web.Request) -> web.Response:
        try:
            plan = BatchPlan.from_dict(await request.json())
        except (ValueError, TypeError) as exc:
            return _error(400, str(exc))
        self.set_plan(plan)
        return web.json_response({"ok": True, "plan": asdict(plan)})

    async def _admin_advance(self, request: web.Request) -> web.Response:
        try:
            data = await request.json() if request.can_read_body else {}
            steps = int(data.get("steps", 1))
        except (ValueError, TypeError, AttributeError) as exc:
            return _error(400, repr(exc))
        if data.get("finish"):
            self.finish_all()
        else:
            self.advance(steps, data.get("batch_id"))
        return web.json_response({"ok": True, "statuses": self.statuses()})

    async def _admin_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    # -- the lifecycle (caller holds the lock) --------------------------------------------------

    def _enter(self, batch: _Batch, status: str) -> None:
        batch.status = status
        batch.stamps[status] = int(time.time())

    def _step(self, batch: _Batch) -> None:
        status = batch.status
        if status == "validating":
            problems = self._validate(batch)
            if problems:
                batch.errors = problems
                self._enter(batch, "failed")
            elif batch.plan.outcome == "failed":
                batch.errors = [
                    {
                        "code": "model_not_found",
                        "message": "The model in this batch does not exist (fake).",
                        "param": "body.model",
                        "line": 1,
                    }
                ]
                self._enter(batch, "failed")
            else:
                self._enter(batch, "in_progress")
        elif status == "in_progress":
            self._work(batch)
        elif status == "finalizing":
            self._finish(batch, "completed")
        elif status == "cancelling":
            self._finish(batch, "cancelled")

    def _validate(self, batch: _Batch) -> list[dict[str, Any]]:
        """OpenAI's checks of an input file; the problems, or [] when it is valid."""
        plan = batch.plan

        def problem(code: str, message: str, line: int | None = None) -> list[dict[str, Any]]:
            return [{"code": code, "message": message, "param": None, "line": line}]

        if batch.endpoint != ENDPOINT:
            return problem("invalid_endpoint", f"endpoint must be {ENDPOINT}")
        if batch.completion_window != "24h":
            return problem("invalid_completion_window", "completion_window must be 24h")
        data = self._files[batch.input_file_id].data
        if len(data) > plan.max_bytes:
            return problem("file_too_large", f"the file has more than {plan.max_bytes} bytes")
        seen: set[str] = set()
        lines: list[dict[str, Any]] = []
        for number, raw in enumerate(data.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                return problem("invalid_json_line", "this line is not JSON", number)
            custom_id = line.get("custom_id") if isinstance(line, dict) else None
            if not isinstance(custom_id, str) or not custom_id:
                return problem("missing_custom_id", "each line needs a custom_id", number)
            if len(custom_id) > MAX_CUSTOM_ID_CHARS:
                return problem("invalid_custom_id", "custom_id is longer than 64", number)
            if custom_id in seen:
                return problem("duplicate_custom_id", f"custom_id {custom_id} repeats", number)
            seen.add(custom_id)
            if line.get("method") != "POST" or line.get("url") != batch.endpoint:
                return problem("invalid_url", f"method must be POST and url {ENDPOINT}", number)
            if not isinstance(line.get("body"), dict) or "model" not in line["body"]:
                return problem("invalid_body", "body must be an object with a model", number)
            lines.append(line)
            if len(lines) > plan.max_requests:
                return problem("too_many_requests", f"more than {plan.max_requests} requests")
        if not lines:
            return problem("empty_file", "the input file has no requests")
        batch.lines = lines
        return []

    def _work(self, batch: _Batch) -> None:
        """One step in progress: answer the next share of lines, then move on."""
        plan = batch.plan
        total = len(batch.lines)
        stop_at = total
        if plan.outcome in ("expired", "cancelled"):
            stop_at = int(total * plan.answered_share)
        batch.steps_in_progress += 1
        share = -(-stop_at // plan.in_progress_steps)
        target = min(stop_at, batch.answered + share)
        started = time.perf_counter()
        for line in batch.lines[batch.answered : target]:
            self._answer_line(batch, line)
        self._answering_s += time.perf_counter() - started
        batch.answered = target
        if batch.answered < stop_at:
            return
        if plan.outcome == "expired":
            for line in batch.lines[batch.answered :]:
                batch.failed += 1
                batch.error_lines.append(
                    json.dumps(
                        {
                            "id": self._new_id("batch_req_"),
                            "custom_id": line["custom_id"],
                            "response": None,
                            "error": {
                                "code": "batch_expired",
                                "message": "This request could not be executed before the "
                                "completion window expired.",
                            },
                        }
                    )
                )
            self._finish(batch, "expired")
        elif plan.outcome == "cancelled":
            self._enter(batch, "cancelling")
        else:
            self._enter(batch, "finalizing")

    def _answer_line(self, batch: _Batch, line: dict[str, Any]) -> None:
        plan, rng = batch.plan, batch.rng
        draw = rng.random()
        if draw < plan.missing_rate:
            batch.completed += 1  # the provider thinks it answered; the line never shows up
            return
        if draw < plan.missing_rate + plan.error_rate:
            status, body = (
                500,
                {
                    "error": {
                        "message": "fake batch: the server had an error processing this request",
                        "type": "server_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
        elif draw < plan.missing_rate + plan.error_rate + plan.bad_request_rate:
            status, body = (
                400,
                {
                    "error": {
                        "message": "fake batch: this request was refused by the content policy",
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "content_policy_violation",
                    }
                },
            )
        else:
            status, body = self._answer(line["body"])
        record = json.dumps(
            {
                "id": self._new_id("batch_req_"),
                "custom_id": line["custom_id"],
                "response": {
                    "status_code": status,
                    "request_id": self._new_id("req_"),
                    "body": body,
                },
                "error": None,
            }
        )
        if status == 200:
            batch.completed += 1
            batch.outputs.append(record)
        else:
            batch.failed += 1
            batch.error_lines.append(record)

    def _finish(self, batch: _Batch, status: str) -> None:
        """Write the output and error files and enter the final `status`."""
        if batch.plan.shuffle:
            batch.rng.shuffle(batch.outputs)
        now = int(time.time())
        for kind, lines in (("output", batch.outputs), ("error", batch.error_lines)):
            if not lines:
                continue
            file = _File(
                self._new_id("file-fake"),
                f"{batch.id}_{kind}.jsonl",
                f"batch_{kind}",
                ("\n".join(lines) + "\n").encode(),
                now,
            )
            self._files[file.id] = file
            if kind == "output":
                batch.output_file_id = file.id
            else:
                batch.error_file_id = file.id
        batch.outputs, batch.error_lines = [], []
        self._enter(batch, status)
