"""Every problem's declared misconceptions: the authoring rules `validate` enforces hold and catch what they should,
and each misreading's outputs are neither the reference's nor a trivial answer's."""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT, expectations_of

from grader.course.authoring import SENTENCE_END, explanation_findings, misreading_findings
from grader.course.new_problem import write_skeleton
from grader.judge.cases import Call
from grader.judge.compare import fails_alike, judge_case, same_as
from grader.judge.expectations import single_threaded
from grader.model.generic import CATALOGUE
from grader.model.misconceptions import Misconception
from grader.model.problem import Problem, list_problems, load_module
from grader.model.spec import CheckSpec, SpecError
from grader.model.verdicts import Verdict
from grader.worker.protocol import observe_call


@functools.cache
def _problem(problem_id: str) -> Problem:
    return Problem(problem_id, ROOT)


# every problem's misreadings, as the loader reads them from wrong/*.toml and misconceptions.toml alike
PROBLEMS = [p for p in list_problems(ROOT) if _problem(p).misconceptions]
DECLARED = [(p, m.id) for p in PROBLEMS for m in _problem(p).misconceptions]


def _misconception(problem_id: str, misconception_id: str) -> Misconception:
    (found,) = [m for m in _problem(problem_id).misconceptions if m.id == misconception_id]
    return found


def test_some_problem_declares_misconceptions() -> None:
    assert PROBLEMS, "no problem declares a misreading"


# ---------------------------------------------------------------- the authoring rules, which `validate` enforces


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_misreadings_keep_the_authoring_rules(problem_id: str) -> None:
    """What `validate` checks without grading: explanations, ids, owners (`course/authoring.py`)."""
    assert not misreading_findings(_problem(problem_id))


def _explained(explanation: str, **extra: Any) -> Misconception:
    fields = {"id": "sigma_floored", "solution": "max_sigma_eps.py", "owners": ["eps_placement"], **extra}
    return Misconception(explanation=explanation, **fields)


@pytest.mark.parametrize(
    ("explanation", "rule"),
    [
        ("The statement adds eps. " * 20, "characters"),
        ("The statement adds eps outside the root", "end its last sentence"),
        ("One. Two. Three.", "3 sentences"),
        ("Seed 4409 shows it.", "quotes a hidden seed"),
        ("As max_sigma_eps does.", "names the known-wrong file"),
    ],
)
def test_each_explanation_rule_names_what_is_wrong(explanation: str, rule: str) -> None:
    found = explanation_findings(_explained(explanation), [4409, 52])
    assert any(rule in finding for finding in found), found


def test_a_good_explanation_breaks_no_rule_and_an_id_that_repeats_its_file_does() -> None:
    text = "`torch.std` divides by G - 1, not G; eps is 1e-6. The statement divides by G."
    assert explanation_findings(_explained(text), [4409]) == []
    assert explanation_findings(_explained(text, id="max_sigma_eps"), [4409]) == [
        "its id repeats the known-wrong file's name; name the misreading instead"
    ]


def test_sentence_counter_ignores_dots_inside_code_and_numbers() -> None:
    assert len(SENTENCE_END.findall("`torch.std` divides by G - 1, not G; eps is 1e-6.")) == 1
    assert len(SENTENCE_END.findall("One. Two. Three.")) == 3


# ---------------------------------------------------------------- outputs are neither the reference's nor trivial


@dataclass(frozen=True)
class Case:
    check: CheckSpec
    call: Call
    expected: dict[str, Any]


@functools.cache
def _public_cases(problem_id: str) -> tuple[Case, ...]:
    """Every differential case of the public seed with its expected observation."""
    problem = _problem(problem_id)
    expectations = expectations_of(problem_id, problem.spec.public_seed)  # shared with every module
    return tuple(
        Case(check, call, expectations.observation(check.expected, check.cases, index))
        for check in problem.spec.checks
        if check.cases
        for index, call in enumerate(expectations.cases(check.cases))
    )


def _solution_functions(problem: Problem, solution: str) -> dict[str, Callable[..., Any]]:
    module = load_module(
        f"paperleet_test_misconception_{problem.id}_{Path(solution).stem}", problem.known_wrong_file(solution)
    )
    return {f.name: getattr(module, f.name) for f in problem.spec.functions}


def _observe(functions: dict[str, Callable[..., Any]], call: Call) -> dict[str, Any]:
    with single_threaded():
        return observe_call(functions[call.function], call.kwargs, list(call.requires_grad), call.backward)


def _items(observation: dict[str, Any]) -> list[dict[str, Any]]:
    output = observation["output"]
    return output["items"] if output.get("kind") == "sequence" else [output]


