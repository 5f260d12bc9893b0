"""Mastra's context-precision scorer tests (its index.test.ts), translated to our API, plus the
call shapes and options Mastra users bring. Every run goes over real HTTP to the fake judge,
whose verdict function plays the part Mastra's tests give to a mocked analyze step."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from scorer_core import (
    ConfigError,
    InputError,
    context_precision,
    create_context_precision_scorer,
    score_band,
)
from scorer_core.scorer import ContextPrecisionScorer
from scorer_core.types import ScoreResult
from tests.fake_judge import FakeJudgeServer
from tests.support.fakes import JudgeFactory, RecordingSleep

pytestmark = pytest.mark.timeout(120)

MODEL = "openai/gpt-4o-mini"
TEXT_PART = {"type": "text", "text": "Which letters?"}
MASTRA_DESCRIPTION = (
    "A scorer that evaluates the relevance and precision of retrieved context nodes for "
    "generating expected outputs"
)


def relevant_if_marked(context: str, query: str) -> bool:
    """Mastra's tests mock the verdicts; here the contexts carry them: "(yes)" is relevant."""
    return context.endswith("(yes)")


@pytest.fixture
def mastra(fake_judge: JudgeFactory) -> FakeJudgeServer:
    """The fake judge, answering as Mastra's tests' mocked analyze step would."""
    return fake_judge(verdict_fn=relevant_if_marked)


def scorer(server: FakeJudgeServer, options: dict[str, Any]) -> ContextPrecisionScorer:
    """Mastra's call: createContextPrecisionScorer({model, options}), pointed at the fake."""
    return create_context_precision_scorer(
        {"model": MODEL, "options": options},
        api_base=server.url,
        sleep=RecordingSleep(),
    )


def message(id: str, role: str, content: str) -> dict[str, Any]:
    """Mastra's createTestMessage: a stored message with text parts."""
    return {
        "id": id,
        "role": role,
        "content": {"format": 2, "parts": [{"type": "text", "text": content}], "content": content},
        "createdAt": "2026-11-30T00:00:00Z",
    }


def agent_run(query: str, answer: str) -> dict[str, Any]:
    """Mastra's createAgentTestRun: a single run object with an agent's input and output."""
    return {
        "input": {
            "inputMessages": [message("1", "user", query)],
            "rememberedMessages": [],
            "systemMessages": [],
            "taggedSystemMessages": {},
        },
        "output": [message("2", "assistant", answer)],
    }


PHOTOSYNTHESIS = (
    "What is photosynthesis?",
    "Photosynthesis is the process by which plants convert sunlight into energy.",
)
EXERCISE = (
    "What are the benefits of exercise?",
    "Regular exercise improves cardiovascular health and mental wellbeing.",
)


def scored_with(
    server: FakeJudgeServer, contexts: list[str], reason: str, query_answer: tuple[str, str]
) -> ScoreResult:
    """Mastra's cases that differ only in their contexts: scale 1, one agent run."""
    options = {"context": contexts, "scale": 1, "reason": reason}
    return scorer(server, options).run(agent_run(*query_answer))


# ----------------------------------------------------------------------------------------------
# index.test.ts, case by case


def test_throws_when_no_context_is_provided() -> None:
    with pytest.raises(ConfigError, match=r"either context=.* or context_extractor"):
        create_context_precision_scorer({"model": MODEL, "options": {}})


def test_throws_when_context_array_is_empty() -> None:
    with pytest.raises(ConfigError, match="cannot be empty if provided"):
        create_context_precision_scorer({"model": MODEL, "options": {"context": []}})


def test_creates_a_scorer_with_proper_configuration() -> None:
    created = create_context_precision_scorer(
        {"model": MODEL, "options": {"context": ["Test context 1", "Test context 2"], "scale": 1}}
    )
    assert created.id == "context-precision-scorer"
    assert created.name == "Context Precision Scorer"
    assert created.description == MASTRA_DESCRIPTION


