"""Config values keep the user's meaning; every invalid value is a config error naming its key."""

from __future__ import annotations

import datetime as dt
import typing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from jobs import cli
from jobs.cli.arguments import parse_storage_options
from jobs.core.config import JobConfig, assign_dotted, load_config, parse_config
from jobs.run.factory import check_judge_settings
from scorer_core.errors import ConfigError


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text("input: {path: /nowhere/in.jsonl}\n" + body, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("2026-11-30", "2026-11-30"),
        ("2026-02-30", "2026-02-30"),
        ("20261130", "20261130"),
        ("0x1F", "0x1F"),
        ("1e3", "1e3"),
        ("007", "007"),
        ("true", "true"),
    ],
)
def test_run_id_is_the_text_written_in_yaml_and_in_set(
    tmp_path: Path, written: str, expected: str
) -> None:
    in_yaml = load_config(write(tmp_path, f"run: {{id: {written}}}\n"))
    assert in_yaml.run.id == expected
    in_set = load_config(write(tmp_path, ""), [f"run.id={written}"])
    assert in_set.run.id == expected


def test_a_date_field_still_takes_a_date(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "run: {date: 2026-11-30}\n"), ["run.id=2026-11-30"])
    assert config.run.date == dt.date(2026, 11, 30)
    assert config.run.id == "2026-11-30"
    # numbers elsewhere stay numbers
    config = load_config(write(tmp_path, ""), ["ray.shard_size=300", "judge.timeout_s=2.5"])
    assert (config.ray.shard_size, config.judge.timeout_s) == (300, 2.5)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("run.date=2026-13-45", "run.date"),
        ("run.date=2026-02-30", "run.date"),
        ("run.date=20261130", "run.date"),
        ("judge.timeout_s=2026-01-01", "judge.timeout_s"),
        ("ray.shard_size=2026-11-30", "ray.shard_size"),
        ("input=3", "input"),
        ("run.id=a/b", "run.id"),
        ("judge.api_base=localhost:8000", "judge.api_base"),
        ("judge.api_base=http://", "judge.api_base"),
        ("judge.api_base=http://host:99999/v1", "judge.api_base"),
        ("run.date=!!timestamp 2026-13-45", "run.date"),
        # the scale is checked here, where the config is made, and nowhere after it
        ("scorer.scale=-1", "scorer.scale"),
        ("scorer.scale=.inf", "scorer.scale"),
        ("scorer.scale=.nan", "scorer.scale"),
        ("scorer.scale=ten", "scorer.scale"),
    ],
)
def test_every_invalid_value_is_a_config_error_naming_the_key(
    tmp_path: Path, override: str, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "")
    with pytest.raises(ConfigError) as raised:
        load_config(path, [override])
    assert key in str(raised.value)
    # through the real command line: exit 2, one line, no traceback
    assert cli.main(["run", "--config", str(path), "--set", override]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err


def test_an_impossible_date_in_the_yaml_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"run\.date"):
        load_config(write(tmp_path, "run: {date: 2026-13-45}\n"))


def test_storage_options_are_never_dates() -> None:
    assert parse_storage_options(["a.b=2026-11-30", "n=3"]) == {"a": {"b": "2026-11-30"}, "n": 3}


def dotted_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        keys.append(prefix + name)
        for alternative in typing.get_args(field.annotation) or (field.annotation,):
            if isinstance(alternative, type) and issubclass(alternative, BaseModel):
                keys += dotted_keys(alternative, f"{prefix}{name}.")
    return keys


KEYS = dotted_keys(JobConfig)
NASTY = [
    "2026-13-45",
    "2026-02-30",
    "2026-11-30T25:61:00",
    "1e999",
    "-.inf",
    ".nan",
    "0x1F",
    "0o17",
    "9" * 400,
    "[1, [2, {a: b}]]",
    "{a: 1}",
    "&a [*a]",
    "!!binary aGVsbG8=",
    "!!timestamp 2026-99-99",
    "!!python/object:os.system",
    "!!float abc",
    "''",
    "~",
    "true",
    "\x1b[31m",
    "a: b: c",
    "[unclosed",
    "- x",
    "😀",
]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(KEYS), st.sampled_from(NASTY) | st.text(max_size=20))
def test_any_value_of_any_key_is_valid_or_a_config_error(key: str, value: str) -> None:
    raw = {"input": {"path": "/nowhere/in.jsonl"}}
    try:
        config = parse_config_with(raw, f"{key}={value}")
        check_judge_settings(config)
    except ConfigError:
        pass  # named, one line: what exit 2 prints


def parse_config_with(raw: dict[str, object], assignment: str) -> JobConfig:
    assign_dotted(raw, assignment, "--set", keep_text=True)
    return parse_config(raw)


@pytest.mark.parametrize("value", [".inf", ".nan", "-.inf"])
def test_infinite_or_nan_numbers_are_config_errors(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=r"rate_limit\.requests_per_minute"):
        load_config(write(tmp_path, ""), [f"rate_limit.requests_per_minute={value}"])


def test_every_store_credential_is_redacted_from_the_published_config() -> None:
    """What the manifest keeps of storage_options: no secret of s3fs, adlfs or gcsfs (an Azure
    connection string holds the account key), the rest as given."""
    azure = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0;"
    secrets = {
        "connection_string": azure,
        "account_key": "c2VjcmV0",
        "sas_token": "sv=2026&sig=abc",
        "client_secret": "s3cr3t",
        "credential": "s3cr3t",
        "token": "/home/me/service-account.json",
        "key": "AKIA-not-real",
        "secret": "s3cr3t",
    }
    options = {**secrets, "account_name": "acct", "project": "p", "client_kwargs": {"a": 1}}
    config = parse_config(
        {
            "input": {"path": "az://c/in.jsonl", "storage_options": options},
            "output": {"path": "gs://b/out", "storage_options": options},
        }
    )
    for section in ("input", "output"):
        kept = config.redacted()[section]["storage_options"]
        assert kept == {
            **dict.fromkeys(secrets, "***"),
            "account_name": "acct",
            "project": "p",
            "client_kwargs": {"a": 1},
        }
