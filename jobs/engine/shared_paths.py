"""Paths every node of a multi-node cluster must reach: joining a cluster of several live
nodes, a local `input.path`, `output.path` or `cache.path` is refused at start-up (a
different disk on every node), unless `ray.shared_filesystem: true` says it is a shared mount."""

from __future__ import annotations

from fsspec.core import split_protocol

from jobs.core.config import JobConfig
from scorer_core.capabilities import is_offline
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


def check_shared_paths(config: JobConfig, nodes: int) -> None:
    """`ConfigError` when a cluster of `nodes` nodes would see a local path of the run as a
    different disk on every node (unless `ray.shared_filesystem: true`)."""
    if nodes <= 1 or config.ray.shared_filesystem:
        return
    paths = {"input.path": config.input.path, "output.path": config.output.path}
    if config.cache.enabled and config.cache.path and not is_offline(config.judge.model):
        paths["cache.path"] = config.cache.path
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
