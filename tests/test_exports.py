"""Gradescope results.json, JUnit XML and the learner view: their formats, report.json's scores, no hidden detail."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from grader.judge import checks
from grader.judge.checks import CaseOutcome, Tally, run_check
from grader.judge.compare import Outcome, judge_case
from grader.judge.failures import LearnerFailure, failure_evidence
from grader.model.problem import Problem
from grader.model.report import Report, load_report, round_score
from grader.model.spec import Aspect, CheckSpec, DifferentialCheck, Tolerance
from grader.model.verdicts import Status, Verdict
from grader.outputs.exports import class_junit_xml, gradescope_refusal, gradescope_results, junit_xml
from grader.outputs.learner_view import learner_view

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = "glm5_offpolicy"
WRONG = Problem(PROBLEM).known_wrong_file("ratio_inverted.py")  # fails every hidden T1 case

# Gradescope's autograder specification, results.json: the fields it documents.
GRADESCOPE_TOP = {
    "score",
    "execution_time",
    "output",
    "output_format",
    "test_output_format",
    "test_name_format",
    "visibility",
    "stdout_visibility",
    "extra_data",
    "tests",
    "leaderboard",
}
GRADESCOPE_TEST = {
    "score",
    "max_score",
    "status",
    "name",
    "name_format",
    "number",
    "output",
    "output_format",
    "tags",
    "visibility",
    "extra_data",
}
VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}

# The common JUnit schema (Jenkins' junit-10.xsd): the attributes each element may carry, and those it must.
JUNIT_ATTRIBUTES = {
    "testsuites": ({"name", "time", "tests", "failures", "disabled", "errors"}, set()),
    "testsuite": (
        {
            "name",
            "tests",
            "failures",
            "errors",
            "time",
            "disabled",
            "skipped",
            "skips",
            "timestamp",
            "hostname",
            "id",
            "package",
            "assertions",
            "file",
            "skip",
            "log",
            "url",
        },
        {"tests"},
    ),
    "properties": (set(), set()),
    "property": ({"name", "value"}, {"name", "value"}),
    "testcase": (
        {
            "name",
            "assertions",
            "time",
            "timestamp",
            "classname",
            "status",
            "class",
            "file",
            "line",
            "log",
            "group",
            "url",
        },
        {"name"},
    ),
    "failure": ({"type", "message"}, set()),
    "error": ({"type", "message"}, set()),
    "skipped": ({"type", "message"}, set()),
    "system-out": (set(), set()),
    "system-err": (set(), set()),
}
JUNIT_CHILDREN = {
    "testsuites": {"testsuite"},
    "testsuite": {"testsuite", "properties", "testcase", "system-out", "system-err"},
    "properties": {"property"},
    "testcase": {"skipped", "error", "failure", "system-out", "system-err"},
}


@dataclass(frozen=True)
class Exports:
    report: Report
    results: dict
    junit: str
    wall_s: float  # the `grade` command's wall time, measured around its process

    def learner_texts(self) -> dict[str, str]:
        return {
            "results.json": json.dumps(self.results),
            "junit.xml": self.junit,
            "learner view": json.dumps(learner_view(self.report)),
        }

    def learner_entries(self, check_id: str) -> dict[str, str]:
        """What each learner-facing output says about one check."""
        test = next(t for t in self.results["tests"] if t["name"].startswith(f"{check_id}:"))
        case = next(c for c in ET.fromstring(self.junit).iter("testcase") if c.get("name") == check_id)
        view = next(c for t in learner_view(self.report)["tiers"] for c in t["checks"] if c["id"] == check_id)
        return {
            "results.json": json.dumps(test),
            "junit.xml": ET.tostring(case, encoding="unicode"),
            "learner view": json.dumps(view),
        }


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Exports:
    out = tmp_path_factory.mktemp("exports")
    env = {**os.environ, "PAPERLEET_ARTIFACTS": str(out / "artifacts")}
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "grade",
            str(WRONG),
            "--problem",
            PROBLEM,
            "--out",
            str(out / "report"),
            "--gradescope",
            str(out / "results.json"),
            "--junit",
            str(out / "junit.xml"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    wall_s = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    return Exports(
        load_report(out / "report" / "report.json"),
        json.loads((out / "results.json").read_text()),
        (out / "junit.xml").read_text(),
        wall_s,
    )


# ---------------------------------------------------------------- Gradescope results.json


def test_gradescope_fields_are_the_documented_ones(exports: Exports) -> None:
    results = exports.results
    assert set(results) <= GRADESCOPE_TOP
    assert {"score", "execution_time", "output", "visibility", "stdout_visibility", "tests"} <= set(results)
    assert isinstance(results["execution_time"], int) and isinstance(results["output"], str)
    assert results["visibility"] in VISIBILITIES and results["stdout_visibility"] == "hidden"
    for test in results["tests"]:
        assert set(test) == {"name", "number", "score", "max_score", "status", "output", "tags", "visibility"}
        assert test["status"] in ("passed", "failed")
        assert test["visibility"] in VISIBILITIES
        assert re.fullmatch(r"\d+\.\d+", test["number"])
        assert all(isinstance(tag, str) for tag in test["tags"])
        assert isinstance(test["output"], str) and test["output"]


def test_gradescope_has_one_test_per_check_with_report_scores(exports: Exports) -> None:
    report, tests = exports.report, exports.results["tests"]
    checks_in_order = [(tier.tier, check) for tier in report.tiers for check in tier.checks]
    assert len(tests) == len(checks_in_order)
    assert len({t["number"] for t in tests}) == len(tests)
    for test, (tier, check) in zip(tests, checks_in_order, strict=True):
        assert test["name"].startswith(check.id)
        assert test["number"].split(".")[0] == tier.removeprefix("T")
        assert (test["score"], test["max_score"]) == (round_score(check.score), check.max_score)
        assert test["status"] == ("passed" if check.verdict == Verdict.PASS else "failed")
        assert tier in test["tags"]
    assert exports.results["score"] == pytest.approx(report.score, abs=0.01)
    assert sum(t["score"] for t in tests) == pytest.approx(report.score, abs=0.01)
    assert sum(t["max_score"] for t in tests) == pytest.approx(report.max_score)


def test_gradescope_visibility_comes_from_the_spec(exports: Exports) -> None:
    spec = {c.id: c for c in Problem(PROBLEM).spec.checks}
    for test in exports.results["tests"]:
        check = spec[test["name"].split(":")[0]]
        assert test["visibility"] == check.visibility
        assert check.visibility == ("after_published" if check.tier == "T1" else "visible")


# ---------------------------------------------------------------- JUnit XML


def _validate_junit(element: ET.Element) -> None:
    allowed, required = JUNIT_ATTRIBUTES[element.tag]
    assert set(element.attrib) <= allowed, (element.tag, set(element.attrib) - allowed)
    assert required <= set(element.attrib), (element.tag, required - set(element.attrib))
    for name in ("tests", "failures", "errors", "skipped"):
        if name in element.attrib:
            assert element.attrib[name].isdigit()
    if "time" in element.attrib:
        assert float(element.attrib["time"]) >= 0
    for child in element:
        assert child.tag in JUNIT_CHILDREN.get(element.tag, set()), (element.tag, child.tag)
        _validate_junit(child)


def _suite_score(suite: ET.Element) -> float:
    """A suite's score as a reader takes it: the property named `score`, wherever it stands among the others."""
    (score,) = [p.get("value", "nan") for p in suite.findall("properties/property") if p.get("name") == "score"]
    return float(score)


