"""The lazily imported packages' public names (`scorer_core`, `jobs.inputs`, `jobs.engine`): the
lazy table and the typed imports list the same names from the same modules, and every one of
them resolves."""

from __future__ import annotations

import ast
import importlib

import pytest

from tests.support.paths import REPO

PACKAGES = ["scorer_core", "jobs.inputs", "jobs.engine"]


def typed_imports(package: str) -> dict[str, str]:
    """Name -> module of the imports under `if TYPE_CHECKING:` in the package's __init__.py."""
    path = REPO.joinpath(*package.split("."), "__init__.py")
    block = next(node for node in ast.parse(path.read_text()).body if isinstance(node, ast.If))
    return {
        alias.asname or alias.name: str(node.module)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


@pytest.mark.parametrize("package", PACKAGES)
def test_the_lazy_table_and_the_typed_imports_agree(package: str) -> None:
    module = importlib.import_module(package)
    assert typed_imports(package) == module._WHERE
    assert module.__all__ == sorted(typed_imports(package))


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves_to_its_module_s_object(package: str) -> None:
    lazy = importlib.import_module(package)
    for name, module in typed_imports(package).items():
        assert getattr(lazy, name) is getattr(importlib.import_module(module), name)
