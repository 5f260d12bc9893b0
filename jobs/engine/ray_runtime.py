"""Ray for the job: the environment it needs, how the driver starts (and stops) or joins it.
`RAY_ENV` is the one place those variables are written in Python (the Makefile and .ci/run
export them in shell); Ray is imported only inside the functions, so reading it costs nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from jobs.core.config import RayConfig

R = TypeVar("R")
Mapper = Callable[[Callable[..., Any], Iterable[tuple[Any, ...]]], Iterator[Any]]
"""Runs `fn(*args)` for each args tuple, here or as Ray tasks; the results in any order."""

# Ray reads these at import and its workers inherit them: a local Ray on loopback, litellm's
# bundled price map (offline-safe), no usage statistics, Arrow on jemalloc, which hands freed
# pages back (with mimalloc the driver grew with the run: docs/design-notes-engine.md).
RAY_ENV: dict[str, str] = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "RAY_USAGE_STATS_ENABLED": "0",
    "ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
}


# Ray's INFO lines in the driver (a local instance started, a cluster joined) are noise in a
# run's log; `ray.init` sets this level (importing Ray resets its logger: ours cannot reach it).
_RAY_LOG_LEVEL = logging.WARNING
# Our local Ray keeps Ray's default token authentication; its warning saying so, on every run,
# says nothing a user can act on.
_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def set_env_defaults(environ: MutableMapping[str, str] = os.environ) -> None:
    """Put `RAY_ENV` into `environ` where a variable is not set already (a user's value wins)."""
    for key, value in RAY_ENV.items():
        environ.setdefault(key, value)


def cluster_address(ray: RayConfig) -> str | None:
    """The address of the cluster the run joins (`ray.address`, else `RAY_ADDRESS`, which a
    Ray Job sets); None: Ray starts locally, on this machine alone."""
    return ray.address or os.environ.get("RAY_ADDRESS") or None


def alive_nodes() -> int:
    """How many nodes of the cluster this process has joined are alive."""
    import ray

    nodes: list[dict[str, object]] = ray.nodes()  # type: ignore[no-untyped-call]
    return len([node for node in nodes if node.get("Alive")])


def start_ray(ray_config: RayConfig) -> None:
    """Join the configured cluster (or the one a Ray Job runs in), else start Ray locally."""
    address = cluster_address(ray_config)
    if not address:
        set_env_defaults()  # Ray reads these when it is imported
    import ray

    if ray.is_initialized():
        return
    with _keep_sigterm_handler():
        _init_ray(address)


@contextlib.contextmanager
def _keep_sigterm_handler() -> Iterator[None]:
    """Keep the driver's SIGTERM handler: `ray.init` puts its own (an exit) in its place, and a
    scheduler's SIGTERM must stop the run as Ctrl-C does (`jobs.engine.driver`)."""
    main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)


def _init_ray(address: str | None) -> None:
    import ray

    if address:
        # No runtime_env of our own: a Ray Job's may set the same variables and Ray refuses to
        # merge conflicting ones (scorer_core sets litellm's offline price map itself).
        ray.init(address=address, log_to_driver=True, logging_level=_RAY_LOG_LEVEL)
        return
    # Our own local Ray: none of its processes may outlive this driver (jobs.engine.reaper).
    from jobs.engine.reaper import reaped

    logging.getLogger(_AUTH_LOGGER).setLevel(logging.ERROR)
    with reaped():
        for attempt in (1, 2):
            try:
                ray.init(
                    # "local": a new instance of our own, never a cluster someone left running on
                    # this machine (`ray start` leaves its address where a bare ray.init finds it)
                    address="local",
                    num_cpus=max(2, os.cpu_count() or 2),
                    include_dashboard=False,
                    # no runtime_env: its processes inherit this environment, and a runtime_env
                    # (even env_vars alone) costs a run's first tasks seconds of worker start
                    _node_ip_address="127.0.0.1",
                    log_to_driver=True,
                    logging_level=_RAY_LOG_LEVEL,
                )
                atexit.register(stop_ray)  # before Ray's own exit handler (last in, first out)
                return
            except Exception as exc:
                # On an overloaded machine a local node can miss Ray's start-up deadline; a second
                # try usually makes it. Anything else is not ours to retry.
                if attempt == 2 or "timed out during startup" not in str(exc):
                    raise
                ray.shutdown()


def stop_ray() -> None:
    """Stop (or leave) Ray, if this process started it, without Ray's waits at exit: a 0.5 s
    pause, then a second for its autoscaler monitor, which outlasts SIGTERM."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    node: Any = ray._private.worker._global_node  # its processes by type: a private attribute
    for info in node.all_processes.get("monitor", []) if node else []:
        info.process.kill()
    ray.shutdown()


def local_map(fn: Callable[..., R], calls: Iterable[tuple[Any, ...]]) -> Iterator[R]:
    """A `Mapper` running every call in this process, one after another."""
    return (fn(*args) for args in calls)


def ray_task(ray_config: RayConfig, fn: Callable[..., Any], **options: Any) -> Any:
    """`fn` as a Ray task: `ray.num_cpus_per_task`, retried `ray.max_task_retries` times, spread
    over the nodes; `options` are more of Ray's. Ray must be up."""
    import ray

    return ray.remote(fn).options(
        num_cpus=ray_config.num_cpus_per_task,
        max_retries=ray_config.max_task_retries,
        scheduling_strategy="SPREAD",
        **options,
    )


def ray_map(ray_config: RayConfig, in_flight: int | None = None, **options: Any) -> Mapper:
    """A `Mapper` running each call as a `ray_task`, at most `in_flight` at once (None: all),
    yielding the results as they finish."""
    import ray

    def run(fn: Callable[..., R], calls: Iterable[tuple[Any, ...]]) -> Iterator[R]:
        task = ray_task(ray_config, fn, **options)
        pending: list[Any] = []
        for args in calls:
            pending.append(task.remote(*args))
            if in_flight is not None and len(pending) >= in_flight:
                ready, pending = ray.wait(pending, num_returns=1)
                yield ray.get(ready[0])
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            yield ray.get(ready[0])

    return run
