"""Misreadings held together: failing cases that no one declared misreading explains, matched against a solution that
holds two or three of them at once.

A library port, or a learner, departs from a statement in several places at once: float32 arithmetic and constant
groups left unhandled give answers that neither misreading's own solution gives. A *combination* is the solution that
makes every edit of its members' known-wrong solutions (`model.known_wrong.combined`); it explains a failing case as
a misreading does, and the case then counts as explained by each member, so that diagnosis charges each in its own
owner checks and carries the case forward elsewhere. The search is bounded: only the few misreadings that explain
most points alone, or that own a check whose cases stay unexplained, are combined; a combination runs only on the
cases still unexplained; and no more than `MAX_VARIANTS` combinations run in one grade.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch

from grader.judge.cases import Call
from grader.judge.checks import CaseOutcome, CheckRun
from grader.judge.compare import as_tensor, fails_alike, flatten_output, same_as
from grader.model.generic import CATALOGUE
from grader.model.misconceptions import Fitted, Misconception
from grader.model.spec import CheckSpec, Tolerance

LEANING_CASES = 96  # failing cases read to tell which misreadings move answers the learner's way
EXPLAINERS = 3  # misreadings that explain most points alone, each combined with the others
CANDIDATES = 8  # with owners of the checks whose failures stay unexplained, at most this many in all
MAX_VARIANTS = 20  # combinations run in one grade, pairs first
MAX_SIZE = 3  # a port departs on two to four conventions: pairs, then triples that extend a chosen pair


class Combining(Protocol):
    """What the search asks of the judge; implemented by `context.CheckContext`."""

    def cases(self, check: CheckSpec) -> list[Call]: ...
    def tolerances(self) -> dict[str, Tolerance]: ...
    def expected(self, check: CheckSpec, index: int, call: Call) -> dict[str, Any]: ...
    def misconception_observations(self, check: CheckSpec, index: int) -> dict[str, dict[str, Any]]: ...
    def expected_float32(self, check: CheckSpec, index: int, call: Call) -> dict[str, Any] | None: ...
    def combination_observation(
        self, check: CheckSpec, index: int, ids: tuple[str, ...], fitted: Fitted = ()
    ) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class Open:
    """A failing case with an answer that no single misreading explains, and the points it costs."""

    run: CheckRun
    index: int
    points: float


@dataclass(frozen=True)
class Match:
    """What one combination explains among the open cases: by answering alike, or by failing alike."""

    ids: tuple[str, ...]
    answers: frozenset[int]  # positions in the open list
    failures: frozenset[int]
    fitted: Fitted = ()  # the parameters set to make it

    @property
    def explained(self) -> frozenset[int]:
        return self.answers | self.failures


def case_points(run: CheckRun) -> list[float]:
    """What each case of a check is worth: the check's points shared among its scored groups, and a group's share
    among its calls."""
    assert run.tally is not None
    groups = run.tally.groups()
    worth = {id(case): run.check.points / len(groups) / len(group) for group in groups for case in group}
    return [worth[id(case)] for case in run.tally.outcomes]


@dataclass(frozen=True)
class Combined:
    """A combination that explains some failing cases no single misreading explains: (run, case, answered alike)
    for each, failing alike where not answered alike."""

    ids: tuple[str, ...]
    cases: tuple[tuple[CheckRun, int, bool], ...]
    fitted: Fitted = ()  # the parameters fitted to the learner's answers, (misreading, value)


def find_combined(
    context: Combining,
    runs: Sequence[CheckRun],
    misconceptions: Sequence[Misconception],
    contradicting: Callable[[set[str]], Mapping[str, int]],
) -> list[Combined]:
    """The combinations that explain the failing cases no single misreading explains, most points first, each
    with the cases it explains that the ones before it leave unexplained; `contradicting` counts, for each
    misreading asked about, the learner's passing cases its own solution fails."""
    open_cases = _open_cases(runs)
    if not open_cases:
        return []
    alone = _points_alone(runs)
    leaning = _leaning(context, runs)
    contradicted = contradicting(set(alone) | set(leaning))
    candidates = _candidates(open_cases, alone, misconceptions, contradicted, leaning)

    def likely(found: Match) -> tuple[float, float]:
        """Between combinations that explain as much: fewer passing cases contradicting, then answers moved more
        the learner's way (Bessel's correction always, rather than a ddof read backwards)."""
        return (-sum(contradicted.get(mid, 0) for mid in found.ids), sum(leaning.get(mid, 0.0) for mid in found.ids))

    left = set(range(len(open_cases)))
    by_id = {m.id: m for m in misconceptions}
    fixed: dict[str, float] = {}  # parameters fitted alone, kept in the pairs that hold their misreading
    # a combination computed in float32 is matched at float32's precision, whatever the check compares at
    rounded = {m.id for m in misconceptions if m.generic == "float32_arithmetic"}

    def match(ids: tuple[str, ...]) -> Match:
        lowered = bool(rounded & set(ids))
        best = _match(context, open_cases, ids, left, lowered)
        for fitted in _grid(ids, by_id, fixed):
            tried = _match(context, open_cases, ids, left, lowered, fitted)
            if _points(tried, open_cases, left) > _points(best, open_cases, left):
                best = tried
        return best

    # a misreading with a parameter may explain nothing at its declared value: it is fitted alone first, and then
    # counts as one that explains something alone, the candidates chosen again for the cases it leaves
    singles = [(mid,) for mid in candidates if by_id[mid].parameter is not None]
    found = _greedy([match(ids) for ids in singles], open_cases, left, likely)
    if found:
        alone = {**alone, **{m.ids[0]: (_points(m, open_cases, m.explained), len(m.explained)) for m in found}}
        fixed.update(dict(pair for m in found for pair in m.fitted))
        rest = [open_cases[p] for p in sorted(left)]
        candidates = _candidates(rest, alone, misconceptions, contradicted, leaning, False)
    # each pair holds one misreading that explains something alone, unless none does
    pairs: list[tuple[str, ...]] = [
        ids for ids in itertools.combinations(candidates, 2) if set(ids) & set(alone) or not alone
    ]
    pairs = pairs[: MAX_VARIANTS - len(singles)]
    found += _greedy([match(ids) for ids in pairs], open_cases, left, likely)
    budget = MAX_VARIANTS - len(singles) - len(pairs)
    for pair in list(found) if MAX_SIZE >= 3 else []:
        for third in (mid for mid in candidates if mid not in pair.ids):
            if budget <= 0 or not left:
                break
            budget -= 1
            ids = tuple(sorted((*pair.ids, third), key=lambda mid: candidates.index(mid) if mid in candidates else -1))
            found += _greedy([match(ids)], open_cases, left, likely)
    return [
        Combined(
            chosen.ids,
            tuple((open_cases[p].run, open_cases[p].index, p in chosen.answers) for p in sorted(chosen.explained)),
            chosen.fitted,
        )
        for chosen in found
    ]


