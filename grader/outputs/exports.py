"""Course exports of one report, both built from the learner's view: Gradescope's results.json and JUnit XML."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from grader.model.report import Report, round_score, score_sum, write_atomic
from grader.model.spec import CheckSpec
from grader.model.verdicts import Verdict
from grader.outputs.learner_view import learner_seconds, learner_view

HIDDEN_NOTE = (
    "Checks on hidden cases report a verdict and a hint, never the cases themselves; some of them show "
    "their results only once grades are published."
)
# When Gradescope shows a test of each visibility; until then neither its score nor the total can be seen.
SHOWN = {"after_due_date": "after the due date", "after_published": "once grades are published"}

# JUnit's closed vocabulary (junit-10.xsd): a failed comparison is a failure; anything else that went wrong with the
# learner's code is an error: it raised, hung, crashed, or never ran because the file did not import or the
# submission's time ran out (a skipped check is never the learner's choice, so it is not reported as <skipped>).
JUNIT_ELEMENT = {
    Verdict.FAIL: "failure",
    Verdict.ERROR: "error",
    Verdict.TIMEOUT: "error",
    Verdict.CRASHED: "error",
    Verdict.JUDGE_ERROR: "error",
    Verdict.SKIPPED: "error",
}
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # characters XML 1.0 cannot carry at all


def _points(value: float) -> str:
    return f"{round_score(value):g}"


def _check_output(check: dict[str, Any]) -> str:
    verdict = check["verdict"]
    head = "" if verdict in (Verdict.PASS, Verdict.FAIL) else f"[{verdict}] "
    return f"{head}{check['message']}\n{_points(check['score'])}/{_points(check['max_score'])} points"


def _withheld_text(checks: list[dict[str, Any]]) -> str:
    """When the points of `checks` (none of them visible) show, in words."""
    whens = sorted({SHOWN.get(c["visibility"], "later") for c in checks})
    return f"{_points(sum(c['max_score'] for c in checks))} more points show {' or '.join(whens)}"


def _tier_line(tier: dict[str, Any]) -> str:
    shown = [c for c in tier["checks"] if c["visibility"] == "visible"]
    withheld = [c for c in tier["checks"] if c["visibility"] != "visible"]
    head = f"{tier['tier']} {tier['title']}: "
    if not withheld:
        return head + f"{_points(tier['score'])}/{_points(tier['max_score'])}"
    if not shown:
        return head + _withheld_text(withheld).replace(" more points", " points", 1)
    return head + (
        f"{_points(score_sum(c['score'] for c in shown))}/{_points(sum(c['max_score'] for c in shown))} "
        f"on the checks shown now; {_withheld_text(withheld)}"
    )


def _summary(view: dict[str, Any]) -> str:
    """The text above the tests, which Gradescope always shows: made only of what the visible tests show, so that
    no score of a test shown later (nor the total, which depends on them) can be read from it before then."""
    checks = [c for tier in view["tiers"] for c in tier["checks"]]
    shown = [c for c in checks if c["visibility"] == "visible"]
    withheld = [c for c in checks if c["visibility"] != "visible"]
    if withheld:
        head = (
            f"{view['problem']} ({view['status']}): {_points(score_sum(c['score'] for c in shown))}/"
            f"{_points(sum(c['max_score'] for c in shown))} points on the checks shown now; "
            f"{_withheld_text(withheld)}."
        )
    else:
        head = f"{view['problem']}: {_points(view['score'])}/{_points(view['max_score'])} points ({view['status']})"
    lines = [
        head,
        *([view["message"]] if view["message"] else []),
        *_diagnosis_lines(view),
        *(_tier_line(t) for t in view["tiers"]),
    ]
    lines.append(HIDDEN_NOTE)
    return "\n".join(lines)


def _diagnosis_line(finding: dict[str, Any]) -> str:
    return (
        f"Likely misreading ({finding['id']}, charged in {', '.join(finding['owners'])}): {finding['explanation']}"
        + (f" A library's convention: {finding['convention']}" if finding.get("convention") else "")
    )


def _diagnosis_lines(view: dict[str, Any]) -> list[str]:
    """The likeliest misreadings, first: what a learner should read before the list of symptoms."""
    return [_diagnosis_line(d) for d in view.get("diagnosis", [])]


def _diagnosis_by_check(view: dict[str, Any]) -> dict[str, list[str]]:
    """Each misreading's line under every check it explains or is charged in, as the learner view names them."""
    lines: dict[str, list[str]] = {}
    for finding in view.get("diagnosis", []):
        for check in dict.fromkeys([*finding["checks"], *finding["owners"]]):
            lines.setdefault(check, []).append(_diagnosis_line(finding))
    return lines


