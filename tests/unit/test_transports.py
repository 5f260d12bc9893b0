"""judge.transport: auto picks the lean HTTP client for OpenAI-style endpoints only."""

from __future__ import annotations

import pytest

from scorer_core.errors import ConfigError
from scorer_core.openai_http import wire_model_name
from scorer_core.transports import resolve_transport


@pytest.mark.parametrize(
    ("model", "api_base", "expected"),
    [
        ("openai/gpt-4o-mini", None, "http"),
        ("openai/judge", "http://127.0.0.1:8000/v1", "http"),
        ("hosted_vllm/meta-llama/Llama-3-8B", "http://vllm:8000/v1", "http"),
        ("lm_studio/qwen", "http://127.0.0.1:1234/v1", "http"),
        ("hosted_vllm/meta-llama/Llama-3-8B", None, "litellm"),
        ("anthropic/claude-3-5-haiku", None, "litellm"),
        ("bedrock/anthropic.claude-3", None, "litellm"),
        ("azure/my-deployment", "https://x.openai.azure.com", "litellm"),
        ("ollama/llama3", "http://127.0.0.1:11434", "litellm"),
        ("gpt-4o-mini", None, "litellm"),
    ],
)
def test_auto(model: str, api_base: str | None, expected: str) -> None:
    assert resolve_transport("auto", model, api_base) == expected


def test_an_explicit_choice_wins_and_nonsense_is_refused() -> None:
    assert resolve_transport("litellm", "openai/gpt-4o-mini", None) == "litellm"
    assert resolve_transport("http", "anthropic/claude", "http://gateway/v1") == "http"
    with pytest.raises(ConfigError, match="transport"):
        resolve_transport("grpc", "openai/x", None)


def test_the_lean_client_drops_litellms_provider_prefix_on_the_wire() -> None:
    assert wire_model_name("openai/gpt-4o-mini") == "gpt-4o-mini"
    assert wire_model_name("hosted_vllm/meta-llama/Llama-3-8B") == "meta-llama/Llama-3-8B"
    assert wire_model_name("lm_studio/qwen") == "qwen"
    assert wire_model_name("judge") == "judge"