def test_junit_has_the_common_schema_shape(exports: Exports) -> None:
    assert exports.junit.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    root = ET.fromstring(exports.junit)
    assert root.tag == "testsuites"
    _validate_junit(root)


def test_junit_groups_checks_by_tier_like_report(exports: Exports) -> None:
    report, root = exports.report, ET.fromstring(exports.junit)
    suites = root.findall("testsuite")
    assert [s.get("name", "").split()[0] for s in suites] == [t.tier for t in report.tiers]
    for suite, tier in zip(suites, report.tiers, strict=True):
        cases = suite.findall("testcase")
        assert [c.get("name") for c in cases] == [c.id for c in tier.checks]
        assert int(suite.get("tests", -1)) == len(cases)
        assert int(suite.get("failures", -1)) == sum(c.find("failure") is not None for c in cases)
        assert _suite_score(suite) == pytest.approx(tier.score, abs=0.01)
        for case, check in zip(cases, tier.checks, strict=True):
            failure = case.find("failure")
            assert (failure is None) == (check.verdict == Verdict.PASS)
            if failure is not None:
                assert check.learner_message in (failure.text or "")
    assert int(root.get("tests", -1)) == len(report.checks())


def test_junit_names_a_misreading_in_the_checks_it_explains_and_counts_no_test_for_it(exports: Exports) -> None:
    """A diagnosis is no test: it is read in the failing checks' own text (which CI readers show), never a suite."""
    diagnosis = learner_view(exports.report)["diagnosis"]
    assert diagnosis, "the graded file is diagnosed: the test would prove nothing"
    for text in (exports.junit, class_junit_xml([exports.report])):
        root = ET.fromstring(text)
        assert int(root.get("tests", -1)) == len(list(root.iter("testcase"))) == len(exports.report.checks())
        assert all(
            len(suite.findall("testcase")) == int(suite.get("tests", -1)) > 0 for suite in root.iter("testsuite")
        )
        details = {case.get("name"): case.find("failure") for case in root.iter("testcase")}
        for finding in diagnosis:
            touched = [c for c in (*finding["checks"], *finding["owners"]) if details.get(c) is not None]
            assert touched, finding["id"]
            for check in touched:
                assert f"Likely misreading ({finding['id']}" in (details[check].text or "")  # type: ignore[union-attr]
                assert finding["explanation"] in (details[check].text or "")  # type: ignore[union-attr]


