"""Misreadings held together: a solution that makes several known-wrong solutions' edits at once, the bounded search
that matches failures no one misreading explains against it, and the cover that names the fewest misreadings."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import problem_named
from in_process import grade_in_process
from pydantic import ValidationError

from grader.judge.cases import Call
from grader.judge.checks import CaseOutcome, CheckRun, Tally
from grader.judge.combinations import CANDIDATES, MAX_VARIANTS, case_points, find_combined, record
from grader.judge.compare import Mismatch, Outcome
from grader.judge.diagnosis import Credit, Explained, diagnose, follow_through
from grader.judge.expectations import Expectations
from grader.model.generic import CATALOGUE
from grader.model.known_wrong import combined
from grader.model.misconceptions import Fitted, Misconception, Parameter
from grader.model.spec import CheckSpec, DifferentialCheck, Tolerance
from grader.model.verdicts import Verdict

SAMPLES = Path(__file__).resolve().parent / "samples"
FLOAT32 = Misconception(id="float32", solution="f.py", owners=["precision"], explanation="Compute in float64.")
CONSTANT = Misconception(id="constant", solution="c.py", owners=["constant"], explanation="Zero a constant group.")
DDOF = Misconception(id="ddof", solution="d.py", owners=["ddof"], explanation="Divide by G, not G - 1.")


def test_the_cover_ranks_by_points_and_names_a_misreading_owning_its_checks_failures() -> None:
    # float32 explains few, costly cases; constant many cheap ones; ddof repeats what constant explains
    failing = [
        *[Explained("precision", ("float32",), points=4.0)] * 2,
        *[Explained("constant", ("constant", "ddof"), points=0.5)] * 6,
        *[Explained("other", ()) for _ in range(4)],
    ]
    found = diagnose(failing, [DDOF, CONSTANT, FLOAT32])
    assert [f.misconception.id for f in found] == ["float32", "constant"]
    assert [f.points_explained for f in found] == [8.0, 3.0]
    # 2 of 12 failing cases, under a quarter, but every failure of its owner check: named all the same
    assert found[0].cases_explained == 2 and found[0].cases_failing == 12


def test_a_misreading_explaining_a_small_share_outside_its_owners_is_not_named() -> None:
    failing = [Explained("precision", ()), Explained("precision", ()), *[Explained("x", ("float32",))] * 1]
    failing += [Explained("y", ()) for _ in range(5)]
    assert diagnose(failing, [FLOAT32]) == []  # it explains none of its owner's failures, and 1 of 8 overall


def _reference_dir(tmp_path: Path, declarations: dict[str, str]) -> Path:
    (tmp_path / "wrong").mkdir(parents=True)
    (tmp_path / "reference.py").write_text('"""Reference."""\n\ndef f(x):\n    y = x + 1\n    return y * 2\n')
    for stem, edit in declarations.items():
        find, replace = edit.split(" -> ")
        (tmp_path / "wrong" / f"{stem}.toml").write_text(
            f'defect = "d"\nbreaks = ["c"]\nmust_fail = ["c"]\n\n[[edit]]\nfind = "{find}"\nreplace = "{replace}"\n'
        )
    return tmp_path


def test_a_combination_makes_every_edit_or_is_none_when_two_touch_the_same_text(tmp_path: Path) -> None:
    folder = _reference_dir(
        tmp_path / "p", {"plus": "x + 1 -> x + 2", "times": "y * 2 -> y * 3", "again": "x + 1 -> x - 1"}
    )
    path = combined("p", folder, ("plus", "times"), cache=tmp_path / "cache")
    assert path is not None
    namespace: dict[str, Any] = {}
    exec(path.read_text(), namespace)
    assert namespace["f"](1) == 9  # (1 + 2) * 3: both edits
    assert combined("p", folder, ("plus", "again"), cache=tmp_path / "cache") is None


def _check(check_id: str, points: float = 4.0) -> CheckSpec:
    return DifferentialCheck(
        id=check_id, tier="T2", kind="differential", title="t", points=points, clause="c", cases="c", compare=["values"]
    )


def _tensor(value: float) -> dict[str, Any]:
    item = {"kind": "tensor", "value": torch.tensor([value]), "requires_grad": False, "has_grad_fn": False}
    return {"output": {**item, "device": "cpu"}}


class FakeContext:
    """Cases answer 10 * index where the reference answers index; only float32 and constant held together do."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, ...]] = []

    def cases(self, check: CheckSpec) -> list[Call]:
        return [Call("f", {}, label=str(i)) for i in range(8)]

    def tolerances(self) -> dict[str, Tolerance]:
        return {"float32": Tolerance(rtol=1e-6, atol=1e-6)}

    def expected_float32(self, check: CheckSpec, index: int, call: Call) -> dict[str, Any] | None:
        return None

    def expected(self, check: CheckSpec, index: int, call: Call) -> dict[str, Any]:
        return _tensor(float(index))

    def misconception_observations(self, check: CheckSpec, index: int) -> dict[str, dict[str, Any]]:
        return {}  # no misreading alone moves an answer the learner's way

    def combination_observation(
        self, check: CheckSpec, index: int, ids: tuple[str, ...], fitted: Fitted = ()
    ) -> dict[str, Any] | None:
        self.ran.append(ids)
        return _tensor(10.0 * index if set(ids) == {"float32", "constant"} else -1.0)