def test_creates_a_scorer_with_a_context_extractor() -> None:
    created = create_context_precision_scorer(
        {
            "model": MODEL,
            "options": {
                "contextExtractor": lambda i, o: ["Dynamic context 1", "Dynamic context 2"],
                "scale": 1,
            },
        }
    )
    assert created.id == "context-precision-scorer"
    assert created.name == "Context Precision Scorer"


@pytest.mark.parametrize("reason", ["llm", "template"])
def test_perfect_context_precision(mastra: FakeJudgeServer, reason: str) -> None:
    contexts = [
        "Photosynthesis is a biological process used by plants to create energy from "
        "sunlight. (yes)",
        "The process of photosynthesis produces oxygen as a byproduct. (yes)",
    ]
    result = scored_with(mastra, contexts, reason, PHOTOSYNTHESIS)
    assert result.score == 1.0
    assert result.reason.startswith("The score is 1 because")
    assert result.band == "excellent"
    sent = mastra.requests()[0]["messages"][-1]["content"]
    assert '"What is photosynthesis?"' in sent
    assert '"Photosynthesis is the process by which plants convert sunlight' in sent


@pytest.mark.parametrize("reason", ["llm", "template"])
def test_mixed_context_relevance(mastra: FakeJudgeServer, reason: str) -> None:
    contexts = [
        "Exercise strengthens the heart and improves blood circulation. (yes)",
        "A balanced diet is important for health.",
        "Regular physical activity reduces stress and anxiety. (yes)",
        "Exercise equipment can be expensive.",
    ]
    result = scored_with(mastra, contexts, reason, EXERCISE)
    # (1/1 + 2/3) / 2 = 0.8333..., rounded to 0.83
    assert result.score == pytest.approx(0.83, abs=0.005)
    assert result.score == 0.83
    assert result.reason.startswith("The score is 0.83 because")
    assert [v["verdict"] for v in result.to_dict()["analyzeStepResult"]["verdicts"]] == [
        "yes",
        "no",
        "yes",
        "no",
    ]


@pytest.mark.parametrize("reason", ["llm", "template"])
def test_no_relevant_context(mastra: FakeJudgeServer, reason: str) -> None:
    contexts = [
        "The weather is sunny today.",
        "Cats are popular pets.",
        "Coffee is a popular beverage.",
    ]
    result = scored_with(mastra, contexts, reason, EXERCISE)
    assert result.score == 0
    assert result.reason.startswith("The score is 0 because")
    assert result.band == "none"


def test_respects_a_custom_scale(mastra: FakeJudgeServer) -> None:
    result = scorer(
        mastra,
        {
            "context": [
                "Photosynthesis converts sunlight to energy. (yes)",
                "Plants produce oxygen through photosynthesis. (yes)",
            ],
            "scale": 10,
            "reason": "llm",
        },
    ).run(
        agent_run("What is photosynthesis?", "Photosynthesis converts sunlight to energy."),
    )
    assert result.score == 10.0
    assert result.reason.startswith("The score is 10 because")
    assert "10 out of 10" in (result.reason_prompt or "")


def test_preserves_scale_0(mastra: FakeJudgeServer) -> None:
    result = scorer(
        mastra, {"context": ["Photosynthesis converts sunlight to energy. (yes)"], "scale": 0}
    ).run("What is photosynthesis?", "It converts sunlight.")
    assert [v.relevant for v in result.verdicts] == [True]
    assert result.score == 0
    assert context_precision([True], 0) == 0


def test_empty_analyze_results_score_0() -> None:
    assert context_precision([]) == 0
    assert context_precision([], 10) == 0


# ----------------------------------------------------------------------------------------------
# call shapes


