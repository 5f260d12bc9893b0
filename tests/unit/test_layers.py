"""The layers jobs/__init__.py draws hold: every import in the code (at module level or inside
a function) points down, and the tools reach the engine only through its public API."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO

# Bottom to top: a module may import its own layer and the layers below it.
FOUNDATION = (
    "jobs.input_limits",
    "jobs.config",
    "jobs.config_yaml",
    "jobs.endpoints",
    "jobs.text_safety",
    "jobs.error_rate",
    "jobs.formatting",
    "jobs.schema",
    "jobs.layout",
    "jobs.storage",
    "jobs.inputs",
    "jobs.cache",
    "jobs.verdict_store",
    "jobs.pricing",
    "jobs.records",
    "jobs.stats",
    "jobs.sampling",
)
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("scorer_core", ("scorer_core",)),
    ("foundation", FOUNDATION),
    ("engine", ("jobs.engine",)),
    ("factory", ("jobs.factory", "jobs.canary")),
    ("job", ("jobs.job",)),
    ("tools", ("jobs.tools",)),
    ("cli", ("jobs.cli", "jobs.context_precision", "jobs.config_reference", "jobs")),
)
RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}


def layer_of(module: str) -> str | None:
    """The layer of a module of ours (the longest matching prefix), None for others'."""
    best: tuple[int, str] | None = None
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), name)
    return best[1] if best else None


def module_name(path: Path) -> str:
    """The module's dotted name; a `__main__` module (`python -m` entry point) is the CLI's."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__main__" and parts[0] == "jobs":
        return "jobs.cli"
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import in the file, type-checking ones included."""
    return iter(sorted(set(_imports(path))))


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    entry_point = _entry_point_lines(tree)
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in entry_point:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                # `from jobs import factory` imports the module jobs.factory
                full = f"{node.module}.{alias.name}"
                yield node.lineno, full if layer_of(full) != layer_of(node.module) else node.module


def _entry_point_lines(tree: ast.Module) -> set[int]:
    """The lines of an `if __name__ == "__main__":` block: `python -m` entry-point code, which
    belongs to the CLI's layer wherever it is written."""
    lines: set[int] = set()
    for node in tree.body:
        test = node.test if isinstance(node, ast.If) else None
        if (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id == "__name__"
        ):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def source_files() -> list[Path]:
    return sorted([*(REPO / "jobs").rglob("*.py"), *(REPO / "scorer_core").rglob("*.py")])


def violations() -> list[str]:
    found = []
    for path in source_files():
        here = module_name(path)
        mine = layer_of(here)
        assert mine is not None, here
        for line, target in imports(path):
            theirs = layer_of(target)
            if theirs is None or theirs == mine:
                continue
            where = f"{path.relative_to(REPO)}:{line} imports {target}"
            if RANK[theirs] > RANK[mine]:
                found.append(f"{where} (layer {theirs} is above {mine})")
            elif theirs == "engine" and target != "jobs.engine":
                found.append(f"{where} (only the engine's public API, `jobs.engine`)")
    return found


def test_every_import_points_down_and_tools_use_only_the_engines_public_api() -> None:
    assert violations() == []


@pytest.mark.parametrize(
    "module, layer",
    [
        ("scorer_core.judge", "scorer_core"),
        ("jobs.layout", "foundation"),
        ("jobs.inputs.records", "foundation"),
        ("jobs.engine.worker", "engine"),
        ("jobs.factory", "factory"),
        ("jobs.tools.estimate", "tools"),
        ("jobs.cli", "cli"),
        ("polars", None),
    ],
)
def test_modules_are_placed_in_their_layers(module: str, layer: str | None) -> None:
    assert layer_of(module) == layer


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The scan is not vacuous: an engine module importing the factory is reported, also
    inside a function; only `python -m` entry-point code is the CLI's."""
    source = (
        "from jobs import factory\n"
        "def f():\n    from jobs.tools.estimate import estimate\n"
        "if __name__ == '__main__':\n    from jobs.cli import main\n"
    )
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    targets = [target for _, target in imports(bad)]
    assert targets == ["jobs.factory", "jobs.tools.estimate"]
    assert RANK[layer_of(targets[0]) or ""] > RANK["engine"]


def test_the_coordinator_imports_nothing_heavy() -> None:
    """The coordinator actor passes leases and reports around: importing its module (and
    what it needs to unpickle them) loads no pyarrow, Polars, fsspec or scorer."""
    code = (
        "import sys, jobs.engine.coordinator, jobs.engine.messages, jobs.inputs.shard;"
        "heavy = {'pyarrow', 'polars', 'fsspec', 'scorer_core.scorer', 'scorer_core.judge'};"
        "print(sorted(heavy & set(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert loaded.stdout.strip() == "[]"