def test_junit_maps_every_verdict(exports: Exports) -> None:
    report = exports.report.model_copy(deep=True)
    verdicts = [Verdict.ERROR, Verdict.TIMEOUT, Verdict.CRASHED, Verdict.SKIPPED, Verdict.JUDGE_ERROR]
    report.diagnosis = []
    for position, check in enumerate(report.tiers[0].checks):
        verdict = verdicts[position] if position < len(verdicts) else Verdict.PASS
        check.verdict, check.learner_message = verdict, f"went wrong \x07 <{verdict}> & more"
    suite = ET.fromstring(junit_xml(report)).findall("testsuite")[0]
    _validate_junit(suite)
    assert (suite.get("errors"), suite.get("skipped"), suite.get("failures")) == ("5", "0", "0")
    outputs = [t["output"] for t in gradescope_results(report)["tests"][:5]]
    assert [o.split()[0] for o in outputs] == [f"[{v}]" for v in verdicts]


def _not_imported(report: Report, status: Status) -> Report:
    """`report` as if its file had not imported (or had run out of time): every check skipped, none scored."""
    broken = report.model_copy(deep=True)
    broken.status, broken.score, broken.message = status, 0.0, "importing ratio_inverted.py failed at line 4"
    for tier in broken.tiers:
        tier.score = 0.0
        for check in tier.checks:
            check.verdict, check.score = Verdict.SKIPPED, 0.0
            check.message = check.learner_message = broken.message
    return broken


@pytest.mark.parametrize(
    "status", [Status.IMPORT_ERROR, Status.IMPORT_TIMEOUT, Status.IMPORT_CRASHED, Status.BUDGET_EXCEEDED]
)
def test_junit_counts_a_file_that_did_not_run_as_errors(exports: Exports, status: Status) -> None:
    root = ET.fromstring(junit_xml(_not_imported(exports.report, status)))
    _validate_junit(root)
    cases = list(root.iter("testcase"))
    assert int(root.get("errors", -1)) == int(root.get("tests", -1)) == len(cases) > 0
    assert not list(root.iter("skipped")) and all(s.get("skipped") == "0" for s in root.iter("testsuite"))
    assert {case.find("error").get("type") for case in cases} == {str(status)}  # type: ignore[union-attr]