def gradescope_refusal(checks: list[CheckSpec]) -> str | None:
    """Why Gradescope cannot carry these checks' visibility, or None. Gradescope hides a learner's total while
    a test is after_due_date or after_published, but not for a `hidden` test, which it expects to be worth
    nothing: the total would give a hidden check's points away."""
    hidden = [c.id for c in checks if c.visibility == "hidden" and c.points > 0]
    if not hidden:
        return None
    return (
        f'checks {", ".join(hidden)} are `visibility = "hidden"` and worth points; Gradescope shows the total '
        "whenever only hidden tests are held back, which gives their points away: declare them "
        '"after_published" or "after_due_date"'
    )


def gradescope_results(report: Report, execution_s: float | None = None) -> dict[str, Any]:
    """results.json as Gradescope's autograder specification documents it: one test per check, numbered
    tier.check ("2.3" is T2's third check), each with the visibility its problem spec declares.

    `score` is the sum of the tests' scores as they are shown. Gradescope keeps it from the learner while any
    test is after_due_date or after_published, and `output`, which it always shows, says nothing those tests
    do not (`_summary`). `execution_s` is the wall time of the whole grading command, when known; the test
    entries carry no time (the specification makes it optional)."""
    view = learner_view(report)
    tests = []
    for tier in view["tiers"]:
        for position, check in enumerate(tier["checks"], start=1):
            tests.append(
                {
                    "name": f"{check['id']}: {check['title']}",
                    "number": f"{tier['tier'].removeprefix('T')}.{position}",
                    "score": round_score(check["score"]),
                    "max_score": check["max_score"],
                    "status": "passed" if check["verdict"] == Verdict.PASS else "failed",
                    "output": _check_output(check),
                    "tags": [tier["tier"], check["verdict"]],
                    "visibility": check["visibility"],
                }
            )
    return {
        "score": score_sum(test["score"] for test in tests),
        # students see it: in LEARNER_SECONDS steps, like every duration that learner code holding hidden inputs sets
        "execution_time": learner_seconds(
            report.duration_s if execution_s is None else max(execution_s, report.duration_s)
        ),
        "output": _summary(view),
        "visibility": "visible",
        # the autograder's stdout carries the instructor's report (case labels, expected values): staff only
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("\N{REPLACEMENT CHARACTER}", text)


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def _count(checks: list[dict[str, Any]], element: str) -> int:
    return sum(JUNIT_ELEMENT.get(Verdict(c["verdict"])) == element for c in checks)


def _timed(durations: list[float | None]) -> dict[str, str]:
    """A `time` attribute for these durations, or none at all (junit-10.xsd makes it optional) when one of them is
    withheld from learners: a sum that includes it would carry it."""
    if any(d is None for d in durations):
        return {}
    return {"time": _seconds(sum(d for d in durations if d is not None))}


def _testcase(suite: ET.Element, classname: str, check: dict[str, Any], status: str, diagnosis: list[str]) -> None:
    """One check as a testcase; when it did not pass, the misreadings that explain it close its failure's text,
    where JUnit readers show them without counting them as tests."""
    case = ET.SubElement(suite, "testcase", name=check["id"], classname=classname)
    case.attrib.update(_timed([check["duration_s"]]))
    element = JUNIT_ELEMENT.get(Verdict(check["verdict"]))
    if element is None:
        return
    message = _xml_text(check["message"])
    # a check that never ran is typed by why: the import failure or the exhausted budget of the whole submission
    kind = status if check["verdict"] == Verdict.SKIPPED and status != "graded" else check["verdict"]
    detail = ET.SubElement(case, element, message=message.splitlines()[0] if message else kind, type=kind)
    points = f"{_points(check['score'])}/{_points(check['max_score'])} points ({check['title']})"
    detail.text = "\n".join([message, points, *(_xml_text(line) for line in diagnosis)])


def _suite(
    parent: ET.Element, name: str, checks: list[dict[str, Any]], properties: dict[str, str], time: dict[str, str]
) -> ET.Element:
    suite = ET.SubElement(
        parent,
        "testsuite",
        name=_xml_text(name),
        tests=str(len(checks)),
        failures=str(_count(checks, "failure")),
        errors=str(_count(checks, "error")),
        skipped="0",
    )
    suite.attrib.update(time)
    listed = ET.SubElement(suite, "properties")
    for key, value in properties.items():
        ET.SubElement(listed, "property", name=key, value=_xml_text(value))
    return suite


def _document(name: str, suites: list[ET.Element], root: ET.Element, duration_s: float) -> str:
    cases = [case for suite in suites for case in suite.iter("testcase")]
    root.attrib.update(
        name=_xml_text(name),
        tests=str(len(cases)),
        failures=str(sum(case.find("failure") is not None for case in cases)),
        errors=str(sum(case.find("error") is not None for case in cases)),
        time=_seconds(duration_s),
    )
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def junit_xml(report: Report) -> str:
    """JUnit XML of one grade: one testsuite per tier, one testcase per check; failures carry the learner's
    message, then the misreadings diagnosed in that check."""
    view = learner_view(report)
    diagnosis = _diagnosis_by_check(view)
    root = ET.Element("testsuites")
    suites = []
    for tier in view["tiers"]:
        suite = _suite(
            root,
            f"{tier['tier']} {tier['title']}",
            tier["checks"],
            {"score": _points(tier["score"]), "max_score": _points(tier["max_score"])},
            _timed([c["duration_s"] for c in tier["checks"]]),
        )
        for check in tier["checks"]:
            _testcase(suite, f"{view['problem']}.{tier['tier']}", check, view["status"], diagnosis.get(check["id"], []))
        suites.append(suite)
    return _document(f"{view['problem']} {view['submission']}", suites, root, view["duration_s"])


def class_junit_xml(reports: list[Report]) -> str:
    """JUnit XML of a class: one testsuite per submission, one testcase per check, the tier in its classname."""
    root = ET.Element("testsuites")
    suites = []
    for view in (learner_view(r) for r in sorted(reports, key=lambda r: r.submission)):
        checks = [c for tier in view["tiers"] for c in tier["checks"]]
        suite = _suite(
            root,
            view["submission"],
            checks,
            {"score": _points(view["score"]), "max_score": _points(view["max_score"]), "status": view["status"]},
            {"time": _seconds(view["duration_s"])},
        )
        diagnosis = _diagnosis_by_check(view)
        for tier in view["tiers"]:
            for check in tier["checks"]:
                _testcase(
                    suite, f"{view['problem']}.{tier['tier']}", check, view["status"], diagnosis.get(check["id"], [])
                )
        suites.append(suite)
    problem = reports[0].problem if reports else ""
    return _document(problem, suites, root, sum(learner_seconds(r.duration_s) for r in reports))


def write_exports(
    report: Report, gradescope: Path | None = None, junit: Path | None = None, execution_s: float | None = None
) -> None:
    """Write whichever exports were asked for, each atomically."""
    if gradescope is not None:
        results = gradescope_results(report, execution_s)
        write_atomic(gradescope, json.dumps(results, indent=2, allow_nan=False) + "\n")
    if junit is not None:
        write_atomic(junit, junit_xml(report))