def _values(item: dict[str, Any]) -> torch.Tensor | None:
    """The item's values as a flat float64 tensor (None when it is neither a tensor nor a number)."""
    if item.get("kind") == "tensor":
        value = item["value"]
        return value.to(torch.float64).flatten() if not value.is_complex() else None
    if item.get("kind") == "python" and isinstance(item.get("value"), (bool, int, float)):
        return torch.tensor([float(item["value"])], dtype=torch.float64)
    return None


def _constants(observation: dict[str, Any]) -> tuple[float | None, ...] | None:
    """Per returned item, the one value all its elements hold (None for an empty item); None when some item
    varies or is not numeric."""
    found: list[float | None] = []
    for item in _items(observation):
        values = _values(item)
        if values is None:
            return None
        if values.numel() == 0:
            found.append(None)
            continue
        first = values[0]
        same = (values == first) | (values.isnan() & first.isnan())
        if not bool(same.all()):
            return None
        found.append(float(first))
    return tuple(found)


def _same_constants(a: tuple[float | None, ...], b: tuple[float | None, ...]) -> bool:
    return len(a) == len(b) and all(
        x is None or y is None or x == y or (x != x and y != y) for x, y in zip(a, b, strict=True)
    )


def _same_as_input(item: dict[str, Any], value: Any) -> bool:
    if item.get("kind") == "python":
        return type(value) is type(item.get("value")) and value == item.get("value")
    if item.get("kind") != "tensor" or type(value) is not torch.Tensor:
        return False
    mine = item["value"]
    return mine.shape == value.shape and mine.dtype == value.dtype and _equal_nan(mine, value)


def _equal_nan(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if not a.is_floating_point():
        return torch.equal(a, b)
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.masked_fill(a.isnan(), 0), b.masked_fill(b.isnan(), 0))


def _echoes_an_input(observation: dict[str, Any], call: Call) -> bool:
    return all(any(_same_as_input(item, v) for v in call.kwargs.values()) for item in _items(observation))


def _trivial_kinds(observations: list[tuple[Case, dict[str, Any]]]) -> Iterator[str]:
    """The trivial answers (always raising, one constant, an input echoed) that match wherever the solution
    returns; raising where the reference raises does not make a constant answer any less trivial."""
    returned = [(case, obs) for case, obs in observations if "raised" not in obs]
    if not returned:
        yield "always raises"
        return
    # one constant per function: a problem's functions may return different numbers of results
    constants = [(case.call.function, c) for case, obs in returned if (c := _constants(obs)) is not None]
    first = dict(reversed(constants))
    if len(constants) == len(returned) and all(_same_constants(first[f], c) for f, c in constants):
        yield f"the same constant {constants[0][1]} everywhere"
    if all(_echoes_an_input(obs, case.call) for case, obs in returned):
        yield "an input echoed back"


def _replace_output(observation: dict[str, Any], make: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, Any]:
    def swap(item: dict[str, Any]) -> dict[str, Any]:
        return {**item, "value": make(item["value"])} if item.get("kind") == "tensor" else item

    output = observation["output"]
    if output.get("kind") == "sequence":
        return {**observation, "output": {**output, "items": [swap(i) for i in output["items"]]}}
    return {**observation, "output": swap(output)}


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_trivial_detector_flags_constant_answers_and_spares_the_reference(problem_id: str) -> None:
    cases = [c for c in _public_cases(problem_id) if "raised" not in c.expected]
    reference = [(c, c.expected) for c in cases]
    assert not list(_trivial_kinds(reference))
    for fill in (0.0, 1.0, float("nan")):
        filled = functools.partial(torch.full_like, fill_value=fill)
        constant = [(c, _replace_output(c.expected, filled)) for c in cases]
        assert any("constant" in kind for kind in _trivial_kinds(constant)), fill
    first_input = [
        (
            c,
            {
                "output": {
                    "kind": "tensor",
                    "value": next(v for v in c.call.kwargs.values() if type(v) is torch.Tensor).clone(),
                    "requires_grad": False,
                    "has_grad_fn": False,
                    "device": "cpu",
                }
            },
        )
        for c in cases
    ]
    assert "an input echoed back" in list(_trivial_kinds(first_input))


