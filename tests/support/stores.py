"""The object stores the docs name, each a real server on 127.0.0.1 behind one interface, so that a
scenario runs on every store unchanged:

    s3   moto's S3 server (the session's, tests.support.moto), in this process
    gs   gcp-storage-emulator (the dev extra), its objects on disk so a restart keeps them
    az   Azurite's Blob service (tests/emulators, installed by `make emulators`), its data in a
         folder (--location) so a restart keeps them; adlfs with Azurite's documented
         development account

`ObjectStore` is a bucket on one of them: its URLs, the storage_options a job config gives,
a fresh filesystem to read back with, and (gs, az) the `Emulator` process to stop and start
again on the same port. An emulator that cannot be found skips its tests with the command that
installs it, except where `REQUIRE_EMULATORS` is set (`.ci/run` sets it): there it fails.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import psutil  # type: ignore[import-untyped]
import pytest

from jobs.core.storage import filesystem
from tests.support.paths import REPO, VENV_BIN

HOST = "127.0.0.1"
# Set (to anything but empty) where a missing emulator is a failure, not a skip: in CI.
REQUIRE_EMULATORS = "CTXPREC_REQUIRE_EMULATORS"

GCS_EMULATOR = VENV_BIN / "gcp-storage-emulator"
GCS_PROJECT = "ctxprec-test"
AZURITE = REPO / "tests" / "emulators" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's development account, published in its documentation (not a secret anywhere; the
# tests check it never reaches a manifest or a log all the same).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def free_port() -> int:
    """A port nothing listens on at 127.0.0.1 right now."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def azurite_connection_string(blob_endpoint: str) -> str:
    """The development account's connection string, its blob endpoint at `blob_endpoint`."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={blob_endpoint}/{AZURITE_ACCOUNT};"
    )


def missing(what: str, how: str) -> None:
    """Skip the test because `what` is not installed (`how` installs it), or fail in CI."""
    message = f"{what} is not installed ({how})"
    if os.environ.get(REQUIRE_EMULATORS):
        pytest.fail(f"{message}, and {REQUIRE_EMULATORS} is set: the emulators must run here")
    pytest.skip(message)


@dataclass
class Emulator:
    """A store's server in a process of its own on a fixed port of 127.0.0.1; `stop` and
    `start` again keep what it holds (it keeps it on disk). Its output goes to `log`."""

    name: str
    command: Callable[[int], Sequence[str]]  # the command line, given the port
    log: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        """Start it and wait until it accepts connections (idempotent)."""
        if self.process is not None:
            return
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                list(self.command(self.port)),
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of the tests reaches it through stop() only
            )
        deadline = time.monotonic() + timeout_s
        while not self.reachable():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.name} did not start on {self.url}:\n{tail}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop it as a service manager does, with SIGTERM (SIGKILL if it has not gone after
        10 s); from then on connections to its port are refused (idempotent). Azurite closes
        its service, saving its data, at the first SIGTERM and exits only at a second one."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        deadline = time.monotonic() + 10
        while process.poll() is None and self.reachable() and time.monotonic() < deadline:
            time.sleep(0.02)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.5)
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def reachable(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=1):
                return True
        except OSError:
            return False

    def listening(self) -> set[str]:
        """The addresses its process listens on (every one should be 127.0.0.1)."""
        assert self.process is not None, f"{self.name} is not running"
        sockets = psutil.Process(self.process.pid).net_connections(kind="inet")
        return {s.laddr.ip for s in sockets if s.status == psutil.CONN_LISTEN}


@dataclass
class ObjectStore:
    """A bucket (an Azure container) on a store's server, named as a job config names it."""

    scheme: str  # s3, gs, az
    bucket: str
    storage_options: dict[str, Any]
    emulator: Emulator | None = None  # None: moto, in this process
    # Strings a published manifest or a log must never hold (the store's credentials).
    secrets: tuple[str, ...] = ()
    # The environment a command-line user gives instead of --storage-option (az: the
    # connection string); empty: the options go on the command line.
    environment: dict[str, str] = field(default_factory=dict)

    def url(self, *parts: str) -> str:
        return "/".join([f"{self.scheme}://{self.bucket}", *parts])

    def fresh_prefix(self) -> str:
        """The URL of a new, empty folder in the bucket, for one test."""
        return self.url(f"t-{uuid.uuid4().hex[:12]}")

    def fs(self) -> fsspec.AbstractFileSystem:
        """A filesystem of its own (no instance shared with the job), as the job opens it."""
        options = {**self.storage_options, "skip_instance_cache": True}
        return filesystem(self.url(), options)[0]

    def path(self, url: str) -> str:
        """The filesystem path of `url` (bucket/key), what `fs()` takes."""
        return url.split("://", 1)[1]

    def cli_options(self) -> list[str]:
        """`--storage-option KEY=VALUE` arguments for `ctxprec show`/`report` (none for the
        options `environment` carries)."""
        flat = {k: v for k, v in self.storage_options.items() if k != "client_kwargs"}
        if self.environment:
            return []
        return [f"--storage-option={key}={value}" for key, value in flat.items()]


def start_gcs(folder: Path) -> tuple[Emulator, ObjectStore]:
    """gcp-storage-emulator on disk in `folder`, bucket `ctxprec-test` created with gcsfs."""
    if not GCS_EMULATOR.exists():
        missing("gcp-storage-emulator", "the dev extra: make install")
    data = folder / "data"

    def command(port: int) -> list[str]:
        return [str(GCS_EMULATOR), "-d", str(data), "start", "--host", HOST, "--port", str(port)]

    emulator = Emulator("gcp-storage-emulator", command, folder / "gcs-emulator.log")
    emulator.start()
    options = {"token": "anon", "project": GCS_PROJECT, "endpoint_url": emulator.url}
    store = ObjectStore("gs", "ctxprec-test", options, emulator=emulator)
    store.fs().mkdir(store.bucket)
    return emulator, store


def start_azurite(folder: Path) -> tuple[Emulator, ObjectStore]:
    """Azurite's Blob service with its data in `folder`, container `ctxprec-test` created."""
    if not AZURITE.exists():
        missing("Azurite", "npm ci --prefix tests/emulators, or make emulators; needs node")

    def command(port: int) -> list[str]:
        return [
            str(AZURITE),
            *("--blobHost", HOST, "--blobPort", str(port)),
            *("--location", str(folder / "data"), "--skipApiVersionCheck", "--silent"),
        ]

    emulator = Emulator("Azurite", command, folder / "azurite.log")
    emulator.start()
    connection = azurite_connection_string(emulator.url)
    store = ObjectStore(
        "az",
        "ctxprec-test",
        {"connection_string": connection},
        emulator=emulator,
        secrets=(AZURITE_KEY, connection),
        environment={"AZURE_STORAGE_CONNECTION_STRING": connection},
    )
    store.fs().mkdir(store.bucket)
    return emulator, store
