"""The tree is the architecture: module docstrings, complete problem folders, starters, and the docs about them."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest
from conftest import PROBLEM, ROOT

from grader.model.problem import Problem, list_problems

GRADER_MODULES = sorted(p for p in (ROOT / "grader").rglob("*.py") if "__pycache__" not in p.parts)
PROBLEM_FILES = ["problem.toml", "cases.py", "starter.py", "statement.md"]
REFERENCE_FILES = ["reference.py", "oracle.py", "grading.toml", "wrong"]
README = ROOT / "README.md"
CONTRACT = ROOT / "docs" / "contract.md"


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(), filename=str(path))) or ""


@pytest.mark.parametrize("path", GRADER_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_grader_module_opens_with_a_docstring(path: Path) -> None:
    doc = _docstring(path)
    assert doc and doc.splitlines()[0].strip(), "no module docstring"


@pytest.mark.parametrize("name", ["__init__.py", "__main__.py"])
def test_worker_says_it_runs_untrusted_code(name: str) -> None:
    assert _docstring(ROOT / "grader" / "worker" / name).startswith("Runs UNTRUSTED learner code")


@pytest.mark.parametrize("problem_id", list_problems())
def test_problem_folders_are_complete(problem_id: str) -> None:
    missing = [f"problems/{problem_id}/{f}" for f in PROBLEM_FILES if not (ROOT / "problems" / problem_id / f).exists()]
    missing += [
        f"reference/{problem_id}/{f}" for f in REFERENCE_FILES if not (ROOT / "reference" / problem_id / f).exists()
    ]
    assert not missing


@pytest.mark.parametrize("problem_id", list_problems())
def test_starter_declares_the_contract_functions(problem_id: str) -> None:
    spec = tomllib.loads((ROOT / "problems" / problem_id / "problem.toml").read_text())
    tree = ast.parse((ROOT / "problems" / problem_id / "starter.py").read_text())
    defined = {
        node.name: [a.arg for a in node.args.args + node.args.kwonlyargs]
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
    }
    for function in spec["functions"]:
        assert defined.get(function["name"]) == function["params"], function["name"]


# ---------------------------------------------------------------- README and docs


def _first_code_block(text: str) -> str:
    match = re.search(r"```[a-z]*\n(.*?)```", text, re.S)
    return match.group(1) if match else ""


def test_readme_opens_with_the_two_commands() -> None:
    text = README.read_text()
    block = _first_code_block(text)
    assert "make grade" in block and "make test" in block
    assert text.index("```") < text.index("\n## ")  # before any section


def test_readme_links_resolve() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert "docs/contract.md" in local and "docs/threat-model.md" in local
    assert [link for link in local if not (ROOT / link).exists()] == []


def _contract_rows() -> list[tuple[str, set[str], set[str]]]:
    """(clause, check ids, known-wrong file names) for each row of the contract table."""
    rows = []
    for line in CONTRACT.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not line.lstrip().startswith("|") or set(cells[1]) <= set("-: "):
            continue
        checks = set(re.findall(r"`([a-z0-9_]+)`", cells[1]))
        wrong = set(re.findall(r"`([a-z0-9_]+\.py)`", cells[2]))
        if checks:
            rows.append((cells[0], checks, wrong))
    return rows


def test_contract_table_covers_every_check() -> None:
    spec_checks = {c.id for c in Problem(PROBLEM).spec.checks}
    named = set().union(*(checks for _, checks, _ in _contract_rows()))
    assert named <= spec_checks, f"unknown checks {sorted(named - spec_checks)}"
    assert spec_checks <= named, f"checks missing from the table {sorted(spec_checks - named)}"


def test_contract_cites_only_known_wrong_solutions_that_must_fail_the_row() -> None:
    known = {k.path.name: k for k in Problem(PROBLEM).known_wrong()}
    bad = []
    for clause, checks, wrong in _contract_rows():
        for name in wrong:
            if name not in known:
                bad.append(f"{clause}: {name} does not exist")
            elif not known[name].must_fail & checks:
                bad.append(f"{clause}: {name} must fail none of {sorted(checks)}")
    assert not bad


def test_every_module_is_on_the_architecture_map() -> None:
    """docs/architecture.md's tree names each module of the package, and each subpackage's map names its own."""
    tree = (ROOT / "docs" / "architecture.md").read_text()
    unlisted = []
    for path in GRADER_MODULES:
        if path.name == "__init__.py" or (path.name == "__main__.py" and path.parent.name != "worker"):
            continue
        if path.parent.name == "pages":
            continue  # the page templates' package, listed as a whole
        if not re.search(rf"\b{re.escape(path.stem)}(\.py)?\b", tree):
            unlisted.append(str(path.relative_to(ROOT)))
        package = path.parent / "__init__.py"
        if path.parent != ROOT / "grader" and path.stem not in _docstring(package):
            unlisted.append(f"{path.relative_to(ROOT)} (in its package's map)")
    assert not unlisted, unlisted


# Exercises written with the authoring kit, and the lines each may take (problems/<id>/ and reference/<id>/, its
# convention ports left out: they reproduce libraries, not the exercise), under the 1,250 an exercise may take at
# most; each budget grows only with misreadings declared (about ten lines apiece) and tests of the toy's claims
LINE_BUDGETS = {"kl_estimators": 1100, "gspo_sequence_ratio": 1125}


def _exercise_lines(problem_id: str) -> int:
    folders = [ROOT / "problems" / problem_id, ROOT / "reference" / problem_id]
    files = [p for f in folders for p in f.rglob("*") if p.is_file() and not {"ports", "__pycache__"} & set(p.parts)]
    return sum(len(p.read_text().splitlines()) for p in files)


@pytest.mark.parametrize("problem_id", sorted(LINE_BUDGETS))
def test_a_kit_exercise_stays_within_its_line_budget(problem_id: str) -> None:
    assert _exercise_lines(problem_id) <= LINE_BUDGETS[problem_id]
