"""The verdict cache's namespace names whatever decides which model answers, not the model
string alone (jobs.run.factory.cache_fingerprint)."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.core.config import JobConfig, parse_config
from jobs.run.factory import cache_fingerprint


def config(**judge: Any) -> JobConfig:
    return parse_config({"input": {"path": "x.jsonl"}, "judge": {"model": "openai/judge", **judge}})


def test_the_same_model_at_another_endpoint_has_another_cache() -> None:
    base = cache_fingerprint(config())
    assert base == cache_fingerprint(config())
    assert cache_fingerprint(config(api_base="http://127.0.0.1:8000/v1")) != base
    assert cache_fingerprint(config(api_base="http://127.0.0.1:8000/v1")) != cache_fingerprint(
        config(api_base="http://127.0.0.1:8001/v1")
    )
    # a trailing slash is the same endpoint
    assert cache_fingerprint(config(api_base="http://h:1/v1/")) == cache_fingerprint(
        config(api_base="http://h:1/v1")
    )
    assert cache_fingerprint(config(batch={"provider": "hosted_vllm"})) != base
    assert cache_fingerprint(config(model="azure/a")) != cache_fingerprint(config(model="azure/b"))


def test_an_endpoint_litellm_takes_from_the_environment_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AZURE_API_BASE", raising=False)
    without = cache_fingerprint(config(model="azure/gpt"))
    monkeypatch.setenv("AZURE_API_BASE", "https://one.openai.azure.com")
    one = cache_fingerprint(config(model="azure/gpt"))
    monkeypatch.setenv("AZURE_API_BASE", "https://two.openai.azure.com")
    assert len({without, one, cache_fingerprint(config(model="azure/gpt"))}) == 3
