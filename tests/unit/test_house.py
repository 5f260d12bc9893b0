"""The house rules of docs/layout.md, measured on the code as it is: how many modules in a
folder, no file name twice, short functions and module docstrings, no output stream threaded
through the engine, no path of somebody's machine."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from tests.support.paths import REPO

PACKAGES = ("jobs", "scorer_core")
MAX_FUNCTION_LINES = 60
MAX_MODULE_DOCSTRING_LINES = 20
MAX_LONG_MODULE_DOCSTRINGS = 3


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))


def test_no_module_file_name_is_used_twice() -> None:
    names = Counter(p.name for p in modules() if not p.name.startswith("__"))
    assert [name for name, count in names.items() if count > 1] == []


def test_the_top_folders_stay_small() -> None:
    def direct(folder: str) -> list[str]:
        return [p.name for p in (REPO / folder).glob("*.py") if p.name != "__init__.py"]

    assert len(direct("jobs")) <= 8, direct("jobs")
    assert len(direct("jobs/engine")) <= 15, direct("jobs/engine")


def test_no_function_is_longer_than_a_screen() -> None:
    long = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                assert node.end_lineno is not None
                if node.end_lineno - start + 1 > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}")
    assert long == []


def test_module_docstrings_say_what_a_module_is_for_in_a_few_lines() -> None:
    long = []
    for path in modules():
        tree = ast.parse(path.read_text())
        first = tree.body[0] if tree.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            assert first.end_lineno is not None
            if first.end_lineno - first.lineno + 1 > MAX_MODULE_DOCSTRING_LINES:
                long.append(str(path.relative_to(REPO)))
    assert len(long) <= MAX_LONG_MODULE_DOCSTRINGS, long


def test_the_engine_logs_rather_than_threading_an_output_stream() -> None:
    threaded = [
        str(path.relative_to(REPO))
        for path in (REPO / "jobs" / "engine").rglob("*.py")
        if re.search(r"\bTextIO\b", path.read_text())
    ]
    assert threaded == []


def test_no_path_of_a_build_machine_in_code_or_docs() -> None:
    machine = re.compile(r"/work/|/home/\w|/root/|/Users/\w")
    places = [*modules(), *(REPO / "docs").glob("*.md"), REPO / "README.md", REPO / "Makefile"]
    found = [str(p.relative_to(REPO)) for p in places if machine.search(p.read_text())]
    assert found == []