def test_class_junit_has_one_suite_per_submission(exports: Exports) -> None:
    other = _not_imported(exports.report, Status.IMPORT_ERROR)
    other.submission = "broken.py"
    root = ET.fromstring(class_junit_xml([exports.report, other]))
    _validate_junit(root)
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["broken.py", exports.report.submission]
    checks = len(exports.report.checks())
    assert all(int(s.get("tests", -1)) == len(s.findall("testcase")) == checks for s in suites)
    assert int(suites[0].get("errors", -1)) == checks
    properties = {p.get("name"): p.attrib["value"] for p in suites[1].iter("property")}
    assert properties["status"] == "graded"
    assert float(properties["score"]) == pytest.approx(exports.report.score, abs=0.01)
    assert int(root.get("tests", -1)) == 2 * checks


def _withheld(results: dict) -> list[dict]:
    return [t for t in results["tests"] if t["visibility"] != "visible"]


def test_gradescope_output_says_nothing_a_held_back_test_does_not(exports: Exports) -> None:
    """Gradescope always shows `output` and hides the total while a test is after_published: so `output` must
    read the same whatever the held-back tests scored, and never state the total."""
    results = exports.results
    held = _withheld(results)
    assert held and {t["visibility"] for t in held} == {"after_published"}
    other = exports.report.model_copy(deep=True)
    for check in other.checks():
        if check.visibility != "visible":
            check.score = check.max_score - check.score  # what the held-back tests score, turned around
    again = gradescope_results(other)
    assert [t["score"] for t in _withheld(again)] != [t["score"] for t in held]
    assert again["output"] == results["output"]
    total = f"{results['score']:g}/{exports.report.max_score:g}"
    assert total not in results["output"]
    shown = [t for t in results["tests"] if t["visibility"] == "visible"]
    assert f"{sum(t['score'] for t in shown):g}/{sum(t['max_score'] for t in shown):g} points" in results["output"]
    assert "once grades are published" in results["output"]


def test_gradescope_output_states_the_total_once_everything_is_visible(exports: Exports) -> None:
    visible = exports.report.model_copy(deep=True)
    for check in visible.checks():
        check.visibility = "visible"
    results = gradescope_results(visible)
    assert f"{results['score']:g}/{visible.max_score:g} points" in results["output"]


def test_gradescope_refuses_a_hidden_check_worth_points() -> None:
    hidden = _check().model_copy(update={"visibility": "hidden"})
    assert gradescope_refusal([_check()]) is None
    why = gradescope_refusal([hidden])
    assert why is not None and "probe" in why and "after_published" in why


def test_exports_round_scores_once_and_add_them_up(exports: Exports) -> None:
    """A check worth 35/12 points shows 2.92 everywhere; tier and total scores are the sums of what is shown."""
    report = exports.report.model_copy(deep=True)
    for check in report.checks():
        check.score = check.max_score * 7 / 12
    results = gradescope_results(report)
    scores = [t["score"] for t in results["tests"]]
    assert all(score == round(score, 2) for score in scores) and any(score != round(score, 1) for score in scores)
    assert results["score"] == round(sum(scores), 2)
    view = learner_view(report)
    for tier in view["tiers"]:
        assert tier["score"] == round(sum(c["score"] for c in tier["checks"]), 2)
    assert view["score"] == round(sum(t["score"] for t in view["tiers"]), 2) == results["score"]
    junit = ET.fromstring(junit_xml(report))
    for suite, tier in zip(junit.findall("testsuite"), view["tiers"], strict=True):
        assert _suite_score(suite) == tier["score"]


def test_a_checks_score_is_rounded_where_it_is_computed() -> None:
    passed, failed = Outcome(Verdict.PASS), Outcome(Verdict.FAIL, failure_evidence(LearnerFailure(Verdict.FAIL, "x")))
    result = Tally(
        [CaseOutcome("a", False, passed), CaseOutcome("b", False, failed), CaseOutcome("c", False, failed)]
    ).result(_check(), 0.0)
    assert result.score == round_score(4 / 3) == 1.33