def _failing(index: int, explained: tuple[str, ...] = ()) -> CaseOutcome:
    return CaseOutcome(
        str(index),
        False,
        Outcome(Verdict.FAIL, Mismatch.of("values differ")),
        explained_by=explained,
        answer=_tensor(10.0 * index),
    )


def test_failures_no_misreading_explains_alone_are_explained_by_their_pair() -> None:
    precision = CheckRun(_check("precision"), 0.0, Tally([_failing(0, ("float32",))]))
    constant = CheckRun(_check("constant", 8.0), 0.0, Tally([_failing(0), _failing(1), _failing(2, ("constant",))]))
    context = FakeContext()
    found = find_combined(context, [precision, constant], [DDOF, CONSTANT, FLOAT32], lambda ids: {})
    assert [c.ids for c in found] == [("float32", "constant")]  # the one explaining more points alone first
    assert constant.tally is not None
    before = list(constant.tally.outcomes)
    undo = record(found)
    assert [case.explained_by for case in constant.tally.outcomes] == [
        ("float32", "constant"),
        ("float32", "constant"),
        ("constant",),
    ]
    assert len(set(context.ran)) <= MAX_VARIANTS
    assert case_points(constant) == [8.0 / 3] * 3
    # every failing case is now explained: the two are named together
    failing = [
        Explained(run.check.id, case.explained_by, points=points)
        for run in (precision, constant)
        if run.tally is not None
        for case, points in zip(run.tally.outcomes, case_points(run), strict=True)
    ]
    assert {f.misconception.id for f in diagnose(failing, [DDOF, CONSTANT, FLOAT32])} == {"constant", "float32"}
    undo()
    assert constant.tally.outcomes == before and [c.explained_by for c in constant.tally.outcomes][0] == ()


class LeaningContext(FakeContext):
    """Cases answer 10 * index + 1 where the reference answers index: only `explains` and `near` held together
    do. `near` alone answers 10 * index, near the learner's; `explains` alone explains case 0; as many misreadings
    as the search takes candidates, declared before `near`, own the same check and answer what the reference does."""

    def misconception_observations(self, check: CheckSpec, index: int) -> dict[str, dict[str, Any]]:
        found = {f"owner{k}": _tensor(float(index)) for k in range(CANDIDATES)}
        return {**found, "near": _tensor(10.0 * index), "explains": _tensor(-1.0)}

    def combination_observation(
        self, check: CheckSpec, index: int, ids: tuple[str, ...], fitted: Fitted = ()
    ) -> dict[str, Any] | None:
        self.ran.append(ids)
        return _tensor(10.0 * index + 1 if set(ids) == {"explains", "near"} else -1.0)


