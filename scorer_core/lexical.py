"""An offline, deterministic judge: IDF-weighted overlap of content words and word pairs
with the query and the answer (the reference when given), instead of a language model.

A baseline that runs anywhere, not a substitute for an LLM judge (docs/judges.md).
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from scorer_core.capabilities import OFFLINE_CAPABILITIES, OFFLINE_JUDGE, JudgeCapabilities
from scorer_core.errors import ConfigError
from scorer_core.prompt import reason_start
from scorer_core.types import ContextVerdict, ScoringItem, Usage, VerdictBatch

# Chosen on a tuning split of human labels (`python -m bench.lexical_agreement --tune`).
DEFAULT_THRESHOLD = 0.2
DEFAULT_RELATIVE = 0.8
DEFAULT_ANSWER_WEIGHT = 0.5
DEFAULT_PHRASE_WEIGHT = 0.5
DEFAULT_MAX_TOKENS = 5_000
DEFAULT_MAX_CHARS = 50_000

_TIE = 1e-9
_WEIGHT_BOUNDS = {
    "threshold": 1.0,
    "relative": 1.0,
    "answer_weight": math.inf,
    "phrase_weight": 1.0,
}

# Unicode word characters without the underscore: letters and digits of any script.
_TOKEN_RE = re.compile(r"[^\W_]+")

_STOPWORD_TEXT = """
    a about above after again against all also am an and any are aren as at be because been
    before being below between both but by can cannot could couldn did didn do does doesn doing
    don down during each either else etc ever every few for from further had hadn has hasn have
    haven having he her here hers herself him himself his how however i if in into is isn it its
    itself just let ll me might more most much must mustn my myself neither no nor not now of off
    on once only or other others ought our ours ourselves out over own per rather re same shall
    shan she should shouldn since so some such than that the their theirs them themselves then
    there these they this those though through thus to too under until up upon us ve very via
    was wasn we were weren what whatever when where whether which while who whom whose why will
    with within without won would wouldn yes yet you your yours yourself yourselves
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())
# Dropped tokens: stopwords and single Latin letters (initials, "s" of "it's"). Single digits and
# single characters of other scripts (a CJK character can be a word) are kept.
_DROPPED: frozenset[str] = STOPWORDS | frozenset("abcdefghijklmnopqrstuvwxyz")


@functools.lru_cache(maxsize=1 << 17)
def stem(word: str) -> str:
    """A crude stem of a lower-case word: plural s/es/ies, -ing and -ed stripped, numbers and
    short words unchanged (both sides of a comparison are stemmed alike: no dictionary)."""
    length = len(word)
    if length <= 3 or word.isdigit():
        return word
    if word.endswith("ies") and length > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    if word.endswith("ing") and length > 5:
        return word[:-3]
    if word.endswith("ed") and length > 4:
        return word[:-2]
    return word


def is_relevant(score: float, best: float, *, threshold: float, relative: float) -> bool:
    """The verdict rule: a positive score at least `threshold` and `relative` x the item's best
    (public so that calibration can sweep both over precomputed `scores`). A score within 1e-9
    of a bound counts as reaching it, so float rounding cannot flip ties."""
    return score > 0.0 and score >= threshold - _TIE and score >= relative * best - _TIE


def _tokens(text: str, max_chars: int, max_tokens: int) -> list[str]:
    """Lower-cased word tokens of the first `max_chars` characters, at most `max_tokens`."""
    return _TOKEN_RE.findall(text[:max_chars].lower())[:max_tokens]


def content_words(
    text: str, *, max_chars: int = DEFAULT_MAX_CHARS, max_tokens: int = DEFAULT_MAX_TOKENS
) -> list[str]:
    """The content words of `text` (lower-cased, not stemmed), in order, with repeats."""
    return [token for token in _tokens(text, max_chars, max_tokens) if token not in _DROPPED]


def _is_position(position: object, count: int) -> bool:
    """Whether `position` is a context's index among `count` (an int, not a bool)."""
    if isinstance(position, bool) or not isinstance(position, int):
        return False
    return 0 <= position < count


def _pairs(terms: Sequence[str]) -> set[tuple[str, str]]:
    return {(first, second) for first, second in itertools.pairwise(terms) if first != second}


def _context_hits(
    contexts: Sequence[str],
    target_set: frozenset[str],
    target_pairs: set[tuple[str, str]],
    max_chars: int,
    max_tokens: int,
) -> tuple[list[frozenset[str]], list[int]]:
    """Per context: the target terms it contains, and how many target word pairs."""
    hit_sets: list[frozenset[str]] = []
    pair_hits: list[int] = []
    for context in contexts:
        tokens = _tokens(context, max_chars, max_tokens)
        # Stem each distinct surface form once; the sequence is only needed for pairs.
        stems = {token: stem(token) for token in set(tokens).difference(_DROPPED)}
        hit = frozenset(stems.values()) & target_set
        hit_sets.append(hit)
        n_pair_hits = 0
        if len(hit) >= 2 and any(first in hit and second in hit for first, second in target_pairs):
            seq: list[str] = list(filter(None, map(stems.get, tokens)))
            n_pair_hits = len(_pairs(seq) & target_pairs)
        pair_hits.append(n_pair_hits)
    return hit_sets, pair_hits


