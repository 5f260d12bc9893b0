"""`ctxprec calibrate`: exact metrics on tiny labelled files, lexical and LLM (fake server)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from jobs.cli import build_parser, options_of
from jobs.cli import main as ctxprec
from jobs.core.config import load_config
from jobs.tools import sample_data
from jobs.tools.calibration import (
    Agreement,
    Calibration,
    ItemStatuses,
    LabelledItem,
    agreement,
    calibrate,
    load_labels,
)
from jobs.tools.tool_options import CalibrateOptions, ConfigSource
from scorer_core.metrics import kendall_tau_b, pearson, spearman
from scorer_core.types import ContextVerdict, ScoreResult, ScoringItem
from tests.fake_judge import FakeJudgeServer
from tests.support.fakes import JudgeFactory
from tests.support.job import lexical_flags
from tests.support.paths import REPO, SHARED_DATA

DATA_DIR = SHARED_DATA
KEY_VAR = "CTXPREC_TEST_CALIBRATE_KEY"
SECRET = "sk-calibrate-secret-0987654321"

# Three items, four contexts each. Judge verdicts J and human labels G:
#   A: J [1,0,1,0]  G [1,0,0,0]  -> tp 1, fp 1, tn 2   scores J 0.83, G 1.0
#   B: J [0,1,0,0]  G [0,1,1,0]  -> tp 1, fn 1, tn 2   scores J 0.5,  G 0.58
#   C: J [1,0,0,0]  G [1,0,0,0]  -> tp 1, tn 3         scores J 1.0,  G 1.0
# total tp 3, fp 1, fn 1, tn 7: precision = recall = F1 = 0.75;
# kappa = (10/12 - 5/9) / (1 - 5/9) = 0.625.
JUDGE = {"A": [1, 0, 1, 0], "B": [0, 1, 0, 0], "C": [1, 0, 0, 0]}
GOLD = {"A": [1, 0, 0, 0], "B": [0, 1, 1, 0], "C": [1, 0, 0, 0]}
JUDGE_SCORES = [0.83, 0.5, 1.0]
GOLD_SCORES = [1.0, 0.58, 1.0]
RETRIEVER = {"A": "sys-x", "B": "sys-x", "C": "sys-y"}

# Lexical-judge items whose verdicts are JUDGE (checked in the test before it is relied on).
LEXICAL_ITEMS = {
    "A": (
        "Which river flows through Velmora?",
        "Amberline",
        [
            "The Amberline river flows through Velmora, dividing its old town.",
            "Bakers sell bread on Tuesdays near the harbour.",
            "The Amberline river flows through Velmora past the mill.",
            "Glaciers carve valleys over millennia.",
        ],
    ),
    "B": (
        "Who founded the Quenbridge observatory?",
        "Ottilie Marsh",
        [
            "Penguins live in cold places.",
            "Ottilie Marsh founded the Quenbridge observatory in 1821.",
            "Copper conducts electricity well.",
            "Tides follow the moon.",
        ],
    ),
    "C": (
        "What is the weight of the Torvik kettle?",
        None,  # no reference: a retrieval-only item, judged against the query
        [
            "The Torvik kettle weighs 340 grams when empty.",
            "Rain fell all week in the valley.",
            "Snails move slowly across gardens.",
            "Maps show roads and rivers.",
        ],
    ),
}


def write_labels(path: Path, items: dict[str, tuple[str, str | None, list[str]]]) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for name, (query, answer, contexts) in items.items():
            row = {
                "row_id": f"row-{name}",
                "query_id": name,
                "query": query,
                "expected_answer": answer,
                "contexts": contexts,
                "relevance": GOLD[name],
                "retriever": RETRIEVER[name],
            }
            handle.write(json.dumps(row) + "\n")
    return path


def write_config(tmp_path: Path, judge: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"input: {{path: unused.jsonl}}\noutput: {{path: {tmp_path / 'out'}}}\njudge: {judge}\n",
        encoding="utf-8",
    )
    return path


def check_exact(result: Calibration | Agreement) -> None:
    ctx = result.per_context
    assert result.items == ItemStatuses(judged=3, ok=3, unscored=0, error=0, excluded=0)
    assert (ctx.tp, ctx.fp, ctx.fn, ctx.tn) == (3, 1, 1, 7)
    assert ctx.contexts == 12
    assert ctx.precision == pytest.approx(0.75)
    assert ctx.recall == pytest.approx(0.75)
    assert ctx.f1 == pytest.approx(0.75)
    assert ctx.cohen_kappa == pytest.approx(0.625)
    item = result.per_item
    assert item.items == 3
    assert item.pearson == pytest.approx(pearson(JUDGE_SCORES, GOLD_SCORES))
    assert item.spearman == pytest.approx(spearman(JUDGE_SCORES, GOLD_SCORES))
    assert item.mean_judge == pytest.approx(sum(JUDGE_SCORES) / 3)
    assert item.mean_labels == pytest.approx(sum(GOLD_SCORES) / 3)
    by_name = {r.retriever: r for r in result.retrievers}
    assert by_name["sys-x"].items == 2
    assert by_name["sys-x"].mean_judge == pytest.approx((0.83 + 0.5) / 2)
    assert by_name["sys-x"].mean_labels == pytest.approx((1.0 + 0.58) / 2)
    assert by_name["sys-y"].mean_judge == pytest.approx(1.0)
    assert result.retriever_kendall_tau_b == pytest.approx(1.0)  # both rank sys-y first


def per_context_row(text: str) -> list[str]:
    """The cells of the printed per-context Markdown table's row (the first "judge vs labels")."""
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[0] == "judge vs labels":
            return cells
    raise AssertionError(f"no per-context row in {text!r}")


