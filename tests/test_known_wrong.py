"""Known-wrong solutions stay in step with the reference: each is declared as edits that apply exactly once to
today's reference, and its materialized file differs from the reference only there."""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

import pytest

from grader.model.known_wrong import (
    Declaration,
    KnownWrong,
    load_declaration,
    materialize,
    split_docstring,
)
from grader.model.problem import Problem, list_problems
from grader.model.spec import SpecError

PROBLEMS = list_problems()
REFERENCE = '"""A reference."""\n\nimport torch\n\n\ndef f(x):\n    return x + 1\n\n\ndef g(x):\n    return x * 2\n'


@pytest.fixture(scope="module", params=PROBLEMS)
def materialized(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Problem, list[KnownWrong]]:
    problem = Problem(request.param)
    return problem, materialize(problem.id, problem.reference_dir, tmp_path_factory.mktemp("cache"))


def _top_level_names(source: str) -> set[str]:
    return {
        node.name
        for node in ast.parse(source).body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


def _enclosing_functions(source: str, start: int, end: int) -> set[str]:
    """Top-level functions whose lines overlap characters [start, end) of `source`."""
    first, last = source.count("\n", 0, start) + 1, source.count("\n", 0, max(start, end - 1)) + 1
    return {
        node.name
        for node in ast.parse(source).body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.lineno <= last
        and (node.end_lineno or node.lineno) >= first
    }


def test_the_wrong_folders_hold_declarations_only() -> None:
    """A full copy of the reference would drift again; each solution is its edits."""
    for problem_id in PROBLEMS:
        wrong = Problem(problem_id).reference_dir / "wrong"
        assert sorted(p.name for p in wrong.iterdir() if p.suffix != ".toml") == [], wrong


def test_each_edit_occurs_exactly_once_in_the_reference(materialized: tuple[Problem, list[KnownWrong]]) -> None:
    problem, known = materialized
    _, code = split_docstring((problem.reference_dir / "reference.py").read_text())
    for wrong in known:
        assert wrong.declaration is not None
        for number, edit in enumerate(load_declaration(wrong.declaration).edit, 1):
            assert code.count(edit.find) == 1, f"{wrong.declaration.name}: edit {number}"
            assert edit.find != edit.replace, f"{wrong.declaration.name}: edit {number} changes nothing"


def _lines_of(code: str, text: str) -> set[int]:
    """Indices of the lines of `code` that its only occurrence of `text` touches."""
    start = code.index(text)
    first, last = code.count("\n", 0, start), code.count("\n", 0, start + max(len(text) - 1, 0))
    return set(range(first, last + 1))


def test_each_file_differs_from_the_reference_only_in_its_edits(materialized: tuple[Problem, list[KnownWrong]]) -> None:
    problem, known = materialized
    _, reference = split_docstring((problem.reference_dir / "reference.py").read_text())
    lines = reference.splitlines(keepends=True)
    for wrong in known:
        assert wrong.declaration is not None
        edited = set().union(*(_lines_of(reference, e.find) for e in load_declaration(wrong.declaration).edit))
        _, code = split_docstring(wrong.path.read_text())
        changes = [
            op
            for op in difflib.SequenceMatcher(None, lines, code.splitlines(keepends=True), autojunk=False).get_opcodes()
            if op[0] != "equal"
        ]
        assert changes, f"{wrong.path.name} is the reference itself"
        for _, i1, i2, _, _ in changes:
            touched = set(range(i1, i2)) or {i1 - 1, i1}  # an insertion sits between two lines
            assert touched & edited if i1 == i2 else touched <= edited, (
                f"{wrong.path.name} differs from the reference outside its declared edits, at line {i1 + 1} of "
                f"the reference's code: {''.join(lines[i1 : i2 or i1 + 1]).strip()!r}"
            )


def test_each_file_is_python_with_the_reference_functions_intact(
    materialized: tuple[Problem, list[KnownWrong]],
) -> None:
    problem, known = materialized
    reference = (problem.reference_dir / "reference.py").read_text()
    _, reference_code = split_docstring(reference)
    contract = {f.name for f in problem.spec.functions}
    for wrong in known:
        source = wrong.path.read_text()
        compile(source, str(wrong.path), "exec")
        names = _top_level_names(source)
        assert contract <= names, f"{wrong.path.name} lost {sorted(contract - names)}"
        assert wrong.declaration is not None
        for edit in load_declaration(wrong.declaration).edit:
            start = reference_code.index(edit.find)
            touched = _enclosing_functions(reference_code, start, start + len(edit.find))
            assert touched <= names, f"{wrong.path.name}: an edit removed {sorted(touched - names)}"


def test_each_file_names_its_defect_and_its_checks(materialized: tuple[Problem, list[KnownWrong]]) -> None:
    problem, known = materialized
    for wrong in known:
        source = wrong.path.read_text()
        docstring = ast.get_docstring(ast.parse(source)) or ""
        assert docstring.startswith(f"Known-wrong {problem.id} solution ({wrong.path.stem}).")
        header = dict(line[2:].split(":", 1) for line in source.splitlines()[:3])
        assert {k: {p.strip() for p in v.split(",") if p.strip()} for k, v in header.items() if k != "defect"} == {
            "must_fail": wrong.must_fail,
            "may_fail": wrong.may_fail,
        }, wrong.path.name
        assert header["defect"].strip() == wrong.defect


def test_misconceptions_name_declared_solutions(materialized: tuple[Problem, list[KnownWrong]]) -> None:
    problem, known = materialized
    names = {k.path.name for k in known}
    solutions = [m.solution for m in problem.misconceptions if m.solution is not None]
    assert set(solutions) <= names
    for solution in solutions:
        assert problem.known_wrong_file(solution).is_file()


def test_each_file_embodies_a_misconception_its_checks_own(materialized: tuple[Problem, list[KnownWrong]]) -> None:
    """Every known-wrong solution is some misreading's, and the checks that charge it are among those it fails."""
    problem, known = materialized
    declared = {m.solution: m for m in problem.misconceptions}
    for wrong in known:
        misconception = declared.get(wrong.path.name)
        assert misconception is not None, f"{wrong.path.name} embodies no declared misconception"
        assert set(misconception.owners) <= wrong.must_fail | wrong.may_fail, wrong.path.name


# ---------------------------------------------------------------- materializing, on a made-up problem


def _problem_dir(tmp_path: Path, declarations: dict[str, str]) -> Path:
    folder = tmp_path / "reference" / "toy"
    (folder / "wrong").mkdir(parents=True)
    (folder / "reference.py").write_text(REFERENCE)
    for name, text in declarations.items():
        (folder / "wrong" / f"{name}.toml").write_text(text)
    return folder


OFF_BY_ONE = (
    'defect = "adds 2"\nbreaks = ["sum"]\nmust_fail = ["oracle"]\n\n[[edit]]\nfind = "x + 1"\nreplace = "x + 2"\n'
)


def test_materialized_files_are_content_addressed(tmp_path: Path) -> None:
    folder = _problem_dir(tmp_path, {"off_by_two": OFF_BY_ONE})
    (first,) = materialize("toy", folder, tmp_path / "cache")
    (again,) = materialize("toy", folder, tmp_path / "cache")
    assert first == again and "return x + 2" in first.path.read_text()
    assert (first.must_fail, first.may_fail, first.defect) == (frozenset({"oracle"}), frozenset(), "adds 2")
    (folder / "reference.py").write_text(REFERENCE.replace("x * 2", "x * 3"))
    (changed,) = materialize("toy", folder, tmp_path / "cache")
    assert changed.path != first.path and first.path.is_file()
    assert "return x * 3" in changed.path.read_text()


@pytest.mark.parametrize(("find", "count"), [("x + 5", 0), ("return x", 2)])
def test_an_edit_that_does_not_occur_exactly_once_names_the_file(tmp_path: Path, find: str, count: int) -> None:
    folder = _problem_dir(tmp_path, {"stale": OFF_BY_ONE.replace('"x + 1"', f'"{find}"')})
    with pytest.raises(SpecError, match=rf"stale\.toml: edit 1's find text occurs {count} times"):
        materialize("toy", folder, tmp_path / "cache")


def test_the_reference_docstring_is_not_editable(tmp_path: Path) -> None:
    folder = _problem_dir(tmp_path, {"doc": OFF_BY_ONE.replace('"x + 1"', '"A reference."')})
    with pytest.raises(SpecError, match="doc.toml: edit 1's find text occurs 0 times"):
        materialize("toy", folder, tmp_path / "cache")


def test_overlapping_edits_are_rejected(tmp_path: Path) -> None:
    text = OFF_BY_ONE + '\n[[edit]]\nfind = "return x + 1"\nreplace = "return x - 1"\n'
    folder = _problem_dir(tmp_path, {"overlap": text})
    with pytest.raises(SpecError, match="overlap.toml: two edits overlap"):
        materialize("toy", folder, tmp_path / "cache")


@pytest.mark.parametrize(
    "text",
    [
        'defect = "no checks"\n\n[[edit]]\nfind = "x + 1"\nreplace = "x + 2"\n',  # must_fail missing
        OFF_BY_ONE.replace('must_fail = ["oracle"]', "must_fail = []"),  # must fail something
        'defect = "no edit"\nmust_fail = ["oracle"]\n',  # the reference itself is not wrong
        OFF_BY_ONE + 'severity = "high"\n',  # unknown field
        "defect = \n",  # not TOML
    ],
)
def test_a_malformed_declaration_is_a_clear_error(tmp_path: Path, text: str) -> None:
    folder = _problem_dir(tmp_path, {"bad": text})
    with pytest.raises(SpecError, match=r"bad\.toml: not a known-wrong declaration"):
        materialize("toy", folder, tmp_path / "cache")


def test_declaration_keeps_the_checks_as_lists() -> None:
    declaration = Declaration.model_validate(
        {
            "defect": "d",
            "breaks": ["s"],
            "must_fail": ["a", "b"],
            "may_fail": ["c"],
            "edit": [{"find": "x", "replace": "y"}],
        }
    )
    assert (declaration.must_fail, declaration.may_fail) == (["a", "b"], ["c"])
