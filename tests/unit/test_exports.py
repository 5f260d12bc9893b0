"""`scorer_core`'s public names: the lazy table and the typed imports list the same names from
the same modules, and every one of them resolves."""

from __future__ import annotations

import ast
import importlib

import scorer_core
from tests.support.paths import REPO


def typed_imports() -> dict[str, str]:
    """Name -> module of the imports under `if TYPE_CHECKING:` in scorer_core/__init__.py."""
    tree = ast.parse((REPO / "scorer_core" / "__init__.py").read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If))
    return {
        alias.asname or alias.name: str(node.module)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_the_lazy_table_and_the_typed_imports_agree() -> None:
    assert typed_imports() == scorer_core._WHERE
    assert scorer_core.__all__ == sorted(typed_imports())


def test_every_public_name_resolves_to_its_module_s_object() -> None:
    for name, module in typed_imports().items():
        assert getattr(scorer_core, name) is getattr(importlib.import_module(module), name)
