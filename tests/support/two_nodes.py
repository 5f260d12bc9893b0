"""A Ray cluster of two nodes on 127.0.0.1, in its own process, for tests/test_multinode.py.

    python -m tests.support.two_nodes

Starts Ray's multi-node test harness (`ray.cluster_utils.Cluster`): a head node with 1 CPU and
a second node with 2 CPUs, both on 127.0.0.1, prints `ADDRESS <gcs address>` on stdout, and
shuts the cluster down when its stdin closes. Its own process, so that the pytest process's
in-process Ray (`ray_local`) and this cluster never meet; every process of the cluster
(raylets, workers) inherits this process's environment, which the test sets (loopback only,
and the barrier of `tests.support.node_barrier`).
"""

from __future__ import annotations

import sys

from jobs.engine.ray_runtime import set_env_defaults


def main() -> int:
    set_env_defaults()  # before Ray is imported: its processes stay on 127.0.0.1
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes(timeout=120)
        print(f"ADDRESS {cluster.address}", flush=True)
        sys.stdin.read()  # until the test closes it
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
