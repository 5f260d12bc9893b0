"""The documented `ctxprec run` command lines that run offline (the lexical judge) run fully.

tests/unit/test_docs_commands.py finds every command line of README.md and docs/*.md, parses
it and validates its config. Here those that run the job with the offline judge are run end
to end on the session's Ray, as written, except for where they read and write: their input is
a generated sample with the columns configs/local.yaml reads
and their output a temporary folder. A command the docs say fails must fail with exit 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import cli
from jobs.core.config import load_config
from jobs.tools.sample_data import generate, write_jsonl
from tests.unit.test_docs_commands import COMMANDS, ROOT, expand

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]


def offline_runs() -> list[tuple[str, list[str], bool]]:
    found = []
    for where, command, fails in COMMANDS:
        argv = expand(command)
        args = cli.build_parser().parse_args(argv[1:])
        if args.command != "run":
            continue
        try:
            config = load_config(ROOT / args.config, args.set)
        except Exception:
            found.append((where, argv, fails))  # a failure the docs show: run it too
            continue
        if config.judge.model == "lexical":
            found.append((where, argv, fails))
    return found


RUNS = offline_runs()


def test_some_documented_runs_are_offline() -> None:
    assert len(RUNS) >= 2


@pytest.mark.parametrize(("where", "argv", "fails"), RUNS, ids=[w for w, _, _ in RUNS])
def test_documented_offline_run(where: str, argv: list[str], fails: bool, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    write_jsonl(source, generate(60, seed=3))
    # where the documented command reads and writes, moved here (its other settings kept)
    moved = [*argv[1:], "--set", f"input.path={source}", "--set", f"output.path={tmp_path}/out"]
    config_arg = moved.index("--config") + 1
    moved[config_arg] = str(ROOT / moved[config_arg])
    code = cli.main(moved)
    assert code == (2 if fails else 0), where
    if not fails:
        assert list((tmp_path / "out").glob("scores/**/*.parquet")), where