@pytest.mark.parametrize(
    ("run_input", "run_output"),
    [
        ("Which letters?", "alpha and gamma"),
        (
            [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "Which letters?"},
            ],
            [{"role": "assistant", "content": "alpha and gamma"}],
        ),
        (
            {"inputMessages": [{"role": "user", "content": "Which letters?"}]},
            {"role": "assistant", "content": "alpha and gamma"},
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "Which letters?"}]}
                ]
            },
            {"text": "alpha and gamma"},
        ),
        (
            [
                {"role": "user", "content": "Which letters?"},
                {"role": "user", "content": "second question"},
            ],
            [
                {"role": "assistant", "content": "alpha and gamma"},
                {"role": "assistant", "content": "later answer"},
            ],
        ),
    ],
)
def test_every_shape_reaches_the_judge_as_the_same_strings(
    mastra: FakeJudgeServer, run_input: Any, run_output: Any
) -> None:
    created = scorer(mastra, {"context": ["alpha (yes)", "beta"], "reason": "none"})
    assert created.run(run_input, run_output).score == 1.0
    sent = mastra.requests()[-1]["messages"][-1]["content"]
    assert '<query>\n"Which letters?"\n</query>' in sent
    assert '<output>\n"alpha and gamma"\n</output>' in sent


def test_a_single_run_object_with_ground_truth(mastra: FakeJudgeServer) -> None:
    created = scorer(mastra, {"context": ["alpha (yes)", "beta"], "reason": "none"})
    run = {"input": "Which letters?", "output": "alpha", "groundTruth": "alpha only"}
    assert created.run(run).score == 1.0
    created.run("Which letters?", "alpha", groundTruth="alpha only")
    first, second = (body["messages"][-1]["content"] for body in mastra.requests())
    assert first == second
    assert '<reference_answer>\n"alpha only"\n</reference_answer>' in first


def test_the_extractor_sees_what_the_caller_passed(mastra: FakeJudgeServer) -> None:
    seen: list[tuple[Any, Any]] = []

    def extractor(run_input: Any, run_output: Any) -> list[str]:
        seen.append((run_input, run_output))
        return ["from the extractor (yes)"]

    created = scorer(mastra, {"contextExtractor": extractor, "reason": "none"})
    run = agent_run("q", "a")
    created.run(run)
    created.run("plain q", "plain a")
    assert seen == [(run["input"], run["output"]), ("plain q", "plain a")]


def test_unreadable_shapes_say_what_is_wrong() -> None:
    created = create_context_precision_scorer("lexical", context=["a"])
    with pytest.raises(InputError, match="cannot read the query"):
        created.run({"inputMessages": [{"role": "assistant", "content": "x"}]}, "out")
    with pytest.raises(InputError, match="cannot read the answer"):
        created.run("q", [{"role": "user", "content": "not an answer"}])
    with pytest.raises(InputError, match="run object"):
        created.run("just one string")
    with pytest.raises(InputError, match="unknown key"):
        created.run({"input": "q", "output": "o", "expected": "typo"})
    with pytest.raises(ConfigError, match="unknown keyword 'ground'"):
        created.run("q", "o", ground="x")


# ----------------------------------------------------------------------------------------------
# options


