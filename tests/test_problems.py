"""What every problem must prove, written once over all of them: its hidden seeds appear in no learner-visible file,
the reference earns full marks on every hidden seed, it agrees with the oracle, each known-wrong solution gets
exactly its declared verdicts, and trivial answers earn nothing beyond T0. Each problem is graded once for the whole
run (see `Proof`); `validate` is replayed on those reports, so its verdict logic is the one under test. Tests of one
problem alone live in reference/<id>/tests/."""

from __future__ import annotations

import ast
import dataclasses
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import PROBLEM, expectations_of, problem_named
from in_process import grade_in_process

from grader import cli, commands, engine
from grader.course.authoring import quoted_seeds, seed_findings
from grader.course.coverage import reference_coverage
from grader.course.new_problem import write_skeleton
from grader.course.validate import (
    MIN_SEEDS,
    Finding,
    declared_findings,
    declared_scores,
    failed_checks,
    reference_findings,
    wrong_findings,
)
from grader.judge.accept import accept_observation
from grader.judge.cases import Call, generator_for
from grader.judge.compare import compare_tensors, judge_case
from grader.judge.diagnosis import MIN_SHARE
from grader.judge.expectations import Expectations, run_series, single_threaded
from grader.model.misconceptions import Misconception
from grader.model.problem import Problem, list_problems, load_module
from grader.model.report import Report, round_score
from grader.model.spec import CheckSpec, DifferentialCheck, Limits, Tolerance
from grader.model.verdicts import ExitCode, Status, Verdict
from grader.worker.protocol import observe_call

PROBLEMS = list_problems()
GRADED_TIERS = ("T1", "T2", "T3")
Functions = dict[str, Callable[..., Any]]


def _problem(problem_id: str) -> Problem:
    return problem_named(problem_id)


def trivial_files(problem: Problem) -> list[Path]:
    """Answers that must earn nothing beyond T0: the starter, and the problem's own trivial files (zeros, ones, an
    input echoed back, always raising), kept on the hidden side in reference/<id>/tests/trivial/."""
    return [problem.problem_dir / "starter.py", *sorted((problem.reference_dir / "tests" / "trivial").glob("*.py"))]


# Files that other modules grade in the sandbox beside the proof's own (a name -> how to write it for a proof), each
# added to the problem's one sandboxed batch: tests/test_cases_seeded.py's replay of the learner pack and
# tests/test_constant_answers.py's forged worker, each against zeros of the promised shape.
SANDBOXED_EXTRAS: dict[str, Callable[[Proof], str]] = {}


class Proof:
    """One problem proven once for the whole run, in process (see `in_process`): each file graded at most once per
    seed, against one set of expectations per seed, and only when a test asks. `sandboxed` reads the problem's one
    sandboxed batch, graded as `grade-all` grades, for the tests that prove what only the sandbox shows."""

    def __init__(self, problem: Problem, scratch: Path) -> None:
        self.problem = problem
        self.reference = problem.reference_dir / "reference.py"
        self.first_seed = problem.grading_seeds[0]
        self._scratch = scratch  # where the raising twins are written
        self._reports: dict[tuple[Path, int], Report] = {}
        self._sandboxed: dict[Path, Report] | None = None
        self._extras: dict[str, Path] | None = None
        self._wrong_findings: list[Finding] | None = None
        self._twins: list[RaisingTwin] | None = None

    def expectations(self, seed: int) -> Expectations:
        return expectations_of(self.problem.id, seed)

    def grade_many(self, files: list[Path], seed: int) -> list[Report]:
        """`validate`'s way of grading, each file's report kept for every later test that asks for it."""
        for file in dict.fromkeys(f for f in files if (f, seed) not in self._reports):
            (self._reports[(file, seed)],) = grade_in_process(self.problem, [file], self.expectations(seed))
        return [self._reports[(f, seed)] for f in files]

    def extra(self, name: str) -> Path:
        """The file `SANDBOXED_EXTRAS[name]` writes for this problem, in the proof's scratch folder."""
        if self._extras is None:
            self._extras = {}
            for extra, source in sorted(SANDBOXED_EXTRAS.items()):
                self._extras[extra] = self._scratch / f"{extra}.py"
                self._extras[extra].write_text(source(self))
        return self._extras[name]

    def sandboxed_files(self) -> list[Path]:
        """The problem's one sandboxed batch: the reference, every trivial answer, a few known-wrong solutions, the
        raising twins, and every file of `SANDBOXED_EXTRAS`."""
        wrong = [k.path for k in self.problem.known_wrong()][:SANDBOXED_WRONG]
        twins = [t.path for t in self.twins()]
        extras = [self.extra(name) for name in sorted(SANDBOXED_EXTRAS)]
        return [self.reference, *trivial_files(self.problem), *wrong, *twins, *extras]

    def sandboxed(self, files: list[Path]) -> list[Report]:
        """`files`' reports from the problem's one sandboxed batch (see `sandboxed_files`), graded at the first grading
        seed with the problem's own limits (one zygote), as `grade-all` grades, once for the whole run."""
        if self._sandboxed is None:
            batch = self.sandboxed_files()
            reports = engine.grade_many(self.problem, batch, self.first_seed, self.problem.spec.limits, jobs=2)
            self._sandboxed = dict(zip(batch, reports, strict=True))
        return [self._sandboxed[file] for file in files]

    def report(self, file: Path) -> Report:
        """`file` graded on the first grading seed, as `grade` and `grade-all` grade it."""
        (report,) = self.grade_many([file], self.first_seed)
        return report

    def twins(self) -> list[RaisingTwin]:
        """The files that raise as a misreading does where their twin answers (see `raising_twins`)."""
        if self._twins is None:
            self._twins = raising_twins(self.expectations(self.first_seed), self._scratch)
        return self._twins

    def wrong_findings(self) -> list[Finding]:
        """`validate`'s findings about the known-wrong solutions."""
        if self._wrong_findings is None:
            self._wrong_findings = wrong_findings(self.problem, self.grade_many)
        return self._wrong_findings


