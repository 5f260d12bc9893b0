"""The precision maths: a table of exact cases and hypothesis properties."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scorer_core import (
    ConfigError,
    average_precision,
    context_precision,
    create_context_precision_scorer,
    make_judge,
    round_half_up,
)
from scorer_core.precision import format_score, round_score
from scorer_core.scoring import ScoringSettings
from tests.support.exact import exact_average_precision

YES, NO = True, False


@pytest.mark.parametrize(
    ("verdicts", "scale", "expected"),
    [
        ([YES, NO, YES, NO], 1, 0.83),
        ([NO, YES, YES], 1, 0.58),
        ([NO, NO, YES], 1, 0.33),
        ([YES, NO, YES, NO], 10, 8.33),
        ([NO, YES, YES], 10, 5.83),
        ([YES, NO, YES, NO], 0, 0.0),
        ([], 1, 0.0),
        ([NO, NO, NO], 1, 0.0),
        ([YES], 1, 1.0),
        ([YES, YES, YES], 1, 1.0),
        ([NO, YES], 1, 0.5),
        # 1/8 = 0.125 exactly: half up gives 0.13 where round-half-even would give 0.12.
        ([NO] * 7 + [YES], 1, 0.13),
        # 0.835 is stored as 0.83499999...; half up must still give 0.84.
        ([YES], 0.835, 0.84),
        ([YES], 0.8333, 0.83),
        ([1, 0, 1, 0], 1, 0.83),
        # 0.8875 * 6 is 5.324999... as a double; Mastra's epsilon is too small there to lift it.
        ([1, 1, 0, 1, 1], 6, 5.32),
        ([NO, YES], None, 0.5),  # scale None means 1
        ([], 10, 0.0),
    ],
)
def test_context_precision_table(verdicts: list[bool], scale: float, expected: float) -> None:
    assert context_precision(verdicts, scale) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.835, 0.84), (0.8333, 0.83), (0.125, 0.13), (0.005, 0.01), (0.0049, 0.0), (2.675, 2.68)],
)
def test_round_half_up(value: float, expected: float) -> None:
    assert round_half_up(value) == expected


@pytest.mark.parametrize("scale", [-1, float("nan"), float("inf"), "1", True])
def test_bad_scale_is_a_config_error_where_the_library_takes_options(scale: object) -> None:
    # Checked once where options come in (the maths trusts its caller): the scorer's
    # constructors and make_judge; the job's config checks scorer.scale itself.
    for make in (
        lambda: create_context_precision_scorer("lexical", context=["a"], scale=scale),
        lambda: make_judge("openai/x", scale=scale),
        lambda: ScoringSettings(scale=scale),
    ):
        with pytest.raises(ConfigError, match="scale must be a"):
            make()


def exact_ap(flags: list[bool]) -> Fraction:
    return exact_average_precision(flags)


verdict_lists = st.lists(st.booleans(), max_size=40)


@given(verdict_lists)
def test_average_precision_matches_exact_fractions(flags: list[bool]) -> None:
    assert average_precision(flags) == pytest.approx(float(exact_ap(flags)), abs=1e-12)


@given(verdict_lists, st.sampled_from([1, 10, 100, 0.5]))
def test_score_is_within_bounds(flags: list[bool], scale: float) -> None:
    score = context_precision(flags, scale)
    assert 0 <= score <= scale
    if not any(flags):
        assert score == 0


@given(st.integers(min_value=1, max_value=20), st.integers(min_value=0, max_value=20))
def test_perfect_ranking_scores_one(relevant: int, irrelevant: int) -> None:
    assert context_precision([YES] * relevant + [NO] * irrelevant) == 1.0


@given(verdict_lists.filter(lambda f: any(f) and not all(f)), st.data())
def test_moving_a_relevant_context_earlier_never_lowers_the_score(
    flags: list[bool], data: st.DataObject
) -> None:
    relevant_positions = [i for i, f in enumerate(flags) if f]
    source = data.draw(st.sampled_from(relevant_positions))
    earlier_irrelevant = [i for i in range(source) if not flags[i]]
    if not earlier_irrelevant:
        return
    target = data.draw(st.sampled_from(earlier_irrelevant))
    moved = list(flags)
    moved[source], moved[target] = moved[target], moved[source]
    assert exact_ap(moved) >= exact_ap(flags)
    assert context_precision(moved) >= context_precision(flags)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.49999999999999994 / 100, 0.01),
        (1.005, 1.01),
        (0.1 + 0.2, 0.3),
        (5.325, 5.33),
        (-0.0, 0.0),
    ],
)
def test_round_score_is_mastras_math_round(value: float, expected: float) -> None:
    assert round_score(value) == expected


@pytest.mark.parametrize(
    ("score", "text"), [(1.0, "1"), (0.0, "0"), (0.83, "0.83"), (10.0, "10"), (8.33, "8.33")]
)
def test_format_score_prints_like_javascript(score: float, text: str) -> None:
    assert format_score(score) == text
