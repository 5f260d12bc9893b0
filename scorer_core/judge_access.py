"""The check every command makes before a judge's first request (`run`, `score`, `calibrate`,
`estimate`): litellm can route the model, and its key's environment variable is set: the one
named, else the provider's own as litellm knows it (ANTHROPIC_API_KEY for anthropic/...).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass

from scorer_core.capabilities import OFFLINE_JUDGE, capabilities_of
from scorer_core.errors import ConfigError
from scorer_core.transports import resolve_transport

OPENAI_KEY_ENV = "OPENAI_API_KEY"  # what OpenAI-compatible endpoints are sent by default
CONFIG_OPTIONS = ("judge.model", "judge.api_base", "judge.api_key_env")


@dataclass(frozen=True, kw_only=True)
class JudgeAccess:
    """How a judge is reached. `key_env` None: the provider's own variable, needed only
    without an `api_base`; `options` name the model, api_base and key settings in errors."""

    model: str
    api_base: str | None = None
    transport: str = "auto"
    key_env: str | None = None
    options: tuple[str, str, str] = CONFIG_OPTIONS

    def provider(self) -> str:
        """litellm's provider for the model; `ConfigError` naming the model when it has none."""
        from scorer_core.litellm_client import import_litellm

        try:
            found = import_litellm().get_llm_provider(model=self.model, api_base=self.api_base)
        except Exception as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            close = difflib.get_close_matches(self.model, [OFFLINE_JUDGE], n=1)
            hint = f"did you mean {OFFLINE_JUDGE!r}, the offline judge? Or use" if close else "use"
            raise ConfigError(
                f"{self.options[0]}: litellm cannot route {self.model!r} ({reason[:300]}); "
                f"{hint} a provider prefix such as openai/, anthropic/, azure/, hosted_vllm/"
            ) from None
        return str(found[1])

    def routes_by_http(self) -> bool:
        return resolve_transport(self.transport, self.model, self.api_base) == "http"

    def key_variable(self) -> str | None:
        """The variable the key is read from here; None: litellm reads the provider's own."""
        if self.key_env or capabilities_of(self.model).offline:
            return self.key_env
        if self.routes_by_http() or self.provider() == "openai":
            return OPENAI_KEY_ENV
        return None

    def api_key(self) -> str | None:
        """The key, read from the environment at the moment it is needed, never stored."""
        variable = self.key_variable()
        return (os.environ.get(variable) or None) if variable else None

    def check(self) -> None:
        """`ConfigError` (exit 2) when the model cannot be routed or its key is not set."""
        if not capabilities_of(self.model).needs_api_key:
            return
        by_http = self.routes_by_http()
        if not by_http:
            self.provider()
        if self.key_env:
            missing = [] if os.environ.get(self.key_env) else [self.key_env]
        elif self.api_base:
            return  # a local server needs no key, unless a variable is named for it
        elif by_http:
            missing = [] if os.environ.get(OPENAI_KEY_ENV) else [OPENAI_KEY_ENV]
        else:
            from scorer_core.litellm_client import import_litellm

            found = import_litellm().validate_environment(model=self.model)["missing_keys"]
            # only key variables: cloud credentials (AWS_*, VERTEXAI_*) may come from elsewhere
            missing = [name for name in found if name.endswith("_API_KEY")]
        if missing:
            _, base, key = self.options
            raise ConfigError(
                f"{key}: environment variable {' or '.join(missing)} is not set (model "
                f"{self.model} needs an API key; set {key} to the variable that holds it, or "
                f"{base} for a local server)"
            )
