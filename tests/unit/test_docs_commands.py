"""Every command line the README and docs/*.md show works as shown.

The command lines are found generically, so that the test follows the docs as they are
rewritten: in every fenced code block of README.md and docs/*.md, a line (backslash
continuations joined) running `ctxprec ...` or `python -m jobs.context_precision ...` (after
any path, environment assignments or `ray job submit ... --`). Each is expanded as a shell
would (only `$(date ...)` substitutions are allowed), parsed by the real CLI parser, and its
config (if it names one) loaded and validated with its `--set` overrides and checked as the
driver checks it before Ray starts. The ones that run offline in a moment (`ctxprec score`
with the lexical judge on a file in the repo, `--help`) run fully.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import subprocess
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from jobs import cli
from jobs.core.config import load_config
from jobs.run.factory import check_judge_settings
from scorer_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_COMMAND = re.compile(
    r"""(?:^|[\s"'])(?:[^\s"']*/)?(ctxprec|python["']?\s+-m\s+jobs\.context_precision)(\s.*)?$"""
)
_SUBSTITUTION = re.compile(r"\$\(([^)]*)\)")
# A synopsis's optional part, "[--set dotted.key=value ...]": not a literal argument.
_OPTIONAL = re.compile(r"\s\[-[^\]]*\]")
# Where the command's own words end: a redirection or a pipe ("--json > gate.json").
_SHELL_TAIL = re.compile(r"\s(?:\d?>>?|<|\|)(?:\s.*)?$")


_SAYS_FAILS = re.compile(r"\b(fail|fails|failed|exit(s)? [12]|error)\b", re.IGNORECASE)


def documented_commands() -> list[tuple[str, str, bool]]:
    """(where, command line from the program on, whether the docs say it fails) of every
    documented command line. A command fails by the docs when a comment line between the
    previous command and it says so ("the job FAILS", "exit 2", "error")."""
    found: list[tuple[str, str, bool]] = []
    for doc in DOCS:
        in_block, pending, start, comments = False, "", 0, ""
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                in_block, pending, comments = not in_block, "", ""
                continue
            if not in_block:
                continue
            if line.lstrip().startswith("#"):
                comments += line
                continue
            if not pending:
                start = number
            text = f"{pending} {line.strip()}" if pending else line.strip()
            if text.endswith("\\"):
                pending = text[:-1]
                continue
            pending = ""
            match = _COMMAND.search(text)
            if match:
                program = "ctxprec" if match.group(1) == "ctxprec" else "ctxprec run"
                fails = bool(_SAYS_FAILS.search(comments))
                found.append((f"{doc.name}:{start}", f"{program}{match.group(2) or ''}", fails))
                comments = ""
    return found


def expand(command: str) -> list[str]:
    """The argv a shell gives the command (comments and synopsis brackets dropped)."""
    command = _SHELL_TAIL.sub("", _OPTIONAL.sub("", command))
    for inner in _SUBSTITUTION.findall(command):
        assert inner.split()[:1] == ["date"], f"only $(date ...) is expanded here: $({inner})"
    words = shlex.split(command, comments=True)
    if not any("$" in word for word in words):
        return words
    script = "set -f; printf '%s\\0' " + command.split("#", 1)[0]
    env = {"PATH": os.environ["PATH"], "PWD": str(ROOT), "T": "/tmp/ctxprec-docs", "HOME": "/tmp"}
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True, env=env, cwd=ROOT
    )
    return done.stdout.split("\0")[:-1]


COMMANDS = documented_commands()


def test_the_docs_show_commands() -> None:
    # the search itself must find the documented nightly command
    assert any("run.id=" in command for _, command, _ in COMMANDS), COMMANDS
    assert len(COMMANDS) >= 5


@pytest.mark.parametrize(("where", "command", "fails"), COMMANDS, ids=[w for w, _, _ in COMMANDS])
def test_documented_command(where: str, command: str, fails: bool) -> None:
    argv = expand(command)
    assert argv[0] == "ctxprec", (where, argv)
    try:
        args = cli.build_parser().parse_args(argv[1:])
    except SystemExit as exc:  # argparse's usage error
        pytest.fail(f"{where}: {command!r} does not parse (exit {exc.code})")
    if getattr(args, "config", None):
        try:
            config = load_config(ROOT / args.config, args.set)
            check_judge_settings(config)
        except ConfigError as exc:
            # a failure the docs show must be a config error naming the key, never a traceback
            assert fails, f"{where}: {command!r}: {exc}"
            return
        assert not fails, f"{where}: the docs say {command!r} fails; its config is valid"
    if args.command == "score" and args.model == "lexical" and args.item:
        item = ROOT / args.item
        if item.exists():
            out = io.StringIO()
            with redirect_stdout(out):
                assert cli.main([*argv[1:2], str(item), *argv[3:]]) == 0, where
            assert out.getvalue().strip(), where
