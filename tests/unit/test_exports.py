"""The lazily imported packages' public names (`scorer_core`, `jobs.inputs`, `jobs.engine`): one
list per package, its `__init__.pyi` stub, which type checkers read and `lazy_loader` loads
from; every name it lists resolves to its module's object, and nothing else is public."""

from __future__ import annotations

import ast
import importlib

import pytest

from tests.support.paths import REPO

PACKAGES = ["scorer_core", "jobs.inputs", "jobs.engine"]


def stub_imports(package: str) -> dict[str, str]:
    """Name -> module of the re-exports in the package's `__init__.pyi`."""
    path = REPO.joinpath(*package.split("."), "__init__.pyi")
    names = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            assert node.level == 1, f"{path}: only `from .module import Name as Name`"
            for alias in node.names:
                assert alias.asname == alias.name, f"{path}: {alias.name} is not re-exported"
                names[alias.name] = f"{package}.{node.module}"
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_the_public_names_are_the_stub_s(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == sorted(stub_imports(package))


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves_to_its_module_s_object(package: str) -> None:
    lazy = importlib.import_module(package)
    for name, module in stub_imports(package).items():
        assert getattr(lazy, name) is getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("package", PACKAGES)
def test_an_unknown_name_is_an_attribute_error(package: str) -> None:
    lazy = importlib.import_module(package)
    with pytest.raises(AttributeError):
        lazy.no_such_name  # noqa: B018
