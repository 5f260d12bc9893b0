"""Input files: list them (`listing`), check their columns (`columns`), plan shards (`planning`),
read a shard into checked items (`records`); traces are joined into items by `traces`.

The public names are those `__init__.pyi` lists, each imported from its module on first use: a
process that only passes shards around (the run's coordinator) imports `jobs.inputs.spec`
without pulling in pyarrow and fsspec through this package.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