def test_a_misreading_that_moves_answers_the_learners_way_is_combined_first() -> None:
    # a library port departs twice: one departure explains some cases alone, the other none (its partner's moves
    # every answer off), and CANDIDATES misreadings own as many unexplained points; the cap would leave `near` out
    def owner(mid: str) -> Misconception:
        return Misconception(id=mid, solution=f"{mid}.py", owners=["oracle"], explanation="Do as the statement says.")

    explains, near = owner("explains"), owner("near")
    misreadings = [explains, *(owner(f"owner{k}") for k in range(CANDIDATES)), near]
    run = CheckRun(_check("oracle"), 0.0, Tally([_failing(0, ("explains",)), *(_leaning(i) for i in range(1, 5))]))
    asked: list[set[str]] = []

    def contradicting(ids: set[str]) -> dict[str, int]:
        asked.append(ids)
        return {}

    found = find_combined(LeaningContext(), [run], misreadings, contradicting)
    assert [c.ids for c in found] == [("explains", "near")]
    assert [index for _, index, _ in found[0].cases] == [1, 2, 3, 4]
    assert "near" in asked[0]  # a leaning misreading is asked about contradictions like the ones that explain
    # a passing case that `near`'s own solution fails puts it back behind the owners: the search misses the pair
    assert find_combined(LeaningContext(), [run], misreadings, lambda ids: {"near": 1}) == []


def _leaning(index: int) -> CaseOutcome:
    return CaseOutcome(
        str(index), False, Outcome(Verdict.FAIL, Mismatch.of("values differ")), answer=_tensor(10.0 * index + 1)
    )


def test_nothing_is_run_when_every_failure_is_explained_alone() -> None:
    run = CheckRun(_check("precision"), 0.0, Tally([_failing(0, ("float32",))]))
    context = FakeContext()
    assert find_combined(context, [run], [FLOAT32, CONSTANT], lambda ids: {}) == []
    assert context.ran == []


def test_a_misreading_named_for_its_owners_alone_charges_there_and_carries_nothing() -> None:
    failing = [Explained("precision", ("float32",)), Explained("oracle", ("float32",))]
    failing += [Explained("constant", ("constant",)) for _ in range(8)]
    found = {f.misconception.id: f for f in diagnose(failing, [FLOAT32, CONSTANT])}
    assert found["float32"].held_back and not found["constant"].held_back  # 2 of 10 failing cases, 8 of 10
    credit = Credit({"float32": FLOAT32, "constant": CONSTANT}, held_back=frozenset({"float32"}))
    assert follow_through("oracle", "T1", ("float32",), (), False, credit) is None
    assert follow_through("oracle", "T1", ("float32", "constant"), (), False, credit) is None  # not through another
    assert follow_through("oracle", "T1", ("constant",), (), False, credit) == "constant"


def test_members_of_a_combination_are_named_together() -> None:
    # constant explains most alone; three cases only float32 and constant held together explain
    failing = [Explained("constant", ("constant",)) for _ in range(6)]
    failing += [Explained("precision", ("constant", "float32"), together=("constant", "float32")) for _ in range(3)]
    found = [f.misconception.id for f in diagnose(failing, [CONSTANT, FLOAT32])]
    assert found == ["constant", "float32"]
    alone = [*failing[:6], *[Explained("precision", ("constant", "float32")) for _ in range(3)]]
    assert [f.misconception.id for f in diagnose(alone, [CONSTANT, FLOAT32])] == ["constant"]  # it adds nothing


@pytest.mark.parametrize("generic", sorted(CATALOGUE))
def test_a_generic_explanation_is_short(generic: str) -> None:
    text = CATALOGUE[generic].explanation  # type: ignore[index]
    assert len(text) < 400 and 1 <= len(re.findall(r"[.!?](?=\s|$)", text)) <= 2