def test_gradescope_execution_time_covers_the_whole_command(exports: Exports) -> None:
    # the process's own start-up and exit are all that is left out
    assert exports.results["execution_time"] >= 0.8 * exports.wall_s - 1 > 0


# ---------------------------------------------------------------- learner-facing outputs leak nothing hidden


def test_learner_outputs_hold_no_hidden_case_details(exports: Exports) -> None:
    report = exports.report
    hidden = {c.id: c for c in report.checks() if c.visibility == "after_published" and c.verdict == Verdict.FAIL}
    assert hidden, "ratio_inverted fails some hidden check"
    # a hidden case's label names only its non-secret parameters (dtype, shape, mode); its values stay out
    for where, text in exports.learner_texts().items():
        assert not re.search(rf"(?<![\d.]){report.seed}(?![\d.])", text), where
        assert "seed" not in text.lower(), where
    for check in hidden.values():
        # the same numbers may turn up in a visible case's message, so each hidden check is read on its own
        expected = re.findall(r"expected (-?[\d.]+(?:e[-+]?\d+)?)", check.message)
        assert expected, "report.json keeps the instructor's detail"
        elements = re.search(r"(\d+) of (\d+) elements differ", check.message)
        assert elements is not None
        for where, text in exports.learner_entries(check.id).items():
            for secret in [*expected, f"{elements[0]}", f"of {elements[2]}"]:
                assert secret not in text, (where, check.id, secret)


def test_learner_view_keeps_scores_and_drops_instructor_fields(exports: Exports) -> None:
    view = learner_view(exports.report)
    assert not {"seed", "command", "stdout", "stderr", "isolation", "submission_sha256"} & set(view)
    assert view["score"] == exports.report.score
    pairs = zip([c for t in view["tiers"] for c in t["checks"]], exports.report.checks(), strict=True)
    assert all(v["message"] == c.learner_message and v["score"] == round_score(c.score) for v, c in pairs)


# ---------------------------------------------------------------- every message path is hidden-safe

SECRET = "4242.125"  # stands for any input, expected value or learner-chosen text of a hidden case
TOLERANCES = {"float64": Tolerance(rtol=1e-9, atol=1e-12), "float32": Tolerance(rtol=1e-4, atol=1e-6)}


def _tensor(value: torch.Tensor) -> dict:
    return {"kind": "tensor", "value": value, "requires_grad": False, "has_grad_fn": False, "device": "cpu"}


def _raised(kind: str, bases: list[str]) -> dict:
    return {"type": kind, "bases": bases, "message": f"bad input {SECRET}"}