def _grid(ids: tuple[str, ...], by_id: Mapping[str, Misconception], fixed: Mapping[str, float]) -> list[Fitted]:
    """The parameter settings tried for a combination besides the declared values: the value fitted alone of a
    member that has one, else each grid value of its first member with a parameter (a second one keeps its
    declared value)."""
    held = tuple((mid, fixed[mid]) for mid in ids if mid in fixed)
    if held:
        return [held]
    for mid in ids:
        parameter = by_id[mid].parameter
        if parameter is not None:
            return [((mid, value),) for value in parameter.values]
    return []


def _points(match: Match, open_cases: list[Open], left: set[int] | frozenset[int]) -> float:
    return sum(open_cases[p].points for p in match.explained & left)


def _open_cases(runs: Sequence[CheckRun]) -> list[Open]:
    found = []
    for run in runs:
        if run.tally is None or run.check.kind != "differential":
            continue
        for index, (case, points) in enumerate(zip(run.tally.outcomes, case_points(run), strict=True)):
            if not case.passed and case.answer is not None and not (case.explained_by or case.fails_like):
                found.append(Open(run, index, points))
    return found


def _points_alone(runs: Sequence[CheckRun]) -> dict[str, tuple[float, int]]:
    """The points and the number of the failing cases each misreading explains on its own."""
    alone: dict[str, tuple[float, int]] = {}
    for run in runs:
        if run.tally is None:
            continue
        for case, worth in zip(run.tally.outcomes, case_points(run), strict=True):
            if not case.passed:
                for mid in dict.fromkeys((*case.explained_by, *case.fails_like)):
                    points, count = alone.get(mid, (0.0, 0))
                    alone[mid] = (points + worth, count + 1)
    return alone


