"""YAML for configs that keeps the user's meaning: no scalar is ever a date, and numbers and
booleans remember their text (`UserScalar`), so `run.id: 20261130` is an id, not a number.
"""

from __future__ import annotations

import datetime as dt
import types
import typing
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from scorer_core.errors import ConfigError

_TIMESTAMP = "tag:yaml.org,2002:timestamp"


@dataclass(frozen=True)
class UserScalar:
    """A YAML number or boolean, with the text it was written as."""

    value: Any
    text: str


class _Loader(yaml.SafeLoader):
    """SafeLoader without implicit dates, whose numbers and booleans keep their text."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _keeping_text(tag: str) -> None:
    parse = yaml.SafeLoader.yaml_constructors[tag]
    _Loader.add_constructor(tag, lambda loader, node: UserScalar(parse(loader, node), node.value))


for _tag in ("int", "float", "bool"):
    _keeping_text(f"tag:yaml.org,2002:{_tag}")
# an explicit `!!timestamp` is read as its text too: pydantic judges it where a date is wanted
_Loader.add_constructor(_TIMESTAMP, lambda loader, node: str(node.value))


def load_yaml(text: str, where: str) -> Any:
    """Parse YAML text (numbers and booleans as `UserScalar`); `ConfigError` naming `where`."""
    try:
        value = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: safe
    except (yaml.YAMLError, ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{where}: YAML nested too deeply") from None
    if _cyclic(value):
        raise ConfigError(f"{where}: a YAML alias refers to the node that holds it (&a [*a])")
    return value


def _cyclic(value: Any, holding: frozenset[int] = frozenset()) -> bool:
    """Whether `value` contains itself (a recursive YAML alias)."""
    if not isinstance(value, dict | list):
        return False
    if id(value) in holding:
        return True
    children = value.values() if isinstance(value, dict) else value
    return any(_cyclic(child, holding | {id(value)}) for child in children)


def plain(value: Any) -> Any:
    """`value` with every `UserScalar` replaced by its parsed value."""
    if isinstance(value, UserScalar):
        return value.value
    if isinstance(value, dict):
        return {plain(key): plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def resolve_user_text(raw: Any, model: type[BaseModel]) -> Any:
    """The raw config, each `UserScalar` as its text where `model` takes text, else its value."""
    if not isinstance(raw, dict):
        return plain(raw)
    resolved: dict[Any, Any] = {}
    for key, value in raw.items():
        name = plain(key)
        field = model.model_fields.get(name) if isinstance(name, str) else None
        resolved[name] = plain(value) if field is None else _resolve(value, field.annotation)
    return resolved


def _resolve(value: Any, annotation: Any) -> Any:
    submodel = _submodel(annotation)
    if submodel is not None and isinstance(value, dict):
        return resolve_user_text(value, submodel)
    if isinstance(value, UserScalar):
        # text where every alternative is text or a date
        takes_text = all(alternative in (str, dt.date) for alternative in _alternatives(annotation))
        return value.text if takes_text else value.value
    if isinstance(value, list) and typing.get_origin(annotation) is list:
        (element,) = typing.get_args(annotation) or (Any,)
        return [_resolve(item, element) for item in value]
    return plain(value)


def _alternatives(annotation: Any) -> list[Any]:
    """The types of a field (None aside)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [
            alternative
            for alternative in typing.get_args(annotation)
            if alternative is not type(None)
        ]
    return [annotation]


def _submodel(annotation: Any) -> type[BaseModel] | None:
    for alternative in _alternatives(annotation):
        if isinstance(alternative, type) and issubclass(alternative, BaseModel):
            return alternative
    return None