_PROOFS: dict[str, Proof] = {}  # one per problem for the whole run, whichever module imports the fixture


@pytest.fixture(scope="session")
def proofs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Proof]:
    """Each problem's `Proof`, made on first use and kept for the session (other modules import this fixture)."""

    def proof(problem_id: str) -> Proof:
        if problem_id not in _PROOFS:
            _PROOFS[problem_id] = Proof(_problem(problem_id), tmp_path_factory.mktemp(f"twins_{problem_id}"))
        return _PROOFS[problem_id]

    return proof


def _seeds(problem_id: str) -> list[int]:
    problem = _problem(problem_id)
    return [problem.spec.public_seed, *problem.grading_seeds]


def _known_wrong() -> Iterator[tuple[str, str]]:
    for problem_id in PROBLEMS:
        for known in _problem(problem_id).known_wrong():
            yield problem_id, known.path.name


def _trivial() -> Iterator[tuple[str, str]]:
    for problem_id in PROBLEMS:
        for path in trivial_files(_problem(problem_id)):
            yield problem_id, path.stem


KNOWN_WRONG = list(_known_wrong())
TRIVIAL = list(_trivial())
SEEDS = [(problem_id, seed) for problem_id in PROBLEMS for seed in _seeds(problem_id)]
# each problem's first grading seed in every tier, its other seeds in `make test` (`every_seed`)
SEED_PARAMS = [
    pytest.param(problem_id, seed, id=f"{problem_id}:{seed}", marks=[] if seed == first else [pytest.mark.every_seed])
    for problem_id, seed in SEEDS
    for first in [_problem(problem_id).grading_seeds[0]]
]


def _ids(pairs: list[tuple[str, Any]]) -> list[str]:
    return [f"{a}:{b}" for a, b in pairs]


# ---------------------------------------------------------------------------------------------- hidden seeds


def test_a_quoted_seed_is_found_and_digits_of_another_number_are_not() -> None:
    assert quoted_seeds("seed = 4409\n", [4409, 52]) == [4409]
    assert quoted_seeds("x[52] = 1.52; 4409.5, 144091, seed_4409", [4409, 52]) == [52]


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_hidden_seeds_are_many_distinct_and_quoted_in_no_learner_visible_file(problem_id: str) -> None:
    """The authoring rules `validate` enforces (`course/authoring.py`): neither in the problem's own folder nor in
    any other file a learner may read."""
    problem = _problem(problem_id)
    assert len(problem.grading_seeds) >= MIN_SEEDS
    assert not seed_findings(problem)


