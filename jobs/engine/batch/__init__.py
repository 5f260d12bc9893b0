"""Batch mode (`judge.mode: batch`): the providers' Batch APIs as the judge, at about half the
price, within a completion window instead of the per-minute limits.

The same read -> judge -> write pipeline as online, with another judge stage:

    requests   what a batch request line is: custom_id, the online request body
    judge      BatchJudge: the online LLMJudge answering from replies through a ReplayClient
    stage      a shard's pass on a worker (jobs.engine.shards.worker.ShardRunner plugs it in)
    layout     where the work lives under the run's staging area
    state      a round's batches as recorded (ids before anything waits on them), the split
    provider   the Files + Batches API through litellm
    ingest     output and error files -> one reply per request sent
    rounds     the driver: pass -> plan -> submit -> wait -> ingest, round after round

Importing this package imports none of its modules (the worker imports `stage`, the driver
`rounds`).
"""
