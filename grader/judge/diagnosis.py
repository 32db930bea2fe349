"""Name the misreading behind a learner's failures, and charge each one only in the checks that own it.

A problem declares its known misreadings in `reference/<id>/misconceptions.toml`: an id, a learner-facing
explanation and the known-wrong solution that embodies it. The checks that own it are those of the clauses that
solution declares it breaks (its `breaks`), so a misreading's owners are declared once, as clauses. The judge
computes what each of those solutions does on every case (trusted side, cached like the expectations). A failing
case is *explained* by a misconception when the learner's observation matches that solution's on the aspects the
check compares. A misconception is *charged* when it explains a failing case of one of its owner checks; the
report's diagnosis lists the charged ones, the one explaining most failing cases first.

Follow-through credit, as an exam marker carries an error forward, carries answers: a failing case whose answer
matches a charged misconception's earns its points in every check that does not own that misconception. The owner
checks charge it, and a case an owner check charges to one misconception is never credited there through another.
A raised exception or a missing series carries only when the learner behaves like that misconception on every
case (it is *faithful* to it): otherwise raising the exception a misreading raises would buy the points of cases
the learner fails for another reason. A misconception charged only through a result's form (its type, dtype,
device or a graph flag) carries no value credit into T1-T3: there it credits only failures of form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from grader.model.misconceptions import Misconception

# A misreading is named, and carried forward, only when it explains at least this share of the failing cases (and
# more of them than the passing cases it contradicts): a trivial or unrelated answer matches some misreading on a
# few cases by accident (a zero where that misreading also gives zero), and must earn nothing by it.
MIN_SHARE = 0.25


@dataclass(frozen=True)
class Explained:
    """One failing case and the misconceptions whose observation it matches: by answering alike, or by failing
    alike (`failures`, a subset); `form_only` when its answer differs from the expected one only in form."""

    check: str
    misconceptions: tuple[str, ...]
    failures: tuple[str, ...] = ()
    form_only: bool = False


@dataclass(frozen=True)
class Finding:
    """A charged misconception: how many failing cases it explains, and where."""

    misconception: Misconception
    cases_explained: int
    cases_failing: int
    checks: tuple[str, ...]
    owners_charged: tuple[str, ...]  # the owner checks where it explains a failing case
    cases_contradicted: int = 0  # passing cases where this misreading would have failed


def diagnose(
    failing: list[Explained], misconceptions: Sequence[Misconception], contradicted: Mapping[str, int] | None = None
) -> list[Finding]:
    """Charged misconceptions, best explanation first: most failing cases explained, less the passing cases where
    the misreading would have failed (a learner who passes them does not hold it); declaration order breaks ties."""
    contradicted = contradicted or {}
    findings = []
    for misconception in misconceptions:
        touched = [case.check for case in failing if misconception.id in case.misconceptions]
        checks = tuple(dict.fromkeys(touched))
        owners_charged = tuple(check for check in checks if check in misconception.owners)
        explained, against = len(touched), contradicted.get(misconception.id, 0)
        if owners_charged and explained >= MIN_SHARE * len(failing) and explained > against:
            findings.append(Finding(misconception, explained, len(failing), checks, owners_charged, against))
    order = {m.id: i for i, m in enumerate(misconceptions)}
    ranked = sorted(findings, key=lambda f: (f.cases_contradicted - f.cases_explained, order[f.misconception.id]))
    # a misreading that explains no failing case a better-ranked one leaves unexplained adds nothing: left out
    kept: list[Finding] = []
    covered: set[int] = set()
    for finding in ranked:
        mine = {i for i, case in enumerate(failing) if finding.misconception.id in case.misconceptions}
        if mine - covered:
            kept.append(finding)
            covered |= mine
    return kept


def candidates(failing: list[Explained]) -> set[str]:
    """Every misconception that explains some failing case."""
    return {mid for case in failing for mid in case.misconceptions}


# The tiers that score values: a misconception of form carries no credit of a value into them.
VALUE_TIERS = frozenset({"T1", "T2", "T3"})


@dataclass(frozen=True)
class Credit:
    """What follow-through may carry in one grade: the charged misconceptions, those the learner is faithful to
    (whose failures carry too), and those charged only through a result's form."""

    charged: Mapping[str, Misconception]
    faithful: frozenset[str] = frozenset()
    form_charged: frozenset[str] = frozenset()


NO_CREDIT = Credit({})


def credit_for(
    failing: list[Explained], charged: Mapping[str, Misconception], contradicted: Mapping[str, int]
) -> Credit:
    """The credit a grade's charged misconceptions carry, from every failing case of the grade."""
    faithful = frozenset(
        mid for mid in charged if contradicted.get(mid, 0) == 0 and all(mid in case.misconceptions for case in failing)
    )
    form_charged = frozenset(
        mid
        for mid, misconception in charged.items()
        if all(
            case.form_only and mid not in case.failures
            for case in failing
            if case.check in misconception.owners and mid in case.misconceptions
        )
    )
    return Credit(charged, faithful, form_charged)


def follow_through(
    check: str,
    tier: str,
    answers: tuple[str, ...],
    failures: tuple[str, ...],
    form_only: bool,
    credit: Credit,
) -> str | None:
    """The charged misconception that carries this failing case of `check` forward, if any.

    None when a charged misconception that explains the case owns the check (it charges the case there); else the
    first whose answer the case matches (one charged by form only, in a value tier, when the case fails by form
    only), else the first the case fails like, when the learner is faithful to it and it is not one of form in a
    value tier."""
    charged = credit.charged
    explaining = [mid for mid in (*answers, *failures) if mid in charged]
    if any(check in charged[mid].owners for mid in explaining):
        return None
    value_tier = tier in VALUE_TIERS
    for mid in answers:
        if mid in charged:
            return mid
    for mid in failures:
        if mid in credit.faithful and not (value_tier and mid in credit.form_charged):
            return mid
    return None
