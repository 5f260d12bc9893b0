"""Paths every node of a multi-node cluster must reach: joining a cluster of several live
nodes, a local `input.path`, `output.path` or `cache.path` is refused at start-up (a
different disk on every node), unless `ray.shared_filesystem: true` says it is a shared mount."""

from __future__ import annotations

from collections.abc import Mapping

from fsspec.core import split_protocol

from jobs.core.config import JobConfig, RayConfig
from jobs.core.verdict_cache import CacheSpec
from scorer_core.errors import ConfigError

_LOCAL_PROTOCOLS = frozenset({None, "file", "local"})
# What goes wrong when a path of the run is a different disk on every node.
_ON_EACH_NODE = {
    "input.path": "workers on other nodes would look for the input on their own disks",
    "output.path": "workers on other nodes would stage their shards on their own disks, where "
    "this driver cannot read them to publish the run",
    "cache.path": "each node would keep a verdict cache of its own, which the others never see",
}


def is_local(path: str) -> bool:
    """Whether `path` is a local file path (no protocol, or file://)."""
    return split_protocol(path)[0] in _LOCAL_PROTOCOLS


def run_paths(config: JobConfig, cache: CacheSpec | None) -> dict[str, str]:
    """The paths a run's workers use, by their config key: the input, the output, and the
    verdict cache's own place when the run uses one (`cache`: the run's, None without)."""
    paths = {"input.path": config.input.path, "output.path": config.output.path}
    if cache is not None and cache.url is not None:
        paths["cache.path"] = cache.url
    return paths


def check_shared_paths(paths: Mapping[str, str], nodes: int, ray: RayConfig) -> None:
    """`ConfigError` when a cluster of `nodes` nodes would see a local path of `paths` (by
    config key, `run_paths`) as a different disk on every node (unless
    `ray.shared_filesystem: true`)."""
    if nodes <= 1 or ray.shared_filesystem:
        return
    local = [
        f"{key} {path!r} is a local path, but the Ray cluster this run joined has {nodes} "
        f"nodes: {_ON_EACH_NODE[key]}."
        for key, path in paths.items()
        if is_local(path)
    ]
    if local:
        raise ConfigError(
            " ".join(local) + " Use an object store URL (s3://, gs://, az://) that every node "
            "can reach, or, if the path is on a filesystem every node mounts at the same place "
            "(NFS), set ray.shared_filesystem: true."
        )