def test_lexical_judge_metrics_are_exact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, (query, answer, contexts) in LEXICAL_ITEMS.items():
        item = ScoringItem(
            input=query, output=answer or "", contexts=tuple(contexts), expected_output=answer
        )
        assert lexical_flags(item) == [bool(v) for v in JUDGE[name]], name
    labels = write_labels(tmp_path / "labels.jsonl", LEXICAL_ITEMS)
    config = write_config(tmp_path, "{model: lexical}")
    result = calibrate(load_config(config), str(labels))
    check_exact(result)
    assert result.gold_rule == ("relevance > 0",)
    assert "none for 1 item(s) without one (retrieval-only" in result.judge_output
    assert result.response_format is None  # the offline judge negotiates nothing

    assert ctxprec(["calibrate", "--config", str(config), "--labels", str(labels)]) == 0
    text = capsys.readouterr().out
    assert per_context_row(text)[:2] == ["judge vs labels", "12"]
    assert "0.625" in text and "Kendall's tau-b" in text
    assert ctxprec(["calibrate", "--config", str(config), "--labels", str(labels), "--json"]) == 0
    # the JSON is the typed record, field for field: it reads back as the same result
    printed = Calibration.model_validate(json.loads(capsys.readouterr().out))
    check_exact(printed)
    assert printed.model_dump(exclude={"seconds"}) == result.model_dump(exclude={"seconds"})


@pytest.fixture
def server(fake_judge: JudgeFactory) -> FakeJudgeServer:
    """The fake judge, answering only requests with the key SECRET."""
    return fake_judge(require_api_key=SECRET)


def marked_items(verdicts: dict[str, list[int]]) -> dict[str, tuple[str, str | None, list[str]]]:
    """Contexts the fake judge answers `verdicts` for (it says yes to the word RELEVANT)."""
    return {
        name: (
            f"question {name}?",
            f"answer {name}" if name != "C" else None,
            [f"passage {name}{p} " + ("RELEVANT" if v else "other") for p, v in enumerate(flags)],
        )
        for name, flags in verdicts.items()
    }


def llm_config(tmp_path: Path, server: FakeJudgeServer, extra: str = "") -> Path:
    return write_config(
        tmp_path,
        f"{{model: openai/fake, api_base: '{server.url}', api_key_env: {KEY_VAR}, "
        f"contexts_per_call: 3, max_retries: 1, timeout_s: 10{extra}}}",
    )


def test_llm_judge_through_the_fake_server(
    tmp_path: Path,
    server: FakeJudgeServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY_VAR, SECRET)
    config = llm_config(tmp_path, server)
    # a judge that agrees with the labels perfectly
    labels = write_labels(tmp_path / "agree.jsonl", marked_items(GOLD))
    assert ctxprec(["calibrate", "--config", str(config), "--labels", str(labels), "--json"]) == 0
    output = capsys.readouterr().out
    assert SECRET not in output
    perfect = json.loads(output)
    ctx = perfect["per_context"]
    assert ctx["cohen_kappa"] == 1.0
    assert ctx["precision"] == ctx["recall"] == ctx["f1"] == 1.0
    assert perfect["per_item"]["pearson"] == pytest.approx(1.0)
    assert perfect["model"] == "openai/fake"
    # 4 contexts at 3 per call: 2 verdict requests per item, no reason requests; the same
    # again without a reason per verdict, which agrees as well here, with a shorter reply
    assert perfect["usage"]["calls"] == perfect["other_reasons"]["usage"]["calls"] == 6
    assert perfect["verdict_reasons"] is True
    assert perfect["other_reasons"]["per_context"]["cohen_kappa"] == 1.0
    other = perfect["other_reasons"]["usage"]["completion_tokens"]
    assert 0 < other < perfect["usage"]["completion_tokens"]
    stats = server.stats()
    assert stats["total_requests"] == 12
    assert stats["by_schema"] == {"context_precision_verdicts": 12}
    assert stats["authorization_headers"] == [f"Bearer {SECRET}"]  # the key was sent
    assert perfect["response_format"] == {
        "endpoint": server.url,
        "setting": "auto",
        "in_use": "json_schema",
        "confirmed": True,
        "dropped": [],
    }
    # Item C has no reference: it is judged against the query, and the request says so.
    prompts = [r["messages"][-1]["content"] for r in server.requests()[:6]]
    retrieval_only = [p for p in prompts if "retrieval-only" in p]
    assert len(retrieval_only) == 2 and all("question C?" in p for p in retrieval_only)
    assert not any("<output>" in p for p in retrieval_only)

    # a judge that disagrees exactly as in the table at the top of this file
    labels = write_labels(tmp_path / "known.jsonl", marked_items(JUDGE))
    check_exact(calibrate(load_config(config), str(labels)))


