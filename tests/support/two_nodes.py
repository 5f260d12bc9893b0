"""A Ray cluster of two nodes on 127.0.0.1, in its own process, for tests/test_multinode.py.

    python -m tests.support.two_nodes

Starts Ray's multi-node test harness (`ray.cluster_utils.Cluster`): a head node with 1 CPU and
a second node with 2 CPUs, both on 127.0.0.1, prints `ADDRESS <gcs address>` on stdout, and
kills the cluster when its stdin closes. A line `LOSE NODE` on stdin kills the second
node at once (its raylet and every process on it, as a lost machine); once every one of them
is gone, `LOST <n>` is printed, n the Ray processes (workers, tasks) that ran on it.
Its own process, so that the pytest process's in-process Ray (`ray_local`) and this cluster
never meet; every process of the cluster (raylets, workers) inherits this process's
environment, which the test sets (loopback only, and the barrier of
`tests.support.node_barrier`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from jobs.engine.ray_runtime import set_env_defaults


def lose(cluster: Any, node: Any) -> int:
    """Kill `node` and every process under its raylet; how many Ray workers ran on it."""
    import psutil
    from ray._private import ray_constants

    (raylet,) = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET]
    under = psutil.Process(raylet.process.pid).children(recursive=True)
    workers = 0
    for process in under:
        with contextlib.suppress(psutil.Error):
            workers += " ".join(process.cmdline()).startswith("ray::")
    cluster.remove_node(node, allow_graceful=False)
    for process in under:  # a worker outliving its raylet could still write: not on a lost node
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(under, timeout=30)
    return workers


def main() -> None:
    set_env_defaults()  # before Ray is imported: its processes stay on 127.0.0.1
    import ray._common.utils
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False},
    )
    try:
        second = cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes(timeout=120)
        print(f"ADDRESS {cluster.address}", flush=True)
        for line in sys.stdin:  # until the test closes it
            if line.strip() == "LOSE NODE":
                print(f"LOST {lose(cluster, second)}", flush=True)
    finally:
        # At once, as `LOSE NODE` does: a graceful stop waits on the workers of the last run.
        for node in [*cluster.worker_nodes, cluster.head_node]:
            cluster.remove_node(node, allow_graceful=False)
        # As `Cluster.shutdown` does: else a later bare `ray.init()` on this machine looks for
        # the dead cluster that /tmp/ray/ray_current_cluster still names.
        ray._common.utils.reset_ray_address()
    sys.stdout.flush()
    os._exit(0)  # Ray's exit handlers would spend about 10 s trying the killed GCS


if __name__ == "__main__":
    main()