def test_options_dict_and_camel_case_are_honoured(mastra: FakeJudgeServer) -> None:
    created = create_context_precision_scorer(
        MODEL,
        options={"contextExtractor": lambda i, o: ["x (yes)", "y"], "scale": 10},
        apiBase=mastra.url,
        contextsPerCall=1,
        reason="none",
    )
    result = created.run("q", "o")
    assert result.score == 10.0 and created.settings.scale == 10
    assert mastra.stats()["total_requests"] == 2  # one context per call


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"context": ["a"], "contextExtractr": len}, "unknown option contextExtractr"),
        ({"context": ["a"], "options": {"scael": 2}}, "unknown option scael"),
        ({"context": ["a"], "top_p": 0.5}, "unknown option top_p"),
        ({"context": ["a"], "options": {"scale": 2}, "scale": 3}, "'scale' is given twice"),
        (
            {"options": {"context": ["a"], "contextExtractor": len, "context_extractor": len}},
            "twice",
        ),
        (
            {"context": ["a"], "transport": "litellm", "max_connections": 4},
            "does not apply to transport 'litellm'",
        ),
    ],
)
def test_unknown_or_repeated_options_are_config_errors(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        create_context_precision_scorer(MODEL, **kwargs)


def test_lexical_judge_options_are_checked_too() -> None:
    with pytest.raises(ConfigError, match="unknown option api_base for the lexical judge"):
        create_context_precision_scorer("lexical", context=["a"], api_base="http://x")
    assert create_context_precision_scorer("lexical", context=["a"], threshold=0.3)


def test_scale_none_means_1() -> None:
    assert create_context_precision_scorer("lexical", context=["a"], scale=None).settings.scale == 1
    assert context_precision([True, False, True], None) == context_precision([True, False, True])


# ----------------------------------------------------------------------------------------------
# results, retrieval-only items, bands


def test_to_dict_has_mastras_shape_and_the_prompts_sent(mastra: FakeJudgeServer) -> None:
    created = scorer(mastra, {"context": ["alpha (yes)", "beta", "gamma (yes)"], "reason": "llm"})
    result = created.run("q", "o")
    data = result.to_dict()
    assert data["score"] == 0.83 and data["band"] == "good" and data["status"] == "ok"
    assert data["analyzeStepResult"]["verdicts"] == [
        {"context_index": 0, "verdict": "yes", "reason": "Context 0 is useful here."},
        {"context_index": 1, "verdict": "no", "reason": "Context 1 is not useful here."},
        {"context_index": 2, "verdict": "yes", "reason": "Context 2 is useful here."},
    ]
    verdict_request, reason_request = mastra.requests()
    assert data["analyzePrompt"] == verdict_request["messages"][-1]["content"]
    assert data["generateReasonPrompt"] == reason_request["messages"][-1]["content"]
    reason_prompt = data["generateReasonPrompt"]
    assert '[2] "gamma (yes)"' in reason_prompt  # the contexts
    assert "0.83 out of 1" in reason_prompt  # the score out of the scale
    assert '[1] no: "Context 1 is not useful here."' in reason_prompt  # the verdicts
    assert data["reason"].startswith("The score is 0.83 because")


def test_retrieval_only_items_are_judged_against_the_query(mastra: FakeJudgeServer) -> None:
    created = scorer(mastra, {"context": ["passage (yes)", "other"], "reason": "template"})
    result = created.run("what is a passage?", "")
    assert result.status == "ok" and result.score == 1.0
    sent = mastra.requests()[0]["messages"][-1]["content"]
    assert "<output>" not in sent and "<reference_answer>" not in sent
    assert "retrieval-only" in sent and "against the query itself" in sent
    mastra.reset_stats()
    created.run({"input": "what is a passage?", "output": None})
    assert "retrieval-only" in mastra.requests()[0]["messages"][-1]["content"]


@pytest.mark.parametrize(
    ("score", "scale", "band"),
    [
        (0.0, 1, "none"),
        (0.01, 1, "low"),
        (0.34, 1, "low"),
        (0.35, 1, "moderate"),
        (0.64, 1, "moderate"),
        (0.65, 1, "good"),
        (0.84, 1, "good"),
        (0.85, 1, "excellent"),
        (1.0, 1, "excellent"),
        (8.5, 10, "excellent"),
        (3.5, 10, "moderate"),
        (0.0, 0, "none"),
    ],
)
def test_bands(score: float, scale: float, band: str) -> None:
    assert score_band(score, scale) == band


def test_arun_accepts_the_same_shapes(mastra: FakeJudgeServer) -> None:
    created = scorer(mastra, {"context": ["alpha (yes)"], "reason": "none"})

    async def inside() -> float | None:
        result = await created.arun(agent_run("q", "a"))
        return result.score

    assert asyncio.run(inside()) == 1.0