def test_the_form_a_server_without_json_schema_takes_is_reported(
    tmp_path: Path,
    fake_judge: JudgeFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY_VAR, SECRET)
    labels = write_labels(tmp_path / "agree.jsonl", marked_items(GOLD))
    llama_like = fake_judge(
        require_api_key=SECRET, accepted_response_formats={"json_object", "text"}
    )
    config = llm_config(tmp_path, llama_like)
    assert ctxprec(["calibrate", "--config", str(config), "--labels", str(labels)]) == 0
    assert llama_like.stats()["response_format_rejections"] == {"json_schema": 1}
    text = capsys.readouterr().out
    assert "structured output: json_object; json_schema rejected: " in text
    assert "validation error" in text
    # every item scored after the step down
    assert per_context_row(text)[:2] == ["judge vs labels", "12"]
    assert "| verdict_reasons: false " in text  # both settings measured, the config's first
    assert "judge usage (other setting): 6 calls" in text


def test_llm_judge_with_a_rate_limit_and_limit(
    tmp_path: Path, server: FakeJudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, SECRET)
    config = llm_config(tmp_path, server)
    labels = write_labels(tmp_path / "agree.jsonl", marked_items(GOLD))
    loaded = load_config(
        config, ["rate_limit.requests_per_minute=6000", "rate_limit.max_concurrency=2"]
    )
    result = calibrate(loaded, str(labels), limit=2)
    assert result.items.judged == 2
    assert result.rows.read == 2
    assert result.per_context.cohen_kappa == 1.0


