"""grader.model.problem and the problem folders: deterministic cases, headers, trust boundary (the hidden seeds are
proved for every problem in test_problems.py)."""

from __future__ import annotations

import ast
import shutil
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from conftest import PROBLEM, ROOT

from grader.judge.cases import generator_for
from grader.model.problem import Problem, list_problems
from grader.model.spec import SpecError

GRADER = ROOT / "grader"
WORKER = GRADER / "worker"


def problem_ids() -> set[str]:
    """Every problem id the repo declares: each spec's `id` and each folder under problems/."""
    ids = {p.name for p in (ROOT / "problems").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    for spec in (ROOT / "problems").glob("*/problem.toml"):
        ids.add(str(tomllib.loads(spec.read_text()).get("id", spec.parent.name)))
    return ids


# ---------------------------------------------------------------- cases


def test_case_generators_are_deterministic(problem: Problem) -> None:
    name = "random_loss"
    first = problem.case_generator(name)(generator_for(1, name))
    again = problem.case_generator(name)(generator_for(1, name))
    other = problem.case_generator(name)(generator_for(2, name))
    assert [c.label for c in first] == [c.label for c in again]
    for a, b in zip(first, again, strict=True):
        assert all(torch.equal(a.kwargs[k], b.kwargs[k]) for k in a.kwargs if isinstance(a.kwargs[k], torch.Tensor))
    assert not torch.equal(first[0].kwargs["advantages"], other[0].kwargs["advantages"])


# ---------------------------------------------------------------- known-wrong solutions


def test_known_wrong_headers_parse_and_name_real_checks(problem: Problem) -> None:
    known = problem.known_wrong()
    assert len(known) >= 10
    check_ids = {c.id for c in problem.spec.checks}
    for wrong in known:
        assert wrong.defect, wrong.path.name
        assert wrong.must_fail, wrong.path.name
        assert wrong.must_fail | wrong.may_fail <= check_ids, wrong.path.name
        assert not wrong.must_fail & wrong.may_fail, wrong.path.name


# ---------------------------------------------------------------- loader


def test_unknown_problem_lists_the_known_ones() -> None:
    with pytest.raises(SpecError, match=f"unknown problem 'nope'.*{PROBLEM}"):
        Problem("nope")


def test_problem_id_must_be_a_plain_name() -> None:
    with pytest.raises(SpecError, match="lowercase"):
        Problem("../reference")


def test_listed_problems_include_this_one() -> None:
    assert PROBLEM in list_problems()


def _copy_problem(root: Path) -> None:
    for kind in ("problems", "reference"):
        shutil.copytree(ROOT / kind / PROBLEM, root / kind / PROBLEM, ignore=shutil.ignore_patterns("__pycache__"))


def test_missing_case_generator_is_named(tmp_path: Path) -> None:
    _copy_problem(tmp_path)
    spec = tmp_path / "problems" / PROBLEM / "problem.toml"
    text = spec.read_text()
    check = '[[checks]]\nid = "token_mean"\n'  # the check, not the clause of the same name
    assert check in text
    spec.write_text(text.replace(check, check + 'cases = "no_such_generator"\n'))
    with pytest.raises(SpecError, match="token_mean.*cases.py"):
        Problem(PROBLEM, root=tmp_path)


def test_content_hash_covers_the_hidden_reference(tmp_path: Path) -> None:
    _copy_problem(tmp_path)
    before = Problem(PROBLEM, root=tmp_path).content_hash
    reference = tmp_path / "reference" / PROBLEM / "reference.py"
    reference.write_text(reference.read_text() + "\n# changed\n")
    assert Problem(PROBLEM, root=tmp_path).content_hash != before


# ---------------------------------------------------------------- trust boundary


def test_grader_never_names_a_problem() -> None:
    ids = problem_ids()
    assert PROBLEM in ids
    found = []
    for path in GRADER.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            text = path.read_text(errors="replace").lower()
            found += [f"{path.relative_to(ROOT)}: {i}" for i in ids if i.lower() in text]
    assert not found


def _imports(path: Path) -> list[tuple[int, str]]:
    """(relative level, module) for every import of a file; `from . import x` gives (1, 'x')."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level and node.module is None:
                found += [(node.level, alias.name) for alias in node.names]
            else:
                found.append((node.level, node.module or ""))
    return found


def test_worker_imports_only_torch_the_standard_library_and_itself() -> None:
    siblings = {p.stem for p in WORKER.glob("*.py")}
    allowed = set(sys.stdlib_module_names) | {"torch", "__future__"}
    bad = []
    for path in sorted(WORKER.glob("*.py")):
        for level, module in _imports(path):
            top = module.split(".")[0]
            ok = top in allowed if level == 0 else level == 1 and top in siblings
            if not ok:
                bad.append(f"{path.name}: {'.' * level}{module}")
    assert not bad


def test_import_scan_sees_a_forbidden_import(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_text(
        "from .. import judge\nfrom grader.judge.checks import REGISTRY\nimport numpy\nfrom . import protocol\n"
    )
    assert _imports(path) == [(2, "judge"), (0, "grader.judge.checks"), (0, "numpy"), (1, "protocol")]
