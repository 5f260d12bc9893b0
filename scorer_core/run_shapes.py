"""The call shapes Mastra's scorers accept, reduced to the strings the judge needs.

`run`/`arun` take plain strings, message lists (the first user / assistant message is used),
an agent run's input (`{"inputMessages": [...]}`, `{"messages"}`, `{"prompt"}`, ...) and output
message, or one run object `{"input", "output", "groundTruth"}`. Content may be a string, a
list of parts (the last text part counts, as in Mastra) or Mastra's stored form (`{"parts"}`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from scorer_core.errors import InputError

GROUND_TRUTH_KEYS = ("groundTruth", "ground_truth", "expected_output", "expectedOutput")
# Keys a Mastra run object may carry besides input/output/groundTruth; they are not used.
RUN_OBJECT_EXTRA_KEYS = frozenset(
    {"runId", "requestContext", "runtimeContext", "additionalContext", "tracingContext"}
)


def _is_list(value: Any) -> TypeGuard[Sequence[Any]]:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _last_text_part(parts: Sequence[Any]) -> str | None:
    texts = [
        part["text"]
        for part in parts
        if isinstance(part, Mapping)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    ]
    return texts[-1] if texts else None


def content_text(value: Any) -> str | None:
    """The text of a message or of its content, or None when it holds no text."""
    if isinstance(value, str):
        return value
    if _is_list(value):
        return _last_text_part(value)
    if not isinstance(value, Mapping):
        return None
    content = value.get("content")
    if isinstance(content, str) or _is_list(content):
        return content_text(content)
    inner = content_text(content) if isinstance(content, Mapping) else None
    if inner is not None:
        return inner
    if isinstance(value.get("text"), str):
        return str(value["text"])
    parts = value.get("parts")
    return _last_text_part(parts) if _is_list(parts) else None


def _first_with_role(messages: Any, role: str) -> str | None:
    if not _is_list(messages):
        return None
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") == role:
            return content_text(message)
    return None


def message_text(value: Any, role: str) -> str | None:
    """The text of a string, of the first `role` message of a list, or of one such message."""
    if isinstance(value, str):
        return value
    if _is_list(value):
        return _first_with_role(value, role)
    if not isinstance(value, Mapping) or value.get("role") not in (None, role):
        return None
    return content_text(value)


def user_text(run_input: Any) -> str | None:
    """The query from a run's input: a string, messages, or an agent/workflow input object."""
    if isinstance(run_input, Mapping):
        for key in ("inputMessages", "messages"):
            found = _first_with_role(run_input.get(key), "user")
            if found is not None:
                return found
        for key in ("prompt", "text"):
            if isinstance(run_input.get(key), str):
                return str(run_input[key])
        if "content" not in run_input:
            return None
    return message_text(run_input, "user")


def unpack_run_object(run: Any, expected_output: Any) -> tuple[Any, Any, Any]:
    """(input, output, reference) of the run object given to run() as its one argument."""
    if not isinstance(run, Mapping) or "output" not in run:
        raise InputError(
            "run() got one argument: pass (input, output), or a run object "
            '{"input": ..., "output": ..., "groundTruth": ...}'
        )
    unknown = set(run) - {"input", "output", *GROUND_TRUTH_KEYS, *RUN_OBJECT_EXTRA_KEYS}
    if unknown:
        listed = ", ".join(sorted(map(str, unknown)))
        raise InputError(f"run object has unknown key(s): {listed}")
    given = [key for key in GROUND_TRUTH_KEYS if run.get(key) is not None]
    if len(given) > 1:
        raise InputError(f"run object gives the reference twice: {', '.join(given)}")
    return run.get("input"), run.get("output"), run[given[0]] if given else expected_output


def texts_of(run_input: Any, run_output: Any, expected_output: Any) -> tuple[str, str, str | None]:
    """The query, the answer and the reference the judge reads from any accepted shape;
    `InputError` says what could not be read."""
    query = user_text(run_input)
    if query is None:
        raise InputError(
            f"cannot read the query from input of type {type(run_input).__name__}: give a "
            "string, a message list with a user message, or {inputMessages: [...]}"
        )
    answer = "" if run_output is None else message_text(run_output, "assistant")
    if answer is None:
        raise InputError(
            f"cannot read the answer from output of type {type(run_output).__name__}: give a "
            "string, a message list with an assistant message, or one assistant message"
        )
    if expected_output is None:
        return query, answer, None
    reference = content_text(expected_output)
    if reference is None:
        reference = message_text(expected_output, "assistant")
    if reference is None:
        raise InputError(
            "expected_output (groundTruth) must be a string or a message, got "
            f"{type(expected_output).__name__}"
        )
    return query, answer, reference
