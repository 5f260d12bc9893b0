"""The job on a real Ray cluster: `ray start --head` + `ray job submit`, all in subprocesses.

The `cluster` tests start their own head node on 127.0.0.1 (free ports, a short private temp
dir, token authentication ON with a token of their own), submit the job with `ray job submit
--working-dir <repo>` the way docs/cluster.md tells people to, and check what a user would:
the submit command's exit code, the job's status, the published Parquet and the job's logs.

They never call `ray.init` in the pytest process, so they coexist with the session-scoped
in-process Ray (`ray_local` in conftest) and with other people's Ray on the same machine.

Teardown deliberately does NOT run `ray stop --force`: that command kills every process on the
machine whose name looks like Ray's (gcs_server, raylet, ...), i.e. the in-process `ray_local`
of this very pytest run and anyone else's Ray. Instead the head runs as `ray start --block`,
the one process the fixture started, and SIGTERM to it stops the node's processes. Anything
that outlives it is found by a marker in its environment (every Ray process inherits the
head's environment) or this cluster's temp dir on its command line, and stopped by pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jobs.engine.ray_runtime import RAY_ENV
from tests.support.paths import REPO, VENV_BIN

RAY = str(VENV_BIN / "ray")  # the venv the tests (and so the cluster) run from
MARKER_VAR = "CTXPREC_CLUSTER_TEST"
ITEMS = 300
RUN_ID = "cluster-test"

# Loopback, offline litellm price map, no usage stats (the job's own RAY_ENV): the head's
# environment, which every Ray process of the cluster (job supervisor, entrypoint, workers)
# inherits.
CLUSTER_ENV_VARS = RAY_ENV
# Job-level variables passed with --runtime-env-json (the way docs/cluster.md passes
# credentials). The successful submission below also sets one of the RAY_ENV ones, which the
# driver sets too: a driver that joins a cluster has no runtime_env of its own to merge.
JOB_ENV_VARS = {"POLARS_MAX_THREADS": "1"}  # 2 shared cores: keep Polars from oversubscribing


# ----------------------------------------------------------------------------------------------
# The cluster fixture
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RayCluster:
    address: str  # the job server (dashboard) URL, http://127.0.0.1:<port>
    env: dict[str, str]  # environment for clients: token auth, loopback, this cluster's token
    temp_dir: Path
    work: Path  # inputs and outputs of the test jobs

    def ray(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        """Run the `ray` CLI of the venv against this cluster's environment."""
        return subprocess.run(
            [RAY, *args],
            env={**self.env, **env},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _head_logs(cluster: RayCluster, lines: int = 30) -> str:
    """The last lines of the head's own logs, for a failure's message: once a test ends, its
    temp dir (and so every log of the cluster) is gone, and a job server that stops answering
    mid-module says why only there."""
    logs = cluster.temp_dir / "session_latest" / "logs"
    files = [cluster.temp_dir / "ray-start.log"]
    files += [logs / n for n in ("dashboard.log", "dashboard.err", "gcs_server.out", "raylet.out")]
    parts = []
    for path in files:
        with contextlib.suppress(OSError):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name} ---\n" + "\n".join(tail))
    return "\n".join(["", "the head's logs:", *parts])


