"""The typed judge spec (`JudgeSpec`, `build_judge`), the free `score_item` function and judge
capabilities: a spec builds the judge `make_judge` builds from the same options, over real
HTTP to the fake judge, and `score_item` scores exactly as the library's scorer does."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from scorer_core import (
    ConfigError,
    JudgeSpec,
    ScoringItem,
    build_judge,
    capabilities_of,
    context_precision,
    create_context_precision_scorer,
    make_judge,
    score_item,
)
from scorer_core.capabilities import LLM_CAPABILITIES, OFFLINE_CAPABILITIES
from scorer_core.judge import JudgeRuntime, LLMJudge
from scorer_core.lexical import LexicalJudge
from scorer_core.litellm_client import LiteLLMClient
from scorer_core.openai_http import OpenAIHTTPClient
from scorer_core.scoring import ScoringSettings
from scorer_core.types import ReasonMode
from tests.fake_judge import FakeJudgeServer
from tests.support.fakes import RecordingSleep

MODEL = "openai/fake-judge"
ITEM = ScoringItem(
    input="which letters?",
    output="alpha and gamma",
    contexts=("alpha RELEVANT", "beta", "gamma RELEVANT", "delta", "eps RELEVANT"),
)


def test_the_api_key_is_never_in_the_specs_repr() -> None:
    spec = JudgeSpec(model=MODEL, api_key="sk-secret-value")
    assert "sk-secret-value" not in repr(spec)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.model = "other"  # type: ignore[misc]


def test_transport_auto_is_chosen_by_the_options_only_one_client_takes() -> None:
    assert JudgeSpec(model=MODEL).resolved_transport() == "http"
    assert JudgeSpec(model=MODEL, request_options={"top_p": 1}).resolved_transport() == "litellm"
    assert JudgeSpec(model="anthropic/x").resolved_transport() == "litellm"
    assert JudgeSpec(model="anthropic/x", max_connections=4).resolved_transport() == "http"
    assert isinstance(build_judge(JudgeSpec(model=MODEL))._client, OpenAIHTTPClient)  # type: ignore[attr-defined]
    litellm = build_judge(JudgeSpec(model=MODEL, transport="litellm"))
    assert isinstance(litellm._client, LiteLLMClient)  # type: ignore[attr-defined]


def test_a_spec_is_checked_as_make_judge_checks_options() -> None:
    with pytest.raises(ConfigError, match="request_options does not apply to transport 'http'"):
        build_judge(JudgeSpec(model=MODEL, transport="http", request_options={"top_p": 1}))
    with pytest.raises(ConfigError, match="unknown option colour for the lexical judge"):
        build_judge(JudgeSpec(model="lexical", lexical={"colour": 1}))
    with pytest.raises(ConfigError, match="lexical options apply to the lexical judge only"):
        build_judge(JudgeSpec(model=MODEL, lexical={"threshold": 0.3}))
    with pytest.raises(ConfigError, match="response_format must be one of"):
        build_judge(JudgeSpec(model=MODEL, response_format="xml"))
    with pytest.raises(ConfigError, match="transport must be one of"):
        build_judge(JudgeSpec(model=MODEL, transport="grpc"))


def test_the_offline_spec_builds_the_lexical_judge_with_its_options() -> None:
    judge = build_judge(JudgeSpec(model="lexical", lexical={"threshold": 0.3}))
    assert isinstance(judge, LexicalJudge) and judge.threshold == 0.3
    assert repr(judge) == repr(make_judge("lexical", threshold=0.3))


def test_judges_say_what_they_can_do() -> None:
    offline = make_judge("lexical")
    online = make_judge(MODEL)
    assert offline.capabilities is OFFLINE_CAPABILITIES and offline.asker is None
    assert online.capabilities is LLM_CAPABILITIES
    asker = online.asker
    assert asker is not None and asker.transport == "http"
    assert asker.response_format.setting == "auto"
    # What has only a model string asks capabilities_of; a spec asks it for its model.
    assert capabilities_of("lexical") is OFFLINE_CAPABILITIES
    assert capabilities_of(MODEL) is LLM_CAPABILITIES
    assert JudgeSpec(model="lexical").capabilities.offline


def test_spec_and_make_judge_send_the_same_requests() -> None:
    """The same options as keywords or as a spec: byte-for-byte the same request bodies."""
    bodies = []
    for build in ("make_judge", "spec"):
        with FakeJudgeServer() as server:
            options = {"api_base": server.url, "timeout": 5.0, "max_tokens": 300, "scale": 10.0}
            if build == "make_judge":
                judge = make_judge(MODEL, sleep=RecordingSleep(), **options)
            else:
                runtime = JudgeRuntime(sleep=RecordingSleep())
                judge = build_judge(JudgeSpec(model=MODEL, **options), runtime)  # type: ignore[arg-type]
            assert isinstance(judge, LLMJudge)
            result = asyncio.run(
                score_item(judge, ITEM, ScoringSettings(scale=10.0, contexts_per_call=2))
            )
            assert result.status == "ok" and result.score is not None
            bodies.append(server.requests())
    assert bodies[0] == bodies[1] and len(bodies[0]) == 4  # 3 verdict slices + the reason


@pytest.mark.parametrize("reason", ["llm", "template", "none"])
def test_score_item_is_what_the_scorer_computes(
    server: FakeJudgeServer, reason: ReasonMode
) -> None:
    scorer = create_context_precision_scorer(
        MODEL,
        context=["unused"],
        api_base=server.url,
        reason=reason,
        scale=5,
        contexts_per_call=2,
        sleep=RecordingSleep(),
    )
    by_scorer = asyncio.run(scorer.score_item(ITEM))
    by_function = asyncio.run(
        score_item(
            scorer.judge, ITEM, ScoringSettings(scale=5.0, reason=reason, contexts_per_call=2)
        )
    )
    assert by_function == by_scorer
    assert by_function.score == context_precision([True, False, True, False, True], 5) == 3.78


def test_scoring_settings_reject_a_slice_size_below_one_and_an_unknown_reason() -> None:
    with pytest.raises(ConfigError, match="contexts_per_call must be >= 1, got 0"):
        ScoringSettings(contexts_per_call=0)
    with pytest.raises(ConfigError, match=r"contexts_per_call must be an integer, got 2\.5"):
        ScoringSettings(contexts_per_call=2.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="reason must be one of llm, template, none"):
        ScoringSettings(reason="prose")  # type: ignore[arg-type]
    assert ScoringSettings(scale=None).scale == 1.0  # type: ignore[arg-type]
