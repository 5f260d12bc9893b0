"""Paths every node of a multi-node cluster must reach: joining a cluster of several live
nodes, a local `input.path`, `output.path` or `cache.path` is refused at start-up (a
different disk on every node), unless `ray.shared_filesystem: true` says it is a shared mount."""

from __future__ import annotations

from dataclasses import dataclass

from fsspec.core import split_protocol

from jobs.core.config import JobConfig
from scorer_core.capabilities import is_offline
from scorer_core.errors import ConfigError

_LOCAL_PROTOCOLS = frozenset({None, "file", "local"})


@dataclass(frozen=True, slots=True)
class RunPath:
    """A path the run's workers use: its config key, its value, and what goes wrong when it
    is a different disk on every node."""

    key: str
    path: str
    on_each_node: str


def run_paths(config: JobConfig) -> list[RunPath]:
    """The input, output and (when the run uses the cache) cache paths of `config`."""
    paths = [
        RunPath(
            "input.path",
            config.input.path,
            "workers on other nodes would look for the input on their own disks",
        ),
        RunPath(
            "output.path",
            config.output.path,
            "workers on other nodes would stage their shards on their own disks, where this "
            "driver cannot read them to publish the run",
        ),
    ]
    if config.cache.enabled and config.cache.path and not is_offline(config.judge.model):
        paths.append(
            RunPath(
                "cache.path",
                config.cache.path,
                "each node would keep a verdict cache of its own, which the others never see",
            )
        )
    return paths


def is_local(path: str) -> bool:
    """Whether `path` is a local file path (no protocol, or file://)."""
    protocol, _ = split_protocol(path)
    return protocol in _LOCAL_PROTOCOLS


def check_shared_paths(config: JobConfig, nodes: int) -> None:
    """Raise `ConfigError` when a cluster of `nodes` nodes would see a local path of the run
    as a different disk on every node (not with `ray.shared_filesystem: true`)."""
    if nodes <= 1 or config.ray.shared_filesystem:
        return
    local = [path for path in run_paths(config) if is_local(path.path)]
    if not local:
        return
    lines = [
        f"{path.key} {path.path!r} is a local path, but the Ray cluster this run joined has "
        f"{nodes} nodes: {path.on_each_node}."
        for path in local
    ]
    raise ConfigError(
        " ".join(lines) + " Use an object store URL (s3://, gs://, az://) that every node can "
        "reach, or, if the path is on a filesystem every node mounts at the same place (NFS), "
        "set ray.shared_filesystem: true."
    )