SECRET_T = torch.full((7, 13), float(SECRET), dtype=torch.float64)
Case = tuple[dict[str, Any], dict[str, Any], list[Aspect], dict[str, Any]]  # got, want, aspects, sent
CASES: dict[str, Case] = {
    "values": (
        {"output": _tensor(torch.zeros(7, 13, dtype=torch.float64))},
        {"output": _tensor(SECRET_T)},
        ["values"],
        {},
    ),
    "shape": (
        {"output": _tensor(torch.zeros(2, 2, dtype=torch.float64))},
        {"output": _tensor(SECRET_T)},
        ["shape"],
        {},
    ),
    "shape under values": (
        {"output": _tensor(torch.zeros(2, 2, dtype=torch.float64))},
        {"output": _tensor(SECRET_T)},
        ["values"],
        {},
    ),
    "dtype": (
        {"output": _tensor(torch.zeros(7, 13, dtype=torch.float32))},
        {"output": _tensor(SECRET_T)},
        ["dtype"],
        {},
    ),
    "python value": (
        {"output": {"kind": "python", "type": f"Leak{SECRET}", "value": 0.5}},
        {"output": {"kind": "python", "type": "float", "value": float(SECRET)}},
        ["type"],
        {},
    ),
    "not a tensor": (
        {"output": {"kind": "other", "type": f"Leak{SECRET}"}},
        {"output": _tensor(SECRET_T)},
        ["type"],
        {},
    ),
    "raised": ({"raised": _raised(f"Leak{SECRET}", ["ValueError"])}, {"output": _tensor(SECRET_T)}, ["values"], {}),
    "wrong exception": ({"raised": _raised("TypeError", [])}, {"raised": _raised("ValueError", [])}, ["raises"], {}),
    "backward": (
        {"output": _tensor(SECRET_T), "backward_error": _raised("RuntimeError", [])},
        {"output": _tensor(SECRET_T), "grads": {"logp": SECRET_T}},
        ["backward"],
        {},
    ),
    "grads": (
        {"output": _tensor(SECRET_T), "grads": {"logp": torch.zeros(7, 13, dtype=torch.float64)}},
        {"output": _tensor(SECRET_T), "grads": {"logp": SECRET_T}},
        ["grads"],
        {},
    ),
    "mutated input": (
        {"output": _tensor(SECRET_T), "inputs_after": {"logp": torch.zeros(7, 13, dtype=torch.float64)}},
        {"output": _tensor(SECRET_T)},
        ["inputs_unchanged"],
        {"logp": SECRET_T},
    ),
}


def _check(check_id: str = "probe") -> CheckSpec:
    return DifferentialCheck(
        id=check_id,
        tier="T1",
        clause="c",
        kind="differential",
        title="probe",
        points=4,
        cases="probe",
        compare=["values"],
        visibility="after_published",
    )


def _secret_free(text: str) -> bool:
    """No value, shape (7 x 13 = 91 elements), dtype or tolerance of the case, no learner-chosen text."""
    return not any(part in text for part in (SECRET, "4242", "7, 13", "91", "float64", "1e-09", "Leak"))


@pytest.mark.parametrize("name", list(CASES))
def test_judge_case_learner_message_is_hidden_safe(name: str) -> None:
    got, want, aspects, sent = CASES[name]
    outcome = judge_case("masked_is_weights", sent, got, want, aspects, TOLERANCES)
    assert outcome.verdict != Verdict.PASS and outcome.mismatch is not None
    assert _secret_free(outcome.mismatch.learner_message), outcome.mismatch.learner_message
    # a hidden case's label names only non-secret parameters (dtype, shape, mode): it may be shown
    result = Tally([CaseOutcome("a hidden case", True, outcome)]).result(_check(), 0.0)
    assert _secret_free(result.learner_message) and outcome.mismatch.message in result.message


def test_visible_case_keeps_its_detail_for_the_learner() -> None:
    got, want, aspects, sent = CASES["values"]
    outcome = judge_case("f", sent, got, want, aspects, TOLERANCES)
    result = Tally([CaseOutcome("a visible case", False, outcome)]).result(_check(), 0.0)
    assert result.learner_message == result.message and "a visible case" in result.learner_message


@pytest.mark.parametrize("verdict", [Verdict.FAIL, Verdict.ERROR, Verdict.TIMEOUT, Verdict.CRASHED, Verdict.SKIPPED])
def test_learner_failures_of_hidden_cases_are_hidden_safe(verdict: Verdict) -> None:
    evidence = failure_evidence(LearnerFailure(verdict, f"forged frame naming {SECRET}"))
    result = Tally([CaseOutcome("hidden", True, Outcome(verdict, evidence))]).result(_check(), 0.0)
    assert _secret_free(result.learner_message) and SECRET in result.message


def test_judge_errors_show_learners_no_exception_text(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ctx: object, check: CheckSpec) -> Tally:
        raise RuntimeError(f"reference failed on {SECRET}")

    monkeypatch.setitem(checks.REGISTRY, "differential", broken)
    result = run_check(None, _check()).result()  # type: ignore[arg-type]
    assert result.verdict == Verdict.JUDGE_ERROR
    assert SECRET in result.message and _secret_free(result.learner_message)
