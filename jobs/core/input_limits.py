"""How much of an item's retrieved contexts is judged: the truncation defaults, written once.

A context longer than `DEFAULT_MAX_CONTEXT_CHARS` characters is cut to that length, and only
the first `DEFAULT_MAX_CONTEXTS` contexts of an item are kept (`jobs.inputs.records`
applies the rule and flags the item as truncated). `jobs.core.config.InputConfig` takes its
defaults from here.

Why not inside `jobs.inputs`: importing any module of that package first runs the
package's `__init__`, which loads pyarrow and fsspec. `jobs.core.config` is only the config schema
and stays free of the readers and their dependencies.
"""

from __future__ import annotations

DEFAULT_MAX_CONTEXT_CHARS = 200_000
DEFAULT_MAX_CONTEXTS = 1000
