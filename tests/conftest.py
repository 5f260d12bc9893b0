"""Shared pytest fixtures."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from jobs.engine.ray_runtime import RAY_ENV, set_env_defaults

# The fake judge's `server` fixture and other small fakes, for every test module.
pytest_plugins = ["tests.fakes"]

# Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER when it is imported, so it must be set before any
# test module imports ray: keep every Ray in the tests on 127.0.0.1, and litellm offline.
set_env_defaults()

# ==========================================================================================
# moto S3 fixtures (owner: storage/inputs). A real S3-compatible HTTP endpoint on loopback:
# moto's ThreadedMotoServer on 127.0.0.1 at a free port, dummy credentials, us-east-1.
# Other fixtures (Ray, ...) go in their own block below this one.
# ==========================================================================================

MOTO_BUCKET = "ctxprec-test"
MOTO_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class MotoS3(NamedTuple):
    """Unpacks as `(endpoint_url, bucket, storage_options)`."""

    endpoint_url: str
    bucket: str
    storage_options: dict[str, Any]


def moto_storage_options(endpoint_url: str, **extra: Any) -> dict[str, Any]:
    """fsspec storage_options for s3fs against the moto endpoint (a fresh dict each call)."""
    return {
        "key": "testing",
        "secret": "testing",
        "endpoint_url": endpoint_url,
        "client_kwargs": {"region_name": "us-east-1"},
        **extra,
    }


def start_moto_server() -> tuple[Any, str]:
    """Start a ThreadedMotoServer on 127.0.0.1 at a free port: (server, endpoint_url).

    Every moto server in one process shares the same in-memory backend: a bucket created
    through one is visible through the others.
    """
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """A moto S3 server for the whole session, with bucket `MOTO_BUCKET` created."""
    import boto3  # type: ignore[import-untyped]

    with pytest.MonkeyPatch.context() as patch:
        for name, value in MOTO_CREDENTIALS.items():
            patch.setenv(name, value)
        server, endpoint = start_moto_server()
        try:
            client = boto3.client(
                "s3",
                endpoint_url=endpoint,
                region_name="us-east-1",
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
            )
            client.create_bucket(Bucket=MOTO_BUCKET)
            yield MotoS3(endpoint, MOTO_BUCKET, moto_storage_options(endpoint))
        finally:
            server.stop()


@pytest.fixture
def s3_prefix(moto_s3: MotoS3) -> str:
    """A fresh, empty s3:// prefix in the moto bucket for one test."""
    return f"s3://{moto_s3.bucket}/t-{uuid.uuid4().hex[:12]}"


# ==================================== end of moto S3 fixtures =============================


# ==========================================================================================
# Ray fixture (owner: job integration tests). One local Ray instance for the whole session,
# on loopback only, started lazily by the first test that asks for it. `jobs.engine.ray_runtime.
# start_ray` sees `ray.is_initialized()` and reuses it. The environment is set before
# `ray.init` so the raylet and every worker inherit it (loopback, offline litellm).
# ==========================================================================================

# The job's own Ray environment (jobs.engine.ray_runtime), under the name tests import.
RAY_TEST_ENV = RAY_ENV


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """`ray` initialised with 2 CPUs on 127.0.0.1, shut down at the end of the session."""
    import ray

    with pytest.MonkeyPatch.context() as patch:
        for name, value in RAY_ENV.items():
            patch.setenv(name, value)
        if ray.is_initialized():  # pragma: no cover - someone else started it
            yield ray
            return
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
        )
        try:
            yield ray
        finally:
            ray.shutdown()


# ==================================== end of Ray fixture ==================================
