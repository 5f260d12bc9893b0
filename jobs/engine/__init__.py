"""The engine: a run's shards judged on Ray under one shared limit, then published as Parquet
(docs/layout.md draws it; start reading at `jobs.engine.driver.run_job`). The tools, the CLI
and `jobs.run` use only the names `__init__.pyi` lists, each imported from its module on first
use, so that importing a light module of the package (messages, ray_runtime) loads no Polars
or pyarrow."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
