"""The README's configuration reference is the one the config models generate."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from jobs import config_reference
from jobs.config import JobConfig
from tests.support.paths import REPO

README = REPO / "README.md"


def _fields(model: type[BaseModel], prefix: str) -> list[tuple[str, object]]:
    """Every field under `model`, nested sections (input.columns, judge.batch) and their
    fields included."""
    found: list[tuple[str, object]] = []
    for name, field in model.model_fields.items():
        found.append((f"{prefix}{name}", field))
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            found += _fields(field.annotation, f"{prefix}{name}.")
    return found


def _leaf_models() -> list[tuple[str, object]]:
    found = []
    for section, field in JobConfig.model_fields.items():
        model = field.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        found += _fields(model, f"{section}.")
    return found


def _nested(field: object) -> bool:
    annotation = getattr(field, "annotation", None)
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def test_readme_reference_matches_the_models() -> None:
    text = README.read_text(encoding="utf-8")
    block = text[text.index(config_reference.START) : text.index(config_reference.END)]
    expected = config_reference.render()
    assert block + config_reference.END == expected, (
        "README's configuration reference is stale: run python -m jobs.config_reference "
        "--write README.md"
    )


@pytest.mark.parametrize(("key", "field"), _leaf_models())
def test_every_config_field_is_described(key: str, field: object) -> None:
    assert getattr(field, "description", None), f"{key} has no Field(description=...)"


def test_every_key_appears_in_the_rendered_reference() -> None:
    rendered = config_reference.render()
    for key, field in _leaf_models():
        if _nested(field):
            continue  # a section: rendered as its fields, e.g. input.columns.<field>
        assert f"`{key}`" in rendered, key
    for column in ("query_id", "input", "output", "expected_output", "context"):
        assert f"`input.columns.{column}`" in rendered


def test_replace_block_refreshes_only_the_block() -> None:
    text = f"before\n{config_reference.START}\nold\n{config_reference.END}\nafter\n"
    refreshed = config_reference.replace_block(text, "NEW")
    assert refreshed == "before\nNEW\nafter\n"
