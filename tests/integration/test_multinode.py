"""The job on a Ray cluster of two nodes (Ray's own multi-node harness, both on 127.0.0.1).

On such a cluster a local path is a different disk on every node, so the driver refuses a
local input, output or cache path at start-up, naming the key and what to use instead; with
`ray.shared_filesystem: true` it trusts the path to be a mount all nodes see. With its input and
output on S3 (moto on 127.0.0.1) the same run succeeds, and its shards ran on both nodes: the
manifest counts each node's shards, and a barrier (`tests.support.node_barrier`) makes sure,
without any timing, that each node's worker took shards before either judged one.

The cluster runs in its own process (`tests.support.two_nodes`) and every driver is a
subprocess that joins it through `ray.address`, as a user's driver would; the pytest process
never joins it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import s3fs
import yaml

from jobs.core.config import load_config
from jobs.core.storage import open_store, s3_options
from jobs.engine.ray_runtime import RAY_ENV
from tests.fake_judge import Arrival
from tests.support.fakes import JudgeFactory
from tests.support.hooks import HoldRequests
from tests.support.job import (
    COLUMNS,
    lexical_truth,
    llm_judge,
    sample_job,
    truth,
    verdict_requests,
    wait_journaled,
    write_items,
)
from tests.support.moto import MotoS3
from tests.support.node_barrier import BARRIER_ENV, NodeBarrier
from tests.support.paths import REPO
from tests.support.processes import process_on_port

pytestmark = [pytest.mark.timeout(900)]

RUN_DATE = "2026-11-30"


@pytest.fixture(scope="module")
def barrier() -> Iterator[NodeBarrier]:
    with NodeBarrier(nodes=2) as barrier:
        yield barrier


@contextlib.contextmanager
def two_node_cluster(barrier: NodeBarrier) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A two-node cluster (tests.support.two_nodes) whose workers know the barrier's address:
    its address, and its process (which takes `LOSE NODE` on stdin); stopped on exit."""
    env = {**os.environ, **RAY_ENV, BARRIER_ENV: barrier.address}
    env.pop("RAY_ADDRESS", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.two_nodes"],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        line = process.stdout.readline()
        assert line.startswith("ADDRESS "), f"the cluster did not start: {line!r}"
        yield line.split()[1], process
    finally:
        process.stdin.close()
        process.wait(timeout=300)


@pytest.fixture(scope="module")
def cluster_and_harness(barrier: NodeBarrier) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The module's two-node cluster whose workers know the barrier's address: its address and
    its process (the last test of the module takes its second node away)."""
    with two_node_cluster(barrier) as started:
        yield started


@pytest.fixture
def cluster(cluster_and_harness: tuple[str, subprocess.Popen[str]]) -> str:
    return cluster_and_harness[0]


def run_driver(tmp_path: Path, config: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """`python -m jobs.context_precision` with `config`, in its own process."""
    path = tmp_path / f"config-{len(list(tmp_path.glob('config-*')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, **RAY_ENV}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "jobs.context_precision", "--config", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def job(cluster: str, source: str, out: str, run_id: str, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "input": {"path": source, "format": "jsonl", "columns": dict(COLUMNS)},
        "output": {"path": out},
        "judge": {"model": "lexical"},
        "ray": {"address": cluster, "shard_size": 10, "workers": 2},
        "run": {"id": run_id, "date": RUN_DATE},
    }
    for section, values in extra.items():
        config.setdefault(section, {}).update(values)
    return config


def test_local_paths_on_two_nodes_are_refused_at_start_up(cluster: str, tmp_path: Path) -> None:
    source = tmp_path / "items.jsonl"
    write_items(source, 20)
    out = tmp_path / "out"
    done = run_driver(tmp_path, job(cluster, str(source), str(out), "local-refused"))

    assert done.returncode == 2, done.stderr[-3000:]
    message = done.stderr
    for expected in (
        f"input.path '{source}' is a local path, but the Ray cluster this run joined has 2 nodes",
        f"output.path '{out}' is a local path",
        "where this driver cannot read them",
        "Use an object store URL (s3://, gs://, az://)",
        "set ray.shared_filesystem: true",
    ):
        assert expected in message, message[-3000:]
    assert not (out / "scores").exists() and not (out / "_staging").exists()


def test_a_shared_filesystem_is_trusted(cluster: str, tmp_path: Path) -> None:
    # Both "nodes" are this machine: its disk is a filesystem every node sees.
    source = tmp_path / "items.jsonl"
    rows = write_items(source, 30)
    out = tmp_path / "out"
    config = job(cluster, str(source), str(out), "shared-fs", ray={"shared_filesystem": True})
    done = run_driver(tmp_path, config)

    assert done.returncode == 0, done.stderr[-3000:]
    scores = pl.read_parquet(next(out.glob("scores/**/*.parquet")))
    assert dict(zip(scores["query_id"], scores["score"], strict=True)) == lexical_truth(rows)


def test_on_s3_the_run_succeeds_with_shards_on_both_nodes(
    cluster: str, barrier: NodeBarrier, moto_s3: MotoS3, s3_prefix: str, tmp_path: Path
) -> None:
    local = tmp_path / "items.jsonl"
    rows = write_items(local, 80)
    fs = s3fs.S3FileSystem(**s3_options(moto_s3.storage_options))
    source, out = f"{s3_prefix}/in/items.jsonl", f"{s3_prefix}/out"
    fs.put_file(str(local), source)
    config = job(
        cluster,
        source,
        out,
        "on-s3",
        input={
            "storage_options": moto_s3.storage_options,
            "context_extractor": "tests.support.node_barrier:contexts",
        },
        output={"storage_options": moto_s3.storage_options},
    )
    done = run_driver(tmp_path, config)

    assert done.returncode == 0, done.stderr[-3000:]
    partition = f"run_date={RUN_DATE}/run_id=on-s3"
    manifest = json.loads(fs.cat_file(f"{out}/manifests/{partition}/manifest.json"))
    nodes = manifest["nodes"]
    assert len(nodes) == 2 and all(count > 0 for count in nodes.values()), nodes
    assert sum(nodes.values()) == manifest["shards"]
    assert set(nodes) == barrier.nodes_seen
    with fs.open(f"{out}/scores/{partition}/part-00000.parquet", "rb") as handle:
        scores = pl.read_parquet(handle)
    assert set(scores["status"]) == {"ok"}
    assert dict(zip(scores["query_id"], scores["score"], strict=True)) == lexical_truth(rows)


def _senders(held: list[Arrival]) -> set[int]:
    """The processes (Ray workers) that sent the held requests."""
    return {process_on_port(arrival.peer[1]).pid for arrival in held if arrival.peer}


# Last in the module: it loses the module cluster's second node (a cluster of its own would
# cost a start and a stop of two nodes).
def test_a_node_lost_half_way_costs_only_its_last_seconds_of_replies(
    cluster_and_harness: tuple[str, subprocess.Popen[str]],
    tmp_path: Path,
    judge_key: str,
    fake_judge: JudgeFactory,
) -> None:
    """200 items on two nodes; when 100 replies are in (and journaled), the second node is
    killed: Ray retries its worker on the head node, which takes over the dead worker's
    journal, so the run asks at most 1.05 x the items in all. (Both nodes on 127.0.0.1 share
    a disk: `ray.shared_filesystem`.)"""
    address, harness = cluster_and_harness
    items, half = 200, 100
    source, rows, out = sample_job(tmp_path, items, seed=67)
    gate = HoldRequests(when=lambda arrival: arrival.number > half)
    server = fake_judge(on_request=gate)
    config = job(
        address,
        str(source),
        str(out),
        "lose-a-node",
        judge=llm_judge(server, transport="http", timeout_s=120.0),
        rate_limit={"max_concurrency": 4},
        # a CPU a worker: the head node (1 CPU) holds one at most, so the second node runs one
        ray={
            "shard_size": 50,
            "workers": 2,
            "num_cpus_per_task": 1,
            "shared_filesystem": True,
            "max_task_retries": 3,
        },
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, **RAY_ENV}
    env.pop("RAY_ADDRESS", None)
    with (tmp_path / "driver.log").open("w") as log:
        driver = subprocess.Popen(
            [sys.executable, "-m", "jobs.context_precision", "--config", str(path)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        gate.wait_held(1, timeout_s=300)
        wait_journaled(open_store(str(out)), load_config(path), rows, half)
        # both workers have requests in flight (the head node runs one at most): the loss hits one
        gate.wait_until(lambda held: len(_senders(held)) >= 2, "requests held from 2 workers")
        assert harness.stdin is not None and harness.stdout is not None
        harness.stdin.write("LOSE NODE\n")
        harness.stdin.flush()
        lost = harness.stdout.readline().split()
        assert lost[0] == "LOST" and int(lost[1]) >= 1, lost  # a worker of the run was there
    finally:
        gate.release()
    assert driver.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    calls = verdict_requests(server)
    # more than the items: the lost node's worker had requests in flight, asked again by its
    # retry; at most 5% more: everything it had received came back from its journal
    assert items < calls <= 1.05 * items, calls
    scores = pl.read_parquet(out / "scores" / "**" / "*.parquet")
    assert set(scores["status"]) == {"ok"}
    assert dict(zip(scores["query_id"], scores["score"], strict=True)) == truth(rows)
