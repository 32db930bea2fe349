"""grader.outputs.progress: a learner's attempts summed up per problem, from what a learner may read alone."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import ROOT
from rich.console import Console

from grader.course.pack_check import learner_report, show_progress
from grader.model.problem import Problem
from grader.model.report import CheckResult, Diagnosis, Report, TierResult, Versions, write_report
from grader.model.verdicts import Status, Verdict
from grader.outputs.progress import print_progress, progress_of, read_attempt, report_files

# What a grade knows that a learner must never read in a summary of their attempts.
SEED = 918273645
HIDDEN_VALUE = "4242.125"  # an input or expected value of a hidden case, as the instructor's message quotes it
HIDDEN_CHECK = "held_back_until_published"  # a check whose visibility shows its result only later
HIDDEN_TITLE = "Rejects tokens on the secret boundary"
HIDDEN_MISREADING = "misread_only_where_held_back"  # charged only in that check
PRINTED = "printed-by-the-learner-code-7781"  # the worker's stdout, which may spell out a hidden input
PROBLEMS = ("grpo_advantages", "ppo_clip_loss", "routed_gates")


def _check(check_id: str, passed: bool, visibility: str = "visible", title: str = "") -> CheckResult:
    return CheckResult(
        id=check_id,
        title=title or f"the {check_id} check",
        verdict=Verdict.PASS if passed else Verdict.FAIL,
        score=10.0 if passed else 0.0,
        max_score=10.0,
        message="" if passed else f"case hidden[3]: expected {HIDDEN_VALUE}, got 0 (seed {SEED})",
        learner_message="" if passed else "a hidden case differs from the expected result",
        duration_s=0.5,
        visibility=visibility,
        cases_passed=4 if passed else 1,
        cases_total=4,
    )


def _report(problem: str, name: str, passing: set[str], misreadings: list[str], hidden_passes: bool) -> Report:
    """A graded report of three visible checks (a, b, c) and one held back, `passing` the visible ones that pass."""
    checks = [_check(c, c in passing) for c in ("a", "b", "c")]
    checks.append(_check(HIDDEN_CHECK, hidden_passes, "after_published", HIDDEN_TITLE))
    diagnosis = [
        Diagnosis(
            id=m,
            explanation=f"You read {m} the wrong way.",
            cases_explained=2,
            cases_failing=3,
            checks=["a", HIDDEN_CHECK],
            owners=["a"],
            charged_in=["a"],
        )
        for m in misreadings
    ]
    if not hidden_passes:
        diagnosis.append(
            Diagnosis(
                id=HIDDEN_MISREADING,
                explanation=f"Only the held-back check shows it ({HIDDEN_VALUE}).",
                cases_explained=1,
                cases_failing=1,
                checks=[HIDDEN_CHECK],
                owners=[HIDDEN_CHECK],
                charged_in=[HIDDEN_CHECK],
            )
        )
    score = sum(c.score for c in checks)
    return Report(
        problem=problem,
        submission=name,
        submission_sha256="0" * 64,
        status=Status.GRADED,
        score=score,
        max_score=40.0,
        tiers=[TierResult(tier="T1", title="Oracle", score=score, max_score=40.0, checks=checks)],
        artifacts=[],
        seed=SEED,
        versions=Versions(python="3.11", torch="2", grader="0"),
        problem_hash="f" * 64,
        command=f".venv/bin/python -m grader grade {name} --problem {problem} --seed {SEED}",
        stdout=PRINTED,
        stderr=PRINTED,
        diagnosis=diagnosis,
    )


# per problem, attempts in the order they were graded: (visible checks passing, misreadings, hidden check passes)
ATTEMPTS = {
    "grpo_advantages": [
        ({"a"}, ["mean_of_batch"], False),
        ({"a", "b"}, ["mean_of_batch"], False),
        ({"a", "b", "c"}, [], True),
    ],
    "ppo_clip_loss": [
        (set(), ["sign_ignored", "min_not_max"], False),
        ({"b", "c"}, ["sign_ignored"], False),
        ({"b"}, ["sign_ignored"], True),
    ],
    "routed_gates": [({"c"}, [], True), ({"c"}, ["softmax_over_all"], False)],  # the held-back check fails last
}


@pytest.fixture
def attempts_dir(tmp_path: Path) -> Path:
    """Reports as `grade --out DIR/<problem>/<try>` writes them, each graded a minute after the one before."""
    when = 1_700_000_000
    for problem, attempts in ATTEMPTS.items():
        for n, (passing, misreadings, hidden_passes) in enumerate(attempts, 1):
            path = tmp_path / problem / f"try{n}" / "report.json"
            write_report(_report(problem, f"try{n}.py", passing, misreadings, hidden_passes), path)
            when += 60
            os.utime(path, (when, when))
    (tmp_path / "notes" / "report.json").parent.mkdir()
    (tmp_path / "notes" / "report.json").write_text("not a report")  # read past, not a crash
    return tmp_path


def _rendered(progress: list, as_json: bool, capsys: pytest.CaptureFixture[str]) -> str:
    console = Console(width=200, record=True, highlight=False)
    print_progress(progress, {"grpo_advantages": "GRPO advantages"}, as_json=as_json, console=console)
    return console.export_text() + capsys.readouterr().out


def test_progress_shows_best_and_last_scores_still_failing_checks_and_recurring_misreadings(
    attempts_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    attempts = [a for a in map(read_attempt, report_files([attempts_dir])) if a is not None]
    assert len(attempts) == 8
    found = {item.problem: item for item in progress_of(attempts)}
    assert set(found) == set(PROBLEMS)
    ppo = found["ppo_clip_loss"]
    # scores count only the visible checks: 30 points, the held-back check's 10 show later
    assert (ppo.attempts, ppo.best.score, ppo.best.submission) == (3, 20, "try2.py")
    assert (ppo.last.score, ppo.last.max_score, ppo.last.submission) == (10, 30, "try3.py")
    assert ppo.last.withheld == 10
    assert [check for check, _ in ppo.last.failing] == ["a", "c"]
    assert [(m, n) for m, _, n in ppo.misreadings] == [("sign_ignored", 3), ("min_not_max", 1)]
    grpo = found["grpo_advantages"]
    assert (grpo.best.score, grpo.last.score, grpo.last.failing) == (30, 30, ())
    assert [(m, n) for m, _, n in grpo.misreadings] == [("mean_of_batch", 2)]
    data = json.loads(_rendered(progress_of(attempts), True, capsys))
    assert {d["problem"]: d["best"]["score"] for d in data} == {
        "grpo_advantages": 30,
        "ppo_clip_loss": 20,
        "routed_gates": 10,
    }
    table = _rendered(progress_of(attempts), False, capsys)
    assert "sign_ignored (in 3 of 3)" in table and "You read sign_ignored the wrong way." in table
    assert "none" in table and "[green]" not in table  # grpo_advantages' last attempt fails no visible check


def _assert_nothing_hidden(text: str) -> None:
    for secret in (HIDDEN_VALUE, HIDDEN_CHECK, HIDDEN_TITLE, HIDDEN_MISREADING, PRINTED, "Only the held-back"):
        assert secret not in text
    assert not re.search(rf"(?<!\d){SEED}(?!\d)", text) and "seed" not in text.lower()
    assert "--problem" not in text  # the command that would grade again at the hidden seed


def test_progress_shows_no_hidden_case_seed_or_held_back_check(
    attempts_dir: Path, run_cli, capsys: pytest.CaptureFixture[str]
) -> None:
    # the reports do hold every secret: the summary is what must leave them out
    held = "".join(p.read_text() for p in attempts_dir.rglob("report.json"))
    assert all(s in held for s in (HIDDEN_VALUE, HIDDEN_CHECK, HIDDEN_TITLE, HIDDEN_MISREADING, PRINTED, str(SEED)))
    attempts = [a for a in map(read_attempt, report_files([attempts_dir])) if a is not None]
    for as_json in (True, False):
        _assert_nothing_hidden(_rendered(progress_of(attempts), as_json, capsys))
    for extra in ((), ("--json",)):
        done = run_cli("progress", "--out", attempts_dir, *extra)
        assert done.returncode == 0, done.stderr
        assert "ppo_clip_loss" in done.stdout
        _assert_nothing_hidden(done.stdout + done.stderr)


def test_the_pack_shows_the_same_view_of_its_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    problem = Problem("ppo_clip_loss")
    shutil.copyfile(problem.problem_dir / "problem.toml", tmp_path / "problem.toml")
    for n, (passing, misreadings, hidden_passes) in enumerate(ATTEMPTS["ppo_clip_loss"], 1):
        view = learner_report(_report(problem.id, f"try{n}.py", passing, misreadings, hidden_passes), problem.spec)
        path = tmp_path / "reports" / f"try{n}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(view))
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))
    assert show_progress(tmp_path) == 0
    shown = capsys.readouterr().out
    assert "ppo_clip_loss" in shown and "(public cases)" in shown and "sign_ignored (in 3 of 3)" in shown
    assert "20/30" in shown and "10/30" in shown
    _assert_nothing_hidden(shown)


def test_progress_of_a_missing_folder_is_a_usage_error(run_cli, tmp_path: Path) -> None:
    done = run_cli("progress", "--out", tmp_path / "nowhere")
    assert done.returncode == 4 and "no such folder" in done.stderr


def _hidden_inputs(problem: Problem) -> set[str]:
    """The first two values of `logp` of every hidden case, as tests/hostile/leak_hidden_inputs.py writes them."""
    from grader.judge.expectations import Expectations

    expect = Expectations(problem, problem.grading_seeds[0])
    found = set()
    for check in problem.spec.checks:
        for call in expect.cases(check.cases) if check.cases else []:
            logp = call.kwargs.get("logp")
            if call.hidden and logp is not None:
                found.add(" ".join(f"{v:.6f}" for v in logp.reshape(-1)[:2].tolist()))
    return found


def test_progress_over_real_grades_quotes_no_hidden_input(run_cli, tmp_path: Path) -> None:
    """A file that raises with every input it was sent, then a known-wrong file: the grades keep the hidden inputs
    for the instructor, and the learner's progress shows neither them nor the grading seed."""
    problem = Problem("glm5_offpolicy")
    hostile = ROOT / "tests" / "hostile" / "leak_hidden_inputs.py"
    wrong = problem.known_wrong_file("ratio_inverted.py")
    for n, file in enumerate((hostile, wrong), 1):
        done = run_cli("grade", file, "--problem", problem.id, "--out", tmp_path / f"try{n}")
        assert done.returncode == 0, done.stderr[-2000:]
    hidden = _hidden_inputs(problem)
    instructor = (tmp_path / "try1" / "report.json").read_text()
    assert any(f in instructor for f in hidden)  # the attack worked: the report keeps what the file echoed
    reports = [json.loads((tmp_path / f"try{n}" / "report.json").read_text()) for n in (1, 2)]
    visible_scores = [
        round(sum(c["score"] for t in r["tiers"] for c in t["checks"] if c["visibility"] == "visible"), 2)
        for r in reports
    ]
    for extra in ((), ("--json",)):
        done = run_cli("progress", "--out", tmp_path, *extra)
        assert done.returncode == 0, done.stderr
        text = done.stdout + done.stderr
        assert not [f for f in hidden if f in text]
        assert str(problem.grading_seeds[0]) not in text and "seed" not in text.lower()
    data = json.loads(done.stdout)
    (item,) = data
    assert item["attempts"] == 2 and item["last"]["submission"] == "ratio_inverted.py"
    assert (item["best"]["score"], item["last"]["score"]) == (max(visible_scores), visible_scores[1])
    assert item["still_failing"], "a known-wrong file still fails visible checks"
    visible = {c["id"] for t in reports[1]["tiers"] for c in t["checks"] if c["visibility"] == "visible"}
    assert {c["id"] for c in item["still_failing"]} <= visible
