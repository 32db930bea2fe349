"""Name the misreading behind a learner's failures, and charge each one only in the checks that own it.

A problem declares its known misreadings in `reference/<id>/wrong/<name>.toml` (or `misconceptions.toml`): an id,
a learner-facing explanation and the known-wrong solution that embodies it. The checks that own it are those of the
clauses that solution declares it breaks (its `breaks`), so a misreading's owners are declared once, as clauses.
The judge computes what each of those solutions does on every case (trusted side, cached like the expectations). A
failing case is *explained* by a misconception when the learner's observation matches that solution's on the aspects the
check compares, alone or held together with one or two others (`combinations`). A misconception is *charged* when
it explains a failing case of one of its owner checks. The report's diagnosis is the smallest set of charged
misconceptions found greedily that explains the failing cases, the one explaining most points first; a case's
*points* are its check's points shared among the check's cases.

Follow-through credit, as an exam marker carries an error forward, carries answers: a failing case whose answer
matches a charged misconception's earns its points in every check that does not own that misconception. The owner
checks charge it, and a case an owner check charges to one misconception is never credited there through another.
A raised exception or a missing series carries only when the learner behaves like that misconception on every
case (it is *faithful* to it): otherwise raising the exception a misreading raises would buy the points of cases
the learner fails for another reason. A misconception charged only through a result's form (its type, dtype,
device or a graph flag) carries no value credit into T1-T3: there it credits only failures of form.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from grader.model.misconceptions import Misconception

# A misreading is named, and carried forward, only when it explains at least this share of the failing cases (and
# more of them than the passing cases it contradicts): a trivial or unrelated answer matches some misreading on a
# few cases by accident (a zero where that misreading also gives zero), and must earn nothing by it.
MIN_SHARE = 0.25
# A misreading explaining a smaller share is named still when it explains this share of the failing cases of the
# checks that own it, or every failing case of one of them (those no other misreading explains without it): a port
# that departs in four places loses most cases to one departure, and the others are real departures all the same,
# each seen where its own clause is tested. Named so, it is charged in its owners but carries nothing forward (it is
# *held back*): too few failures are its own to say what else it caused.
OWNER_SHARE = 0.5
# Every failing case of one owner check names it when there are at least this many, each answered as the misreading
# answers: one case is too little to name it by, and so are raising alike (a starter's NotImplementedError fails
# wherever a misreading raises) and a toy's series (a trivial answer's flat curve is some misreading's too).
OWNER_EVIDENCE = 2


@dataclass(frozen=True)
class Explained:
    """One failing case and the misconceptions whose observation it matches: by answering alike, or by failing
    alike (`failures`, a subset); `form_only` when its answer differs from the expected one only in form."""

    check: str
    misconceptions: tuple[str, ...]
    failures: tuple[str, ...] = ()
    form_only: bool = False
    points: float = 1.0  # what the case costs the learner
    together: tuple[str, ...] = ()  # misreadings that explain it only when held together (`combinations`)
    series: bool = False  # a toy's series: one observation of a whole experiment


@dataclass(frozen=True)
class Finding:
    """A charged misconception: how many failing cases it explains, and where."""

    misconception: Misconception
    cases_explained: int
    cases_failing: int
    checks: tuple[str, ...]
    owners_charged: tuple[str, ...]  # the owner checks where it explains a failing case
    cases_contradicted: int = 0  # passing cases where this misreading would have failed
    points_explained: float = 0.0  # the points of the failing cases it explains
    held_back: bool = False  # named for its owner checks alone: it carries no case forward


def diagnose(
    failing: list[Explained], misconceptions: Sequence[Misconception], contradicted: Mapping[str, int] | None = None
) -> list[Finding]:
    """Charged misconceptions, the one explaining most points first: points of the failing cases explained, less
    an average failing case's points for each passing case where the misreading would have failed (a learner who
    passes them does not hold it); declaration order breaks ties. Only those a greedy cover of the failing cases
    takes are kept: one that explains nothing the better ones leave unexplained adds nothing."""
    contradicted = contradicted or {}
    carrying = _carrying(failing)
    findings = []
    for misconception in misconceptions:
        touched = [case for case in failing if misconception.id in case.misconceptions]
        checks = tuple(dict.fromkeys(case.check for case in touched))
        owners_charged = tuple(check for check in checks if check in misconception.owners)
        explained, against = len(touched), contradicted.get(misconception.id, 0)
        carries = misconception.id in carrying
        if owners_charged and (carries or _owns_a_check(misconception, failing)) and explained > against:
            points = sum(case.points for case in touched)
            findings.append(
                Finding(misconception, explained, len(failing), checks, owners_charged, against, points, not carries)
            )
    order = {m.id: i for i, m in enumerate(misconceptions)}
    average = sum(case.points for case in failing) / len(failing) if failing else 0.0
    explains = {
        f.misconception.id: {i for i, case in enumerate(failing) if f.misconception.id in case.misconceptions}
        for f in findings
    }

    def worth(finding: Finding, cases: set[int]) -> float:
        return sum(failing[i].points for i in cases) - average * finding.cases_contradicted

    kept: list[Finding] = []
    covered: set[int] = set()
    pool = sorted(findings, key=lambda f: order[f.misconception.id])
    while pool:
        best = max(pool, key=lambda f: (worth(f, explains[f.misconception.id] - covered), -order[f.misconception.id]))
        if not explains[best.misconception.id] - covered:
            break
        for finding in [best, *_partners(best, pool, failing)]:
            kept.append(finding)
            covered |= explains[finding.misconception.id]
            pool.remove(finding)
    return sorted(kept, key=lambda f: (-worth(f, explains[f.misconception.id]), order[f.misconception.id]))


def _carrying(failing: list[Explained]) -> set[str]:
    """The misreadings that explain `MIN_SHARE` of the failing cases, counting a case a combination explains only
    when every member of it carries too: a departure named for its owner checks alone must not lend its partner the
    cases they explain together, or a trivial answer that matches both by accident would carry through the partner.
    The largest such set: members are dropped until every one left carries by the cases that remain."""
    carrying = candidates(failing)
    while True:
        kept = {
            mid
            for mid in carrying
            if sum(mid in case.misconceptions and set(case.together) <= carrying for case in failing)
            >= MIN_SHARE * len(failing)
        }
        if kept == carrying:
            return kept
        carrying = kept


def _owns_a_check(misconception: Misconception, failing: list[Explained]) -> bool:
    """Whether it explains `OWNER_SHARE` of the failing cases of its owner checks together, or answers as it does in
    every failing case of one owner check that is not a toy's (at least `OWNER_EVIDENCE` of them). Cases another
    misreading explains without it are left out (a wrong ratio in a padded batch with finite padding says nothing
    about how the padding is handled)."""
    mid = misconception.id

    def relevant(checks: Collection[str]) -> list[Explained]:
        return [c for c in failing if c.check in checks and (mid in c.misconceptions or not c.misconceptions)]

    owned = relevant(misconception.owners)
    if sum(mid in c.misconceptions for c in owned) >= OWNER_SHARE * len(owned):
        return True
    for check in misconception.owners:
        cases = relevant({check})
        if (
            len(cases) >= OWNER_EVIDENCE
            and not any(c.series for c in cases)
            and all(mid in c.misconceptions and mid not in c.failures for c in cases)
        ):
            return True
    return False


def _partners(finding: Finding, pool: list[Finding], failing: list[Explained]) -> list[Finding]:
    """The findings held together with `finding` in a case it explains: a combination explains its cases only
    with every member named, so they are taken with it."""
    wanted = {mid for case in failing if finding.misconception.id in case.together for mid in case.together}
    return [f for f in pool if f.misconception.id in wanted and f is not finding]


def candidates(failing: list[Explained]) -> set[str]:
    """Every misconception that explains some failing case."""
    return {mid for case in failing for mid in case.misconceptions}


# The tiers that score values: a misconception of form carries no credit of a value into them.
VALUE_TIERS = frozenset({"T1", "T2", "T3"})


@dataclass(frozen=True)
class Credit:
    """What follow-through may carry in one grade: the charged misconceptions, those the learner is faithful to
    (whose failures carry too), those charged only through a result's form, and those held back (see
    `OWNER_SHARE`), which carry nothing and stop any other from carrying a case they explain."""

    charged: Mapping[str, Misconception]
    faithful: frozenset[str] = frozenset()
    form_charged: frozenset[str] = frozenset()
    held_back: frozenset[str] = frozenset()


NO_CREDIT = Credit({})


def credit_for(
    failing: list[Explained],
    charged: Mapping[str, Misconception],
    contradicted: Mapping[str, int],
    held_back: frozenset[str] = frozenset(),
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
    return Credit(charged, faithful, form_charged, held_back)


def follow_through(
    check: str,
    tier: str,
    answers: tuple[str, ...],
    failures: tuple[str, ...],
    form_only: bool,
    credit: Credit,
) -> str | None:
    """The charged misconception that carries this failing case of `check` forward, if any.

    None when a charged misconception that explains the case owns the check (it charges the case there) or is held
    back; else the first whose answer the case matches (one charged by form only, in a value tier, when the case
    fails by form only), else the first the case fails like, when the learner is faithful to it and it is not one
    of form in a value tier."""
    charged = credit.charged
    explaining = [mid for mid in (*answers, *failures) if mid in charged]
    if any(check in charged[mid].owners or mid in credit.held_back for mid in explaining):
        return None
    value_tier = tier in VALUE_TIERS
    for mid in answers:
        if mid in charged:
            return mid
    for mid in failures:
        if mid in credit.faithful and not (value_tier and mid in credit.form_charged):
            return mid
    return None
