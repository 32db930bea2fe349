"""Diagnosis names the misreading behind failures; follow-through charges it only in the checks that own it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grader.judge.checks import CaseOutcome, Tally
from grader.judge.compare import Mismatch, Outcome
from grader.judge.diagnosis import Credit, Explained, credit_for, diagnose, follow_through
from grader.model.misconceptions import Convention, Misconception, load_misconceptions
from grader.model.problem import Problem
from grader.model.report import CheckResult, Diagnosis, Report, TierResult, UnexplainedCases, Versions
from grader.model.spec import CheckSpec, DifferentialCheck, SpecError
from grader.model.verdicts import Status, Verdict
from grader.outputs.exports import gradescope_results
from grader.outputs.learner_view import learner_diagnosis, learner_view
from grader.outputs.pages.report_page import render_report_page
from grader.outputs.terminal import diagnosis_lines, localisation_lines

ROOT = Path(__file__).resolve().parent.parent
BESSEL = Misconception(id="bessel", solution="b.py", owners=["ddof"], explanation="Divide by G, not G - 1, here.")
BATCH = Misconception(id="batch", solution="c.py", owners=["per_group"], explanation="Statistics are per group.")


def test_a_misreading_is_charged_only_where_an_owner_check_sees_it() -> None:
    failing = [
        Explained("oracle", ("bessel",)),
        Explained("oracle", ("bessel",)),
        Explained("ddof", ("bessel",)),
        Explained("oracle", ("batch",)),
    ]  # batch explains a case, but never in its owner check
    (finding,) = diagnose(failing, [BATCH, BESSEL])
    assert finding.misconception.id == "bessel"
    assert (finding.cases_explained, finding.cases_failing) == (3, 4)
    assert finding.checks == ("oracle", "ddof") and finding.owners_charged == ("ddof",)


def test_a_misreading_is_named_for_every_failure_of_one_owner_check_answered_alike() -> None:
    # bessel explains 2 of 12 failing cases: under a quarter, and under half of its two owners' failures together,
    # but every failure of `ddof` (the failures of `ddof_small` are another departure's)
    bessel = Misconception(id="bessel", solution="b.py", owners=["ddof", "ddof_small"], explanation="G, not G - 1.")
    rest = [Explained("ddof_small", ())] * 3 + [Explained("oracle", ())] * 7
    (finding,) = diagnose([Explained("ddof", ("bessel",))] * 2 + rest, [bessel])
    assert finding.held_back and finding.owners_charged == ("ddof",)
    assert not diagnose([Explained("ddof", ("bessel",)), Explained("ddof", ())] + rest, [bessel])  # 1 of 2
    assert not diagnose([Explained("ddof", ("bessel",))] + rest, [bessel])  # one case is too little
    # raising as it raises, or a toy's series, is too little too
    assert not diagnose([Explained("ddof", ("bessel",), ("bessel",))] * 2 + rest, [bessel])
    assert not diagnose([Explained("ddof", ("bessel",), series=True)] * 2 + rest, [bessel])


def test_a_combination_lends_its_quarter_only_when_every_member_carries() -> None:
    # bessel alone explains 2 of 13; with batch, 2 more: 4 of 13 is a quarter, but batch, named for its one owner
    # check, explains 3 of 13 (under a quarter), so the cases they explain together count for neither
    both = ("bessel", "batch")
    failing = (
        [Explained("ddof", ("bessel",))] * 2
        + [Explained("oracle", both, together=both)] * 2
        + [Explained("per_group", ("batch",))]
        + [Explained("oracle", ())] * 8
    )
    findings = {f.misconception.id: f for f in diagnose(failing, [BESSEL, BATCH])}
    assert findings["bessel"].held_back and findings["batch"].held_back
    # one more case of batch's own makes it carry, and then the shared cases count for both
    carried = {f.misconception.id: f for f in diagnose(failing[:-1] + [Explained("x", ("batch",))], [BESSEL, BATCH])}
    assert not carried["bessel"].held_back and not carried["batch"].held_back


def test_more_explained_cases_rank_first() -> None:
    failing = [Explained("ddof", ("bessel",)), Explained("per_group", ("batch",)), Explained("x", ("batch",))]
    assert [f.misconception.id for f in diagnose(failing, [BESSEL, BATCH])] == ["batch", "bessel"]


def test_follow_through_skips_the_owner() -> None:
    credit = Credit({"bessel": BESSEL})
    assert follow_through("oracle", "T1", ("bessel",), (), False, credit) == "bessel"
    assert follow_through("ddof", "T2", ("bessel",), (), False, credit) is None
    assert follow_through("oracle", "T1", ("batch",), (), False, credit) is None  # not charged: carries nothing


def test_a_case_an_owner_charges_is_never_credited_through_another() -> None:
    credit = Credit({"bessel": BESSEL, "batch": BATCH})
    assert follow_through("ddof", "T2", ("bessel", "batch"), (), False, credit) is None
    assert follow_through("ddof", "T2", ("batch",), (), False, credit) == "batch"


def test_a_failure_carries_only_for_a_misreading_the_learner_is_faithful_to() -> None:
    charged = {"bessel": BESSEL}
    assert follow_through("oracle", "T1", (), ("bessel",), False, Credit(charged)) is None
    faithful = Credit(charged, faithful=frozenset({"bessel"}))
    assert follow_through("oracle", "T1", (), ("bessel",), False, faithful) == "bessel"
    of_form = Credit(charged, faithful=frozenset({"bessel"}), form_charged=frozenset({"bessel"}))
    assert follow_through("oracle", "T1", (), ("bessel",), False, of_form) is None  # no failure into a value tier
    assert follow_through("contract", "T0", (), ("bessel",), False, of_form) == "bessel"
    assert follow_through("oracle", "T1", ("bessel",), (), False, of_form) == "bessel"  # an answer still carries


def test_faithful_means_explaining_every_failing_case_and_contradicting_none() -> None:
    failing = [Explained("ddof", ("bessel",)), Explained("oracle", ("bessel",), ("bessel",))]
    assert credit_for(failing, {"bessel": BESSEL}, {}).faithful == {"bessel"}
    assert credit_for(failing, {"bessel": BESSEL}, {"bessel": 1}).faithful == set()
    other_bug = [*failing, Explained("oracle", ())]
    assert credit_for(other_bug, {"bessel": BESSEL}, {}).faithful == set()


def test_a_misreading_is_of_form_when_every_owner_case_it_explains_differs_only_in_form() -> None:
    by_form = [Explained("ddof", ("bessel",), form_only=True), Explained("oracle", ("bessel",))]
    assert credit_for(by_form, {"bessel": BESSEL}, {}).form_charged == {"bessel"}
    by_value = [*by_form, Explained("ddof", ("bessel",))]
    assert credit_for(by_value, {"bessel": BESSEL}, {}).form_charged == set()
    by_raising = [Explained("ddof", ("bessel",), ("bessel",), form_only=True)]
    assert credit_for(by_raising, {"bessel": BESSEL}, {}).form_charged == set()


def _check(check_id: str) -> CheckSpec:
    return DifferentialCheck(
        id=check_id, tier="T2", kind="differential", title="t", points=4, clause="c", cases="c", compare=["values"]
    )


def _fail(explained: tuple[str, ...] = (), group: str | None = None) -> CaseOutcome:
    return CaseOutcome("case", False, Outcome(Verdict.FAIL, Mismatch.of("values differ")), group, explained)


def test_follow_through_credits_cases_in_checks_that_do_not_own_the_misreading() -> None:
    passed = CaseOutcome("ok", False, Outcome(Verdict.PASS))
    tally = Tally([passed, _fail(("bessel",)), _fail(("bessel",)), _fail()])
    strict = tally.result(_check("oracle"), 0.0)
    assert (strict.score, strict.cases_followed_through) == (1.0, 0)
    carried = tally.result(_check("oracle"), 0.0, Credit({"bessel": BESSEL}))
    assert (carried.score, carried.cases_followed_through, carried.followed_through) == (3.0, 2, ["bessel"])
    assert carried.verdict == Verdict.FAIL and "follow-through" in carried.learner_message
    owner = tally.result(_check("ddof"), 0.0, Credit({"bessel": BESSEL}))
    assert owner.score == 1.0  # the owner charges it


def test_a_group_passes_only_when_every_call_passes_or_is_carried() -> None:
    passed = CaseOutcome("ok", False, Outcome(Verdict.PASS), "g1")
    tally = Tally(
        [passed, _fail(("bessel",), "g1"), CaseOutcome("ok", False, Outcome(Verdict.PASS), "g2"), _fail((), "g2")]
    )
    assert tally.result(_check("oracle"), 0.0, Credit({"bessel": BESSEL})).score == 2.0  # g1 carried, g2 not


def test_declarations_are_checked(tmp_path: Path) -> None:
    (tmp_path / "wrong").mkdir()
    (tmp_path / "wrong" / "b.toml").write_text("")
    good = '[[misconceptions]]\nid = "bessel"\nsolution = "b.py"\nexplanation = "Divide by G."\n'
    (tmp_path / "m.toml").write_text(good)

    def owners_of(path: Path) -> list[str]:
        return ["ddof"] if path == tmp_path / "wrong" / "b.toml" else []

    (loaded,) = load_misconceptions(tmp_path / "m.toml", owners_of, tmp_path / "wrong")
    assert (loaded.id, loaded.owners) == ("bessel", ["ddof"])
    # the owners are the clauses' checks, declared once: a list of them in the file is a second declaration
    for broken in (good.replace("b.py", "c.py"), good + "colour = 1\n", good + good, good + 'owners = ["ddof"]\n'):
        (tmp_path / "m.toml").write_text(broken)
        with pytest.raises(SpecError):
            load_misconceptions(tmp_path / "m.toml", owners_of, tmp_path / "wrong")


def test_visible_only_diagnosis_view(tmp_path: Path) -> None:
    def check(check_id: str, visibility: str) -> CheckResult:
        return CheckResult(
            id=check_id,
            title="t",
            verdict=Verdict.FAIL,
            score=0,
            max_score=1,
            message="m",
            duration_s=0,
            visibility=visibility,
        )

    tiers = [
        TierResult(
            tier="T1",
            title="t",
            score=0,
            max_score=2,
            checks=[check("oracle", "after_published"), check("ddof", "visible")],
        )
    ]
    report = Report(
        problem="p",
        submission="s.py",
        submission_sha256="0",
        status=Status.GRADED,
        score=0,
        max_score=2,
        tiers=tiers,
        artifacts=[],
        seed=1,
        versions=Versions(python="3", torch="2", grader="0"),
        problem_hash="0",
        command="c",
        diagnosis=[
            Diagnosis(
                id="bessel",
                explanation="e",
                cases_explained=3,
                cases_failing=4,
                checks=["oracle", "ddof"],
                owners=["ddof"],
                charged_in=["ddof"],
            ),
            Diagnosis(
                id="hidden_only",
                explanation="e",
                cases_explained=1,
                cases_failing=4,
                checks=["oracle"],
                owners=["oracle"],
                charged_in=["oracle"],
            ),
        ],
    )
    (shown,) = learner_diagnosis(report)
    assert shown == {"id": "bessel", "explanation": "e", "checks": ["ddof"], "owners": ["ddof"]}
    for c in report.checks():
        c.visibility = "visible"
    assert [d["id"] for d in learner_diagnosis(report)] == ["bessel", "hidden_only"]
    assert learner_diagnosis(report)[0]["cases_explained"] == 3


def test_always_bessel_is_diagnosed_and_charged_once(run_cli, tmp_path: Path) -> None:
    """The README's example: a grpo solution that always applies Bessel's correction, as RL libraries do."""
    out = tmp_path / "out"
    result = run_cli(
        "grade",
        str(Problem("grpo_advantages").known_wrong_file("always_bessel.py")),
        "--problem",
        "grpo_advantages",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["diagnosis"][0]["id"] == "bessel_always"
    lost = {c["id"] for tier in report["tiers"] for c in tier["checks"] if c["score"] < c["max_score"]}
    assert lost == {"unbiased_ddof", "scale_normalized"}  # the toy, at ddof 0, owns the curves a ddof of 1 bends
    assert "bessel_always" in result.stdout.split("┏")[0]  # the diagnosis is printed before the table
    strict = run_cli(
        "grade",
        str(Problem("grpo_advantages").known_wrong_file("always_bessel.py")),
        "--problem",
        "grpo_advantages",
        "--out",
        str(tmp_path / "strict"),
        "--no-follow-through",
    )
    assert strict.returncode == 0, strict.stderr[-2000:]
    strict_report = json.loads((tmp_path / "strict" / "report.json").read_text())
    assert strict_report["score"] < report["score"] and not strict_report["follow_through"]


SLIME = {"library": "slime", "does": "divides by sum max(1, n_i)", "statement": "divides by max(1, sum n_i)"}


def test_a_convention_is_loaded_and_checked(tmp_path: Path) -> None:
    (tmp_path / "wrong").mkdir()
    (tmp_path / "wrong" / "b.toml").write_text("")
    good = '[[misconceptions]]\nid = "floor"\nsolution = "b.py"\nexplanation = "Divide by max(1, sum n)."\n'
    line = (
        'convention = { library = "slime", does = "divides by sum max(1, n_i)", '
        'statement = "divides by max(1, sum n_i)" }\n'
    )
    (tmp_path / "m.toml").write_text(good + line)
    (loaded,) = load_misconceptions(tmp_path / "m.toml", lambda path: ["ddof"], tmp_path / "wrong")
    assert loaded.convention is not None and loaded.convention.library == "slime"
    assert loaded.convention.sentence() == (
        "slime divides by sum max(1, n_i) on purpose; this statement divides by max(1, sum n_i)."
    )
    (tmp_path / "m.toml").write_text(good)
    (plain,) = load_misconceptions(tmp_path / "m.toml", lambda path: ["ddof"], tmp_path / "wrong")
    assert plain.convention is None
    for broken in (line.replace(" }", ', url = "x" }'), line.replace('library = "slime", ', "")):
        (tmp_path / "m.toml").write_text(good + broken)
        with pytest.raises(SpecError):
            load_misconceptions(tmp_path / "m.toml", lambda path: ["ddof"], tmp_path / "wrong")


def _report_with(diagnosis: list[Diagnosis], **extra: Any) -> Report:
    check = CheckResult(id="ddof", title="t", verdict=Verdict.FAIL, score=0, max_score=1, message="m", duration_s=0)
    return Report(
        problem="p",
        submission="s.py",
        submission_sha256="0",
        status=Status.GRADED,
        score=0,
        max_score=1,
        tiers=[TierResult(tier="T1", title="t", score=0, max_score=1, checks=[check])],
        artifacts=[],
        seed=1,
        versions=Versions(python="3", torch="2", grader="0"),
        problem_hash="0",
        command="c",
        diagnosis=diagnosis,
        **extra,
    )


def test_a_convention_and_the_unexplained_cases_are_shown_beside_the_diagnosis() -> None:
    sentence = Misconception(
        id="floor", solution="b.py", owners=["ddof"], explanation="e" * 10, convention=Convention(**SLIME)
    )
    assert sentence.convention is not None
    left = UnexplainedCases(check="ddof", cases=["float64 empty response"], hidden=2)
    nowhere = UnexplainedCases(check="ddof", cases=["float64 empty response"], features=["fails only where x is 2-D"])
    entry = Diagnosis(
        id="floor",
        explanation="Divide by max(1, sum n).",
        cases_explained=3,
        cases_failing=6,
        checks=["ddof"],
        owners=["ddof"],
        charged_in=["ddof"],
        convention=sentence.convention.sentence(),
        unexplained=[left],
    )
    report = _report_with([entry], unexplained=[nowhere])
    lines = "\n".join(diagnosis_lines(report))
    assert "slime divides by sum max(1, n_i) on purpose" in lines
    assert "A library's convention: slime" in lines
    assert "left unexplained in ddof: 'float64 empty response', 2 hidden" in lines
    assert "explained by no misreading: ddof: 'float64 empty response' (fails only where x is 2-D)" in lines
    (shown,) = learner_diagnosis(report)
    assert shown["convention"] == entry.convention and shown["unexplained"][0]["hidden"] == 2
    assert learner_view(report)["unexplained"][0]["features"] == ["fails only where x is 2-D"]
    assert "slime divides by" in gradescope_results(report)["output"]
    page = render_report_page(report, [])
    assert "slime divides by sum max(1, n_i) on purpose" in page and "2 hidden" in page
    assert "fails only where x is 2-D" in page
    # without them, nothing is said
    plain = _report_with([entry.model_copy(update={"convention": "", "unexplained": []})])
    assert "on purpose" not in "\n".join(diagnosis_lines(plain)) and "unexplained" not in render_report_page(plain, [])


def test_a_held_back_check_lists_no_unexplained_case() -> None:
    report = _report_with([], unexplained=[UnexplainedCases(check="ddof", cases=["a"], hidden=1)])
    report.tiers[0].checks[0].visibility = "after_published"
    assert learner_view(report)["unexplained"] == []
    report.tiers[0].checks[0].visibility = "visible"
    assert learner_view(report)["unexplained"][0]["check"] == "ddof"


def test_with_no_diagnosis_only_the_located_failures_are_said() -> None:
    located = UnexplainedCases(check="ddof", cases=["a"], features=["fails only where mask is all zero"])
    report = _report_with([], unexplained=[located, UnexplainedCases(check="other", cases=["b"])])
    assert localisation_lines(report) == ["ddof: 'a' (fails only where mask is all zero)"]
    page = render_report_page(report, [])
    assert "fails only where mask is all zero" in page and "&#x27;b&#x27;" not in page
    assert localisation_lines(_report_with([], unexplained=[UnexplainedCases(check="other", cases=["b"])])) == []
