"""grader.course.course_set: a set of problems built in one command into the same packs and zips as one by one."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.course.catalog import load_catalog
from grader.course.course_set import Built, CourseSetError, choose, handout
from grader.course.gradescope_zip import build_zip
from grader.course.learner_pack import build_pack
from grader.model.problem import Problem

CHOSEN = ("glm5_offpolicy", "grpo_advantages", "behavior_weights")


def test_a_set_is_chosen_by_ids_or_tag_in_the_catalogs_order() -> None:
    entries = load_catalog()
    chosen = choose(entries, CHOSEN)
    assert [e.id for e in chosen] == ["grpo_advantages", "behavior_weights", "glm5_offpolicy"]
    tagged = choose(entries, tag="importance sampling")
    assert {e.id for e in tagged} == {e.id for e in entries if "importance sampling" in e.catalog.tags}
    with pytest.raises(CourseSetError, match="no problem nope"):
        choose(entries, ["nope"])
    with pytest.raises(CourseSetError, match="the tags are: "):
        choose(entries, tag="no such tag")
    with pytest.raises(CourseSetError, match="twice"):
        choose(entries, ["grpo_advantages", "grpo_advantages"])


def test_three_problems_build_in_one_command_as_each_builds_alone(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "set"
    done = run_cli("course-set", "--problems", *CHOSEN, "--name", "Off-policy corrections", "--out", out)
    assert done.returncode == 0, done.stderr
    for problem_id in CHOSEN:
        problem = Problem(problem_id)
        pack, autograder = tmp_path / "alone" / f"{problem_id}.zip", tmp_path / "alone" / f"gs-{problem_id}.zip"
        build_pack(problem, pack)
        build_zip(problem, autograder)
        # byte for byte the zips `learner-pack` and `gradescope-zip` build, which their own tests prove
        assert (out / "learner" / f"{problem_id}.zip").read_bytes() == pack.read_bytes()
        assert (out / "gradescope" / f"{problem_id}.zip").read_bytes() == autograder.read_bytes()
    index = (out / "index.md").read_text()
    assert index.startswith("# Off-policy corrections\n")
    rows = [line for line in index.splitlines() if line.startswith("| ") and "`learner/" in line]
    assert [row.split(" | ")[0] for row in rows] == ["| 1", "| 2", "| 3"]
    for n, entry in enumerate(choose(load_catalog(), CHOSEN), 1):
        assert f"## {n}. {entry.title}" in index and entry.catalog.difficulty in rows[n - 1]
        assert all(paper.title in index and str(paper.year) in index for paper in entry.catalog.papers)
    # behavior_weights builds on an exercise outside the set; glm5_offpolicy on one inside it
    assert "`ppo_clip_loss` (not in this set)" in rows[1] and "#2 `behavior_weights`" in rows[2]


def test_a_tag_no_problem_has_is_a_usage_error(run_cli, tmp_path: Path) -> None:
    done = run_cli("course-set", "--tag", "no such tag", "--out", tmp_path)
    assert done.returncode == 4 and "no problem has the tag" in done.stderr
    assert not any(tmp_path.iterdir())


def test_the_handout_escapes_table_cells() -> None:
    (entry,) = [e for e in load_catalog() if e.id == "grpo_advantages"]
    text = handout([Built(entry, Path("/s/learner/a.zip"), Path("/s/gradescope/a.zip"))], "A | B", Path("/s"))
    assert text.startswith("# A \\| B\n") and "`learner/a.zip`" in text