def test_a_seed_quoted_in_a_learner_visible_file_is_named(tmp_path: Path) -> None:
    write_skeleton(tmp_path, "seed_demo")
    problem = Problem("seed_demo", tmp_path)
    assert seed_findings(problem) == []
    statement = tmp_path / "problems" / "seed_demo" / "statement.md"
    statement.write_text(statement.read_text() + f"\nseed {problem.grading_seeds[2]}\n")
    assert seed_findings(problem) == ["problems/seed_demo/statement.md quotes a hidden seed of seed_demo"]


# ---------------------------------------------------------------------------------------------- the reference


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_reference_earns_full_marks_on_the_first_grading_seed(proofs, problem_id: str) -> None:
    proof = proofs(problem_id)
    report = proof.report(proof.reference)
    lost = {c.id: c.message for c in report.checks() if c.verdict != Verdict.PASS}
    assert report.score == report.max_score, lost


@pytest.mark.every_seed
@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_reference_earns_full_marks_on_every_grading_seed(proofs, problem_id: str) -> None:
    proof = proofs(problem_id)
    assert len(proof.problem.grading_seeds) >= MIN_SEEDS
    findings = reference_findings(proof.problem, proof.grade_many)
    assert not findings, "\n".join(f.problem for f in findings)


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_every_line_and_branch_of_the_reference_is_reached_by_a_case(problem_id: str) -> None:
    measured = reference_coverage(_problem(problem_id))
    assert measured.complete, f"{measured.path}: {measured.describe()}"


def test_a_raise_that_no_case_reaches_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cases cut to each generator's first call leave the reference's validation unreached, and it says where."""
    problem = Problem(PROBLEM)
    generators = problem.case_generator
    monkeypatch.setattr(problem, "case_generator", lambda name: lambda g: generators(name)(g)[:1])
    measured = reference_coverage(problem)
    assert not measured.complete
    source = measured.path.read_text().splitlines()
    assert any("raise" in source[line - 1] for line in measured.missing_lines), measured.describe()


@pytest.mark.parametrize(("problem_id", "seed"), SEED_PARAMS)
def test_reference_agrees_with_the_oracle(problem_id: str, seed: int) -> None:
    """Every case a check compares with the oracle, on the public seed and each hidden one: an oracle written
    apart, one element at a time, is what tells a wrong reference from a right one."""
    problem = _problem(problem_id)
    checks = [c for c in problem.spec.checks if isinstance(c, DifferentialCheck) and c.expected == "oracle"]
    assert checks, "no check compares with the oracle"
    failures = []
    for check in checks:
        for call in problem.case_generator(check.cases)(generator_for(seed, check.cases)):
            want = _observe(problem.oracle, call)
            got = _observe(problem.reference, call)
            outcome = judge_case(call.function, call.kwargs, got, want, check.compare, problem.tolerances)
            if outcome.verdict != Verdict.PASS:
                failures.append(f"{check.id}, {call.label}: {outcome.mismatch}")
    assert not failures, "\n".join(failures[:10])


# ---------------------------------------------------------------------------------------------- known-wrong


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_known_wrong_solutions_and_ports_score_as_their_broken_clauses_declare(proofs, problem_id: str) -> None:
    """Where a problem enforces its declared scores, `validate`'s proof of them holds."""
    proof = proofs(problem_id)
    if proof.problem.spec.declared_scores != "enforced":
        pytest.skip(f"{problem_id} reports its declared scores, it does not enforce them yet")
    findings = declared_findings(declared_scores(proof.problem, proof.grade_many))
    assert not findings, "\n".join(f"{f.subject}: {f.problem}" for f in findings)


def test_a_report_scores_without_follow_through_as_a_grade_with_it_off(proofs) -> None:
    """What `validate` reads for the breaks that must hold by construction: each check's score less what follow-through
    credited is that check's score in the same file graded with follow-through off."""
    proof = proofs(PROBLEM)
    credited = next(
        k.path
        for k in proof.problem.known_wrong()
        if any(c.points_followed_through for c in proof.report(k.path).checks())
    )
    report = proof.report(credited)
    (strict,) = grade_in_process(proof.problem, [credited], proof.expectations(proof.first_seed), follow_through=False)
    assert {c.id: round_score(c.score - c.points_followed_through) for c in report.checks()} == {
        c.id: c.score for c in strict.checks()
    }
    assert report.score_without_follow_through() == strict.score < report.score


