"""The job's configuration: YAML in, validated pydantic models out, unknown keys rejected.

Every model forbids extra keys, so a typo such as `rate_limit.request_per_minute` fails at
start-up with the key's full path, not an hour into the night. `--set dotted.key=value`
overrides are applied to the raw YAML before validation, values parsed as YAML scalars.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from scorer_core.errors import ConfigError

#: What a run id may look like (checked by `RunConfig` and by `ctxprec runs`): it becomes part
#: of object paths (`run_id=<id>`), so no '/' or spaces.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ColumnsConfig(_Strict):
    query_id: str = "query_id"
    input: str = "input"
    output: str = "output"
    expected_output: str | None = None
    context: str = "context"


class InputConfig(_Strict):
    path: str
    format: Literal["jsonl", "parquet"] | None = None
    columns: ColumnsConfig = ColumnsConfig()
    context_extractor: str | None = None
    storage_options: dict[str, Any] = Field(default_factory=dict)
    max_context_chars: int = Field(200_000, ge=100)
    max_contexts: int = Field(1000, ge=1)
    # Only keep_first is implemented (jobs.engine.publish.dedupe); "score_all" and "fail" used to be
    # accepted here and silently ignored.
    duplicate_query_ids: Literal["keep_first"] = "keep_first"

    @field_validator("context_extractor")
    @classmethod
    def _extractor_shape(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[\w.]+:[\w]+", value):
            raise ValueError("must look like 'package.module:function'")
        return value


class OutputConfig(_Strict):
    path: str = "results/"
    storage_options: dict[str, Any] = Field(default_factory=dict)


class JudgeConfig(_Strict):
    model: str = "lexical"
    api_base: str | None = None
    # "http": lean aiohttp client for OpenAI-compatible servers (scorer_core.openai_http).
    transport: Literal["litellm", "http"] = "litellm"
    api_key_env: str | None = "OPENAI_API_KEY"
    contexts_per_call: int = Field(16, ge=1, le=256)
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(6, ge=0, le=50)
    max_reasks: int = Field(2, ge=0, le=10)
    temperature: float | None = Field(0.0, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1)
    # Options for the offline judge only (e.g. {threshold: 0.2}).
    lexical: dict[str, Any] = Field(default_factory=dict)

    @field_validator("api_key_env")
    @classmethod
    def _env_name_not_key(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(
                "must be the NAME of an environment variable (e.g. OPENAI_API_KEY), "
                "never the key itself"
            )
        return value

    def api_key(self) -> str | None:
        """The key from the environment, read at the moment it is needed, never stored."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None


class RateLimitConfig(_Strict):
    requests_per_minute: float = Field(0, ge=0)
    tokens_per_minute: float = Field(0, ge=0)
    max_concurrency: int = Field(64, ge=1)
    # Pace a little under the provider's limit so clock skew and latency jitter do not tip
    # a window over it.
    headroom: float = Field(0.98, gt=0.5, le=1.0)


class ScorerConfig(_Strict):
    scale: float = Field(1.0, ge=0)
    reason: Literal["template", "llm", "none"] = "template"


class RunConfig(_Strict):
    id: str | None = None
    date: dt.date | None = None

    @field_validator("id")
    @classmethod
    def _id_safe(cls, value: str | None) -> str | None:
        if value is not None and not RUN_ID_PATTERN.fullmatch(value):
            raise ValueError("use letters, digits, '.', '_' or '-' (max 100), no '/' or spaces")
        return value


class CacheConfig(_Strict):
    enabled: bool = True
    # Default: <output.path>/_cache
    path: str | None = None


class RayConfig(_Strict):
    address: str | None = None
    shard_size: int = Field(2000, ge=1)
    # Ray tasks in flight at once: each judges one shard with asyncio.
    workers: int = Field(4, ge=1)
    num_cpus_per_task: float = Field(0.5, gt=0)
    max_task_retries: int = Field(3, ge=0)


class JobConfig(_Strict):
    input: InputConfig
    output: OutputConfig = OutputConfig()
    judge: JudgeConfig = JudgeConfig()
    rate_limit: RateLimitConfig = RateLimitConfig()
    scorer: ScorerConfig = ScorerConfig()
    run: RunConfig = RunConfig()
    cache: CacheConfig = CacheConfig()
    ray: RayConfig = RayConfig()

    @model_validator(mode="after")
    def _lexical_options_only_for_lexical(self) -> JobConfig:
        if self.judge.model != "lexical" and self.judge.lexical:
            raise ValueError("judge.lexical options apply only to judge.model 'lexical'")
        return self

    def redacted(self) -> dict[str, Any]:
        """The config as plain data, safe to write next to results (no secret values)."""
        data = self.model_dump(mode="json")
        for section in ("input", "output"):
            data[section]["storage_options"] = _redact(data[section]["storage_options"])
        return data


_SECRET_KEY = re.compile(r"(secret|token|password|key|credential|sas|sig)", re.IGNORECASE)


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: ("***" if _SECRET_KEY.search(str(k)) and not isinstance(v, dict) else _redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return value


def assign_dotted(node: dict[str, Any], assignment: str, option: str, empty: Any = None) -> None:
    """Apply `dotted.key=value` to nested dicts, the value parsed as YAML (`empty` when blank).

    `option` names the command-line option in error messages (e.g. "--set").
    """
    dotted, sep, text = assignment.partition("=")
    keys = dotted.strip().split(".")
    if not sep or not all(keys):
        raise ConfigError(f"{option} {assignment!r}: expected dotted.key=value")
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{option} {dotted}: {key} is not a section")
        node = child
    try:
        node[keys[-1]] = yaml.safe_load(text) if text.strip() else empty
    except yaml.YAMLError as exc:
        raise ConfigError(f"{option} {dotted}: cannot parse value {text!r}: {exc}") from None


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply one `--set dotted.key=value` override to the raw config."""
    assign_dotted(raw, assignment, "--set")


def _format_validation_error(source: str, exc: ValidationError) -> str:
    lines = [f"{source}: invalid configuration"]
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden":
            lines.append(f"  {where}: unknown key (check the spelling; see README 'Configuration')")
        else:
            lines.append(f"  {where}: {error['msg']}")
    return "\n".join(lines)


def parse_config(raw: Any, source: str = "config") -> JobConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    try:
        return JobConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(source, exc)) from None


def load_config(path: str | Path, overrides: list[str] | None = None) -> JobConfig:
    """Read, override and validate a YAML config; `ConfigError` names the file and the key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    for assignment in overrides or []:
        apply_override(raw, assignment)
    return parse_config(raw, str(path))


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options shared by every command that takes a job config."""
    parser.add_argument("--config", required=True, help="YAML job config (see configs/)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set rate_limit.requests_per_minute=600",
    )
