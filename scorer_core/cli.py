"""`ctxprec score` / `python -m scorer_core`: score one item given as JSON, from a file or stdin
(`{"input", "output", "expected_output", "context"}`; `query`, `contexts`, `expected_answer`
as aliases). Also every command's exit codes (docs/exit-codes.md) and `call_handler`, which
turns the project's errors into them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from scorer_core.capabilities import OFFLINE_JUDGE, capabilities_of
from scorer_core.errors import ConfigError, CtxPrecError, InputError
from scorer_core.judge_access import JudgeAccess
from scorer_core.protocols import Judge
from scorer_core.response_format import RESPONSE_FORMAT_SETTINGS, negotiation_summary
from scorer_core.scorer import create_context_precision_scorer
from scorer_core.scoring import REASON_MODES
from scorer_core.transports import TRANSPORTS
from scorer_core.types import ScoreResult

EXIT_OK = 0
EXIT_FAILED = 1  # the judge cannot work, the run failed or is over run.max_error_rate, storage
EXIT_USAGE = 2  # bad usage, configuration or input (argparse's own code for usage errors)
EXIT_NO_SCORE = 3  # `score` only: the item is unscored or failed

_ALIASES = {"query": "input", "contexts": "context", "expected_answer": "expected_output"}
_FIELDS = ("input", "output", "expected_output", "context")
CLI_OPTIONS = ("--model", "--api-base", "--api-key-env")
_USAGE_FIELDS = ("calls", "prompt_tokens", "completion_tokens", "retries", "reasks")


def add_score_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("item", nargs="?", help="JSON file with the item (default: stdin)")
    add("--model", default=OFFLINE_JUDGE, help="'lexical' or a litellm model string")
    add("--api-base", help="OpenAI-compatible server URL")
    add(
        "--api-key-env",
        help="name of the environment variable holding the API key (never the key itself; "
        "default: the provider's own, e.g. OPENAI_API_KEY, ANTHROPIC_API_KEY)",
    )
    add("--timeout", type=float, default=60.0, help="seconds per judge request")
    add(
        "--max-tokens",
        type=int,
        help="completion token cap per judge request (default: the server's)",
    )
    add(
        "--transport",
        choices=TRANSPORTS,
        default="auto",
        help="auto: the lean http client for openai/... models, litellm for other providers",
    )
    add(
        "--response-format",
        choices=RESPONSE_FORMAT_SETTINGS,
        default="auto",
        help="structured-output form; 'auto' steps down to what the server takes",
    )
    add("--scale", type=float, default=1.0, help="scores run from 0 to this (default: 1)")
    add(
        "--reason",
        choices=REASON_MODES,
        default="template",
        help="how the score is explained: llm (one more judge request), template (from the "
        "verdicts, no request) or none (default: template)",
    )
    add(
        "--contexts-per-call",
        type=int,
        default=16,
        help="contexts judged per request, the requests sent at once (default: 16)",
    )
    add("--json", action="store_true", help="print the result as JSON")


def read_item(source: TextIO, name: str) -> dict[str, Any]:
    """The item's fields from a JSON object, aliases resolved; InputError names the problem."""
    try:
        raw = json.loads(source.read())
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise InputError(f"{name}: expected a JSON object, got {type(raw).__name__}")
    item: dict[str, Any] = {_ALIASES.get(str(key), str(key)): value for key, value in raw.items()}
    unknown = sorted(set(item) - set(_FIELDS))
    if unknown:
        raise InputError(f"{name}: unknown field(s) {', '.join(unknown)}; use {', '.join(_FIELDS)}")
    for required in ("input", "output", "context"):
        if required not in item:
            raise InputError(f"{name}: missing field {required!r}")
    context = item["context"]
    if not isinstance(context, list) or not all(isinstance(text, str) for text in context):
        raise InputError(f"{name}: field 'context' must be a list of strings")
    if not context:
        raise InputError(f"{name}: field 'context' is empty")
    return item