@pytest.mark.parametrize(("problem_id", "solution"), KNOWN_WRONG, ids=_ids(KNOWN_WRONG))
def test_known_wrong_solution_gets_exactly_its_declared_verdicts(proofs, problem_id: str, solution: str) -> None:
    """It fails every check it must fail, none outside its may-fail list, and its misreading is diagnosed first."""
    found = [f.problem for f in proofs(problem_id).wrong_findings() if f.subject == solution]
    assert not found, "\n".join(found)


def test_a_known_wrong_header_that_names_the_wrong_checks_is_caught(proofs, monkeypatch: pytest.MonkeyPatch) -> None:
    """The proof above can fail: the same reports, under headers that claim too much or too little, are findings."""
    proof = proofs(PROBLEM)
    proof.wrong_findings()  # every file graded under its true header first
    report_of = {k.path: proof.report(k.path) for k in proof.problem.known_wrong()}
    known = next(k for k in proof.problem.known_wrong() if len(failed_checks(report_of[k.path])) > 1)
    kept = min(known.must_fail)
    claims_more = dataclasses.replace(known, must_fail=known.must_fail | {"signatures"})
    claims_less = dataclasses.replace(known, must_fail=frozenset({kept}), may_fail=frozenset())
    monkeypatch.setattr(proof.problem, "known_wrong", lambda: [claims_more, claims_less])
    found = [f.problem for f in wrong_findings(proof.problem, proof.grade_many)]
    assert any(p.startswith("passed checks it must fail: ['signatures']") for p in found), found
    assert any(p.startswith("failed checks outside its declared lists") for p in found), found


