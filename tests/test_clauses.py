"""Clauses: every check owns one, the loaders reject what breaks that, docs/clauses.md is what the data says, and
`validate` proves each declared score within 2 points (here with a fake grader; with the real one, e2e)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from conftest import PROBLEM, ROOT

from grader.course.clauses import clauses_markdown
from grader.course.validate import (
    DECLARED_TOLERANCE,
    Declared,
    declared_findings,
    declared_scores,
)
from grader.model.known_wrong import KnownWrong, load_declaration
from grader.model.ports import Port, load_ports
from grader.model.problem import Problem, list_problems
from grader.model.report import Report
from grader.model.spec import CONSTRUCTED_KINDS, SpecError, load_spec

SPEC_PATH = ROOT / "problems" / PROBLEM / "problem.toml"


def _load_error(edit: tuple[str, str] | None, tmp_path: Path, appended: str = "") -> str:
    """The loader's message for the spec with one text replaced (once) and a tail appended; it is one line."""
    text = SPEC_PATH.read_text()
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit, 1)
    path = tmp_path / "problem.toml"
    path.write_text(text + appended)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_check_naming_an_undeclared_clause_is_rejected(tmp_path: Path) -> None:
    message = _load_error(('clause = "signature"', 'clause = "nowhere"'), tmp_path)
    assert "check signatures names undeclared clause 'nowhere'" in message


def test_a_clause_no_check_owns_is_rejected(tmp_path: Path) -> None:
    orphan = '\n[[clauses]]\nid = "orphan"\nkind = "convention"\ntext = "Nothing owns this."\n'
    assert "no check owns clause(s) orphan" in _load_error(None, tmp_path, orphan)


def test_a_clause_declared_twice_is_rejected(tmp_path: Path) -> None:
    twice = '\n[[clauses]]\nid = "signature"\nkind = "convention"\ntext = "Again."\n'
    assert "clause ids declared more than once: signature" in _load_error(None, tmp_path, twice)


def test_a_check_without_a_clause_and_a_clause_of_unknown_kind_are_rejected(tmp_path: Path) -> None:
    assert "check `signatures`: `clause`: Field required" in _load_error(('clause = "signature"\n', ""), tmp_path)
    assert "`clauses.0.kind`" in _load_error(('kind = "return_type"', 'kind = "style"'), tmp_path)


def test_a_clause_weighs_its_checks_points_and_a_declared_score_charges_each_clause_once() -> None:
    spec = load_spec(SPEC_PATH)
    assert sum(spec.clause_weight(c.id) for c in spec.clauses) == pytest.approx(spec.max_score)
    heavy = max(spec.clauses, key=lambda c: spec.clause_weight(c.id)).id
    weight = sum(c.points for c in spec.checks if c.clause == heavy)
    assert spec.declared_score([heavy, heavy]) == pytest.approx(spec.max_score - weight)
    assert spec.declared_score([]) == spec.max_score


def test_docs_clauses_md_is_what_the_command_writes() -> None:
    """Regenerate with `python -m grader clauses --markdown > docs/clauses.md`."""
    specs = [load_spec(ROOT / "problems" / p / "problem.toml") for p in list_problems(ROOT)]
    assert (ROOT / "docs" / "clauses.md").read_text() == clauses_markdown(specs)


# ---------------------------------------------------------------- known-wrong solutions and ports


