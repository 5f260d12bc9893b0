"""Input files: list them (`listing`), check their columns (`columns`), plan shards (`planning`),
read a shard into checked items (`records`); traces are joined into items by `traces`.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.inputs.columns import InputSchema as InputSchema
    from jobs.inputs.columns import inspect_input as inspect_input
    from jobs.inputs.listing import FileInfo as FileInfo
    from jobs.inputs.listing import list_input_files as list_input_files
    from jobs.inputs.planning import plan_shards as plan_shards
    from jobs.inputs.records import read_shard as read_shard
    from jobs.inputs.records import to_item as to_item
    from jobs.inputs.records import validate_record as validate_record
    from jobs.inputs.spec import ColumnMap as ColumnMap
    from jobs.inputs.spec import InputSpec as InputSpec
    from jobs.inputs.spec import ItemRecord as ItemRecord
    from jobs.inputs.spec import RawRow as RawRow
    from jobs.inputs.spec import RowError as RowError
    from jobs.inputs.spec import Shard as Shard

# Imported on first use: a process that only passes shards around (the run's coordinator)
# imports `jobs.inputs.spec` without pulling in pyarrow and fsspec through this package.
_EXPORTS = {
    "columns": "InputSchema inspect_input",
    "listing": "FileInfo list_input_files",
    "planning": "plan_shards",
    "records": "read_shard to_item validate_record",
    "spec": "ColumnMap InputSpec ItemRecord RawRow RowError Shard",
}
_WHERE = {
    name: f"jobs.inputs.{module}" for module, names in _EXPORTS.items() for name in names.split()
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'jobs.inputs' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
