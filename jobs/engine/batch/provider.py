"""The provider's Files + Batches API through litellm (upload, create, retrieve, cancel, find
the batch made from a file, download), with the online path's error translation and
full-jitter retries of transport failures; the API key never appears in a message."""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from jobs.core.config import JobConfig
from jobs.engine.batch.requests import ENDPOINT, batch_provider
from scorer_core.errors import TransportError
from scorer_core.litellm_client import import_litellm, translate_error
from scorer_core.protocols import Sleeper
from scorer_core.retry import backoff_delay, real_sleep

T = TypeVar("T")
_LIST_PAGE = 100
# Batches looked at when searching for one created from a given file (the newest first).
_LIST_LIMIT = 2000


@dataclass(frozen=True, kw_only=True)
class BatchInfo:
    """What the provider says about a batch."""

    id: str
    status: str
    input_file_id: str
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: str | None = None

    @classmethod
    def of(cls, batch: Any) -> BatchInfo:
        """From litellm's `LiteLLMBatch` (OpenAI's `Batch` shape)."""
        counts = getattr(batch, "request_counts", None)
        errors = getattr(batch, "errors", None)
        problems = [_problem(error) for error in (getattr(errors, "data", None) or [])]
        return cls(
            id=str(batch.id),
            status=str(batch.status),
            input_file_id=str(batch.input_file_id),
            total=int(getattr(counts, "total", 0) or 0),
            completed=int(getattr(counts, "completed", 0) or 0),
            failed=int(getattr(counts, "failed", 0) or 0),
            output_file_id=getattr(batch, "output_file_id", None) or None,
            error_file_id=getattr(batch, "error_file_id", None) or None,
            errors="; ".join(problems) or None,
        )


@dataclass(frozen=True, kw_only=True)
class BatchAccount:
    """The provider account batch mode uses, and how long and how often it asks.

    provider: litellm's custom_llm_provider for files and batches.
    model: the judge's model, as messages name it.
    api_base, api_key: the endpoint (None: the provider's) and the key (never in a message).
    timeout_s: seconds an upload or a download may take.
    call_timeout_s: seconds a call that moves no file (create, retrieve, cancel, list) may
        take before it is asked again (None: timeout_s).
    max_retries: transport retries of each call, with full-jitter backoff.
    completion_window: the window the provider has to answer a batch.
    """

    provider: str
    model: str
    api_base: str | None
    api_key: str | None = field(repr=False)
    timeout_s: float
    max_retries: int
    call_timeout_s: float | None = None
    completion_window: str = "24h"

    @classmethod
    def for_config(cls, config: JobConfig, api_key: str | None) -> BatchAccount:
        judge = config.judge
        return cls(
            provider=batch_provider(config),
            model=judge.model,
            api_base=judge.api_base,
            api_key=api_key,
            # Uploads and downloads of whole batch files take longer than one chat request.
            timeout_s=max(judge.timeout_s, 600.0),
            call_timeout_s=judge.timeout_s,
            max_retries=judge.max_retries,
            completion_window=judge.batch.completion_window,
        )


def _problem(error: Any) -> str:
    """One of a batch's validation errors: "code: message (line N)"."""
    text = f"{getattr(error, 'code', None) or 'error'}: {getattr(error, 'message', '')}"
    line = getattr(error, "line", None)
    return f"{text} (line {line})" if line else text


class LiteLLMBatches:
    """One provider account's files and batches (see the module doc); `sleep` and `rng` are
    the retries' (tests inject them)."""

    def __init__(
        self,
        account: BatchAccount,
        *,
        sleep: Sleeper = real_sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.provider = account.provider
        self._model = account.model
        self._completion_window = account.completion_window
        self._max_retries = account.max_retries
        self._sleep = sleep
        self._rng = rng
        self._api_key = account.api_key
        self._common: dict[str, Any] = {
            "custom_llm_provider": account.provider,
            "timeout": account.timeout_s,
            "max_retries": 0,
        }
        if account.api_base:
            self._common["api_base"] = account.api_base
        if account.api_key:
            self._common["api_key"] = account.api_key
        # Calls that move no file (create, retrieve, cancel, list) answer like a chat request:
        # a reply that does not come in that time is asked again, not waited on for minutes.
        self._small = {**self._common, "timeout": account.call_timeout_s or account.timeout_s}

    @classmethod
    def for_config(
        cls, config: JobConfig, api_key: str | None, sleep: Sleeper = real_sleep
    ) -> LiteLLMBatches:
        return cls(BatchAccount.for_config(config, api_key), sleep=sleep)

    async def _call(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        attempt = 0
        while True:
            try:
                return await call()
            except Exception as exc:
                error = translate_error(exc, f"{self._model} ({what})", self._api_key)
                if not isinstance(error, TransportError) or attempt >= self._max_retries:
                    raise error from None
            await self._sleep(backoff_delay(attempt, base=1.0, cap=60.0, rng=self._rng))
            attempt += 1

    async def upload(self, filename: str, path: str) -> str:
        """Upload the local JSONL file at `path` for a batch; the file id."""
        litellm = import_litellm()

        async def call() -> Any:
            with open(path, "rb") as handle:
                return await litellm.acreate_file(
                    file=(filename, handle), purpose="batch", **self._common
                )

        created = await self._call("upload a batch file", call)
        return str(created.id)

    async def _batch(
        self, what: str, call: Callable[..., Awaitable[Any]], **args: Any
    ) -> BatchInfo:
        return BatchInfo.of(await self._call(what, functools.partial(call, **args, **self._small)))

    async def create(self, file_id: str, metadata: dict[str, str]) -> BatchInfo:
        return await self._batch(
            "create a batch",
            import_litellm().acreate_batch,
            completion_window=self._completion_window,
            endpoint=ENDPOINT,
            input_file_id=file_id,
            metadata=metadata,
        )

    async def retrieve(self, batch_id: str) -> BatchInfo:
        return await self._batch(
            "retrieve a batch",
            import_litellm().aretrieve_batch,
            batch_id=batch_id,
            # without litellm's cost logging, which downloads a finished batch's output
            litellm_metadata={"batch_ignore_default_logging": True},
        )

    async def cancel(self, batch_id: str) -> BatchInfo:
        """Ask the provider to cancel a batch (it goes through `cancelling`)."""
        cancel = import_litellm().acancel_batch
        return await self._batch("cancel a batch", cancel, batch_id=batch_id)

    async def find(self, file_id: str) -> BatchInfo | None:
        """The newest batch created from `file_id`, or None (searching the newest batches)."""
        after: dict[str, str] = {}
        seen = 0
        list_batches = import_litellm().alist_batches
        while seen < _LIST_LIMIT:
            call = functools.partial(list_batches, limit=_LIST_PAGE, **after, **self._small)
            page = await self._call("list batches", call)
            data = list(getattr(page, "data", None) or [])
            for batch in data:
                if str(batch.input_file_id) == file_id:
                    return BatchInfo.of(batch)
            seen += len(data)
            if not data or not getattr(page, "has_more", False):
                return None
            after = {"after": str(data[-1].id)}
        return None

    async def content(self, file_id: str) -> bytes:
        """The bytes of an output or error file."""
        call = functools.partial(import_litellm().afile_content, file_id=file_id, **self._common)
        response = await self._call("download a batch result file", call)
        return bytes(response.content)
