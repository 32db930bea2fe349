"""Mutation analysis: each operator makes the mutant it names, nothing else is touched, equivalence is told from
a difference, mutants are graded in process as the judge grades a file, a hang is ended by the time limit, and
each problem's survivors do not grow beyond tests/mutation_survivors.json."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import PROBLEM, ROOT, expectations_of, problem_named

from grader import cli
from grader.course.mutants import OPERATORS, mutants, unmutated
from grader.course.mutation import (
    Analysis,
    MutantResult,
    Probe,
    analyse,
    first_difference,
    functions_of,
    grade_functions,
    record_survivors,
    result_of,
    run_forked,
    same_observation,
)
from grader.judge.cases import Call
from grader.model.problem import list_problems
from grader.model.verdicts import ExitCode
from grader.worker.protocol import observe_call

SOURCE = '''"""A docstring with 1 number."""
import torch

LIMIT = 0.5


def f(x, mask, n: int = 2):
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n + 0}")
    y = x.detach() * 2
    y = y + 1
    m = mask & (x > LIMIT)
    z = torch.where(m, y, -y)
    s = z.sum(dim=1, keepdim=True)
    return s.to(x.dtype)


def g(flag, x):
    if flag:
        w = x
    else:
        w = -x
    return w
'''

# mutant name -> the line that replaces the reference's on the mutant's own (unparsed) source, or None: removed
EXPECTED = {
    "constant@L4": "LIMIT = 1.5",
    "constant@L7": "def f(x, mask, n: int=3):",
    "compare@L8": "    if n <= 1:",
    "drop_raise@L9": "        pass",
    "drop_detach@L10": "    y = x * 2",
    "operator@L10": "    y = x.detach() / 2",
    "insert_detach@L10": "    y = _mutant_detach(x.detach() * 2)",
    "insert_cast@L11": "    y = _mutant_cast(y + 1)",
    "drop_statement@L11": None,
    "operator@L12": "    m = mask | (x > LIMIT)",
    "compare@L12": "    m = mask & (x >= LIMIT)",
    "unary@L13": "    z = torch.where(m, y, y)",
    "where@L13": "    z = torch.where(m, -y, y)",
    "reduction@L14": "    s = z.mean(dim=1, keepdim=True)",
    "dim@L14": "    s = z.sum(dim=0, keepdim=True)",
    "dim@L14#2": "    s = z.sum(dim=1, keepdim=False)",
    "drop_cast@L15": "    return s",
    "insert_detach@L15": "    return _mutant_detach(s.to(x.dtype))",
}


def _changed(source: str) -> list[tuple[str, str | None]]:
    """(control line, mutant line or None) for each line the mutant changes or removes, in order."""
    import difflib

    control = unmutated(SOURCE).splitlines()
    mine = source.split("\n\ndef _mutant_detach")[0].rstrip("\n").splitlines()
    pairs: list[tuple[str, str | None]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=control, b=mine, autojunk=False).get_opcodes():
        if tag == "replace":
            pairs += list(zip(control[i1:i2], mine[j1:j2], strict=True))
        elif tag == "delete":
            pairs += [(line, None) for line in control[i1:i2]]
    return pairs


def test_each_operator_makes_the_mutant_its_name_says() -> None:
    found = {m.name: m for m in mutants(SOURCE)}
    for name, line in EXPECTED.items():
        assert name in found, f"{name} missing; made {sorted(found)}"
        changed = _changed(found[name].source)
        assert len(changed) == 1, (name, changed)
        assert changed[0][1] == line, (name, changed)
    assert {m.operator for m in found.values()} == set(OPERATORS)


def test_an_inserted_detach_or_cast_leaves_a_value_that_is_not_a_float_tensor_unchanged() -> None:
    (detached,) = [m for m in mutants(SOURCE) if m.name == "insert_detach@L15"]
    (cast,) = [m for m in mutants(SOURCE) if m.name == "insert_cast@L15"]
    x = torch.tensor([[1.0, -2.0]], dtype=torch.float32, requires_grad=True)
    mask = torch.tensor([[True, True]])
    out = functions_of_source(detached.source)["f"](x, mask)
    assert not out.requires_grad and out.dtype == torch.float32
    assert functions_of_source(cast.source)["f"](x, mask).dtype == torch.float64
    assert functions_of_source(cast.source)["g"](True, 3) == 3  # `g` is unchanged: the helper is only defined


def functions_of_source(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "mutant", "exec"), namespace)
    return namespace


def test_docstrings_messages_annotations_and_dims_are_never_mutated() -> None:
    names = {m.name for m in mutants(SOURCE)}
    assert not any(name.endswith("@L1") for name in names), "the module docstring"
    assert [n for n in names if n.endswith("@L9")] == ["drop_raise@L9"], "what a raise says"
    assert not any(n.startswith("constant@L14") for n in names), "a dim is the `dim` operator's"
    for mutant in mutants(SOURCE):
        assert "n: int" in mutant.source, f"{mutant.name} changes an annotation"


def test_a_statement_is_dropped_only_where_every_name_it_binds_stays_bound() -> None:
    names = {m.name for m in mutants(SOURCE)}
    assert "drop_statement@L11" in names  # `y` was bound on line 10
    assert "drop_statement@L10" not in names  # the first binding of `y`: removing it leaves `y` unbound
    assert "drop_statement@L20" not in names and "drop_statement@L22" not in names, "a sibling branch binds `w`"
    assert "drop_statement@L8" not in names, "an `if` that only raises is the `drop_raise` operator's"


def test_mutants_are_made_in_one_order_with_distinct_names_and_each_differs_from_the_reference() -> None:
    first, second = mutants(SOURCE), mutants(SOURCE)
    assert first == second
    assert len({m.name for m in first}) == len(first)
    for mutant in first:
        compile(mutant.source, mutant.name, "exec")
        assert mutant.source != unmutated(SOURCE), mutant.name


@pytest.mark.parametrize("problem_id", list_problems())
def test_every_reference_yields_compilable_mutants_of_most_operators(problem_id: str) -> None:
    made = mutants((ROOT / "reference" / problem_id / "reference.py").read_text())
    for mutant in made:
        compile(mutant.source, mutant.name, "exec")
    assert len({m.operator for m in made}) >= 10, {m.operator for m in made}


# ---------------------------------------------------------------------------------------------- equivalence


def test_observations_agree_within_a_few_ulps_and_never_across_a_real_difference() -> None:
    x = torch.tensor([1.0, 2.0, float("nan")], dtype=torch.float64)
    ulp = torch.nextafter(x, torch.full_like(x, 3.0))
    assert same_observation({"output": x}, {"output": ulp.clone()})
    assert same_observation({"output": x}, {"output": x.clone()}), "NaN agrees with NaN"
    assert not same_observation({"output": x}, {"output": x * 1.001})
    assert not same_observation({"output": x}, {"output": x.float()}), "a dtype differs"
    raised = {"type": "ValueError", "bases": ["ValueError"], "message": "a"}
    assert same_observation({"raised": raised}, {"raised": {**raised, "message": "b"}}), "messages are not compared"
    assert not same_observation({"raised": raised}, {"raised": {**raised, "type": "TypeError"}})
    assert not same_observation({"raised": raised}, {"output": x})


def _probe(calls: list[Call], reference: Callable[..., Any]) -> Probe:
    observed = [observe_call(reference, c.kwargs, list(c.requires_grad), c.backward) for c in calls]
    return Probe([c.label for c in calls], calls, observed)


def test_the_probe_tells_an_equivalent_rewrite_from_a_mutant_that_differs_only_off_the_cases() -> None:
    calls = [
        Call("f", {"x": torch.linspace(-3, 3, 50, dtype=torch.float64)}, f"dense {i}", ("x",), True) for i in range(2)
    ]
    calls.append(Call("f", {"x": torch.tensor([0.0, 1.0], dtype=torch.float64)}, "ties", ("x",), True))
    probe = _probe(calls, lambda x: torch.where(x > 0, x, 0 * x))
    assert first_difference(probe, {"f": lambda x: torch.relu(x)}) == ""
    assert first_difference(probe, {"f": lambda x: torch.where(x >= 0, x, 0 * x)}) == "ties", "the gradient at 0"
    assert first_difference(probe, {"f": lambda x: torch.where(x > 0.5, x, 0 * x)}) == "dense 0"
    assert first_difference(probe, {"f": lambda x: torch.where(x > 0, x.detach(), 0 * x)}) == "dense 0", "gradient"


# ---------------------------------------------------------------------------------------------- grading


def test_in_process_grading_gives_the_reference_full_marks_and_charges_a_known_wrong_solution() -> None:
    problem = problem_named(PROBLEM)
    expectations = expectations_of(problem.id, problem.grading_seeds[0])
    source = (problem.reference_dir / "reference.py").read_text()
    control = grade_functions(problem, expectations, functions_of(problem, unmutated(source), "control"))
    assert control.score == control.max_score and not control.failed
    known = next(k for k in problem.known_wrong() if k.path.stem == "clamp_instead_of_mask")
    graded = grade_functions(problem, expectations, functions_of(problem, known.path.read_text(), "known"))
    assert graded.score < graded.max_score
    assert known.must_fail <= set(graded.failed) | set(graded.followed)  # as `validate` proves it
    assert set(graded.failed) <= known.must_fail | known.may_fail
    assert graded.diagnosis, "the misreading it embodies is named"


@pytest.mark.e2e
def test_a_hang_is_ended_by_the_time_limit_and_a_failure_is_said() -> None:
    (mutant, *_) = mutants(SOURCE)

    def hang() -> dict[str, object]:
        time.sleep(60)
        return {}

    def fail() -> dict[str, object]:
        raise RuntimeError("boom")

    started = time.monotonic()
    results = list(run_forked([(mutant, hang), (mutant, fail), (mutant, lambda: {"score": 1})], 2, 2.0))
    assert time.monotonic() - started < 20
    notes = sorted(why for _, _, why in results)
    assert [found for _, found, _ in results].count({"score": 1}) == 1
    assert any("no result within 2 s" in why for why in notes), notes
    assert any("RuntimeError: boom" in why for why in notes), notes


@pytest.mark.e2e
def test_a_killed_mutant_and_a_likely_equivalent_one_are_told_apart() -> None:
    problem = problem_named(PROBLEM)
    # a limit far above the seconds each takes alone: on a loaded machine a slow mutant is still judged, not cut off
    analysis = analyse(problem, only=["compare@L33", "insert_detach@L29", "constant@L25"], time_limit_s=900)
    outcomes = {r.name: r.outcome for r in analysis.results}
    assert outcomes == {"compare@L33": "killed", "insert_detach@L29": "equivalent", "constant@L25": "undiagnosed"}
    # the kill-only analysis the baseline below runs: the same survivors, each killed one stopped at a failing check
    quick = analyse(problem, only=sorted(outcomes), time_limit_s=900, kill_only=True)
    assert {r.name: r.outcome for r in quick.results} == {
        "compare@L33": "killed",
        "insert_detach@L29": "survived",
        "constant@L25": "killed",
    }
    full = {r.name: r for r in analysis.results}
    for result in quick.results:
        assert len(result.failed) == (result.outcome == "killed") and not result.diagnosis
        assert set(result.failed) <= set(full[result.name].failed), "it stopped at a check the whole grading fails"


# ---------------------------------------------------------------------------------------------- the baseline

BASELINE = Path(__file__).with_name("mutation_survivors.json")


@pytest.mark.slow  # every mutant of every problem, each until it loses points: under a minute a problem on 2 cores
@pytest.mark.parametrize("problem_id", list_problems())
def test_survivors_do_not_grow(problem_id: str) -> None:
    """A problem's mutants at full marks are no more than tests/mutation_survivors.json records; when a change of
    its cases kills more, the file is rewritten from `python -m grader mutate --problem ID` (docs/mutation.md)."""
    recorded = json.loads(BASELINE.read_text())[problem_id]
    analysis = analyse(problem_named(problem_id), kill_only=True)
    survivors = sorted(r.name for r in analysis.survivors)
    new = sorted(set(survivors) - set(recorded["survivors"]))
    assert len(survivors) <= len(recorded["survivors"]), f"{len(survivors)} survivors, new: {new}"


def test_the_record_keeps_each_problems_survivors_apart(tmp_path: Path) -> None:
    record = tmp_path / "survivors.json"
    results = [MutantResult("constant@L3", "constant", 3, "`1` to `2`", "equivalent")]
    results.append(MutantResult("compare@L4", "compare", 4, "`<` to `<=`", "killed"))
    record_survivors(Analysis("first", 1, results, 1.0), record)
    record_survivors(Analysis("second", 1, results[1:], 1.0), record)
    assert json.loads(record.read_text()) == {
        "first": {"mutants": 2, "survivors": ["constant@L3"]},
        "second": {"mutants": 1, "survivors": []},
    }


def test_a_record_of_some_mutants_only_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = tmp_path / "survivors.json"
    code = cli.main(["mutate", "--problem", PROBLEM, "--only", "compare@L33", "--record", str(record)])
    assert code == ExitCode.USAGE and not record.exists()
    assert "--record needs every mutant" in capsys.readouterr().err


def test_the_judge_failing_on_a_mutant_is_an_error_never_a_kill() -> None:
    (mutant, *_) = mutants(SOURCE)
    assert result_of(mutant, None, "no result within 120 s").outcome == "limit"
    assert result_of(mutant, None, "out of memory").outcome == "limit"
    failed = result_of(mutant, None, "grading failed: RuntimeError: boom")
    assert failed.outcome == "error"
    analysis = Analysis("p", 1, [failed, result_of(mutant, None, "out of memory")], 1.0)
    assert analysis.killed_share == 0.5, "an error counts as not killed"
