"""Start-up checks beyond the config's own validation, before Ray starts: the output or cache
not inside the input nor the input inside the output (`ConfigError`, exit 2, naming what to
change). The judge's settings are checked where its parts are built (`jobs.run.factory`)."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any

from fsspec.core import split_protocol

from jobs.core.config import JobConfig
from jobs.core.storage import has_glob
from scorer_core.errors import ConfigError

_LOCAL = {None, "file", "local"}
_ALIASES = {"s3a": "s3", "gcs": "gs", "abfs": "az", "abfss": "az"}


def _location(url: str, options: Mapping[str, Any]) -> tuple[str, str, str]:
    """(protocol, endpoint, normalised path) of a URL or local path, for comparing places."""
    protocol, path = split_protocol(url)
    if protocol in _LOCAL:
        return "file", "", os.path.realpath(os.path.expanduser(path))
    client = options.get("client_kwargs") or {}
    endpoint = str(options.get("endpoint_url") or client.get("endpoint_url") or "")
    name = _ALIASES.get(str(protocol), str(protocol))
    return name, endpoint.rstrip("/"), posixpath.normpath("/" + path.strip("/"))


def _within(inner: str, outer: str) -> str | None:
    """`inner` relative to `outer` when it is `outer` or under it, else None."""
    if inner == outer:
        return "."
    prefix = outer.rstrip("/") + "/"
    return inner[len(prefix) :] if inner.startswith(prefix) else None


def _static_root(path: str) -> str:
    """The folder a glob's matches are all under (the path itself when not a glob)."""
    while has_glob(path):
        path = posixpath.dirname(path)
    return path


def check_paths_apart(config: JobConfig) -> None:
    """`ConfigError` when the run's output (or verdict cache) is inside its input or the
    input inside the output: a rerun would read the job's own tables as items. Allowed: the
    output under a `_` or `.` folder of an input folder (a listing never enters it), and an
    input file right at the output's root (the job writes only into folders there)."""
    if config.input.format == "phoenix":
        return  # the spans are pulled into the run's staging area
    kind_in, endpoint_in, path_in = _location(config.input.path, config.input.storage_options)
    root_in = _static_root(path_in)
    is_folder = kind_in == "file" and os.path.isdir(path_in)
    is_file = kind_in == "file" and os.path.isfile(path_in)
    outputs = [("output.path", config.output.path)]
    if config.cache.path:
        outputs.append(("cache.path", config.cache.path))
    for key, url in outputs:
        kind, endpoint, path = _location(url, config.output.storage_options)
        if (kind, endpoint) != (kind_in, endpoint_in):
            continue
        below = _within(path, root_in)
        if below is not None and not (
            is_folder
            and below != "."
            and any(part.startswith(("_", ".")) for part in below.split("/"))
        ):
            hint = (
                ", or under a folder of the input whose name starts with '_' (a folder listing "
                "skips it)"
                if is_folder
                else ""
            )
            raise ConfigError(
                f"{key} {url} is inside input.path {config.input.path}: a rerun would read the "
                f"job's own tables as items. Write the results elsewhere{hint}"
            )
        inside = _within(root_in, path)
        # a file named as input right at the output's root: the job writes only in folders
        at_root_file = is_file and inside is not None and "/" not in inside and inside != "."
        if inside is not None and not at_root_file:
            raise ConfigError(
                f"input.path {config.input.path} is inside {key} {url}: the job would read "
                "its own tables as items; keep the input outside the output"
            )
