"""Every problem's declared misconceptions: well-formed data tied to real checks and known-wrong solutions, with
short learner-facing explanations, and outputs that are neither the reference's nor a trivial answer's."""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT

from grader.judge.cases import Call
from grader.judge.compare import fails_alike, judge_case, same_as
from grader.judge.expectations import Expectations, single_threaded
from grader.model.generic import CATALOGUE
from grader.model.problem import Problem, list_problems, load_module
from grader.model.spec import CheckSpec
from grader.model.verdicts import Verdict
from grader.worker.protocol import observe_call

FIELDS = {"id", "solution", "explanation"}  # the owners are derived: the checks of the clauses it breaks
# a library's deliberate convention; a generic misreading it is; a parameter fitted to the learner's answers
OPTIONAL_FIELDS = {"convention", "generic", "parameter"}
# a generic misreading may have no solution (the reference, transformed, is it) and keep the stock explanation:
# it names the clauses it breaks itself
GENERIC_FIELDS = {"id", "generic", "breaks"}
ID_PATTERN = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
MAX_EXPLANATION_CHARS = 400
# A sentence ends at . ! or ? followed by whitespace or the end; `torch.std` and 1e-6 end none.
SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def _declaration_path(problem_id: str) -> Path:
    return ROOT / "reference" / problem_id / "misconceptions.toml"


PROBLEMS = [p for p in list_problems(ROOT) if _declaration_path(p).is_file()]


def _raw(problem_id: str) -> dict[str, Any]:
    return tomllib.loads(_declaration_path(problem_id).read_text())


def _entries(problem_id: str) -> list[dict[str, Any]]:
    entries = _raw(problem_id).get("misconceptions", [])
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _declared() -> list[tuple[str, str]]:
    """(problem, misconception id) pairs; a file that does not parse declares none here and fails the
    structure test instead of breaking collection."""
    pairs = []
    for problem_id in PROBLEMS:
        try:
            pairs += [(problem_id, str(e.get("id"))) for e in _entries(problem_id)]
        except tomllib.TOMLDecodeError:
            continue
    return list(dict.fromkeys(pairs))


DECLARED = _declared()


@functools.cache
def _problem(problem_id: str) -> Problem:
    return Problem(problem_id, ROOT)


def _entry(problem_id: str, misconception_id: str) -> dict[str, Any]:
    (entry,) = [e for e in _entries(problem_id) if e.get("id") == misconception_id]
    return entry


def test_some_problem_declares_misconceptions() -> None:
    assert PROBLEMS, "no reference/<id>/misconceptions.toml found for any problem"


# ---------------------------------------------------------------- structure


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_file_holds_only_misconception_tables_with_the_four_fields(problem_id: str) -> None:
    raw = _raw(problem_id)
    assert set(raw) == {"misconceptions"}, f"unknown top-level keys {sorted(set(raw) - {'misconceptions'})}"
    entries = raw["misconceptions"]
    assert isinstance(entries, list) and entries, "`misconceptions` must be a non-empty array of tables"
    for entry in entries:
        assert isinstance(entry, dict), f"{entry!r} is not a table"
        if "solution" not in entry:
            assert GENERIC_FIELDS <= set(entry) <= GENERIC_FIELDS | {"explanation"}, sorted(entry)
            continue
        assert FIELDS <= set(entry) <= FIELDS | OPTIONAL_FIELDS, (
            f"{entry.get('id')}: keys {sorted(entry)} must be {sorted(FIELDS)}, and maybe {sorted(OPTIONAL_FIELDS)}"
        )
        assert isinstance(entry["id"], str) and isinstance(entry["solution"], str)
        assert isinstance(entry["explanation"], str)


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_ids_are_unique_names_of_the_misreading(problem_id: str) -> None:
    ids = [e["id"] for e in _entries(problem_id)]
    assert len(ids) == len(set(ids)), f"duplicate ids {sorted({i for i in ids if ids.count(i) > 1})}"
    for entry in _entries(problem_id):
        assert ID_PATTERN.fullmatch(entry["id"]), f"{entry['id']!r} is not lowercase_with_underscores"
        # the id names the misreading; the file that embodies it is named separately
        assert entry["id"] != Path(entry.get("solution", "")).stem, f"{entry['id']}: the id repeats the file name"


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_each_solution_is_a_distinct_known_wrong_file(problem_id: str) -> None:
    wrong_dir = _problem(problem_id).reference_dir / "wrong"
    solutions = [e["solution"] for e in _entries(problem_id) if "solution" in e]
    assert len(solutions) == len(set(solutions)), "one known-wrong file embodies two misconceptions"
    for name in solutions:
        assert Path(name).name == name and name.endswith(".py"), f"{name!r} must be a file name under wrong/"
        assert (wrong_dir / name).with_suffix(".toml").is_file(), f"{name} is not declared in {wrong_dir}"


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_owners_are_checks_the_solution_declares_it_fails(problem_id: str) -> None:
    problem = _problem(problem_id)
    for misconception in problem.misconceptions:
        owners = misconception.owners
        assert len(owners) == len(set(owners)), f"{misconception.id}: an owner is listed twice"
        if misconception.solution is None:  # a generic misreading's owners are those of the clauses it names
            assert set(owners) == {c.id for c in problem.spec.checks if c.clause in misconception.breaks}
            continue
        (known,) = [k for k in problem.known_wrong() if k.path.name == misconception.solution]
        assert set(owners) == {c.id for c in problem.spec.checks if c.clause in known.breaks}, misconception.id
        undeclared = set(owners) - known.must_fail - known.may_fail
        assert not undeclared, (
            f"{misconception.id}: owners {sorted(undeclared)} are in neither must_fail nor may_fail of "
            f"{misconception.solution}"
        )


# ---------------------------------------------------------------- explanations


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_explanations_are_short_and_reveal_nothing_hidden(problem_id: str) -> None:
    seeds = [str(s) for s in _problem(problem_id).grading_seeds]
    for entry in _entries(problem_id):
        if "explanation" not in entry:
            continue  # the generic misreading's stock explanation (tests/test_generic.py)
        text, name = entry["explanation"].strip(), entry["id"]
        assert 0 < len(text) < MAX_EXPLANATION_CHARS, f"{name}: {len(text)} characters"
        assert text[-1] in ".!?", f"{name}: the explanation must end its last sentence"
        sentences = len(SENTENCE_END.findall(text))
        assert 1 <= sentences <= 2, f"{name}: {sentences} sentences; say it in one or two"
        leaked = [s for s in seeds if s in text]
        assert not leaked, f"{name}: the explanation contains a hidden seed"
        stem = Path(entry.get("solution", "-")).stem
        assert stem not in text and ".py" not in text, f"{name}: the explanation names the known-wrong file"
        convention = " ".join(map(str, entry.get("convention", {}).values()))
        assert not [s for s in seeds if s in convention], f"{name}: the convention contains a hidden seed"
        assert stem not in convention, f"{name}: the convention names the known-wrong file"


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
    expectations = Expectations(problem, problem.spec.public_seed)  # the tests' cache
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
    constants = [c for _, obs in returned if (c := _constants(obs)) is not None]
    if len(constants) == len(returned) and all(_same_constants(constants[0], c) for c in constants):
        yield f"the same constant {constants[0]} everywhere"
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


GENERIC = [(p, m) for p, m in DECLARED if _entry(p, m).get("generic") and _entry(p, m).get("solution")]


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