@pytest.mark.every_seed  # `validate` grades the reference on every hidden seed
@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_validate_says_valid(
    proofs, problem_id: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The `validate` command on this run's reports: exit code and verdict line, and no finding about anything
    but the reference and the known-wrong files tested above."""
    proof = proofs(problem_id)

    def grade_many(problem: Problem, files: list[Path], seed: int, limits: Limits, jobs: int) -> list[Report]:
        assert (problem.id, limits, jobs) == (problem_id, problem.spec.limits, 2)  # the problem's own limits
        return proof.grade_many(files, seed)

    monkeypatch.setattr(commands, "grade_many", grade_many)
    assert cli.main(["validate", "--problem", problem_id, "--jobs", "2"]) == ExitCode.OK, capsys.readouterr().out
    assert f"{problem_id}: valid" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- the sandbox

SANDBOXED_WRONG = 3  # known-wrong solutions in each problem's sandboxed batch, beside the reference and trivial files


def verdicts(report: Report, scores: bool = True) -> tuple[Any, ...]:
    """What a grade decides: status, each check's verdict, and with `scores` the score, each check's score and the
    diagnosis in order."""
    if not scores:
        return report.status, {c.id: c.verdict for c in report.checks()}
    checks = {c.id: (c.verdict, round(c.score, 6)) for c in report.checks()}
    return report.status, round(report.score, 6), checks, [d.id for d in report.diagnosis]


@pytest.mark.e2e
@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_the_sandbox_grades_as_the_proof_does(proofs, problem_id: str) -> None:
    """One sandboxed batch per problem, graded as `grade-all` grades: the reference, every trivial answer and a few
    known-wrong solutions get, check by check, what the in-process proof gives them (the proof's other files differ
    from these only in the reference's lines their edits change). The raising twins get the same verdicts; their
    follow-through credit is left out, as it has been seen to differ by one case between a forked worker and a
    long-lived process."""
    proof = proofs(problem_id)
    wrong = [k.path for k in proof.problem.known_wrong()][:SANDBOXED_WRONG]
    files = [proof.reference, *trivial_files(proof.problem), *wrong]
    twins = [t.path for t in proof.twins()]
    sandboxed = proof.sandboxed([*files, *twins])
    differ = [
        f"{file.name}: sandboxed {verdicts(report, scores)}, in process {verdicts(proof.report(file), scores)}"
        for file, report in zip([*files, *twins], sandboxed, strict=True)
        for scores in [file not in twins]
        if verdicts(report, scores) != verdicts(proof.report(file), scores)
    ]
    assert not differ, "\n".join(differ)


# ---------------------------------------------------------------------------------------------- raising twins

# Follow-through may carry a raise only where the learner fails as the misreading does and follows it everywhere;
# else a file with a bug of its own could raise a misreading's exception and collect, through it, the cases it fails
# for its own reason. The proof: a file that raises as a misreading does where its twin answers earns no more.

TWINS_PER_MISREADING = 2  # answering solutions paired with each raising misreading: a few files per problem
Case = tuple[str, int]  # a check and the index of one of its calls


@dataclasses.dataclass(frozen=True)
class RaisingTwin:
    """A learner file that answers as the known-wrong `answers_as` does, except where the misreading `raises_as`
    raises and the reference answers: there it raises that misreading's exception. `answers_as` is its twin."""

    path: Path
    answers_as: Path
    raises_as: str
    raises_on: frozenset[Case]  # where it raises


@dataclasses.dataclass(frozen=True)
class Behaviour:
    """Where one misreading's solution fails the cases of a seed: all of them, those it fails by raising while the
    reference answers, and those it answers wrongly."""

    fails: frozenset[Case]
    raises: frozenset[Case]
    wrong_answers: frozenset[Case]


def behaviours(expectations: Expectations) -> dict[str, Behaviour]:
    """Each misreading's behaviour on every case of the expectations' seed, from the judge's own observations."""
    problem = expectations.problem
    fails: dict[str, set[Case]] = {m.id: set() for m in problem.misconceptions}
    raises: dict[str, set[Case]] = {m.id: set() for m in problem.misconceptions}
    with single_threaded():  # compared as the judge compares: its many small tensors are slower on a pool of threads
        for check in (c for c in problem.spec.checks if c.cases):
            assert check.cases is not None
            for index, call in enumerate(expectations.cases(check.cases)):
                want = expectations.observation(check.expected, check.cases, index)
                answered = "raised" not in expectations.observation("reference", check.cases, index)
                for mid, got in expectations.misconception_observations(check.cases, index).items():
                    verdict = judge_case(
                        call.function, call.kwargs, got, want, check.compare, problem.tolerances, evidence=False
                    ).verdict
                    if verdict != Verdict.PASS:
                        fails[mid].add((check.id, index))
                    if "raised" in got and answered:
                        raises[mid].add((check.id, index))
    expectations.persist()
    return {
        mid: Behaviour(frozenset(fails[mid]), frozenset(raises[mid]), frozenset(fails[mid] - raises[mid]))
        for mid in fails
    }


def twin_pairs(expectations: Expectations) -> list[tuple[Misconception, Misconception, frozenset[Case]]]:
    """(answers as, raises as, where it raises): for each misreading that raises on some case where the reference
    answers, the other misreadings whose solutions answer wrongly on some of those cases: first those with most such
    cases in their own owner checks and not in its (what a credited raise would buy: elsewhere their answers carry
    through their own misreading) whose failures the raises outnumber enough to charge it, then those with most such
    cases, file name breaking ties."""
    problem, behaviour = expectations.problem, behaviours(expectations)
    pairs = []
    # a twin is written from known-wrong files: a generic misreading without one has none to lend
    embodied = [m for m in problem.misconceptions if m.solution is not None]
    for raiser in embodied:
        raised = behaviour[raiser.id].raises

        def exposure(answerer: Misconception, raised: frozenset[Case] = raised, raiser: Misconception = raiser):
            mine = behaviour[answerer.id]
            wrong = raised & mine.wrong_answers
            # its failures outside its own owner checks are credited through its own misreading already
            bought = {case for case in wrong if case[0] in answerer.owners and case[0] not in raiser.owners}
            charged = len(raised) >= MIN_SHARE * len(mine.fails | raised)
            return (-len(bought) * charged, not charged, -len(wrong), answerer.solution) if wrong else None

        ranked = sorted(
            (key, answerer)
            for answerer in embodied
            if answerer.solution != raiser.solution and (key := exposure(answerer)) is not None
        )
        pairs += [(answerer, raiser, raised) for _, answerer in ranked[:TWINS_PER_MISREADING]]
    return pairs


TWIN_BODY = """

def _module(name, source):
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
    return module


ANSWERS, RAISES, REFERENCE = (_module(name, SOURCES[name]) for name in ("answers", "raises", "reference"))


def _copy(value):
    # strides and requires_grad kept: a misreading may raise on either
    if not isinstance(value, torch.Tensor):
        return value
    try:
        copy = torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device=value.device)
        copy.copy_(value.detach())
    except RuntimeError:  # an expanded tensor's overlapping strides cannot be written into
        copy = value.detach().clone()
    return copy.requires_grad_(value.requires_grad)


def _raised(module, name, kwargs):
    try:
        getattr(module, name)(**{key: _copy(value) for key, value in kwargs.items()})
    except Exception as exc:
        return exc
    return None


def _twin(name, kwargs):
    raised = _raised(RAISES, name, kwargs)
    if raised is not None and _raised(REFERENCE, name, kwargs) is None:
        raise raised
    return getattr(ANSWERS, name)(**kwargs)
"""


def twin_source(problem: Problem, answers_as: Path, raises_as: Path) -> str:
    """The raising twin's file: the three solutions' sources, and each contract function under `answers_as`'s own
    signature (its defaults are part of its answer)."""
    sources = {
        "answers": answers_as.read_text(),
        "raises": raises_as.read_text(),
        "reference": (problem.reference_dir / "reference.py").read_text(),
    }
    defs = {node.name: node for node in ast.parse(sources["answers"]).body if isinstance(node, ast.FunctionDef)}
    wrappers = []
    for function in problem.spec.functions:
        args = defs[function.name].args
        assert not (args.posonlyargs or args.vararg or args.kwarg), f"{answers_as.name}: {function.name}'s signature"
        for arg in (*args.args, *args.kwonlyargs):
            arg.annotation = None  # names of the solution's own imports
        for default in (d for d in (*args.defaults, *args.kw_defaults) if d is not None):
            ast.literal_eval(default)  # raises on a default naming a constant of the solution, unknown here
        wrappers.append(
            f"\n\ndef {function.name}({ast.unparse(args)}):\n    return _twin({function.name!r}, dict(locals()))\n"
        )
    head = f'"""Answers as {answers_as.stem}; raises as {raises_as.stem} where the reference answers."""\n\n'
    return head + f"import types\n\nimport torch\n\nSOURCES = {sources!r}\n" + TWIN_BODY + "".join(wrappers)


def raising_twins(expectations: Expectations, folder: Path) -> list[RaisingTwin]:
    """Every raising twin of the expectations' problem, written into `folder`."""
    problem, twins = expectations.problem, []
    for answerer, raiser, raised in twin_pairs(expectations):
        assert answerer.solution is not None and raiser.solution is not None
        answers_as, raises_as = problem.known_wrong_file(answerer.solution), problem.known_wrong_file(raiser.solution)
        path = folder / f"{answers_as.stem}__raising_as__{raises_as.stem}.py"
        path.write_text(twin_source(problem, answers_as, raises_as))
        twins.append(RaisingTwin(path, answers_as, raiser.id, raised))
    return twins


def _raised_type(observation: dict[str, Any]) -> str | None:
    return str(observation["raised"]["type"]) if "raised" in observation else None


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_no_file_outscores_its_twin_that_answers_instead_of_raising(proofs, problem_id: str) -> None:
    """Each raising twin against the known-wrong solution it answers as, graded in the problem's one batch. The twin
    is first run in process where it must raise, to show it raises there what its misreading raises."""
    proof = proofs(problem_id)
    if not proof.twins():
        pytest.skip(f"no misreading of {problem_id} raises where the reference answers")
    expectations = proof.expectations(proof.first_seed)
    checks = {c.id: c for c in proof.problem.spec.checks}
    gains = []
    for twin in proof.twins():
        functions = _functions(proof.problem, twin.path)
        for check_id, index in sorted(twin.raises_on):
            name = checks[check_id].cases
            assert name is not None
            theirs = expectations.misconception_observations(name, index)[twin.raises_as]
            mine = _observe(functions, expectations.cases(name)[index])
            assert _raised_type(mine) == _raised_type(theirs) is not None, f"{twin.path.name}, {check_id}[{index}]"
        raising, answering = proof.report(twin.path), proof.report(twin.answers_as)
        assert raising.status == Status.GRADED, f"{twin.path.name}: {raising.message}"
        theirs_by_id = {c.id: c.score for c in answering.checks()}
        gained = {
            c.id: round(c.score - theirs_by_id[c.id], 2) for c in raising.checks() if c.score > theirs_by_id[c.id]
        }
        if raising.score > answering.score:
            gains.append(f"{twin.path.name}: {raising.score} > {answering.score}, gaining in {gained}")
    assert not gains, "\n".join(gains)


# ---------------------------------------------------------------------------------------------- trivial answers


@pytest.mark.parametrize(("problem_id", "name"), TRIVIAL, ids=_ids(TRIVIAL))
def test_trivial_answer_graded_earns_nothing_beyond_t0(proofs, problem_id: str, name: str) -> None:
    proof = proofs(problem_id)
    (path,) = [p for p in trivial_files(proof.problem) if p.stem == name]
    report = proof.report(path)
    assert report.status == Status.GRADED, report.message
    earned = {c.id: c.score for t in report.tiers if t.tier in GRADED_TIERS for c in t.checks if c.score > 0}
    assert not earned, f"{name} earns points in {earned}"
    assert {c.verdict for c in report.checks()} <= {Verdict.PASS, Verdict.FAIL, Verdict.ERROR}, "lost to a limit"


def _observe(functions: Functions, call: Call) -> dict[str, Any]:
    return observe_call(functions[call.function], call.kwargs, list(call.requires_grad), call.backward)


def _functions(problem: Problem, path: Path) -> Functions:
    module = load_module(f"paperleet_test_trivial_{problem.id}_{path.stem}", path)
    return {f.name: getattr(module, f.name) for f in problem.spec.functions}


@functools.cache
def _expected(problem_id: str, seed: int, check_id: str) -> list[tuple[Call, dict[str, Any]]]:
    """A check's calls under `seed` with their expected observations, computed once for every trivial answer."""
    problem = _problem(problem_id)
    (check,) = [c for c in problem.spec.checks if c.id == check_id]
    assert check.cases is not None
    source = problem.oracle if check.expected == "oracle" else problem.reference
    calls = problem.case_generator(check.cases)(generator_for(seed, check.cases))
    return [(call, _observe(source, call)) for call in calls]


def _passed_units(problem: Problem, check: CheckSpec, seed: int, functions: Functions) -> list[str]:
    """Labels of the scored units (a group of calls, or one ungrouped call) that `functions` pass."""
    units: dict[object, tuple[str, bool]] = {}
    for index, (call, want) in enumerate(_expected(problem.id, seed, check.id)):
        got = accept_observation(_observe(functions, call))
        outcome = judge_case(call.function, call.kwargs, got, want, check.compare, problem.tolerances)
        key = ("group", call.group) if call.group is not None else index
        label, ok = units.get(key, (call.label, True))
        units[key] = (label, ok and outcome.verdict == Verdict.PASS)
    return [label for label, ok in units.values() if ok]


@pytest.mark.parametrize(("problem_id", "name"), TRIVIAL, ids=_ids(TRIVIAL))
def test_trivial_answer_passes_no_t1_or_t2_unit_on_any_seed(problem_id: str, name: str) -> None:
    """Per scored unit, on the public seed and every hidden one: a lucky seed cannot hide behind the first."""
    problem = _problem(problem_id)
    (path,) = [p for p in trivial_files(problem) if p.stem == name]
    functions = _functions(problem, path)
    passes = [
        f"seed {seed}, {check.id}: {label}"
        for seed in _seeds(problem_id)
        for check in problem.spec.checks
        if check.tier in ("T1", "T2") and check.cases
        for label in _passed_units(problem, check, seed, functions)
    ]
    assert not passes, "\n".join(passes[:10])


def _reference_series(problem_id: str, seed: int) -> dict[str, torch.Tensor]:
    """The reference's toy series as the judge holds them: the run's one expectations at `seed`."""
    return expectations_of(problem_id, seed).series()


@pytest.mark.parametrize(("problem_id", "name"), TRIVIAL, ids=_ids(TRIVIAL))
def test_trivial_answer_matches_no_t3_series(problem_id: str, name: str) -> None:
    problem = _problem(problem_id)
    (path,) = [p for p in trivial_files(problem) if p.stem == name]
    functions = _functions(problem, path)
    matches = []
    for seed in (problem.spec.public_seed, problem.grading_seeds[0]):
        want = _reference_series(problem_id, seed)
        got, _, _ = run_series(problem, seed, functions)  # a part the answer breaks has no series to match
        for check in (c for c in problem.spec.checks if c.kind == "experiment"):
            tol = None if check.exact else Tolerance(rtol=check.rtol, atol=check.atol)
            matches += [
                f"seed {seed}, {check.id}: {s}"
                for s in check.series
                if s in got and compare_tensors(s, got[s], want[s], tol) is None
            ]
    assert not matches, matches
