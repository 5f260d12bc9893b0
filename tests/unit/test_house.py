"""The house rules of docs/layout.md, measured on the code as it is: how many modules in a
folder, no file name twice, short functions and module docstrings, records of more than three
fields built by keyword, no output stream threaded through the engine, no path of somebody's
machine."""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass
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


# --- Records by keyword (issue 42, point 2) ----------------------------------------------------
# A project record is a dataclass, a NamedTuple or a pydantic model defined in jobs/ or
# scorer_core/. One whose constructor takes more than MAX_POSITIONAL_FIELDS fields is kw_only
# (dataclasses: `kw_only=True`, `KW_ONLY`, or `field(kw_only=True)` on the rest), or is only
# ever built by keyword: no call in jobs/, scorer_core/, tests/ or bench/ gives it a positional
# or starred argument, and no NamedTuple is built with `_make`. Pydantic models take keywords
# only (a positional argument is a TypeError), so they pass by construction and are checked the
# same way. A call is matched to its record through the module's own classes and imports
# (`from M import Name`, `import M as m` then `m.Name(...)`) and `cls(...)` in the record's
# own methods; a call through any other name (a variable holding the class) is not seen.
MAX_POSITIONAL_FIELDS = 3
CALLERS = ("jobs", "scorer_core", "tests", "bench")


@dataclass(frozen=True, kw_only=True)
class Record:
    """A project record: where it is, what kind, its constructor's fields (inherited first)
    and those of them that can only be given by keyword."""

    module: str
    name: str
    kind: str  # "dataclass", "namedtuple" or "pydantic"
    fields: tuple[str, ...]
    keyword_only: frozenset[str]
    where: str

    @property
    def qualified(self) -> str:
        return f"{self.module}.{self.name}"

    @property
    def positional(self) -> int:
        """How many fields a call may give by position."""
        return sum(1 for name in self.fields if name not in self.keyword_only)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _last(node: ast.expr) -> str:
    """The last dotted part of a name or attribute (`dataclasses.dataclass` -> `dataclass`)."""
    return ast.unparse(node).split(".")[-1]


def _is_true(call: ast.expr | None, keyword: str) -> bool:
    """Whether `call` is a call given `keyword=True`."""
    if not isinstance(call, ast.Call):
        return False
    for given in call.keywords:
        if given.arg == keyword and isinstance(given.value, ast.Constant):
            return given.value.value is True
    return False


def _dataclass_decorator(node: ast.ClassDef) -> ast.expr | None:
    for decorator in node.decorator_list:
        called = decorator.func if isinstance(decorator, ast.Call) else decorator
        if _last(called) == "dataclass":
            return decorator
    return None


class _Records:
    """Every record of jobs/ and scorer_core/, found from the classes' source (ast)."""

    def __init__(self) -> None:
        self.classes: dict[tuple[str, str], tuple[Path, ast.ClassDef]] = {}
        for path in modules():
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    self.classes[(_module_name(path), node.name)] = (path, node)
        self.by_name: dict[str, list[tuple[str, str]]] = {}
        for key in self.classes:
            self.by_name.setdefault(key[1], []).append(key)
        self.found: dict[tuple[str, str], Record | None] = {}
        for key in self.classes:
            self.record(key)

    def bases(self, node: ast.ClassDef) -> list[tuple[str, str]]:
        """The project classes `node` derives from (matched by name)."""
        found = []
        for base in node.bases:
            found += self.by_name.get(_last(base), [])
        return found

    def kind(self, key: tuple[str, str]) -> str | None:
        _, node = self.classes[key]
        if _dataclass_decorator(node) is not None:
            return "dataclass"
        names = {_last(base) for base in node.bases}
        if "NamedTuple" in names:
            return "namedtuple"
        if "BaseModel" in names:
            return "pydantic"
        for base in self.bases(node):
            parent = self.record(base)
            if parent is not None and parent.kind != "namedtuple":
                return parent.kind
        return None

    def record(self, key: tuple[str, str]) -> Record | None:
        if key in self.found:
            return self.found[key]
        self.found[key] = None  # a class deriving from itself by name ends here
        path, node = self.classes[key]
        kind = self.kind(key)
        if kind is None:
            return None
        inherited: list[str] = []
        keyword: set[str] = set()
        for base in self.bases(node):
            parent = self.record(base)
            if parent is not None:
                inherited += parent.fields
                keyword |= parent.keyword_only
        own, own_keyword = _own_fields(node)
        fields = tuple(dict.fromkeys([*inherited, *own]))
        keyword |= own_keyword
        if kind == "pydantic":  # BaseModel.__init__ takes keywords only
            keyword |= set(fields)
        where = f"{path.relative_to(REPO)}:{node.lineno}"
        record = Record(
            module=key[0],
            name=key[1],
            kind=kind,
            fields=fields,
            keyword_only=frozenset(keyword),
            where=where,
        )
        self.found[key] = record
        return record

    def all(self) -> dict[tuple[str, str], Record]:
        return {key: record for key, record in self.found.items() if record is not None}


