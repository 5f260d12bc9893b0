"""The scoring job and its tools, around the pure `scorer_core` library.

How a night's run flows (start reading at jobs.engine.driver.run_job):

    input file(s)  JSONL or Parquet, local or s3:// / gs:// / az:// (jobs.inputs)
      -> plan      shards of about `ray.shard_size` rows; finished ones are skipped on rerun
      -> shards on Ray workers
                   each task reads its shard, asks the judge (shared rate limit, verdict
                   cache), scores each item with scorer_core (jobs.engine.fanout, .worker)
                   judge.mode batch: the same tasks record requests instead, and the driver
                   sends them as provider batches, waits, ingests the replies and runs the
                   tasks again to judge from them, round after round (jobs.engine.batch)
      -> staged Parquet
                   per shard, under <output>/_staging/run_id=<id>/ (hidden from readers)
      -> publish   Polars dedupes and aggregates the staged shards (jobs.engine.publish,
                   .aggregate) and moves the result into place all or nothing
      -> tables    <output>/{scores,verdicts,summary}/run_date=<d>/run_id=<id>/ + manifest

Layers, each importing only the ones below it:

    jobs.cli            `ctxprec`, every command; imports a command's module only to run it
    jobs.tools          estimate, calibrate, compare, report, status (runs: reading published runs)
    jobs.engine         the Ray job (public API: run_job, RunOutcome, RunFailed)
    jobs.factory        config -> judge, input spec, items, cache; jobs.config: the YAML
    scorer_core         one item's score: judges, prompt, average precision; no Ray or Polars
"""
