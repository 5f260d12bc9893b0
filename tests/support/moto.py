"""The moto S3 server the tests use: a real S3-compatible HTTP endpoint on 127.0.0.1 (moto's
ThreadedMotoServer at a free port), dummy credentials, us-east-1.

Every moto server in one process shares the same in-memory backend: a bucket created through
one is visible through the others (`tests.support.s3_faults.FaultyS3` relies on that).
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

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
    """Start a ThreadedMotoServer on 127.0.0.1 at a free port: (server, endpoint_url)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def create_bucket(endpoint_url: str, bucket: str) -> None:
    """Create `bucket` at the endpoint (with boto3, as a user would)."""
    import boto3  # type: ignore[import-untyped]

    boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket=bucket)