def result_to_dict(
    result: ScoreResult, response_format: str | None, seconds: float
) -> dict[str, Any]:
    """The `--json` output: the result, what the judge spent on it and how long it took."""
    return {
        **{name: getattr(result, name) for name in ("score", "band", "status", "error", "reason")},
        "verdicts": [dataclasses.asdict(verdict) for verdict in result.verdicts],
        "judge_calls": result.usage.calls,
        "usage": {name: getattr(result.usage, name) for name in _USAGE_FIELDS},
        "seconds": round(seconds, 3),
        "response_format": response_format,
    }


def render(result: ScoreResult, response_format: str | None, seconds: float) -> str:
    score = result.score if result.score is not None else "-"
    band = f", {result.band}" if result.band else ""
    lines = [f"score:  {score} ({result.status}{band})"]
    if result.error:
        lines.append(f"error:  {result.error}")
    if result.reason:
        lines.append(f"reason: {result.reason}")
    if response_format:
        lines.append(f"response_format: {response_format}")
    usage = result.usage
    if usage.calls:
        lines.append(
            f"judge:  {usage.calls} call(s), {usage.prompt_tokens} prompt / "
            f"{usage.completion_tokens} completion tokens, {seconds:.1f} s"
        )
    if result.verdicts:
        lines.append("verdicts:")
        for verdict in result.verdicts:
            word = "yes" if verdict.relevant else "no"
            lines.append(f"  [{verdict.index}] {word:3}  {verdict.reason}")
    return "\n".join(lines)


def _judge_options(args: argparse.Namespace) -> dict[str, Any]:
    """The judge's options from the command line (none for the offline judge)."""
    if capabilities_of(args.model).offline:
        return {}
    if args.max_tokens is not None and args.max_tokens < 1:
        raise ConfigError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    access = JudgeAccess(
        model=args.model,
        api_base=args.api_base,
        transport=args.transport,
        key_env=args.api_key_env,
        options=CLI_OPTIONS,
    )
    access.check()  # as `run` does: before any call, not after the retries
    names = ("timeout", "transport", "response_format", "max_tokens")
    options = {name: getattr(args, name) for name in names}
    options |= {"api_base": args.api_base or None, "api_key": access.api_key()}
    return {name: value for name, value in options.items() if value is not None}


def run_score(args: argparse.Namespace) -> int:
    """The `score` command: `EXIT_OK` when the item is scored, else `EXIT_NO_SCORE`."""
    if args.item and args.item != "-":
        try:
            with open(args.item, encoding="utf-8") as handle:
                item = read_item(handle, args.item)
        except OSError as exc:
            raise InputError(f"{args.item}: cannot read ({exc.strerror})") from None
    else:
        item = read_item(sys.stdin, "stdin")
    scoring = {name: getattr(args, name) for name in ("scale", "reason", "contexts_per_call")}
    scorer = create_context_precision_scorer(
        args.model, context=item["context"], **scoring, **_judge_options(args)
    )
    started = time.monotonic()
    result = scorer.run(item["input"], item["output"], item.get("expected_output"))
    seconds = time.monotonic() - started
    form = _negotiated_form(scorer.judge)
    if args.json:
        print(json.dumps(result_to_dict(result, form, seconds), ensure_ascii=False))
    else:
        print(render(result, form, seconds))
    return EXIT_OK if result.status == "ok" else EXIT_NO_SCORE


def _negotiated_form(judge: Judge) -> str | None:
    """The structured-output form the judge's requests used, with the forms the endpoint
    refused and its answer ("json_object (json_schema rejected: ...)"); None for a judge that
    asks no chat model."""
    summary = negotiation_summary(judge)
    if summary is None:
        return None
    refusals = [f"{entry['form']} rejected: {entry['reason']}" for entry in summary["dropped"]]
    if not refusals:
        return str(summary["in_use"])
    return f"{summary['in_use']} ({'; '.join(refusals)})"


def call_handler(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command's handler; a project error is printed as one line and becomes its exit
    code (`EXIT_USAGE` or `EXIT_FAILED`); anything else is a bug and keeps its traceback."""
    try:
        return handler(args)
    except CtxPrecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ConfigError | InputError) else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m scorer_core [score] [item.json] [options]`: the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["score"]:
        args_list = args_list[1:]
    parser = argparse.ArgumentParser(
        prog="python -m scorer_core", description="Score one item's context precision."
    )
    add_score_arguments(parser)
    return call_handler(run_score, parser.parse_args(args_list))