def _own_fields(node: ast.ClassDef) -> tuple[list[str], set[str]]:
    """A record class's own constructor fields, and those of them given by keyword only."""
    every_keyword = _is_true(_dataclass_decorator(node), "kw_only")
    fields: list[str] = []
    keyword: set[str] = set()
    after_marker = False  # after `_: KW_ONLY`
    for statement in node.body:
        if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
            continue
        annotation = ast.unparse(statement.annotation)
        if "ClassVar" in annotation:
            continue
        if _last(statement.annotation) == "KW_ONLY":
            after_marker = True
            continue
        value = statement.value
        is_field = isinstance(value, ast.Call) and _last(value.func) == "field"
        if is_field and _is_false(value, "init"):
            continue  # not a constructor argument
        name = statement.target.id
        fields.append(name)
        if every_keyword or after_marker or (is_field and _is_true(value, "kw_only")):
            keyword.add(name)
    return fields, keyword


def _is_false(call: ast.expr | None, keyword: str) -> bool:
    if not isinstance(call, ast.Call):
        return False
    for given in call.keywords:
        if given.arg == keyword and isinstance(given.value, ast.Constant):
            return given.value.value is False
    return False


def _in(module: str, package: str) -> bool:
    """Whether `module` is `package` or inside it."""
    return module == package or module.startswith(package + ".")


@dataclass(kw_only=True)
class _Module:
    """One module read once: what its names stand for (records, by import; project modules),
    and each of its calls with the class it sits in (for `cls(...)`)."""

    name: str
    records: dict[str, list[tuple[str, str]]]
    modules: dict[str, str]
    calls: list[tuple[ast.Call, str | None]]

    @classmethod
    def read(cls, path: Path, known: dict[tuple[str, str], Record]) -> _Module:
        module = cls(name=_module_name(path), records={}, modules={}, calls=[])
        module.visit(ast.parse(path.read_text()), None, known)
        return module

    def visit(self, node: ast.AST, owner: str | None, known: dict[tuple[str, str], Record]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = owner
            if isinstance(child, ast.ClassDef):
                inner = child.name
                if (self.name, child.name) in known:
                    self.records[child.name] = [(self.name, child.name)]
            elif isinstance(child, ast.ImportFrom | ast.Import):
                self.imported(child, known)
            elif isinstance(child, ast.Call):
                self.calls.append((child, owner))
            self.visit(child, inner, known)

    def imported(
        self, node: ast.ImportFrom | ast.Import, known: dict[tuple[str, str], Record]
    ) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in CALLERS:
                    self.modules[alias.asname or alias.name] = alias.name
            return
        if not node.module or node.module.split(".")[0] not in CALLERS:
            return
        for alias in node.names:
            local = alias.asname or alias.name
            # the class itself, or a package re-exporting it
            candidates = [key for key in known if key[1] == alias.name and _in(key[0], node.module)]
            if candidates:
                self.records[local] = candidates
            else:
                self.modules[local] = f"{node.module}.{alias.name}"

    def built(self, call: ast.Call, owner: str | None) -> list[tuple[str, str, str]]:
        """What `call` may build, as (how, module or package, record name): how is "" for a
        call of the record, "_make" for `NamedTuple._make(...)`."""
        function = call.func
        if isinstance(function, ast.Name) and function.id == "cls" and owner is not None:
            return [("", self.name, owner)]
        if isinstance(function, ast.Name):
            return [("", *key) for key in self.records.get(function.id, [])]
        if not isinstance(function, ast.Attribute) or not isinstance(function.value, ast.Name):
            return []
        base = function.value.id
        if function.attr == "_make":
            return [("_make", *key) for key in self.records.get(base, [])]
        if base in self.modules:
            return [("", self.modules[base], function.attr)]
        return []


def positional_builds() -> dict[str, list[str]]:
    """Per record of more than MAX_POSITIONAL_FIELDS fields that a call may not build that
    way: each call building it with a positional or starred argument, or `_make`."""
    known = _Records().all()
    named: dict[str, list[Record]] = {}
    for record in known.values():
        named.setdefault(record.name, []).append(record)
    offending: dict[str, list[str]] = {}
    callers = sorted(path for folder in CALLERS for path in (REPO / folder).rglob("*.py"))
    for path in callers:
        module = _Module.read(path, known)
        for call, owner in module.calls:
            for how, package, name in module.built(call, owner):
                for record in named.get(name, []):
                    why = _offence(call, record, how) if _in(record.module, package) else ""
                    if why:
                        where = f"{path.relative_to(REPO)}:{call.lineno} {why}"
                        offending.setdefault(record.qualified, []).append(where)
    return offending


def _offence(call: ast.Call, record: Record, how: str) -> str:
    """Why `call` may not build `record` so (a call of one of its positions is fine when
    the record is kw_only past them), or ""."""
    if len(record.fields) <= MAX_POSITIONAL_FIELDS:
        return ""
    starred = any(isinstance(argument, ast.Starred) for argument in call.args)
    if how == "_make":
        return "built with _make"
    if starred:
        return "built from a starred argument"
    if not call.args:
        return ""
    kw_only = record.positional <= MAX_POSITIONAL_FIELDS
    if record.kind == "dataclass" and kw_only:
        return ""  # its fields past the first few can only be named
    return f"built from {len(call.args)} positional argument(s)"


def test_records_of_more_than_three_fields_are_built_by_keyword() -> None:
    offending = positional_builds()
    listed = [
        f"{name}, at\n    " + "\n    ".join(sites) for name, sites in sorted(offending.items())
    ]
    assert listed == [], "records built with positional arguments:\n  " + "\n  ".join(listed)