def _candidates(
    open_cases: list[Open],
    alone: Mapping[str, tuple[float, int]],
    misconceptions: Sequence[Misconception],
    contradicted: Mapping[str, int],
    leaning: Mapping[str, float],
    fitting: bool = True,
) -> list[str]:
    """The misreadings worth combining: those that explain most points alone (and fewer passing cases contradict
    than failing ones it explains), the generic ones that show only through others, those with a parameter to fit
    (while `fitting`), then those that bear on most points: the failing points they move the learner's way
    (`leaning`, unless a passing case contradicts them; less those they move away) and the unexplained points of
    the checks they own; declaration order breaks ties."""
    order = {m.id: i for i, m in enumerate(misconceptions)}
    explainers = sorted(
        (mid for mid, (_, count) in alone.items() if mid in order and contradicted.get(mid, 0) < count),
        key=lambda mid: (-alone[mid][0], order[mid]),
    )[:EXPLAINERS]
    unexplained: dict[str, float] = {}
    for case in open_cases:
        unexplained[case.run.check.id] = unexplained.get(case.run.check.id, 0.0) + case.points
    # a generic misreading (float32 arithmetic, say) combines with any other, whatever their edits
    generic = [
        m.id
        for m in misconceptions
        if m.generic is not None and CATALOGUE[m.generic].combined_unseen and m.id not in explainers
    ]
    # a misreading with a parameter explains nothing alone when the learner's value is not its declared one
    fitted = [
        m.id
        for m in misconceptions
        if fitting and m.parameter is not None and m.id not in explainers + generic and set(m.owners) & set(unexplained)
    ]
    generic += fitted
    owning = sorted(
        (
            m
            for m in misconceptions
            if m.id not in explainers + generic and (set(m.owners) & set(unexplained) or leaning.get(m.id, 0.0) > 0)
        ),
        key=lambda m: (
            -(0.0 if contradicted.get(m.id, 0) else leaning.get(m.id, 0.0))
            - sum(unexplained.get(owner, 0.0) for owner in m.owners),
            order[m.id],
        ),
    )
    # once a parameter is fitted, the pairs all hold the fitted misreading: a wider field costs no more runs
    return (explainers + generic + [m.id for m in owning])[: CANDIDATES if fitting else 2 * CANDIDATES]


def _leaning(context: Combining, runs: Sequence[CheckRun]) -> dict[str, float]:
    """How far each misreading moves the failing answers the learner's way: the points of the failing cases (the
    first `LEANING_CASES` that answered) on which its own answer lies at most half as far from the learner's as the
    expected answer does, less those on which it lies more than twice as far. A member of a combination moves the
    answers its way although, with its partner's departure on top, it explains no case alone (Bessel's correction
    brings an answer from 1 to within 2e-4 of the 0.7069 that Bessel and an eps of 1e-4 give together), while a
    look-alike that departs where the learner does not moves some answers away (a ddof read backwards, on the cases
    that ask for Bessel's correction)."""
    leaning: dict[str, float] = {}
    for run, index, points in _failing_answers(runs)[:LEANING_CASES]:
        call = context.cases(run.check)[index]
        got = _numbers(run.tally.outcomes[index].answer if run.tally is not None else None)
        want = _numbers(context.expected(run.check, index, call))
        if got is None or want is None or got.shape != want.shape:
            continue
        far = float((want - got).abs().sum())
        if not far > 0.0:
            continue
        for mid, theirs in context.misconception_observations(run.check, index).items():
            mine = _numbers(theirs)
            if mine is None or mine.shape != got.shape:
                continue
            distance = float((mine - got).abs().sum())
            if distance <= far / 2 or distance > 2 * far:
                leaning[mid] = leaning.get(mid, 0.0) + (points if distance <= far / 2 else -points)
    return leaning


