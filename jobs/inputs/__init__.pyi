"""The package's public names, for type checkers and for `lazy_loader.attach_stub` (the
__init__ module imports each from its module on first use): the one list of them."""

from .columns import InputSchema as InputSchema
from .columns import inspect_input as inspect_input
from .listing import FileInfo as FileInfo
from .listing import list_input_files as list_input_files
from .planning import plan_shards as plan_shards
from .records import read_shard as read_shard
from .records import to_item as to_item
from .records import validate_record as validate_record
from .spec import ColumnMap as ColumnMap
from .spec import InputSpec as InputSpec
from .spec import ItemRecord as ItemRecord
from .spec import RawRow as RawRow
from .spec import RowError as RowError
from .spec import Shard as Shard
