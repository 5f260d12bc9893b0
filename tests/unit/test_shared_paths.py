"""jobs.engine.shared_paths without a cluster: which paths a run of several nodes refuses, and
what the message says (the same check on a real two-node cluster: tests/test_multinode.py)."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.core.config import JobConfig, parse_config
from jobs.engine.shared_paths import check_shared_paths, is_local, run_paths
from jobs.run.factory import cache_spec
from scorer_core.errors import ConfigError


def config(**sections: Any) -> JobConfig:
    raw: dict[str, Any] = {"input": {"path": "s3://bucket/in/"}, "output": {"path": "s3://b/out"}}
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return parse_config(raw)


def check(config: JobConfig, nodes: int) -> None:
    """The check as the driver makes it: the run's paths, its cache's only when it uses one."""
    check_shared_paths(run_paths(config, cache_spec(config)), nodes, config.ray)


@pytest.mark.parametrize(
    ("path", "local"),
    [
        ("results/", True),
        ("/data/in.jsonl", True),
        ("file:///data/in", True),
        ("s3://bucket/key", False),
        ("gs://bucket/key", False),
        ("az://container/key", False),
    ],
)
def test_is_local(path: str, local: bool) -> None:
    assert is_local(path) is local


def test_object_store_paths_pass_on_any_cluster() -> None:
    check(config(), nodes=8)


def test_one_node_accepts_local_paths() -> None:
    check(config(input={"path": "in.jsonl"}, output={"path": "results/"}), nodes=1)


def test_local_output_on_two_nodes_names_the_key_why_and_what_to_use() -> None:
    with pytest.raises(ConfigError) as raised:
        check(config(output={"path": "results/"}), nodes=2)
    assert str(raised.value) == (
        "output.path 'results/' is a local path, but the Ray cluster this run joined has 2 "
        "nodes: workers on other nodes would stage their shards on their own disks, where this "
        "driver cannot read them to publish the run. Use an object store URL (s3://, gs://, "
        "az://) that every node can reach, or, if the path is on a filesystem every node mounts "
        "at the same place (NFS), set ray.shared_filesystem: true."
    )


def test_every_local_path_is_named_and_the_cache_only_when_used() -> None:
    llm = {"model": "openai/gpt-4o-mini"}
    with pytest.raises(ConfigError) as raised:
        check(config(input={"path": "/data/in"}, cache={"path": "/cache"}, judge=llm), nodes=3)
    message = str(raised.value)
    assert "input.path '/data/in' is a local path" in message
    assert "look for the input on their own disks" in message
    assert "cache.path '/cache' is a local path" in message
    assert "output.path" not in message
    # The offline judge never uses the cache; a disabled cache is not used either.
    check(config(cache={"path": "/cache"}), nodes=3)
    check(config(cache={"path": "/cache", "enabled": False}, judge=llm), nodes=3)


def test_shared_filesystem_opts_out() -> None:
    shared = config(input={"path": "/nfs/in"}, output={"path": "/nfs/out"})
    with pytest.raises(ConfigError):
        check(shared, nodes=2)
    check(
        config(
            input={"path": "/nfs/in"}, output={"path": "/nfs/out"}, ray={"shared_filesystem": True}
        ),
        nodes=2,
    )