@pytest.mark.parametrize(("problem_id", "misconception_id"), DECLARED, ids=[f"{p}:{m}" for p, m in DECLARED])
def test_misconception_differs_from_the_reference_and_from_trivial_answers(
    problem_id: str, misconception_id: str
) -> None:
    problem = _problem(problem_id)
    (misconception,) = [m for m in problem.misconceptions if m.id == misconception_id]
    functions = problem.misconception_functions(misconception)  # a generic's without a solution: its transform
    observations = [(case, _observe(functions, case.call)) for case in _public_cases(problem_id)]
    differing = {
        case.check.id
        for case, obs in observations
        if judge_case(
            case.call.function, case.call.kwargs, obs, case.expected, case.check.compare, problem.tolerances
        ).verdict
        != Verdict.PASS
    }
    assert differing, f"{misconception_id}: behaves like the reference on every public case"
    # an owner is charged only when one of its cases fails; a toy-only owner set is left to `validate`
    (owners,) = [m.owners for m in problem.misconceptions if m.id == misconception_id]
    differential_owners = {c.id for c in problem.spec.checks if c.id in owners and c.cases}
    if differential_owners:
        assert differing & differential_owners, (
            f"{misconception_id}: no public case of its owners {sorted(differential_owners)} tells it from the "
            f"reference (it differs only in {sorted(differing)})"
        )
    trivial = list(_trivial_kinds(observations))
    assert not trivial, f"{misconception_id}: on every public case its answer is {trivial[0]}"


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_a_convention_names_a_library_the_problem_ports(problem_id: str) -> None:
    problem = _problem(problem_id)
    ports = sorted((problem.reference_dir / "ports").glob("*.toml"))
    libraries = {tomllib.loads(path.read_text())["library"] for path in ports}
    for misconception in problem.misconceptions:
        convention = misconception.convention
        if convention is None:
            continue
        named = {library for library in libraries if library in convention.library}
        assert named, f"{misconception.id}: {convention.library!r} names none of the ported {sorted(libraries)}"
        sentence = convention.sentence()
        assert sentence.startswith(convention.library) and "this statement" in sentence


GENERIC = [(p, m) for p, m in DECLARED if _misconception(p, m).generic and _misconception(p, m).solution]


@pytest.mark.parametrize(("problem_id", "misconception_id"), GENERIC, ids=[f"{p}:{m}" for p, m in GENERIC])
def test_a_generic_misreading_transform_behaves_as_its_solution_in_its_owner_checks(
    problem_id: str, misconception_id: str
) -> None:
    """Its transform stands in for its solution's edits wherever it is held together with another misreading."""
    problem = _problem(problem_id)
    (misconception,) = [m for m in problem.misconceptions if m.id == misconception_id]
    assert misconception.generic is not None and misconception.solution is not None
    transform = CATALOGUE[misconception.generic].transform
    wrapped = {name: transform(function) for name, function in problem.reference.items()}
    solution = _solution_functions(problem, misconception.solution)
    rounded = misconception.generic == "float32_arithmetic"  # matched at float32's precision, as diagnosis does
    owned = [case for case in _public_cases(problem_id) if case.check.id in misconception.owners]
    assert owned, f"{misconception_id}: no public case of its owners {misconception.owners}"
    for case in owned:
        call = case.call
        aspects = call.aspects(case.check.compare)
        mine, theirs = _observe(wrapped, call), _observe(solution, call)
        if "raised" in mine or "raised" in theirs:
            assert mine.get("raised", {}).get("type") == theirs.get("raised", {}).get("type"), call.label
            continue
        alike = same_as(call.function, call.kwargs, mine, theirs, aspects, problem.tolerances, rounded)
        # or both fail backward the same way (a result cut from the graph has nothing to differentiate)
        assert alike or fails_alike(call.function, call.kwargs, mine, theirs, aspects, problem.tolerances), call.label


# ---------------------------------------------------------------- one file per misreading, or misconceptions.toml


def _skeleton(tmp_path: Path) -> Path:
    """A fresh skeleton problem's reference folder; its one misreading is declared in its known-wrong file."""
    write_skeleton(tmp_path, "demo")
    return tmp_path / "reference" / "demo"


def _listed(reference: Path, id_: str, solution: str = "scale_ignored.py") -> None:
    explanation = (
        "The statement multiplies the centred values by scale. Leaving scale out is right only when scale is 1."
    )
    reference.joinpath("misconceptions.toml").write_text(
        f'[[misconceptions]]\nid = "{id_}"\nsolution = "{solution}"\nexplanation = "{explanation}"\n'
    )


def test_both_forms_load_to_the_same_misconception(tmp_path: Path) -> None:
    reference = _skeleton(tmp_path)
    (inline,) = Problem("demo", tmp_path).misconceptions
    declaration = reference / "wrong" / "scale_ignored.toml"
    text = declaration.read_text()
    declaration.write_text(text[: text.index("\n# the misreading")] + "\n")
    _listed(reference, "scale_dropped")
    (listed,) = Problem("demo", tmp_path).misconceptions
    assert listed.model_dump() == inline.model_dump()


@pytest.mark.parametrize("listed_id", ["scale_dropped", "scale_forgotten"])
def test_a_misreading_declared_twice_is_rejected_naming_both_places(tmp_path: Path, listed_id: str) -> None:
    """By its id, or by the known-wrong file that embodies it under another id."""
    reference = _skeleton(tmp_path)
    _listed(reference, listed_id)
    twice = "'scale_dropped'" if listed_id == "scale_dropped" else "'scale_ignored.py'"
    with pytest.raises(SpecError, match=f"misreading {twice} is declared twice \\(and in .*misconceptions.toml\\)"):
        _ = Problem("demo", tmp_path).misconceptions