def _free_ports(count: int) -> list[int]:
    """`count` distinct ports that were free on 127.0.0.1 a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _cluster_env(temp_dir: Path, token_path: Path, marker: str) -> dict[str, str]:
    # Nothing Ray-related leaks in from the pytest process (ray_local's ray.init sets
    # RAY_AUTH_MODE there; a RAY_ADDRESS would point clients elsewhere).
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(CLUSTER_ENV_VARS)
    env.update(
        {
            # Token auth stays ON. The token is this cluster's own, in a file under its temp
            # dir, so ~/.ray/auth_token (shared with ray_local and other users) is never
            # read or written.
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(token_path),
            "RAY_TMPDIR": str(temp_dir),
            "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
            MARKER_VAR: marker,
        }
    )
    return env


def _cluster_processes(marker: str, temp_dir: str) -> list[Any]:
    """This cluster's processes (and their children), never anyone else's."""
    import psutil

    me = os.getpid()
    found: dict[int, Any] = {}
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.pid == me:
                continue
            hit = temp_dir in " ".join(proc.info["cmdline"] or ())
            if not hit:
                hit = proc.environ().get(MARKER_VAR) == marker
            if hit:
                found[proc.pid] = proc
                for child in proc.children(recursive=True):
                    found[child.pid] = child
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    found.pop(me, None)
    return list(found.values())


def _stop_cluster(marker: str, temp_dir: str) -> list[int]:
    """SIGTERM this cluster's processes by pid, SIGKILL what is left; returns survivors."""
    import psutil

    for _attempt in range(3):  # a dying raylet may still fork a worker: look again
        procs = _cluster_processes(marker, temp_dir)
        if not procs:
            return []
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=10)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=5)
    return [proc.pid for proc in _cluster_processes(marker, temp_dir)]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """A one-node Ray cluster on 127.0.0.1 started with `ray start --head`, token auth on."""
    # Ray's socket paths (<temp>/session_<date>_<pid>/sockets/...) must stay under ~107 chars:
    # pytest's tmp_path is too long, so the Ray temp dir is a short one under /tmp.
    temp_dir = Path(tempfile.mkdtemp(prefix="ctxr-", dir="/tmp"))
    marker = uuid.uuid4().hex
    token_path = temp_dir / "auth_token"
    token_path.write_text(secrets.token_hex(32))
    token_path.chmod(0o600)
    env = _cluster_env(temp_dir, token_path, marker)
    gcs, dashboard, client, agent, agent_grpc, env_agent, metrics, node_mgr, obj_mgr = _free_ports(
        9
    )
    cluster = RayCluster(
        address=f"http://127.0.0.1:{dashboard}",
        env=env,
        temp_dir=temp_dir,
        work=tmp_path_factory.mktemp("cluster"),
    )
    head_log = temp_dir / "ray-start.log"
    head: subprocess.Popen[bytes] | None = None
    try:
        # --block keeps `ray start` in the foreground: the fixture owns that one process, and
        # SIGTERM to it makes Ray stop the node's processes (gcs_server, raylet, dashboard, ...).
        with head_log.open("wb") as log:
            head = subprocess.Popen(
                [
                    RAY,
                    "start",
                    "--head",
                    "--block",
                    "--node-ip-address=127.0.0.1",
                    "--dashboard-host=127.0.0.1",
                    f"--port={gcs}",
                    f"--dashboard-port={dashboard}",
                    f"--ray-client-server-port={client}",
                    f"--dashboard-agent-listen-port={agent}",
                    f"--dashboard-agent-grpc-port={agent_grpc}",
                    f"--runtime-env-agent-port={env_agent}",
                    f"--metrics-export-port={metrics}",
                    f"--node-manager-port={node_mgr}",
                    f"--object-manager-port={obj_mgr}",
                    "--num-cpus=2",
                    "--disable-usage-stats",
                    f"--temp-dir={temp_dir}",
                ],
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        # Ready when the job server answers an authenticated request (a few seconds; more on a
        # busy machine).
        deadline = time.monotonic() + 180
        while True:
            if head.poll() is not None:
                pytest.fail(f"ray start --head exited {head.returncode}:\n{head_log.read_text()}")
            listed = cluster.ray("job", "list", "--address", cluster.address, timeout=60)
            if listed.returncode == 0:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"the job server never answered:\n{listed.stderr}")
            time.sleep(1)
        yield cluster
    finally:
        if head is not None and head.poll() is None:
            head.terminate()
            try:
                head.wait(timeout=60)
            except subprocess.TimeoutExpired:
                head.kill()
                head.wait(timeout=10)
        # Whatever outlived the head (a worker mid-fork, a job's entrypoint): by pid.
        survivors = _stop_cluster(marker, str(temp_dir))
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not survivors, f"cluster processes still alive after teardown: {survivors}"


# ----------------------------------------------------------------------------------------------
# Helpers for submitted jobs
# ----------------------------------------------------------------------------------------------


def _submit(
    cluster: RayCluster,
    submission_id: str,
    source: Path,
    out: Path,
    *overrides: str,
    env_vars: dict[str, str] = JOB_ENV_VARS,
) -> subprocess.CompletedProcess[str]:
    """`ray job submit` of the job on configs/local.yaml, reading `source`, publishing to
    `out`, with `--set` for each of `overrides`, exactly as docs/cluster.md shows (waits for
    the end).

    The job server answers before its agent has registered (more so on a busy machine), and
    says so: that refusal is retried for up to two minutes, as the message asks.
    """
    sets = [arg for override in overrides for arg in ("--set", override)]
    job_args = ["--config", "configs/local.yaml", "--set", f"input.path={source}"]
    job_args += ["--set", f"output.path={out}", *sets]
    deadline = time.monotonic() + 120
    while True:
        submitted = _submit_once(cluster, submission_id, *job_args, env_vars=env_vars)
        refused = "No available agent to submit job" in submitted.stdout + submitted.stderr
        if not refused or time.monotonic() > deadline:
            return submitted
        time.sleep(2)


