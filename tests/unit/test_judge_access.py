"""Every command checks the judge as `run` does, before its first call (issue 31, point 3): an
unknown model is named, and each provider asks for its own key variable."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from jobs import cli
from jobs.core.config import parse_config
from jobs.core.run_layout import RunLocation
from jobs.run.factory import run_parts
from jobs.tools.sample_data import generate, write_jsonl
from scorer_core.errors import ConfigError
from scorer_core.judge_access import JudgeAccess

LOCATION = RunLocation("access", dt.date(2026, 12, 1))

OPENAI_KEY = "sk-openai-test-never-sent-to-anthropic"


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The OpenAI key set, no other provider's."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "MISTRAL_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def command(name: str, tmp_path: Path, model: str) -> list[str]:
    """`ctxprec <name>` on a small labelled sample with `model` as its judge."""
    data = tmp_path / "sample.jsonl"
    write_jsonl(data, generate(4))
    config = tmp_path / "job.yaml"
    columns = "{query_id: id, input: question, output: answer, context: contexts}"
    config.write_text(f"input: {{path: {data}, columns: {columns}}}\noutput: {{path: {tmp_path}}}")
    if name == "score":
        item = tmp_path / "item.json"
        item.write_text(json.dumps({"input": "q", "output": "a", "context": ["c"]}))
        return ["score", str(item), "--model", model, "--timeout", "1"]
    labels = ["--labels", str(data)] if name == "calibrate" else []
    return [name, "--config", str(config), "--set", f"judge.model={model}", *labels]


@pytest.mark.parametrize("name", ["score", "calibrate", "estimate"])
def test_every_command_names_an_unknown_model_not_a_key(
    name: str, tmp_path: Path, keys: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    keys.delenv("OPENAI_API_KEY")
    assert cli.main(command(name, tmp_path, "lexicl")) == 2
    err = capsys.readouterr().err
    assert "litellm cannot route 'lexicl'" in err and "did you mean 'lexical'" in err, err
    assert "OPENAI_API_KEY" not in err


@pytest.mark.parametrize("name", ["score", "calibrate", "estimate"])
def test_every_command_asks_for_the_providers_own_key_at_once(
    name: str, tmp_path: Path, keys: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(command(name, tmp_path, "anthropic/claude-3-5-haiku-latest")) == 2
    err = capsys.readouterr().err
    assert "environment variable ANTHROPIC_API_KEY is not set" in err, err
    assert cli.main(command(name, tmp_path, "mistral/mistral-small-latest")) == 2
    assert "MISTRAL_API_KEY is not set" in capsys.readouterr().err


def test_run_checks_the_model_before_the_key(keys: pytest.MonkeyPatch) -> None:
    keys.delenv("OPENAI_API_KEY")
    config = parse_config({"input": {"path": "x.jsonl"}, "judge": {"model": "lexicl"}})
    with pytest.raises(ConfigError, match=r"judge\.model: litellm cannot route 'lexicl'"):
        run_parts(config, LOCATION)
    anthropic = parse_config({"input": {"path": "x.jsonl"}, "judge": {"model": "anthropic/c"}})
    with pytest.raises(ConfigError, match=r"judge\.api_key_env: environment variable ANTHROPIC"):
        run_parts(anthropic, LOCATION)


def test_the_key_is_read_from_the_providers_own_variable(keys: pytest.MonkeyPatch) -> None:
    assert JudgeAccess(model="openai/gpt-4o-mini").api_key() == OPENAI_KEY
    assert JudgeAccess(model="gpt-4o-mini").api_key() == OPENAI_KEY  # litellm's openai provider
    # never the OpenAI key to another provider: litellm reads ANTHROPIC_API_KEY itself
    assert JudgeAccess(model="anthropic/claude-x").api_key() is None
    keys.setenv("MY_GATEWAY_KEY", "gw")
    named = JudgeAccess(model="anthropic/claude-x", key_env="MY_GATEWAY_KEY")
    named.check()
    assert named.api_key() == "gw"
    assert JudgeAccess(model="lexical").api_key() is None


def test_a_local_server_needs_no_key_unless_one_is_named(keys: pytest.MonkeyPatch) -> None:
    keys.delenv("OPENAI_API_KEY")
    JudgeAccess(model="openai/m", api_base="http://127.0.0.1:9/v1").check()
    JudgeAccess(model="hosted_vllm/m", api_base="http://127.0.0.1:9/v1").check()
    named = JudgeAccess(
        model="openai/m", api_base="http://127.0.0.1:9/v1", key_env="CTXPREC_NO_KEY"
    )
    with pytest.raises(ConfigError, match="CTXPREC_NO_KEY is not set"):
        named.check()
