"""Start-up guards (jobs.engine.guards, jobs.inputs.columns): refused before Ray starts, exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from jobs import cli
from jobs.core.config import JobConfig, parse_config
from jobs.engine.guards import check_paths_apart
from jobs.inputs import list_input_files
from jobs.inputs.columns import check_every_file
from jobs.run.factory import check_judge_settings
from jobs.run.job import run_job
from scorer_core.errors import ConfigError, InputError
from tests.support.inputs import item, spec_for, write_jsonl, write_parquet
from tests.support.job import raw_config


def config(source: Path | str, out: Path | str, **sections: object) -> JobConfig:
    return parse_config(raw_config(source, out, **sections))


def run_cli(tmp_path: Path, raw: dict[str, object], capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert cli.main(["run", "--config", str(path)]) == 2
    return capsys.readouterr().err


# the columns of tests.support.inputs.item
COLUMNS = {
    "query_id": "query_id",
    "input": "input",
    "output": "output",
    "context": "context",
    "expected_output": None,
}


# -- output inside input, input inside output -------------------------------------------------


def test_output_inside_the_input_folder_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", [item(1)])
    with pytest.raises(ConfigError, match=r"output.path .* is inside input.path"):
        check_paths_apart(config(data, data))
    with pytest.raises(ConfigError, match=r"output.path .* is inside input.path"):
        check_paths_apart(config(data, data / "results"))
    with pytest.raises(ConfigError, match=r"cache.path"):
        check_paths_apart(config(data, tmp_path / "out", cache={"path": str(data / "cache")}))
    # a glob over the folder: no listing rule skips the output
    with pytest.raises(ConfigError, match=r"inside input.path"):
        check_paths_apart(config(f"{data}/**/*.jsonl", data / "results"))


def test_output_under_a_folder_the_listing_skips_is_allowed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", [item(1)])
    check_paths_apart(config(data, data / "_results"))
    check_paths_apart(config(data, data / ".out" / "x"))
    check_paths_apart(config(data / "a.jsonl", tmp_path / "out"))
    check_paths_apart(config(data, tmp_path / "data2"))  # a prefix only


def test_input_inside_the_output_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "scores").mkdir(parents=True)
    write_jsonl(out / "scores" / "a.jsonl", [item(1)])
    with pytest.raises(ConfigError, match=r"input.path .* is inside output.path"):
        check_paths_apart(config(out / "scores", out))
    with pytest.raises(ConfigError, match=r"inside output.path"):
        check_paths_apart(config(out / "scores" / "a.jsonl", out))
    # one file right at the output's root: the job writes only into folders there
    write_jsonl(out / "in.jsonl", [item(1)])
    check_paths_apart(config(out / "in.jsonl", out))


def test_remote_paths_compare_by_bucket_and_endpoint() -> None:
    same = parse_config({"input": {"path": "s3://b/data/"}, "output": {"path": "s3a://b/data/out"}})
    with pytest.raises(ConfigError, match=r"inside input.path"):
        check_paths_apart(same)
    other_endpoint = parse_config(
        {
            "input": {"path": "s3://b/data/", "storage_options": {"endpoint_url": "http://a"}},
            "output": {"path": "s3://b/data/out", "storage_options": {"endpoint_url": "http://b"}},
        }
    )
    check_paths_apart(other_endpoint)


def test_the_driver_refuses_output_in_input_with_exit_2_before_ray(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", [item(1)])
    raw = raw_config(data, data, input={"columns": COLUMNS})
    assert "is inside input.path" in run_cli(tmp_path, raw, capsys)


# -- every input file's schema and format ------------------------------------------------------


def test_a_later_jsonl_file_missing_a_column_is_named(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [item(1), item(2)])
    bad = item(3)
    del bad["context"]
    write_jsonl(tmp_path / "b.jsonl", [bad])
    spec = spec_for(tmp_path)
    with pytest.raises(InputError, match=r"'context' \(context\) missing in .*b\.jsonl"):
        check_every_file(spec, list_input_files(spec))


def test_a_later_parquet_file_missing_a_column_is_named(tmp_path: Path) -> None:
    write_parquet(tmp_path / "a.parquet", [item(1)], 10)
    write_parquet(tmp_path / "b.parquet", [{"query_id": "q", "input": "x", "output": "y"}], 10)
    spec = spec_for(tmp_path)
    with pytest.raises(InputError, match=r"missing in .*b\.parquet"):
        check_every_file(spec, list_input_files(spec))


def test_a_file_of_another_format_is_refused_by_name(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [item(1)])
    write_parquet(tmp_path / "b.parquet", [item(2)], 10)
    spec = spec_for(tmp_path, format="jsonl")
    with pytest.raises(InputError, match=r"b\.parquet is a parquet file by its suffix"):
        check_every_file(spec, list_input_files(spec))
    # the same by its content, whatever its name
    (tmp_path / "b.parquet").rename(tmp_path / "b.data")
    spec = spec_for(tmp_path / "*", format="jsonl")
    with pytest.raises(InputError, match=r"b\.data is a Parquet file"):
        check_every_file(spec, list_input_files(spec))


def test_a_file_name_that_is_not_utf8_is_refused_by_name(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [item(1)])
    bad = os.fsencode(tmp_path) + b"/b\xff.jsonl"
    with open(bad, "w") as handle:
        handle.write('{"query_id": "q", "input": "x", "output": "", "context": ["c"]}\n')
    spec = spec_for(tmp_path)
    with pytest.raises(InputError, match=r"b\\udcff\.jsonl: the file name is not valid UTF-8"):
        check_every_file(spec, list_input_files(spec))


def test_good_files_pass(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [item(1)])
    write_jsonl(tmp_path / "b.jsonl", [item(2)])
    (tmp_path / "c.jsonl").write_text("")
    spec = spec_for(tmp_path)
    check_every_file(spec, list_input_files(spec))


def test_the_driver_checks_every_file_before_judging(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", [item(1)])
    bad = item(2)
    del bad["input"]
    write_jsonl(data / "b.jsonl", [bad])
    raw = raw_config(data, tmp_path / "out", input={"columns": COLUMNS})
    with pytest.raises(InputError, match=r"b\.jsonl"):
        run_job(parse_config(raw))


# -- the judge's settings -----------------------------------------------------------------------


def test_a_model_litellm_cannot_route_is_refused() -> None:
    raw = {"input": {"path": "x.jsonl"}, "judge": {"model": "gpt4-judge-nonsense"}}
    with pytest.raises(ConfigError, match=r"judge.model: litellm cannot route"):
        check_judge_settings(parse_config(raw))
    check_judge_settings(
        parse_config({"input": {"path": "x.jsonl"}, "judge": {"model": "openai/j"}})
    )
    check_judge_settings(
        parse_config({"input": {"path": "x.jsonl"}, "judge": {"model": "anthropic/claude-x"}})
    )