def test_bad_key_stops_without_leaking_it(
    tmp_path: Path,
    server: FakeJudgeServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    wrong = "sk-wrong-key-112233"
    monkeypatch.setenv(KEY_VAR, wrong)
    config = llm_config(tmp_path, server)
    labels = write_labels(tmp_path / "agree.jsonl", marked_items(GOLD))
    # A refused key: the judge cannot work (exit 1, as for every ctxprec command).
    assert ctxprec(["calibrate", "--config", str(config), "--labels", str(labels)]) == 1
    captured = capsys.readouterr()
    assert "error:" in captured.err
    assert wrong not in captured.err + captured.out
    assert SECRET not in captured.err + captured.out

    # a hosted model with no key variable set fails before any call
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    hosted = write_config(tmp_path, "{model: openai/gpt-4o-mini}")
    assert ctxprec(["calibrate", "--config", str(hosted), "--labels", str(labels)]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err


def test_gold_rules_and_invalid_rows(tmp_path: Path) -> None:
    contexts = ["a", "b", "c", "d"]
    rows = [
        {"query": "q1", "contexts": contexts, "relevance": [0, 1, 2, 3]},
        {
            "query": "q2",
            "contexts": contexts,
            "relevance": [0, 1, 2, 3],
            "relevance_binary": [0, 0, 1, 1],
        },
        {"query": "q3", "contexts": contexts, "relevance": [0, 1]},  # wrong length
        {"query": "", "contexts": contexts, "relevance": [0, 0, 0, 0]},  # empty query
    ]
    path = tmp_path / "graded.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{not json\n\n", encoding="utf-8")
    config = load_config(write_config(tmp_path, "{model: lexical}"))
    default = load_labels(str(path), config)
    assert [i.gold for i in default.items] == [
        (False, True, True, True),
        (False, False, True, True),
    ]
    assert [i.rule for i in default.items] == ["relevance > 0", "relevance_binary"]
    assert default.rows_read == 5 and default.invalid == 3
    assert any("relevance has 2 labels for 4 contexts" in e for e in default.invalid_examples)
    assert default.items[0].item_id == "line 1"
    graded = load_labels(str(path), config, min_grade=2)
    assert [i.gold for i in graded.items] == [(False, False, True, True)] * 2
    assert load_labels(str(path), config, limit=1).rows_read == 1
    # the output given to the judge: expected_answer, else none (retrieval-only)
    assert default.items[0].item.output == ""
    assert default.items[0].item.expected_output is None


def test_make_runs_sample_calibrates_as_is_through_the_configs_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """configs/local.yaml names the sample's columns (question, contexts, ground_truth, id)."""
    sample = tmp_path / "sample.jsonl"
    assert sample_data.main(["--out", str(sample), "--items", "30"]) == 0
    local = yaml.safe_load((REPO / "configs" / "local.yaml").read_text())
    local["input"]["path"] = str(sample)
    config = tmp_path / "local.yaml"
    config.write_text(yaml.safe_dump(local))
    assert ctxprec(["calibrate", "--config", str(config), "--labels", str(sample), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["rows"]["invalid"] == 0 and found["items"]["ok"] == 30
    rows = [json.loads(line) for line in sample.read_text().splitlines()]
    loaded = load_labels(str(sample), load_config(config))
    assert [i.item_id for i in loaded.items] == [r["id"] for r in rows]
    assert [i.item.expected_output for i in loaded.items] == [r["ground_truth"] for r in rows]
    assert [i.item.input for i in loaded.items] == [r["question"] for r in rows]
    # a bad row names the config's column
    sample.write_text(json.dumps({**rows[0], "question": ""}) + "\n")
    assert (
        "question (the query) must be"
        in load_labels(str(sample), load_config(config)).invalid_examples[0]
    )


def test_unscored_and_error_items_are_excluded() -> None:
    def labelled(name: str, gold: list[int]) -> LabelledItem:
        item = ScoringItem(input=name, output=name, contexts=tuple("abcd"), expected_output=None)
        return LabelledItem(
            item_id=name,
            item=item,
            gold=tuple(bool(g) for g in gold),
            retriever=None,
            rule="relevance > 0",
        )

    def ok(flags: list[int]) -> ScoreResult:
        verdicts = tuple(ContextVerdict(p, bool(v)) for p, v in enumerate(flags))
        return ScoreResult(score=0.0, reason="", verdicts=verdicts)

    items = [labelled(n, GOLD[n]) for n in "ABC"] + [labelled("D", [1, 1, 1, 1])] * 2
    results = [ok(JUDGE[n]) for n in "ABC"] + [
        ScoreResult(score=None, reason="", verdicts=(), status="unscored", error="bad reply"),
        ScoreResult(score=None, reason="", verdicts=(), status="error", error="timeout"),
    ]
    report = agreement(items, results)
    assert report.items == ItemStatuses(judged=5, ok=3, unscored=1, error=1, excluded=2)
    assert report.per_context.contexts == 12
    assert report.per_context.cohen_kappa == pytest.approx(0.625)
    assert report.per_item.items == 3
    assert len(report.excluded_examples) == 2
    assert report.retrievers == () and report.retriever_kendall_tau_b is None
    assert kendall_tau_b([1.0, 2.0], [1.0, 2.0]) == 1.0


def test_ctxprec_calibrate_parses_the_options_as_the_tool_reads_them() -> None:
    args = build_parser().parse_args(
        [
            "calibrate",
            "--config",
            "c.yaml",
            "--labels",
            "l.jsonl",
            "--limit",
            "5",
            "--min-grade",
            "2",
        ]
    )
    assert options_of(CalibrateOptions, args) == CalibrateOptions(
        config=ConfigSource("c.yaml"), labels="l.jsonl", limit=5, min_grade=2.0
    )


@pytest.mark.parametrize("name", ["hotpotqa_ctxprec.jsonl", "trecdl_passage_ctxprec.jsonl"])
def test_shared_human_labels(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = DATA_DIR / name
    if not path.exists():
        pytest.skip(f"{path} is not available")
    config = write_config(tmp_path, "{model: lexical}")
    assert (
        ctxprec(
            ["calibrate", "--config", str(config), "--labels", str(path), "--limit", "50", "--json"]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["items"]["judged"] == result["items"]["ok"] == 50
    assert result["rows"]["invalid"] == 0
    assert 250 <= result["per_context"]["contexts"] <= 500
    assert result["per_context"]["cohen_kappa"] is not None
    assert -1.0 <= result["per_context"]["cohen_kappa"] <= 1.0
    if name.startswith("trec"):
        assert result["gold_rule"] == ["relevance_binary"]
        assert result["retrievers"]  # the TREC file names its retrievers
    else:
        assert result["gold_rule"] == ["relevance > 0"]
        assert result["per_context"]["cohen_kappa"] > 0.2  # lexical overlap does find gold
