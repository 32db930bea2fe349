"""Say where the failures no misreading explains lie: the case features that separate a check's failing cases.

A *feature* is a sentence true of a call that its kwargs alone decide, of what a learner may see of a case: a
tensor's dtype, its number of dimensions, a zero-size dimension, a mask or row with nothing selected, a flag's
value, a None, a zero or negative number. Never a tensor's values beyond those counts. A feature *separates* a
check's failing cases from its passing ones when every failing case has it and no passing case does ("fails only
where mask has an all-zero row"), or the reverse ("fails only where dual_clip is not None").

Only visible cases are described and compared: a hidden case's inputs are the judge's alone, so hidden failing
cases are only counted. A problem may add named features of its own to the generic ones: `CASE_FEATURES` in its
`problems/<id>/cases.py`, a sequence of (sentence, predicate on a call's kwargs) pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from grader.judge.cases import Call
from grader.model.report import UNEXPLAINED_LISTED, UnexplainedCases
from grader.model.spec import SpecError

if TYPE_CHECKING:
    from grader.judge.checks import CaseOutcome

# A problem's own feature: its sentence ("a response is empty") and whether a call's kwargs have it.
NamedFeature = tuple[str, Callable[[Mapping[str, Any]], bool]]

# At most this many separating features are named per check: with few visible cases many features separate by
# chance, and the first few (the generic order: dtypes, shapes, flags) are the ones a learner can act on.
MAX_FEATURES = 3


def problem_features(problem: object) -> Sequence[NamedFeature]:
    """The named features a problem's case module declares (`CASE_FEATURES`); none for a problem without one (a
    learner pack's problem has no case module). A malformed declaration is the problem author's to fix."""
    declared = getattr(getattr(problem, "cases_module", None), "CASE_FEATURES", ())
    features = list(declared)
    for feature in features:
        if not (
            isinstance(feature, tuple) and len(feature) == 2 and isinstance(feature[0], str) and callable(feature[1])
        ):
            raise SpecError(f"CASE_FEATURES holds {feature!r}: each must be a (sentence, predicate on kwargs) pair")
    return features


def case_features(kwargs: Mapping[str, Any], extra: Sequence[NamedFeature] = ()) -> frozenset[str]:
    """Every feature of one call, from its kwargs, and the problem's named features it has."""
    found: set[str] = set()
    for name, value in kwargs.items():
        found.update(_features_of(name, value))
    found.update(sentence for sentence, has in extra if has(kwargs))
    return frozenset(found)


def _features_of(name: str, value: Any) -> Iterable[str]:
    if value is None:
        yield f"{name} is None"
    elif isinstance(value, bool):
        yield f"{name} is {value}"
    elif isinstance(value, int | float):
        if value == 0:
            yield f"{name} is 0"
        elif value < 0:
            yield f"{name} is negative"
    elif isinstance(value, torch.Tensor):
        yield from _tensor_features(name, value)


def _tensor_features(name: str, value: torch.Tensor) -> Iterable[str]:
    yield f"{name} is {str(value.dtype).removeprefix('torch.')}"
    yield f"{name} is {value.dim()}-D"
    if value.numel() == 0:
        yield f"{name} has a zero-size dimension"
        return
    if value.dtype == torch.bool or not value.is_floating_point():
        # a mask or an index: what it selects is a count, not a value of the case
        selected = value != 0
        if not selected.any():
            yield f"{name} is all zero"
        elif value.dim() >= 2 and not selected.reshape(-1, value.shape[-1]).any(dim=-1).all():
            yield f"{name} has an all-zero row"


@dataclass(frozen=True)
class Separation:
    """The features that separate a check's failing visible cases from its passing ones."""

    features: tuple[str, ...]

    def sentences(self) -> list[str]:
        return [f"fails only where {feature}" for feature in self.features]


def separating(failing: Sequence[frozenset[str]], passing: Sequence[frozenset[str]]) -> Separation:
    """The features every failing case has and no passing one (or the reverse, said negated), in a stable order.

    Nothing separates without both failing and passing cases: a feature of every case says nothing of where."""
    if not failing or not passing:
        return Separation(())
    common_failing = frozenset.intersection(*failing)
    common_passing = frozenset.intersection(*passing)
    seen_passing = frozenset.union(*passing)
    seen_failing = frozenset.union(*failing)
    present = sorted(common_failing - seen_passing)
    absent = sorted(_negated(f) for f in common_passing - seen_failing)
    return Separation(tuple([*present, *absent][:MAX_FEATURES]))


def _negated(feature: str) -> str:
    subject, _, rest = feature.partition(" is ")
    if rest:
        return f"{subject} is not {rest}"
    subject, _, rest = feature.partition(" has ")
    return f"{subject} has no {rest.removeprefix('a ').removeprefix('an ')}" if rest else f"not ({feature})"


@dataclass(frozen=True)
class CheckCases:
    """One check's outcomes, with its calls in the same order when it has calls (None for other kinds)."""

    check: str
    outcomes: Sequence[CaseOutcome]
    calls: Sequence[Call] | None = None


def unexplained_cases(
    checks: Iterable[CheckCases],
    explained: Callable[[CaseOutcome], bool],
    extra: Sequence[NamedFeature] = (),
    localise: bool = False,
) -> list[UnexplainedCases]:
    """By check, the failing cases `explained` leaves out; with `localise`, the features that separate them from
    the check's passing visible cases. Visible cases are named by label, hidden ones only counted."""
    found = []
    for entry in checks:
        left = [i for i, case in enumerate(entry.outcomes) if not case.passed and not explained(case)]
        if not left:
            continue
        labels = [entry.outcomes[i].label for i in left if not entry.outcomes[i].hidden]
        hidden = len(left) - len(labels)
        features = _separating_features(entry, left, extra) if localise else []
        listed = labels[:UNEXPLAINED_LISTED]
        found.append(
            UnexplainedCases(
                check=entry.check, cases=listed, more=len(labels) - len(listed), hidden=hidden, features=features
            )
        )
    return found


def _separating_features(entry: CheckCases, left: list[int], extra: Sequence[NamedFeature]) -> list[str]:
    """What separates the visible cases in `left` from the visible passing ones; a hidden case takes no part."""
    calls = entry.calls
    if calls is None or len(calls) != len(entry.outcomes):
        return []
    shown = [i for i, case in enumerate(entry.outcomes) if not case.hidden and not calls[i].hidden]
    failing = [case_features(calls[i].kwargs, extra) for i in shown if i in left]
    passing = [case_features(calls[i].kwargs, extra) for i in shown if entry.outcomes[i].passed]
    return separating(failing, passing).sentences()