def _failing_answers(runs: Sequence[CheckRun]) -> list[tuple[CheckRun, int, float]]:
    """Each failing case of a differential check that answered, and its points: those no misreading explains
    alone first."""
    found = []
    for run in runs:
        if run.tally is None or run.check.kind != "differential":
            continue
        for index, (case, points) in enumerate(zip(run.tally.outcomes, case_points(run), strict=True)):
            if not case.passed and case.answer is not None:
                found.append((bool(case.explained_by or case.fails_like), run, index, points))
    found.sort(key=lambda entry: entry[0])  # stable: in check and case order within each kind
    return [(run, index, points) for _, run, index, points in found]


def _numbers(observation: dict[str, Any] | None) -> torch.Tensor | None:
    """An answer's tensors and numbers as one float64 vector, non-finite values set to 0; None for a call that raised
    or an answer of another kind."""
    if observation is None or "output" not in observation or "raised" in observation:
        return None
    parts = []
    for _, item in flatten_output(observation["output"], ""):
        value = as_tensor(item)
        if value is None or value.dtype == torch.bool or value.is_complex():
            return None
        parts.append(torch.nan_to_num(value.detach().to(torch.float64).reshape(-1), nan=0.0, posinf=0.0, neginf=0.0))
    return torch.cat(parts) if parts else None


def _match(
    context: Combining, open_cases: list[Open], ids: tuple[str, ...], left: set[int], rounded: bool, fitted: Fitted = ()
) -> Match:
    """Run one combination (its parameters set by `fitted`) on the open cases still unexplained and say which it
    explains; `rounded`: it computes in float32, and is matched at float32's precision."""
    answers, failures = set(), set()
    tolerances = context.tolerances()
    for position in sorted(left):
        case = open_cases[position]
        check, outcome = case.run.check, _outcome(case)
        theirs = context.combination_observation(check, case.index, ids, fitted)
        if theirs is None:  # their edits do not combine: no case can be explained
            break
        assert outcome.answer is not None and check.cases is not None
        call = context.cases(check)[case.index]
        aspects = call.aspects(check.compare)
        lowered = rounded or context.expected_float32(check, case.index, call) is not None
        got = outcome.answer
        if same_as(call.function, call.kwargs, got, theirs, aspects, tolerances, lowered):
            answers.add(position)
        elif fails_alike(call.function, call.kwargs, got, theirs, aspects, tolerances):
            failures.add(position)
    return Match(ids, frozenset(answers), frozenset(failures), fitted)


def _greedy(
    matches: list[Match], open_cases: list[Open], left: set[int], likely: Callable[[Match], tuple[float, float]]
) -> list[Match]:
    """The matches that explain most points among the cases left (`likely` choosing among equals), each taken while
    it adds some; `left` loses what they explain."""
    chosen = []
    pool = list(matches)
    while pool and left:
        best = max(pool, key=lambda m: (round(_points(m, open_cases, left), 9), *likely(m)))
        gained = best.explained & left
        if not gained:
            break
        chosen.append(Match(best.ids, best.answers & gained, best.failures & gained, best.fitted))
        left -= gained
        pool.remove(best)
    return chosen


def _outcome(case: Open) -> CaseOutcome:
    assert case.run.tally is not None
    return case.run.tally.outcomes[case.index]


def record(combined: Sequence[Combined]) -> Callable[[], None]:
    """Count each case a combination explains as explained by each of its members, in the case's outcome
    (`explained_by`, or `fails_like` when it fails alike); what is returned puts the outcomes back."""
    kept: list[tuple[list[CaseOutcome], int, CaseOutcome]] = []
    for match in combined:
        for run, index, answered in match.cases:
            assert run.tally is not None
            outcomes = run.tally.outcomes
            outcome = outcomes[index]
            kept.append((outcomes, index, outcome))
            explained_by, fails_like = outcome.explained_by, outcome.fails_like
            if answered:
                explained_by = tuple(dict.fromkeys((*explained_by, *match.ids)))
            else:
                fails_like = tuple(dict.fromkeys((*fails_like, *match.ids)))
            outcomes[index] = replace(outcome, explained_by=explained_by, fails_like=fails_like, combined=match.ids)

    def undo() -> None:
        for outcomes, index, outcome in reversed(kept):
            outcomes[index] = outcome

    return undo
