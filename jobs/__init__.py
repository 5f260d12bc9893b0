"""The scoring job and its tools, around the pure `scorer_core` library.

How a night's run flows (start reading at jobs.engine.driver.run_job):

    input file(s)  JSONL or Parquet, local or s3:// / gs:// / az:// (jobs.inputs)
      -> plan      shards of about `ray.shard_size` rows; finished ones are skipped on rerun
      -> shards on Ray workers, each: read -> judge stage -> rows -> commit
      (jobs.engine.shards.worker)
                   online: the worker's judge under the run's shared limit, the verdict cache
                   in front (jobs.engine.shards.stages.OnlineStage: the shard's verdicts found in
                   the
                   store before the fan-out, jobs.engine.pairs.cache_lookup; what it judges goes to
                   the worker's journal as it arrives, jobs.core.verdict_store); judge.mode batch:
                   the same shards pass round after round, answered from provider batches the
                   driver sends, waits for and ingests (jobs.engine.shards.stages.BatchPassStage,
                   jobs.engine.batch)
      -> staged Parquet
                   per shard, under <output>/_staging/run_id=<id>/ (jobs.core.run_layout)
      -> publish   Polars dedupes and aggregates the staged shards (jobs.engine.publish.publisher,
                   .aggregate) and moves the result into place all or nothing
      -> tables    <output>/{scores,verdicts,summary}/run_date=<d>/run_id=<id>/ + manifest

Layers, bottom to top; each imports only its own layer and the ones below it
(tests/unit/test_layers.py checks every import, those inside functions included):

    jobs.cli, jobs.context_precision
                  `ctxprec`, every command; imports a command's module only to run it
    jobs.tools    estimate, calibrate, compare, report, status, runs (reading published runs);
                  from the engine only its public API (`from jobs.engine import ...`)
    jobs.run.job      a config run end to end: the factory builds its parts, the engine runs them
    jobs.run.factory  config -> the run's parts (input reader, judge maker, cache spec, what the
                  judge can do, the judge canary: jobs.run.canary); also the judge for the tools
                  that judge in one process
    jobs.engine   the Ray job: it is handed the run's parts (jobs.engine.parts.RunParts) and
                  never builds a judge from a config itself; public API in jobs.engine
    foundation    what engine and tools both stand on: jobs.core.config (the YAML), jobs.core.schema
                  (every table's columns), jobs.core.run_layout (a run's files and item numbering),
                  jobs.core.storage (fsspec), jobs.inputs (reading), jobs.core.verdict_cache (the
                  verdict cache's
                  keys and judge), jobs.core.verdict_store (the content-addressed verdict store and
                  the workers' journal), jobs.core.run_manifest (the typed manifest),
                  jobs.core.pricing,
                  jobs.core.formatting, jobs.core.stats (intervals and tests), jobs.inputs.sampling
                  (which
                  items a sampled run judges), jobs.core.endpoints (which endpoint answers),
                  jobs.core.config_yaml, jobs.core.text_safety, jobs.core.error_rate
    scorer_core   one item's score: judges, prompt, average precision; no Ray, fsspec or Polars
"""
