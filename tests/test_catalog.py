"""grader.course.catalog: every problem carries its catalog table, the set is consistent, `problems` lists it."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from pydantic import ValidationError

from grader.course.catalog import catalog_errors, load_catalog, problem_specs, select, suggested_order
from grader.course.validate import catalog_findings
from grader.model.problem import Problem, list_problems
from grader.model.spec import DIFFICULTIES, ProblemSpec, SpecError, load_spec


def _raw(problem_id: str) -> dict[str, Any]:
    return tomllib.loads((ROOT / "problems" / problem_id / "problem.toml").read_text())


def _spec(problem_id: str, **catalog: Any) -> ProblemSpec:
    """A real problem's spec with some of its catalog fields replaced."""
    data = _raw(problem_id)
    data["catalog"] = {**data["catalog"], **catalog}
    return ProblemSpec.model_validate(data)


@pytest.mark.parametrize("problem_id", list_problems())
def test_every_problem_names_its_papers_tags_difficulty_and_time(problem_id: str) -> None:
    catalog = Problem(problem_id).spec.catalog
    assert catalog.papers and catalog.tags and catalog.minutes > 0 and catalog.summary
    for paper in catalog.papers:
        assert paper.title and paper.authors and 1950 <= paper.year <= 2100
    assert any(paper.equations for paper in catalog.papers), "at least one paper says what is exercised"


def test_a_spec_without_its_catalog_table_is_refused(tmp_path: Path) -> None:
    text = (ROOT / "problems" / "grpo_advantages" / "problem.toml").read_text()
    head, _, rest = text.partition("\n[catalog]\n")
    path = tmp_path / "problem.toml"
    after = re.search(r"\n\[(?!\[?catalog)", rest)  # the first table after the catalog's own
    assert after is not None
    path.write_text(head + "\n" + rest[after.start() :])
    with pytest.raises(SpecError, match="`catalog`: Field required"):
        load_spec(path)


@pytest.mark.parametrize(
    "change",
    [
        {"difficulty": "easy"},
        {"tags": []},
        {"tags": ["Clipping"]},
        {"tags": ["clipping", "clipping"]},
        {"minutes": 0},
        {"papers": []},
        {"papers": [{"title": "A paper", "authors": "", "year": 2024}]},
        {"papers": [{"title": "A paper", "authors": "A. Author", "year": 24}]},
        {"builds_on": ["grpo_advantages"]},
        {"extra": 1},
    ],
)
def test_a_catalog_table_missing_or_breaking_a_field_is_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        _spec("grpo_advantages", **change)  # the last but one names the problem itself


def test_the_whole_catalog_is_consistent_and_lists_every_problem() -> None:
    entries = load_catalog()
    assert sorted(entry.id for entry in entries) == sorted(list_problems())
    assert [entry.order for entry in entries] == list(range(1, len(entries) + 1))
    placed: set[str] = set()
    for entry in entries:  # the suggested order does every exercise after those it builds on
        assert set(entry.catalog.builds_on) <= placed, entry.id
        placed.add(entry.id)
    assert catalog_errors(problem_specs()) == []
    assert catalog_findings(Problem(entries[0].id)) == []


def test_ids_titles_prerequisites_and_circles_are_checked_across_problems() -> None:
    specs = problem_specs()
    first, second = specs[0], specs[1]
    same_title = second.model_copy(update={"title": first.title.upper()})
    assert any("share the title" in e for e in catalog_errors([first, same_title]))
    assert any("is used by 2 problems" in e for e in catalog_errors([first, first]))
    unknown = _spec(first.id, builds_on=["no_such_problem"])
    assert any("no_such_problem" in e and "not problems" in e for e in catalog_errors([unknown, second]))
    a = _spec(first.id, builds_on=[second.id])
    b = second.model_copy(update={"catalog": second.catalog.model_copy(update={"builds_on": [first.id]})})
    (error,) = catalog_errors([a, b])
    assert "circle" in error and first.id in error and second.id in error


def test_the_order_puts_prerequisites_first_then_the_easiest_then_the_shortest() -> None:
    specs = {spec.id: spec for spec in problem_specs()}
    hard = _spec("grpo_advantages", difficulty="advanced")
    short = _spec("routed_gates", difficulty="intermediate", minutes=5)
    order = [s.id for s in suggested_order([hard, short, specs["ppo_clip_loss"]])]
    # ppo_clip_loss builds on grpo_advantages, which is now advanced: the easier routed_gates goes first
    assert order == ["routed_gates", "grpo_advantages", "ppo_clip_loss"]


def test_select_filters_by_every_tag_given_and_the_difficulty() -> None:
    entries = load_catalog()
    tagged = select(entries, ["Importance Sampling"])
    assert tagged and all("importance sampling" in e.catalog.tags for e in tagged)
    assert len(tagged) < len(entries)
    both = select(entries, ["importance sampling", "masking"])
    assert {e.id for e in both} < {e.id for e in tagged}
    for difficulty in DIFFICULTIES:
        assert all(e.catalog.difficulty == difficulty for e in select(entries, difficulty=difficulty))
    assert select(entries, ["no such tag"]) == []


def test_problems_command_prints_the_table_and_json(run_cli) -> None:
    table = run_cli("problems")
    assert table.returncode == 0, table.stderr
    for entry in load_catalog():
        assert entry.id in table.stdout
    data = json.loads(run_cli("problems", "--json").stdout)
    assert [d["id"] for d in data] == [e.id for e in load_catalog()]
    assert {"order", "title", "papers", "tags", "difficulty", "builds_on", "minutes"} <= set(data[0])
    filtered = json.loads(run_cli("problems", "--json", "--tag", "moe routing", "--difficulty", "intermediate").stdout)
    assert [d["id"] for d in filtered] == ["routed_gates"]
    wrong = run_cli("problems", "--difficulty", "easy")
    assert wrong.returncode == 4 and "invalid choice" in wrong.stderr


def test_the_readme_lists_the_catalog_in_its_suggested_order() -> None:
    readme = (ROOT / "README.md").read_text()
    rows = [line.split(" | ") for line in readme.splitlines() if re.match(r"^\| \d+ \| `[a-z0-9_]+` \|", line)]
    entries = load_catalog()
    assert [(row[0], row[1]) for row in rows] == [(f"| {e.order}", f"`{e.id}`") for e in entries]
    for row, entry in zip(rows, entries, strict=True):
        assert row[4] == entry.catalog.difficulty and row[6] == f"{entry.catalog.minutes} min |"
        assert str(entry.catalog.papers[0].year) in row[3]
        order = {e.id: e.order for e in entries}
        assert row[5] == (", ".join(str(n) for n in sorted(order[b] for b in entry.catalog.builds_on)) or "-")
