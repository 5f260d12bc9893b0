"""The configuration reference in docs/configuration.md is the one the config models generate."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from jobs.core.config import JobConfig
from tests.support import config_reference
from tests.support.paths import REPO

PAGE = REPO / "docs" / "configuration.md"


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


def test_the_page_reference_matches_the_models() -> None:
    text = PAGE.read_text(encoding="utf-8")
    block = text[text.index(config_reference.START) : text.index(config_reference.END)]
    expected = config_reference.render()
    assert block + config_reference.END == expected, (
        "docs/configuration.md's reference is stale: run python -m tests.support.config_reference "
        "--write docs/configuration.md"
    )


def test_write_alone_targets_the_page_the_test_reads() -> None:
    assert PAGE.resolve() == config_reference.DOCUMENT


def test_write_refreshes_a_stale_block_in_the_named_file(tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"
    page.write_text(
        f"# Configuration\n\n{config_reference.START}\nold\n{config_reference.END}\nafter\n",
        encoding="utf-8",
    )
    assert config_reference.main(["--write", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert text == f"# Configuration\n\n{config_reference.render()}\nafter\n"


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