def test_a_known_wrong_declaration_must_say_what_it_breaks(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    body = 'defect = "d"\nmust_fail = ["x"]\n[[edit]]\nfind = "a"\nreplace = "b"\n'
    path.write_text(body)
    with pytest.raises(SpecError, match="breaks"):
        load_declaration(path)
    path.write_text('breaks = ["c"]\n' + body)
    assert load_declaration(path).breaks == ["c"]


@pytest.mark.parametrize("problem_id", list_problems(ROOT))
def test_every_known_wrong_solution_breaks_declared_clauses(problem_id: str) -> None:
    problem = Problem(problem_id)
    declared = {c.id for c in problem.spec.clauses}
    for known in problem.known_wrong():
        assert known.breaks and known.breaks <= declared, known.path.name


def test_an_undeclared_clause_in_breaks_is_an_error_naming_the_file() -> None:
    problem = Problem(PROBLEM)
    where = Path("reference/x/wrong/w.toml")
    with pytest.raises(SpecError, match=r"w\.toml: breaks undeclared clauses \['nowhere'\]"):
        problem.owner_checks(where, ["nowhere"])
    clause = problem.spec.clauses[0].id
    assert problem.owner_checks(where, [clause]) == problem.spec.clause_checks(clause)


PORT = """library = "verl"
repository = "volcengine/verl"
commit = "0123456789abcdef0123456789abcdef01234567"
file = "verl/trainer/ppo/core_algos.py"
lines = "1023-1071"
reproduces = "The token-mean loss aggregation."
departures = ["divides by the sum of max(1, n_i)"]
breaks = []
score_before = 43.0
"""


def test_ports_load_strictly_and_need_their_solution(tmp_path: Path) -> None:
    ports = tmp_path / "ports"
    ports.mkdir()
    (ports / "verl_mean.toml").write_text(PORT)
    with pytest.raises(SpecError, match="verl_mean.py is missing"):
        load_ports(tmp_path)
    (ports / "verl_mean.py").write_text("def f(): ...\n")
    (port,) = load_ports(tmp_path)
    assert port.path == ports / "verl_mean.py" and port.breaks == frozenset()
    for broken in (
        PORT.replace('"verl"', '"vibes"'),
        PORT.replace("0123456789abcdef01234567", "short"),
        PORT + "x = 1\n",
    ):
        (ports / "verl_mean.toml").write_text(broken)
        with pytest.raises(SpecError, match="not a port declaration"):
            load_ports(tmp_path)


# ---------------------------------------------------------------- the proof of declared scores


def test_a_score_off_its_declaration_is_a_finding() -> None:
    within = Declared("a.py", frozenset({"c"}), 90.0, 90.0 - DECLARED_TOLERANCE, "", 90.0 + DECLARED_TOLERANCE)
    assert declared_findings([within]) == []
    low = Declared("b.py", frozenset({"c"}), 90.0, 85.0, "bessel")
    (finding,) = declared_findings([low])
    assert finding.subject == "b.py" and "scores 85.00, not 90 declared by breaking c" in finding.problem
    assert "bessel" in finding.problem
    strict = Declared("c.py", frozenset({"c"}), 90.0, 90.0, "", 97.5)
    (finding,) = declared_findings([strict])
    assert "with follow-through off scores 97.50" in finding.problem


def test_declared_scores_grades_every_file_once_and_reads_constructed_breaks_without_follow_through() -> None:
    """A fake grader: every file earns its declared score, except one that misses it by 5 points, and follow-through
    credited 3 of those points in a constructed file."""
    problem = Problem(PROBLEM)
    wrong: list[KnownWrong | Port] = [*problem.known_wrong(), *problem.ports()]
    kinds = {c.id: c.kind for c in problem.spec.clauses}
    declared = {k.path: problem.spec.declared_score(k.breaks) for k in wrong}
    constructed = {k.path for k in wrong if all(kinds[c] in CONSTRUCTED_KINDS for c in k.breaks)}
    missing, credited = wrong[0].path, sorted(constructed - {wrong[0].path})[0]
    asked: list[Path] = []

    def report(path: Path) -> Report:
        score = declared[path] - (5.0 if path == missing else 0.0)
        credit = 3.0 if path == credited else 0.0
        return cast(
            Report,
            SimpleNamespace(
                score=score, diagnosis=[], follow_through=True, score_without_follow_through=lambda: score - credit
            ),
        )

    def grade(files: list[Path], seed: int) -> list[Report]:
        asked.extend(files)
        return [report(f) for f in files]

    rows = declared_scores(problem, grade)
    assert [r.name for r in rows] == [k.path.name for k in wrong]
    assert sorted(asked) == sorted(declared)  # each file graded once
    by_name = {r.name: r for r in rows}
    assert {r.name for r in rows if r.strict is not None} == {p.name for p in constructed}
    assert by_name[credited.name].strict == declared[credited] - 3.0
    findings = declared_findings(rows)
    assert {f.subject for f in findings} == {missing.name, credited.name}
    assert len([f for f in findings if f.subject == missing.name]) == (2 if missing in constructed else 1)
