"""The scoring job and its tools, around the pure `scorer_core` library.

How a night's run flows (start reading at jobs.engine.driver.run_job):

    input file(s)  JSONL or Parquet, local or s3:// / gs:// / az:// (jobs.inputs)
      -> plan      shards of about `ray.shard_size` rows; finished ones are skipped on rerun
      -> shards on Ray workers, each: read -> judge stage -> rows -> commit (jobs.engine.worker)
                   online: the worker's judge under the run's shared limit, the verdict cache
                   in front (jobs.engine.stages.OnlineStage: the shard's verdicts found in the
                   store before the fan-out, jobs.engine.cache_lookup; what it judges goes to
                   the worker's journal as it arrives, jobs.verdict_store); judge.mode batch:
                   the same shards pass round after round, answered from provider batches the
                   driver sends, waits for and ingests (jobs.engine.stages.BatchPassStage,
                   jobs.engine.batch)
      -> staged Parquet
                   per shard, under <output>/_staging/run_id=<id>/ (jobs.layout)
      -> publish   Polars dedupes and aggregates the staged shards (jobs.engine.publish,
                   .aggregate) and moves the result into place all or nothing
      -> tables    <output>/{scores,verdicts,summary}/run_date=<d>/run_id=<id>/ + manifest

Layers, bottom to top; each imports only its own layer and the ones below it
(tests/unit/test_layers.py checks every import, those inside functions included):

    jobs.cli, jobs.context_precision
                  `ctxprec`, every command; imports a command's module only to run it
    jobs.tools    estimate, calibrate, compare, report, status, runs (reading published runs);
                  from the engine only its public API (`from jobs.engine import ...`)
    jobs.job      a config run end to end: the factory builds its parts, the engine runs them
    jobs.factory  config -> the run's parts (input reader, judge maker, cache spec, what the
                  judge can do, the judge canary: jobs.canary); also the judge for the tools
                  that judge in one process
    jobs.engine   the Ray job: it is handed the run's parts (jobs.engine.parts.RunParts) and
                  never builds a judge from a config itself; public API in jobs.engine
    foundation    what engine and tools both stand on: jobs.config (the YAML), jobs.schema
                  (every table's columns), jobs.layout (a run's files and item numbering),
                  jobs.storage (fsspec), jobs.inputs (reading), jobs.cache (the verdict cache's
                  keys and judge), jobs.verdict_store (the content-addressed verdict store and
                  the workers' journal), jobs.records (the typed manifest), jobs.pricing,
                  jobs.formatting, jobs.stats (intervals and tests), jobs.sampling (which
                  items a sampled run judges), jobs.endpoints (which endpoint answers),
                  jobs.config_yaml, jobs.text_safety, jobs.error_rate
    scorer_core   one item's score: judges, prompt, average precision; no Ray, fsspec or Polars
"""
