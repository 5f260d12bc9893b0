"""The README's configuration reference is the one the config models generate."""

from __future__ import annotations

import pytest

from jobs import config_reference
from jobs.config import JobConfig
from tests.support.paths import REPO

README = REPO / "README.md"


def _leaf_models() -> list[tuple[str, object]]:
    found = []
    for section, field in JobConfig.model_fields.items():
        model = field.annotation
        for name, sub in model.model_fields.items():  # type: ignore[union-attr]
            found.append((f"{section}.{name}", sub))
    return found


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
    for key, _ in _leaf_models():
        if key == "input.columns":
            continue  # rendered as input.columns.<field>
        assert f"`{key}`" in rendered, key
    for column in ("query_id", "input", "output", "expected_output", "context"):
        assert f"`input.columns.{column}`" in rendered


def test_replace_block_refreshes_only_the_block() -> None:
    text = f"before\n{config_reference.START}\nold\n{config_reference.END}\nafter\n"
    refreshed = config_reference.replace_block(text, "NEW")
    assert refreshed == "before\nNEW\nafter\n"