def test_float32_arithmetic_rounds_float64_inputs_and_hands_back_float64() -> None:
    def scale(x: torch.Tensor, k: float) -> tuple[torch.Tensor, torch.Tensor]:
        return x * k, (x * k).sum()

    x = torch.tensor([0.1], dtype=torch.float64, requires_grad=True)
    y, total = CATALOGUE["float32_arithmetic"].transform(scale)(x=x, k=1.0)
    assert y.dtype == torch.float64 and total.dtype == torch.float64
    assert y.item() != 0.1 and y.item() == float(torch.tensor(0.1, dtype=torch.float32))
    total.backward()  # the gradient reaches the float64 input through the rounding
    assert x.grad is not None and x.grad.dtype == torch.float64
    same = CATALOGUE["float32_arithmetic"].transform(scale)(x=x.detach().float(), k=3.0)[0]
    assert same.dtype == torch.float32  # a float32 input is left as it is
    detached = CATALOGUE["outputs_detached"].transform(scale)(x=x, k=3.0)
    assert not any(t.requires_grad for t in detached) and type(detached) is tuple


def test_a_generic_misreading_may_keep_the_stock_explanation() -> None:
    stock = Misconception(id="f", solution="f.py", owners=["precision"], generic="float32_arithmetic")
    assert stock.explanation == CATALOGUE["float32_arithmetic"].explanation
    with pytest.raises(ValidationError):
        Misconception(id="f", solution="f.py", owners=["precision"])  # a declared one explains itself


def test_a_parameter_is_fitted_from_the_answers_and_named(tmp_path: Path) -> None:
    """A TRL-style grpo_advantages (ddof 1 always, 1e-4 added to the spread whatever eps says) ignores eps with a
    constant of its own, which the declared misreading (eps left out, a constant 0) does not match anywhere:
    diagnosis fits the constant and names it."""
    problem = problem_named("grpo_advantages")
    expectations = Expectations(problem, problem.grading_seeds[0])
    (report,) = grade_in_process(problem, [SAMPLES / "grpo_trl_style.py"], expectations)
    found = {d.id: d for d in report.diagnosis}
    summary = [(d.id, d.cases_explained, d.cases_failing, d.explanation[-40:]) for d in report.diagnosis]
    assert report.diagnosis[0].id == "eps_dropped", summary
    assert found["eps_dropped"].explanation.endswith("It behaves as if eps = 0.0001."), summary
    assert all("behaves as if" not in d.explanation for d in report.diagnosis[1:]), summary
    # the other departure is Bessel's correction always, not a ddof read backwards (which answers alike wherever
    # unbiased=False, and the other way round where the file applies the correction as asked)
    assert set(found) == {"eps_dropped", "bessel_always"}, summary
    # each departure is charged once, in its owner checks, and nowhere else
    owners = {owner for mid in found for owner in found[mid].owners}
    points = {check.id: check.points for check in problem.spec.checks}
    lost = {c.id: c.max_score - c.score for t in report.tiers for c in t.checks if c.score < c.max_score}
    assert lost == {owner: points[owner] for owner in owners}, summary


def test_a_parameter_edit_sets_the_value_where_its_text_occurs_once() -> None:
    parameter = Parameter(name="eps", find="/ sigma\n", replace="/ (sigma + {value})\n", values=[1e-4, 1e-8])
    assert parameter.edit("a = b / sigma\n", 1e-4) == "a = b / (sigma + 0.0001)\n"
    assert parameter.edit("a = b / sigma\nc = d / sigma\n", 1e-4) is None  # ambiguous: no one place to set it
    assert parameter.sentence(1e-4) == "It behaves as if eps = 0.0001."
    with pytest.raises(ValidationError):
        Misconception(id="e", generic="input_mutated", breaks=["c"], owners=["c"], parameter=parameter)
