"""What a batch request line is: OpenAI's batch format around the body the online HTTP client
would send, and its custom_id `<shard>-<item>-<slice>-<attempt>-<judge tag>` (at most 64
characters), which finds its reply whatever order replies come back in."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jobs.core.config import JobConfig
from jobs.core.endpoints import endpoint_identity
from scorer_core.errors import ConfigError
from scorer_core.judge import count_prompt_tokens
from scorer_core.openai_http import OpenAIHTTPClient
from scorer_core.protocols import RequestSettings
from scorer_core.response_format import ResponseFormat

ENDPOINT = "/v1/chat/completions"
MAX_CUSTOM_ID_CHARS = 64
# Providers whose files and batches litellm reaches, as its custom_llm_provider names them.
BATCH_PROVIDERS = frozenset(
    {"openai", "azure", "vertex_ai", "bedrock", "hosted_vllm", "litellm_proxy", "mistral", "xai"}
)


def item_key(shard_number: int, index: int) -> str:
    """The item part of a custom_id: the shard's number in the run and the item's index in it."""
    return f"{shard_number}-{index}"


def custom_id(item: str, part: str, attempt: int, tag: str = "") -> str:
    """`item` from `item_key`, `part` "v<first position>" or "r", `attempt` 0 for the first ask,
    `tag` the run's `judge_tag`."""
    return f"{item}-{part}-{attempt}" + (f"-{tag}" if tag else "")


def judge_tag(config: JobConfig) -> str:
    """8 hex naming what answers a batch request: the model, the batch provider and the
    endpoint (`jobs.core.endpoints.endpoint_identity`)."""
    material = repr((config.judge.model, batch_provider(config), endpoint_identity(config)))
    return hashlib.sha256(material.encode()).hexdigest()[:8]


def batch_provider(config: JobConfig) -> str:
    """litellm's custom_llm_provider for files and batches: `judge.batch.provider`, else the
    model's prefix; a model without one is OpenAI's."""
    provider = config.judge.batch.provider
    if provider is None:
        model = config.judge.model
        provider = model.split("/", 1)[0] if "/" in model else "openai"
    if provider not in BATCH_PROVIDERS:
        raise ConfigError(
            f"judge.batch.provider: {provider!r} has no batch API in litellm; one of "
            f"{', '.join(sorted(BATCH_PROVIDERS))} (set it when the model's prefix is not "
            "the provider)"
        )
    return provider


@dataclass(frozen=True)
class RequestLines:
    """Builds a run's batch request lines (the same for every worker of the run)."""

    form: ResponseFormat
    _client: OpenAIHTTPClient
    tag: str = ""  # `judge_tag`, the last part of every custom_id

    @classmethod
    def for_config(cls, config: JobConfig) -> RequestLines:
        judge = config.judge
        setting = judge.response_format
        form: ResponseFormat = "json_schema" if setting == "auto" else setting
        # the body names the model as the provider does
        model = judge.model.removeprefix(f"{batch_provider(config)}/")
        settings = RequestSettings(temperature=judge.temperature, max_tokens=judge.max_tokens)
        client = OpenAIHTTPClient(model, settings)
        return cls(form, client, judge_tag(config))

    @property
    def model(self) -> str:
        """The model as request bodies name it."""
        body = self._client.request_body([], schema_name="", schema={}, response_format="prompt")
        return str(body["model"])

    def line(
        self,
        request_id: str,
        messages: Sequence[dict[str, str]],
        schema_name: str,
        schema: dict[str, Any],
    ) -> tuple[bytes, int]:
        """(the JSONL line with its newline, its prompt tokens as estimated for queue limits)."""
        if len(request_id) > MAX_CUSTOM_ID_CHARS:
            raise ValueError(f"custom_id {request_id!r} is longer than {MAX_CUSTOM_ID_CHARS}")
        body = self._client.request_body(
            messages, schema_name=schema_name, schema=schema, response_format=self.form
        )
        line = {"custom_id": request_id, "method": "POST", "url": ENDPOINT, "body": body}
        data = (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        return data, count_prompt_tokens(messages)
