"""Every shared fixture, defined once.

    server        a fresh fake judge (tests.fake_judge) for one test, with no options
    fake_judge    starts fake judges with any FakeJudgeServer options, stopped after the test
    transport     "litellm", then "http": a test that takes it runs once per judge transport
    judge_key     the judge's API key in the environment variable the job configs name
    sleep         a RecordingSleep to inject instead of asyncio.sleep
    run_log       pytest's caplog, capturing what the job logs at INFO (`run_log.text`: the
                  lines `ctxprec run` shows on stderr)
    moto_s3       the session's moto S3 server, with bucket MOTO_BUCKET; s3_prefix: a fresh
                  prefix in it
    faulty_s3     an S3 endpoint of the test's own that it may break (tests.support.s3_faults)
    s3_store, gcs_store, azure_store
                  a bucket on moto's S3, on the GCS emulator, on Azurite, as one ObjectStore
                  (tests.support.stores); the emulators start once per module that asks
    ray_local     a local Ray (2 CPUs, loopback) shared by consecutive modules that ask for
                  it, stopped before a module that does not (idle, it costs 7% of a core);
                  only tests under tests/integration may ask, and a unit test that starts
                  Ray some other way fails

Helpers that are more than fixtures live in tests/support.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs.engine.ray_runtime import RAY_ENV, set_env_defaults
from tests.fake_judge import FakeJudgeServer
from tests.support.fakes import JudgeFactory, RecordingSleep
from tests.support.job import KEY_ENV, KEY_VALUE
from tests.support.moto import (
    MOTO_BUCKET,
    MOTO_CREDENTIALS,
    MotoS3,
    create_bucket,
    moto_storage_options,
    start_moto_server,
)
from tests.support.s3_faults import FaultyS3
from tests.support.stores import Emulator, ObjectStore, start_azurite, start_gcs

# Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER when it is imported, so it must be set before any
# test module imports ray: keep every Ray in the tests on 127.0.0.1, and litellm offline.
set_env_defaults()

UNIT = Path(__file__).resolve().parent / "unit"
# Fixtures a unit test must not use: they start Ray.
_RAY_FIXTURES = {"ray_local"}
# The modules with a test that uses ray_local, and the environment it set for Ray's processes.
_RAY_MODULES: set[Path] = set()
_RAY_ENVIRONMENT = pytest.MonkeyPatch()
# Seconds a module took in a `make test` run (the slowest; the rest take under 15 s each).
_SLOW_MODULES = {
    "test_llm_judge": 90,
    "test_stores_faults": 106,
    "test_phoenix": 80,
    "test_job": 100,
    "test_cluster_submit": 70,
    "test_prompt_cache_job": 65,
    "test_faults_process": 65,
    "test_batch_job": 60,
    "test_multinode": 57,
    "test_signals_process": 52,
    "test_provider_faults": 39,
    "test_stores_job": 47,
    "test_verdict_store_job": 35,
    "test_recipes": 32,
    "test_batch_retries": 29,
    "test_faults_storage": 28,
    "test_bad_input_job": 27,
    "test_runner_survives": 24,
    "test_otlp_job": 21,
    "test_after_a_run": 17,
    "test_significance_job": 17,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit tests run without Ray: one that asks for it belongs in tests/integration."""
    for item in items:
        uses = _RAY_FIXTURES & set(getattr(item, "fixturenames", ()))
        if uses and item.path.is_relative_to(UNIT):
            raise pytest.UsageError(
                f"{item.nodeid} uses {sorted(uses)}: tests that need Ray go in tests/integration"
            )
        if uses:
            _RAY_MODULES.add(item.path)
    # The modules without ray_local first, then those sharing it: a worker that runs them in a
    # row starts Ray once (`make test` keeps this order: --no-loadscope-reorder). Each Ray start
    # costs this 2-core machine 8-13 CPU-seconds. In each group the slowest modules go first,
    # so that the two workers of `make test` end with short ones and finish together.
    items.sort(key=lambda item: (item.path in _RAY_MODULES, -_SLOW_MODULES.get(item.path.stem, 0)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Stop ray_local's Ray after its module's fixtures, unless the next module uses it too."""
    yield
    moving_on = nextitem is None or nextitem.path != item.path
    if moving_on and _ray_running() and (nextitem is None or nextitem.path not in _RAY_MODULES):
        sys.modules["ray"].shutdown()
        _RAY_ENVIRONMENT.undo()


def _ray_running() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


@pytest.fixture(autouse=True)
def _unit_tests_start_no_ray(request: pytest.FixtureRequest) -> Iterator[None]:
    """...nor start it some other way (a `run_job` with shards left to run, say)."""
    if not request.node.path.is_relative_to(UNIT) or _ray_running():
        yield
        return
    yield
    if _ray_running():
        sys.modules["ray"].shutdown()
        pytest.fail("this unit test started Ray: it belongs in tests/integration")


# -- the fake judge ----------------------------------------------------------------------------


@pytest.fixture
def fake_judge() -> Iterator[JudgeFactory]:
    """`fake_judge(**options)` starts a FakeJudgeServer with those options (rpm, fault_plan,
    verdict_fn, require_api_key, on_request, ...); all of them stop when the test ends."""
    started: list[FakeJudgeServer] = []

    def start(**options: Any) -> FakeJudgeServer:
        server = FakeJudgeServer(**options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def server(fake_judge: JudgeFactory) -> FakeJudgeServer:
    """A fake judge of this test's own: no limit, no faults, empty statistics."""
    return fake_judge()


@pytest.fixture(params=["litellm", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    """The judge's transport: a test that takes this fixture runs once with each."""
    return str(request.param)


@pytest.fixture
def judge_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """The key in KEY_ENV, the variable `tests.support.job.llm_judge` configs read it from."""
    monkeypatch.setenv(KEY_ENV, KEY_VALUE)
    return KEY_VALUE


@pytest.fixture
def sleep() -> RecordingSleep:
    """Injected instead of asyncio.sleep: records the waits, waits for nothing."""
    return RecordingSleep()


# -- S3 ----------------------------------------------------------------------------------------


@pytest.fixture
def run_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="jobs")
    return caplog


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """A moto S3 server for the whole session, with bucket `MOTO_BUCKET` created."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in MOTO_CREDENTIALS.items():
            patch.setenv(name, value)
        moto, endpoint = start_moto_server()
        try:
            create_bucket(endpoint, MOTO_BUCKET)
            yield MotoS3(endpoint, MOTO_BUCKET, moto_storage_options(endpoint))
        finally:
            moto.stop()


@pytest.fixture
def s3_prefix(moto_s3: MotoS3) -> str:
    """A fresh, empty s3:// prefix in the moto bucket for one test."""
    return f"s3://{moto_s3.bucket}/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def faulty_s3() -> Iterator[FaultyS3]:
    """An S3 endpoint of this test's own (moto's buckets, a port of its own) to break."""
    endpoint = FaultyS3()
    endpoint.start()
    try:
        yield endpoint
    finally:
        endpoint.stop()


# -- the stores behind one interface: S3, Google Cloud Storage, Azure Blob ----------------------


@pytest.fixture(scope="module")
def s3_store(moto_s3: MotoS3) -> ObjectStore:
    return ObjectStore("s3", moto_s3.bucket, moto_s3.storage_options)


def _emulated(
    start: Callable[[Path], tuple[Emulator, ObjectStore]], folder: Path
) -> Iterator[ObjectStore]:
    """The store `start` opens with its data in `folder`; its emulator stopped after."""
    emulator, store = start(folder)
    try:
        yield store
    finally:
        emulator.stop()


@pytest.fixture(scope="module")
def gcs_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    """gcp-storage-emulator on a free loopback port for this module, bucket ctxprec-test."""
    yield from _emulated(start_gcs, tmp_path_factory.mktemp("gcs"))


@pytest.fixture(scope="module")
def azure_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    """Azurite's Blob service on a free loopback port for this module, container ctxprec-test."""
    yield from _emulated(start_azurite, tmp_path_factory.mktemp("azurite"))


# -- Ray ---------------------------------------------------------------------------------------


@pytest.fixture
def ray_tmp() -> Iterator[str]:
    """A private Ray temp dir for a driver started in a process of its own
    (tests.support.processes.start_driver); short: Ray's socket paths must fit."""
    path = tempfile.mkdtemp(prefix="ctxf-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_local() -> Any:
    """`ray` initialised with 2 CPUs on 127.0.0.1, or the one an earlier module left running.

    `jobs.engine.ray_runtime.start_ray` sees `ray.is_initialized()` and reuses it. The job's
    environment is set before `ray.init` so the raylet and every worker inherit it.
    """
    import ray

    if not ray.is_initialized():
        for name, value in RAY_ENV.items():
            _RAY_ENVIRONMENT.setenv(name, value)
        ray.init(
            address="local",  # never a cluster left running on this machine
            num_cpus=2,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
        )
    return ray