@dataclass(frozen=True, slots=True, kw_only=True)
class _ItemStats:
    """Everything the verdicts on one item need, computed once for all of its contexts."""

    target: tuple[str, ...]  # distinct target terms, answer terms first
    answer_terms: frozenset[str]
    n_pairs: int  # adjacent target word pairs
    hits: tuple[tuple[str, ...], ...]  # per context: target terms it contains, in target order
    pair_hits: tuple[int, ...]  # per context: target pairs it contains
    scores: tuple[float, ...]  # per context, in [0, 1]
    best: float
    answer_source: str  # "reference answer", "answer" or "" (query only)
    display: dict[str, str]  # stem -> the word as first written in the answer or query


@dataclass(kw_only=True, eq=False)
class LexicalJudge:
    """A `Judge` that calls a context relevant when it covers enough of the query and answer.

    Deterministic, no I/O; its `Usage` is always zero.

    Args:
        threshold: the least score in [0, 1] for a "yes".
        relative: a "yes" also needs this share of the best score among the item's contexts
            (0 disables the rule).
        answer_weight: the weight of answer-only words relative to query words (0: the query
            alone counts).
        phrase_weight: the share of the score from adjacent word pairs (0: a bag of words).
        max_chars, max_tokens: only the first `max_chars` characters of each text are read,
            and of those the first `max_tokens` word tokens count.
        cache_items: how many items' statistics to keep for repeated calls (0: none).
    """

    capabilities: ClassVar[JudgeCapabilities] = OFFLINE_CAPABILITIES
    model: ClassVar[str] = OFFLINE_JUDGE
    #: It asks no chat model.
    asker: ClassVar[None] = None

    threshold: float = DEFAULT_THRESHOLD
    relative: float = DEFAULT_RELATIVE
    answer_weight: float = DEFAULT_ANSWER_WEIGHT
    phrase_weight: float = DEFAULT_PHRASE_WEIGHT
    max_chars: int = DEFAULT_MAX_CHARS
    max_tokens: int = DEFAULT_MAX_TOKENS
    cache_items: int = field(default=16, repr=False)
    _cached_stats: Callable[[ScoringItem], _ItemStats] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name, upper in _WEIGHT_BOUNDS.items():
            value = getattr(self, name)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not number or not 0 <= value <= upper or math.isinf(value):
                what = "a number in [0, 1]" if upper == 1 else "a finite number >= 0"
                raise ConfigError(f"{name} must be {what}, got {value!r}")
            setattr(self, name, float(value))
        for name, low in (("max_chars", 1), ("max_tokens", 1), ("cache_items", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        # lru_cache is thread-safe; with maxsize 0 it caches nothing.
        self._cached_stats = functools.lru_cache(self.cache_items)(self._compute)

    def scores(self, item: ScoringItem) -> list[float]:
        """The score in [0, 1] of every context of `item`, in order, before thresholds."""
        return list(self._stats(item).scores)

    def _stats(self, item: ScoringItem) -> _ItemStats:
        try:
            return self._cached_stats(item)
        except TypeError:  # unhashable, e.g. contexts given as a list: correct, not cacheable
            return self._compute(item)

    def _compute(self, item: ScoringItem) -> _ItemStats:
        query_seq, answer_seq, display, answer_source = self._target_words(item)
        target = tuple(dict.fromkeys(answer_seq + query_seq))
        target_pairs = _pairs(query_seq) | _pairs(answer_seq)
        hit_sets, pair_hits = _context_hits(
            item.contexts, frozenset(target), target_pairs, self.max_chars, self.max_tokens
        )
        # Each target term's IDF over the item's contexts, times its role's weight.
        contexts = len(item.contexts)
        contexts_with = Counter(itertools.chain(*hit_sets))  # document frequency
        query_set = set(query_seq)
        weights = {
            term: math.log1p((contexts - contexts_with[term] + 0.5) / (contexts_with[term] + 0.5))
            * (1.0 if term in query_set else self.answer_weight)
            for term in target
        }
        hits = tuple(tuple(term for term in target if term in hit) for hit in hit_sets)
        # math.fsum is exact: scores do not depend on set order (string hashes are salted).
        total = math.fsum(weights.values())
        phrase_weight = self.phrase_weight if target_pairs else 0.0
        scores: list[float] = []
        for hit_terms, n_pair_hits in zip(hits, pair_hits, strict=True):
            covered = math.fsum(weights[term] for term in hit_terms)
            coverage = covered / total if total > 0.0 else 0.0
            phrase = n_pair_hits / len(target_pairs) if target_pairs else 0.0
            score = (1.0 - phrase_weight) * coverage + phrase_weight * phrase
            scores.append(min(1.0, max(0.0, score)))
        return _ItemStats(
            target=target,
            answer_terms=frozenset(answer_seq),
            n_pairs=len(target_pairs),
            hits=hits,
            pair_hits=tuple(pair_hits),
            scores=tuple(scores),
            best=max(scores, default=0.0),
            answer_source=answer_source,
            display=display,
        )

    def _target_words(self, item: ScoringItem) -> tuple[list[str], list[str], dict[str, str], str]:
        """The stemmed content words of the query and of the answer (the reference when given),
        each stem's first written form, and which answer was used ("" when none counts)."""
        if item.expected_output:
            answer_text, answer_source = item.expected_output, "reference answer"
        else:
            answer_text, answer_source = item.output, "answer"
        bounds = {"max_chars": self.max_chars, "max_tokens": self.max_tokens}
        query_raw = content_words(item.input, **bounds)
        answer_raw = content_words(answer_text, **bounds) if self.answer_weight > 0.0 else []
        query_seq = [stem(word) for word in query_raw]
        answer_seq = [stem(word) for word in answer_raw]
        # The first surface form of each stem, so that reasons quote words, not stems.
        display: dict[str, str] = {}
        for surface, term in zip(answer_raw + query_raw, answer_seq + query_seq, strict=True):
            display.setdefault(term, surface)
        return query_seq, answer_seq, display, answer_source if answer_seq else ""

    def _reason(self, stats: _ItemStats, position: int, relevant: bool) -> str:
        if not stats.target:
            return "the query and answer have no content words to match; score 0.00"
        score = stats.scores[position]
        hit = stats.hits[position]
        if not hit:
            what = f"query or the {stats.answer_source}" if stats.answer_source else "query"
            return f"shares no content words with the {what}; score 0.00"
        answer_hits = [term for term in hit if term in stats.answer_terms]
        query_hits = [term for term in hit if term not in stats.answer_terms]
        parts = []
        if answer_hits:
            answer_words = f"words of the {stats.answer_source}"
            parts.append(f"{len(answer_hits)} of {len(stats.answer_terms)} {answer_words}")
        if query_hits:
            other = " other" if stats.answer_terms else ""
            n_query = len(stats.target) - len(stats.answer_terms)
            parts.append(f"{len(query_hits)} of {n_query}{other} query words")
        first_hits = (answer_hits + query_hits)[:5]
        shown = ", ".join(stats.display.get(term, term) for term in first_hits)
        shown += ", ..." if len(hit) > 5 else ""
        shared = " and ".join(parts)
        text = f"shares {shared} ({shown})"
        if stats.n_pairs and self.phrase_weight > 0.0:
            text += f", {stats.pair_hits[position]} of {stats.n_pairs} word pairs"
        if relevant:
            return f"{text}; score {score:.2f} >= threshold {self.threshold:.2f}"
        if score < self.threshold:
            return f"{text}; score {score:.2f} < threshold {self.threshold:.2f}"
        best = f"best context's {stats.best:.2f}"
        return f"{text}; score {score:.2f} < {self.relative:.2f} x {best}"

    async def judge(self, item: ScoringItem, positions: Sequence[int]) -> VerdictBatch:
        """One verdict per position, in the order given; bad or no positions: unscored."""
        count = len(item.contexts)
        bad = [position for position in positions if not _is_position(position, count)]
        if bad:
            return VerdictBatch(
                verdicts=(), unscored_reason=f"positions {bad[:5]} invalid for {count} contexts"
            )
        if not positions:
            return VerdictBatch(verdicts=(), unscored_reason="no positions to judge")
        stats = self._stats(item)
        rule = {"threshold": self.threshold, "relative": self.relative}
        verdicts = []
        for position in positions:
            relevant = is_relevant(stats.scores[position], stats.best, **rule)
            reason = self._reason(stats, position, relevant)
            verdicts.append(ContextVerdict(position, relevant, reason))
        return VerdictBatch(verdicts=tuple(verdicts), usage=Usage())

    def reason_prompt(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> None:
        """None: `explain` asks no model."""
        return None

    async def explain(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> tuple[str, Usage]:
        """A short deterministic summary of the verdicts, begun as every reason is."""
        if not verdicts:
            return "", Usage()
        start = reason_start(score)
        ranks = sorted(verdict.index + 1 for verdict in verdicts if verdict.relevant)
        if not ranks:
            text = (
                f"{start} by word overlap none of the {len(verdicts)} judged contexts matches "
                "the query and answer."
            )
        else:
            shown = ", ".join(map(str, ranks[:10])) + (", ..." if len(ranks) > 10 else "")
            text = (
                f"{start} by word overlap {len(ranks)} of {len(verdicts)} judged contexts match "
                f"the query and answer (ranks {shown})."
            )
        return text, Usage()
