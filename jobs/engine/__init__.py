"""The engine: plan shards -> run them as Ray tasks under one shared limit -> publish Parquet.

Public API (everything else in the package is the engine's own business):

    run_job(config, out=...) -> RunOutcome   run or resume one scoring run end to end
    RunOutcome                               run id and date, what was published, timings
    RunFailed                                the run could not finish (a CtxPrecError); shards
                                             already staged are kept, the same run id resumes

Start reading at jobs.engine.driver.run_job; it calls, in order, jobs.factory (config ->
input spec), inputs (files, schema, shards), lease, ray_runtime, fanout (-> worker on each
Ray node, with a coordinator actor: shard board, governor, progress; and the verdict cache),
manifest (with response_formats: the structured-output form the workers' judges settled on)
and publish (-> aggregate).

The names above are imported from jobs.engine.driver on first use, not here: importing a
light module of the package (ray_runtime, say) must not import Polars, pyarrow or fsspec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.engine.driver import RunFailed, RunOutcome, run_job

__all__ = ["RunFailed", "RunOutcome", "run_job"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from jobs.engine import driver

        return getattr(driver, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