def _submit_once(
    cluster: RayCluster,
    submission_id: str,
    *job_args: str,
    env_vars: dict[str, str],
) -> subprocess.CompletedProcess[str]:
    return cluster.ray(
        "job",
        "submit",
        "--address",
        cluster.address,
        "--submission-id",
        submission_id,
        "--working-dir",
        str(REPO),
        "--runtime-env-json",
        json.dumps({"env_vars": env_vars}),
        "--",
        # The venv's interpreter: the cluster runs from it, so it has every dependency.
        sys.executable,
        "-m",
        "jobs.context_precision",
        *job_args,
        timeout=420,
    )


def _status(cluster: RayCluster, submission_id: str) -> str:
    """The job's status from the Jobs SDK (`JobSubmissionClient`), run in a subprocess."""
    script = (
        "import sys\n"
        "from ray.job_submission import JobSubmissionClient\n"
        "client = JobSubmissionClient(sys.argv[1])\n"
        "print(client.get_job_status(sys.argv[2]).value)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, cluster.address, submission_id],
        env=cluster.env,
        cwd=cluster.work,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr + _head_logs(cluster)
    return result.stdout.strip().splitlines()[-1]


def _logs(cluster: RayCluster, submission_id: str) -> str:
    result = cluster.ray("job", "logs", submission_id, "--address", cluster.address)
    assert result.returncode == 0, result.stderr + _head_logs(cluster)
    return result.stdout


def _sample(cluster: RayCluster) -> Path:
    path = cluster.work / "in.jsonl"
    if not path.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "jobs.tools.sample_data",
                "--out",
                str(path),
                "--items",
                str(ITEMS),
            ],
            cwd=REPO,
            env=cluster.env,
            check=True,
            capture_output=True,
            timeout=120,
        )
    return path


# ----------------------------------------------------------------------------------------------
# The cluster tests
# ----------------------------------------------------------------------------------------------


@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_submitted_job_succeeds_and_publishes_one_row_per_item(ray_cluster: RayCluster) -> None:
    import polars as pl

    source = _sample(ray_cluster)
    out = ray_cluster.work / "out"
    submission_id = f"ctxprec-ok-{uuid.uuid4().hex[:8]}"
    # The job's runtime_env sets a variable the driver's start_ray also sets: start_ray joins a
    # cluster without a runtime_env of its own, so Ray has nothing to merge ("Failed to merge
    # the Job's runtime env" otherwise).
    env_vars = {**JOB_ENV_VARS, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    submitted = _submit(
        ray_cluster, submission_id, source, out, f"run.id={RUN_ID}", env_vars=env_vars
    )
    output = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, output + _head_logs(ray_cluster)
    assert _status(ray_cluster, submission_id) == "SUCCEEDED"

    scores = pl.read_parquet(out / "scores" / "**" / "*.parquet", hive_partitioning=True)
    expected_ids = {
        json.loads(line)["id"] for line in source.read_text(encoding="utf-8").splitlines()
    }
    assert scores.height == ITEMS == len(expected_ids)
    assert set(scores["query_id"].cast(pl.String)) == expected_ids
    assert scores["run_id"].unique().to_list() == [RUN_ID]
    assert (scores["status"] == "ok").all()

    logs = _logs(ray_cluster, submission_id)
    assert "Context precision" in logs
    assert re.search(rf"items\s+{ITEMS}\b", logs), logs
    assert re.search(rf"run {RUN_ID} \(\S+\) done in", logs), logs
    assert str(out) in logs  # "results: <where>" names this run's output


@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_submitted_job_with_a_mistyped_key_fails_with_the_config_error(
    ray_cluster: RayCluster,
) -> None:
    source = _sample(ray_cluster)
    submission_id = f"ctxprec-bad-{uuid.uuid4().hex[:8]}"
    submitted = _submit(
        ray_cluster,
        submission_id,
        source,
        ray_cluster.work / "out-bad",
        "rate_limit.request_per_minute=100",  # the key is requests_per_minute
    )
    assert submitted.returncode == 1, submitted.stdout + submitted.stderr + _head_logs(ray_cluster)
    assert _status(ray_cluster, submission_id) == "FAILED"
    logs = _logs(ray_cluster, submission_id)
    assert "rate_limit.request_per_minute" in logs, logs
    assert "unknown key" in logs, logs
    assert not (ray_cluster.work / "out-bad" / "scores").exists()


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_job_server_refuses_a_client_without_the_token(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    # No RAY_AUTH_MODE, no token variables and an empty HOME (so no ~/.ray/auth_token either).
    env = {k: v for k, v in ray_cluster.env.items() if not k.startswith("RAY_AUTH_")}
    env["HOME"] = str(tmp_path)
    refused = subprocess.run(
        [RAY, "job", "list", "--address", ray_cluster.address],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode != 0
    said = refused.stdout + refused.stderr
    assert re.search(r"authentication|unauthori[sz]ed|401", said, re.I), said + _head_logs(
        ray_cluster
    )
