"""The offline lexical judge: protocol, verdicts, positions, bounds, robustness, real data."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scorer_core.errors import ConfigError
from scorer_core.lexical import LexicalJudge, content_words, is_relevant, stem
from scorer_core.protocols import Judge
from scorer_core.types import ContextVerdict, ScoringItem, Usage, VerdictBatch
from tests.support.job import lexical_flags
from tests.support.paths import REPO, SHARED_DATA

DATA_DIR = SHARED_DATA

QUESTION = (
    "What is the name of the fight song of the university whose main campus is in Lawrence, Kansas?"
)
ANSWER = "Kansas Song"
RESTATES = (
    "University of Kansas: the fight song of the University of Kansas, whose main campus is "
    "in Lawrence, is the Kansas Song, played at every home game."
)
UNRELATED = "The Great Barrier Reef is the world's largest coral reef system, off Australia."


def judge_sync(
    judge: LexicalJudge, item: ScoringItem, positions: list[int] | range
) -> VerdictBatch:
    return asyncio.run(judge.judge(item, positions))


def kansas_item(*contexts: str, reference: str | None = ANSWER) -> ScoringItem:
    return ScoringItem(
        input=QUESTION,
        output="some generated answer",
        contexts=tuple(contexts),
        expected_output=reference,
    )


# -- protocol and basic verdicts ---------------------------------------------------------------


def test_implements_judge_protocol() -> None:
    judge = LexicalJudge()
    assert isinstance(judge, Judge)
    assert judge.model == "lexical"


def test_restating_context_is_relevant_unrelated_is_not() -> None:
    item = kansas_item(UNRELATED, RESTATES, "Kansas City has a jazz scene.")
    batch = judge_sync(LexicalJudge(), item, [0, 1, 2])
    assert batch.unscored_reason is None
    assert [v.index for v in batch.verdicts] == [0, 1, 2]
    assert [v.relevant for v in batch.verdicts] == [False, True, False]
    assert batch.usage == Usage()
    for v in batch.verdicts:
        assert v.reason and v.reason.strip() == v.reason
        assert "score" in v.reason
    assert "kansas" in batch.verdicts[1].reason
    assert "shares no content words" in batch.verdicts[0].reason


def test_without_reference_the_output_is_the_answer() -> None:
    item = ScoringItem(
        input="Which river runs through Vienna?",
        output="The Danube runs through Vienna.",
        contexts=(
            "Vienna lies on the Danube, which runs through the city.",
            "Paris lies on the Seine.",
        ),
    )
    batch = judge_sync(LexicalJudge(), item, [0, 1])
    assert [v.relevant for v in batch.verdicts] == [True, False]
    assert "answer" in batch.verdicts[0].reason


def test_yes_no_reference_leaves_the_query_to_decide() -> None:
    item = ScoringItem(
        input="Are Elko Regional Airport and Gerald R. Ford International Airport in Michigan?",
        output="no",
        contexts=(
            "Elko Regional Airport is a public airport in Elko, Nevada.",
            "Gerald R. Ford International Airport is an airport near Grand Rapids, Michigan.",
            "Bananas are rich in potassium.",
        ),
        expected_output="no",
    )
    batch = judge_sync(LexicalJudge(), item, [0, 1, 2])
    assert all("reference answer" not in v.reason for v in batch.verdicts)
    assert batch.verdicts[1].relevant and not batch.verdicts[2].relevant
    scores = LexicalJudge().scores(item)
    assert min(scores[0], scores[1]) > scores[2] == 0.0
    # A known limit of the relative-to-best rule: in a comparison question the paragraph on
    # the entity with fewer words in the query can fall below 0.8 x the best. Without the
    # rule both entities' paragraphs are relevant.
    assert lexical_flags(item, LexicalJudge(relative=0.0)) == [True, True, False]


def test_scores_are_in_unit_interval_and_match_verdicts() -> None:
    judge = LexicalJudge()
    item = kansas_item(UNRELATED, RESTATES, "Lawrence is a city in Kansas.", "")
    scores = judge.scores(item)
    assert len(scores) == 4 and all(0.0 <= s <= 1.0 for s in scores)
    flags = lexical_flags(item, judge)
    best = max(scores)
    expected = [
        is_relevant(s, best, threshold=judge.threshold, relative=judge.relative) for s in scores
    ]
    assert flags == expected
    batch = judge_sync(judge, item, range(4))
    assert [v.relevant for v in batch.verdicts] == flags


def test_thresholds_are_knobs() -> None:
    item = kansas_item(RESTATES, "Lawrence is a city in Kansas.")
    strict = LexicalJudge(threshold=1.0, relative=0.0)
    lenient = LexicalJudge(threshold=0.0, relative=0.0)
    assert lexical_flags(item, strict) == [False, False]
    assert lexical_flags(item, lenient) == [True, True]
    # The relative rule alone keeps only contexts close to the best one.
    assert lexical_flags(item, LexicalJudge(threshold=0.0, relative=1.0)) == [True, False]


@pytest.mark.parametrize(
    "options",
    [
        {"threshold": 1.5},
        {"threshold": -0.1},
        {"relative": 2},
        {"phrase_weight": "0.3"},
        {"answer_weight": -1.0},
        {"answer_weight": float("inf")},
        {"max_tokens": 0},
        {"max_chars": 10.5},
        {"cache_items": -1},
        {"threshold": True},
    ],
)
def test_bad_options_raise_config_error(options: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        LexicalJudge(**options)  # type: ignore[arg-type]


# -- positions ---------------------------------------------------------------------------------


def test_positions_keep_global_indices_and_batching_does_not_change_verdicts() -> None:
    contexts = [f"Filler passage number {i} about gardening and tomatoes." for i in range(16)]
    contexts += [RESTATES, UNRELATED]
    item = kansas_item(*contexts)
    judge = LexicalJudge()
    tail = judge_sync(judge, item, [16, 17])
    assert [v.index for v in tail.verdicts] == [16, 17]
    assert [v.relevant for v in tail.verdicts] == [True, False]
    everything = judge_sync(LexicalJudge(cache_items=0), item, range(18))
    assert everything.verdicts[16:] == tail.verdicts
    # Any order and any subset give the same verdict per position.
    mixed = judge_sync(judge, item, [17, 3, 16])
    assert [v.index for v in mixed.verdicts] == [17, 3, 16]
    by_index = {v.index: v for v in everything.verdicts}
    assert all(by_index[v.index] == v for v in mixed.verdicts)


def test_unhashable_item_is_judged_without_the_cache() -> None:
    item = ScoringItem(
        input=QUESTION, output="", contexts=[RESTATES, UNRELATED], expected_output=ANSWER
    )  # type: ignore[arg-type]
    batch = judge_sync(LexicalJudge(), item, [0, 1])
    assert [v.relevant for v in batch.verdicts] == [True, False]


def test_bad_or_empty_positions_give_an_unscored_batch() -> None:
    item = kansas_item(RESTATES, UNRELATED)
    judge = LexicalJudge()
    for positions in ([2], [-1], [0, 5]):
        batch = judge_sync(judge, item, positions)
        assert batch.verdicts == () and batch.unscored_reason
    empty = judge_sync(judge, item, [])
    assert empty.verdicts == () and empty.unscored_reason


def test_explain_is_deterministic_and_free() -> None:
    judge = LexicalJudge()
    verdicts = (ContextVerdict(0, True, "x"), ContextVerdict(1, False, "y"))
    item = kansas_item(RESTATES, UNRELATED)
    text, usage = asyncio.run(judge.explain(item, verdicts, 1.0))
    assert usage == Usage()
    assert text == asyncio.run(judge.explain(item, verdicts, 1.0))[0]
    assert "1 of 2" in text
    assert asyncio.run(judge.explain(item, (), 0.0)) == ("", Usage())


# -- determinism -------------------------------------------------------------------------------


def test_deterministic_within_a_process() -> None:
    item = kansas_item(RESTATES, UNRELATED, "Lawrence, Kansas is home to a university.")
    first = judge_sync(LexicalJudge(), item, [0, 1, 2])
    second = judge_sync(LexicalJudge(cache_items=0), item, [0, 1, 2])
    assert first == second


def test_deterministic_across_processes_with_different_hash_seeds() -> None:
    code = (
        "from scorer_core.lexical import LexicalJudge\n"
        "from scorer_core.types import ScoringItem\n"
        f"item = ScoringItem(input={QUESTION!r}, output='x', contexts=({RESTATES!r}, "
        f"{UNRELATED!r}, 'Kansas Song: the fight song of the Kansas Jayhawks, Lawrence campus.',"
        "'The main campus of Kansas State is in Manhattan, Kansas.'), "
        "expected_output='Kansas Song')\n"
        "print(repr(LexicalJudge().scores(item)))\n"
    )
    outputs = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        outputs.add(done.stdout)
    assert len(outputs) == 1


# -- tokens and bounds -------------------------------------------------------------------------


def content_terms(text: str, **bounds: int) -> list[str]:
    """What the judge matches of `text`: its content words, stemmed."""
    return [stem(word) for word in content_words(text, **bounds)]


def test_tokenizer_and_stemmer() -> None:
    assert content_words("The Songs of the Cities, singing!") == ["songs", "cities", "singing"]
    assert content_terms("The Songs of the Cities, singing!") == ["song", "city", "sing"]
    assert stem("directed") == "direct"
    assert stem("boxes") == "box"
    assert stem("glass") == "glass"
    assert stem("1990s") == "1990"
    assert stem("bus") == "bus"
    # Underscores and punctuation separate; other scripts are words; single Latin letters drop.
    assert content_terms('snake_case {braces} "quotes" Gerald R. Ford') == [
        "snake",
        "case",
        "brace",
        "quote",
        "gerald",
        "ford",
    ]
    assert content_terms("Zürich café naïve") == ["zürich", "café", "naïve"]
    assert content_terms("Москва столица России") == ["москва", "столица", "россии"]


def test_multi_megabyte_context_is_bounded() -> None:
    # 6 MB of filler with the answer only at the very end: beyond max_chars, so it never counts.
    filler = "lorem ipsum dolor sit amet " * 230_000
    huge = filler + " Kansas Song fight song Lawrence Kansas university"
    assert len(huge) > 6_000_000
    judge = LexicalJudge(max_chars=20_000, max_tokens=2_000)
    item = kansas_item(huge, RESTATES)
    batch = judge_sync(judge, item, [0, 1])
    assert [v.relevant for v in batch.verdicts] == [False, True]
    assert len(content_terms(huge, max_chars=20_000, max_tokens=2_000)) <= 2_000
    # With the relevant words up front, a huge context is found relevant all the same.
    front = judge_sync(LexicalJudge(), kansas_item(RESTATES + filler, UNRELATED), [0, 1])
    assert [v.relevant for v in front.verdicts] == [True, False]


def test_unicode_quotes_braces_and_empty_texts_are_safe() -> None:
    weird = [
        "",
        "   \n\t ",
        '{"json": ["not", "a", "prompt"]} {{template}} %s {0} \\n \\u0000',
        "emoji 🎉🎉 and RTL עברית and CJK 堪萨斯大学 and combining e\u0301",
        "\x00\x01 control characters \ufeff BOM",
        "Kansas Song {answer} \"Kansas\" 'Song'",
    ]
    item = ScoringItem(
        input='Fight song of "Kansas" {university}?',
        output="",
        contexts=tuple(weird),
        expected_output=ANSWER,
    )
    batch = judge_sync(LexicalJudge(), item, range(len(weird)))
    assert len(batch.verdicts) == len(weird)
    assert all(v.reason for v in batch.verdicts)
    assert batch.verdicts[-1].relevant
    # A query and answer without any content word: every context is "no", with a reason.
    empty = ScoringItem(
        input="?!", output="", contexts=("anything at all", ""), expected_output="the"
    )
    verdicts = judge_sync(LexicalJudge(), empty, [0, 1]).verdicts
    assert [v.relevant for v in verdicts] == [False, False]
    assert all("no content words" in v.reason for v in verdicts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    query=st.text(max_size=60),
    reference=st.one_of(st.none(), st.text(max_size=30)),
    contexts=st.lists(
        st.text(
            alphabet=st.sampled_from(list("kansas song university {}\"'é日 \n_-.")), max_size=80
        )
        | st.text(max_size=80),
        min_size=1,
        max_size=8,
    ),
)
def test_never_raises_and_returns_one_verdict_per_position(
    query: str, reference: str | None, contexts: list[str]
) -> None:
    item = ScoringItem(
        input=query, output="an answer", contexts=tuple(contexts), expected_output=reference
    )
    judge = LexicalJudge()
    positions = list(range(len(contexts)))[::-1]
    batch = judge_sync(judge, item, positions)
    assert batch.unscored_reason is None
    assert [v.index for v in batch.verdicts] == positions
    assert all(v.reason for v in batch.verdicts)
    assert all(0.0 <= s <= 1.0 for s in judge.scores(item))


def test_scorer_core_modules_do_not_import_heavy_dependencies() -> None:
    code = (
        "import sys, scorer_core.lexical, scorer_core.metrics\n"
        "print(sorted(m for m in ('ray', 'fsspec', 'polars') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


# -- agreement with human labels (needs ../shared/data) ----------------------------------------

# Measured with the defaults on the held-out split (see docs/benchmarks.md): HotpotQA kappa
# 0.624 and AP Pearson 0.681; TREC DL kappa 0.081. The floors sit a little below, so that a
# regression fails while harmless changes pass.
HOTPOT_HELD_OUT_KAPPA_FLOOR = 0.58
HOTPOT_HELD_OUT_AP_PEARSON_FLOOR = 0.62
TREC_HELD_OUT_KAPPA_FLOOR = 0.05


def test_agreement_with_human_labels_on_the_held_out_split() -> None:
    if not (DATA_DIR / "hotpotqa_ctxprec.jsonl").exists():
        pytest.skip(f"human-labelled data not found in {DATA_DIR}")
    from bench.lexical_agreement import agreement, check_reference_ap, judge_rows, load_rows

    rows = [r for r in load_rows(DATA_DIR) if r.split == "held-out"]
    hotpot = [r for r in rows if r.dataset == "HotpotQA"]
    trec = [r for r in rows if r.dataset == "TREC DL"]
    assert len(hotpot) == 298

    judge = LexicalJudge()
    flags, _ = judge_rows(judge, hotpot)
    a = agreement(hotpot, flags)
    assert a.kappa is not None and a.kappa >= HOTPOT_HELD_OUT_KAPPA_FLOOR, a
    assert a.ap_pearson is not None and a.ap_pearson >= HOTPOT_HELD_OUT_AP_PEARSON_FLOOR, a
    _, worst = check_reference_ap(hotpot)
    assert worst < 1e-6

    if trec:
        flags, _ = judge_rows(judge, trec)
        t = agreement(trec, flags)
        assert t.kappa is not None and t.kappa >= TREC_HELD_OUT_KAPPA_FLOOR, t
        _, worst = check_reference_ap(trec)
        assert worst < 1e-6
