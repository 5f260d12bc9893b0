"""`input.format: otlp`: before the run is planned, the traces are assembled into item Parquet
under the run's staging area (Ray tasks; a resumed run reads the items and the report again)
and the run reads them as any Parquet input."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from jobs.core.config import ColumnsConfig, JobConfig
from jobs.core.run_layout import RunLocation
from jobs.core.run_manifest import read_manifest
from jobs.core.storage import Store
from jobs.engine.fanout import RunFailed
from jobs.engine.ray_runtime import alive_nodes, cluster_address, ray_map, start_ray
from jobs.engine.shared_paths import check_shared_paths
from jobs.inputs.phoenix_spans import pull_spans
from jobs.inputs.traces import (
    TraceJob,
    TraceReport,
    assemble_traces,
    partitions_for,
    trace_files,
)

logger = logging.getLogger(__name__)


def stage_traces(
    config: JobConfig, store: Store, location: RunLocation
) -> tuple[JobConfig, dict[str, Any]]:
    """(the config that reads the assembled items, the assembly's report)."""
    folder = f"{location.staging}/traces"
    done = store.join(folder, "DONE.json")
    if store.exists(done):
        report = TraceReport(**json.loads(store.read_bytes(done)))
        logger.info(f"{report.summary()} (assembled before: resuming)")
        return items_config(config, report), dataclasses.asdict(report)
    if read_manifest(store, location) is not None:
        raise RunFailed(
            f"run {location.run_id} is already published at "
            f"{store.url(store.join(location.manifest))}; choose another run.id"
        )
    if config.input.phoenix is not None:  # its spans pulled as OTLP files into the staging area
        config = pull_spans(config, store, f"{location.staging}/phoenix")
    files = trace_files(config.input.path, config.input.storage_options)
    start_ray(config)
    if cluster_address(config):
        check_shared_paths(config, alive_nodes())
    job = TraceJob(
        output_url=config.output.path,
        output_options=dict(config.output.storage_options),
        folder=folder,
        input_options=dict(config.input.storage_options),
        carry=tuple(config.input.carry),
        parts=partitions_for(files),
        output_from=config.input.otlp.output,
        row_group_rows=config.ray.shard_size,
    )
    report = assemble_traces(job, files, ray_map(config))
    facts = dataclasses.asdict(report)
    store.write_bytes_atomic(done, json.dumps(facts, indent=2).encode())
    logger.info(f"{report.summary()} ({report.seconds:.1f}s)")
    return items_config(config, report), facts


def items_config(config: JobConfig, report: TraceReport) -> JobConfig:
    """`config` reading the assembled items (`jobs.inputs.traces.items_schema`) instead."""
    columns = ColumnsConfig(
        query_id="query_id",
        input="input",
        output=None if config.input.otlp.output == "none" else "output",
        context="context",
        context_ids="context_ids",
    )
    source = config.input.model_copy(
        update={
            "path": report.items_path,
            "format": "parquet",
            "columns": columns,
            "storage_options": dict(config.output.storage_options),
            "context_extractor": None,
        }
    )
    return config.model_copy(update={"input": source})
