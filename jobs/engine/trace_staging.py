"""`input.format: otlp` or `phoenix`: before the run is planned, the traces are assembled into
item Parquet under the run's staging area (Ray tasks; a resumed run reads the items and the
report again), where the run's reader (`jobs.inputs.records.ItemReader.for_config`) reads them
as any Parquet input."""

from __future__ import annotations

import dataclasses
import json
import logging

from jobs.core.config import JobConfig
from jobs.core.run_layout import RunLocation
from jobs.core.run_manifest import TracesRecord, read_manifest
from jobs.core.storage import Store
from jobs.engine.failures import RunFailed
from jobs.engine.parts import RunParts
from jobs.engine.ray_runtime import alive_nodes, cluster_address, ray_map, start_ray
from jobs.engine.shared_paths import check_shared_paths, run_paths
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
    config: JobConfig, parts: RunParts, store: Store, location: RunLocation
) -> TracesRecord:
    """Assemble the run's traces into items at `location.traces` (once: a resumed run reads
    the report of the first assembly); what the assembly found."""
    folder = location.traces
    done = store.join(folder, "DONE.json")
    if store.exists(done):
        report = TraceReport(**json.loads(store.read_bytes(done)))
        logger.info(f"{report.summary()} (assembled before: resuming)")
        return TracesRecord.model_validate(dataclasses.asdict(report))
    if read_manifest(store, location) is not None:
        raise RunFailed(
            f"run {location.run_id} is already published at "
            f"{store.url(store.join(location.manifest))}; choose another run.id"
        )
    source, source_options = config.input.path, config.input.storage_options
    if config.input.phoenix is not None:  # its spans pulled as OTLP files into the staging area
        phoenix = f"{location.staging}/phoenix"
        source = pull_spans(config.input.phoenix, config.input.otlp.output, store, phoenix)
        source_options = config.output.storage_options
    files = trace_files(source, source_options)
    start_ray(config.ray)
    if cluster_address(config.ray):
        paths = {**run_paths(config, parts.cache), "input.path": source}
        check_shared_paths(paths, alive_nodes(), config.ray)
    job = TraceJob(
        output_url=config.output.path,
        output_options=dict(config.output.storage_options),
        folder=folder,
        input_options=dict(source_options),
        carry=tuple(config.input.carry),
        parts=partitions_for(files),
        output_from=config.input.otlp.output,
        row_group_rows=config.ray.shard_size,
    )
    report = assemble_traces(job, files, ray_map(config.ray))
    facts = dataclasses.asdict(report)
    store.write_bytes_atomic(done, json.dumps(facts, indent=2).encode())
    logger.info(f"{report.summary()} ({report.seconds:.1f}s)")
    return TracesRecord.model_validate(facts)
