"""The call shapes Mastra's scorers accept, reduced to the strings the judge needs.

`run`/`arun` take plain strings, message lists (the first user / assistant message is used),
an agent run's input (`{"inputMessages": [...]}`, `{"messages"}`, `{"prompt"}`, ...) and output
message, or one run object `{"input", "output", "groundTruth"}`. Content may be a string, a
list of parts (the last text part counts, as in Mastra) or Mastra's stored form (`{"parts"}`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scorer_core.errors import InputError

# Keys a Mastra run object may carry besides input/output/groundTruth; they are not used.
RUN_OBJECT_EXTRA_KEYS = frozenset(
    {"runId", "requestContext", "runtimeContext", "additionalContext", "tracingContext"}
)
GROUND_TRUTH_KEYS = ("groundTruth", "ground_truth", "expected_output", "expectedOutput")


def _last_text_part(parts: Sequence[Any]) -> str | None:
    texts = [
        p["text"]
        for p in parts
        if isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)
    ]
    return texts[-1] if texts else None


def content_text(value: Any) -> str | None:
    """The text of a message or of its content, or None when it holds no text."""
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return _last_text_part(value)
    if not isinstance(value, Mapping):
        return None
    content = value.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, bytes):
        return _last_text_part(content)
    if isinstance(content, Mapping):
        inner = content_text(content)
        if inner is not None:
            return inner
    if isinstance(value.get("text"), str):
        return str(value["text"])
    parts = value.get("parts")
    if isinstance(parts, Sequence) and not isinstance(parts, str | bytes):
        return _last_text_part(parts)
    return None


def _first_with_role(messages: Any, role: str) -> str | None:
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        return None
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") == role:
            return content_text(message)
    return None


def user_text(run_input: Any) -> str | None:
    """The query from a run's input: a string, messages, or an agent/workflow input object."""
    if isinstance(run_input, str):
        return run_input
    if isinstance(run_input, Sequence) and not isinstance(run_input, bytes):
        return _first_with_role(run_input, "user")
    if not isinstance(run_input, Mapping):
        return None
    for key in ("inputMessages", "messages"):
        found = _first_with_role(run_input.get(key), "user")
        if found is not None:
            return found
    for key in ("prompt", "text"):
        if isinstance(run_input.get(key), str):
            return str(run_input[key])
    if "content" in run_input and run_input.get("role") in (None, "user"):
        return content_text(run_input)
    return None


def assistant_text(run_output: Any) -> str | None:
    """The answer from a run's output: a string, messages, or one assistant message."""
    if isinstance(run_output, str):
        return run_output
    if isinstance(run_output, Sequence) and not isinstance(run_output, bytes):
        return _first_with_role(run_output, "assistant")
    if not isinstance(run_output, Mapping):
        return None
    if run_output.get("role") not in (None, "assistant"):
        return None
    return content_text(run_output)


@dataclass(frozen=True, slots=True)
class RunCall:
    """One call's arguments: the originals (for a context extractor) and their texts."""

    raw_input: Any
    raw_output: Any
    input: str
    output: str
    expected_output: str | None


def is_run_object(value: Any) -> bool:
    """A Mastra run object: a mapping with an "output" (and usually an "input") key."""
    return isinstance(value, Mapping) and "output" in value


def resolve_call(
    run_input: Any, run_output: Any, expected_output: Any, *, single_argument: bool
) -> RunCall:
    """Texts for the judge from any accepted shape; `InputError` says what could not be read."""
    if single_argument:
        if not is_run_object(run_input):
            raise InputError(
                "run() got one argument: pass (input, output), or a run object "
                '{"input": ..., "output": ..., "groundTruth": ...}'
            )
        run = run_input
        unknown = set(run) - {"input", "output", *GROUND_TRUTH_KEYS, *RUN_OBJECT_EXTRA_KEYS}
        if unknown:
            listed = ", ".join(sorted(map(str, unknown)))
            raise InputError(f"run object has unknown key(s): {listed}")
        given = [key for key in GROUND_TRUTH_KEYS if run.get(key) is not None]
        if len(given) > 1:
            raise InputError(f"run object gives the reference twice: {', '.join(given)}")
        run_input, run_output = run.get("input"), run.get("output")
        if given:
            expected_output = run[given[0]]
    query = user_text(run_input)
    if query is None:
        raise InputError(
            f"cannot read the query from input of type {type(run_input).__name__}: give a "
            "string, a message list with a user message, or {inputMessages: [...]}"
        )
    if run_output is None:
        answer: str | None = ""
    else:
        answer = assistant_text(run_output)
    if answer is None:
        raise InputError(
            f"cannot read the answer from output of type {type(run_output).__name__}: give a "
            "string, a message list with an assistant message, or one assistant message"
        )
    reference: str | None = None
    if expected_output is not None:
        reference = content_text(expected_output)
        if reference is None:
            reference = assistant_text(expected_output)
        if reference is None:
            raise InputError(
                "expected_output (groundTruth) must be a string or a message, got "
                f"{type(expected_output).__name__}"
            )
    return RunCall(run_input, run_output, query, answer, reference)
