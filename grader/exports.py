"""Course exports of one report, both built from the learner's view: Gradescope's results.json and JUnit XML."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from .learner_view import learner_view
from .report import Report, write_atomic
from .verdicts import Verdict

HIDDEN_NOTE = ("Checks on hidden cases report a verdict and a hint, never the cases themselves; some of them show "
               "their results only once grades are published.")

# JUnit's closed vocabulary: a failed comparison is a failure, anything else that went wrong is an error.
JUNIT_ELEMENT = {
    Verdict.FAIL: "failure", Verdict.ERROR: "error", Verdict.TIMEOUT: "error", Verdict.CRASHED: "error",
    Verdict.JUDGE_ERROR: "error", Verdict.SKIPPED: "skipped",
}
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # characters XML 1.0 cannot carry at all


def _points(value: float) -> str:
    return f"{value:g}"


def _check_output(check: dict[str, Any]) -> str:
    verdict = check["verdict"]
    head = "" if verdict in (Verdict.PASS, Verdict.FAIL) else f"[{verdict}] "
    return f"{head}{check['message']}\n{_points(check['score'])}/{_points(check['max_score'])} points"


def _summary(view: dict[str, Any]) -> str:
    lines = [f"{view['problem']}: {_points(view['score'])}/{_points(view['max_score'])} points ({view['status']})"]
    if view["message"]:
        lines.append(view["message"])
    lines += [f"{t['tier']} {t['title']}: {_points(t['score'])}/{_points(t['max_score'])}" for t in view["tiers"]]
    lines.append(HIDDEN_NOTE)
    return "\n".join(lines)


def gradescope_results(report: Report) -> dict[str, Any]:
    """results.json as Gradescope's autograder specification documents it: one test per check, numbered
    tier.check ("2.3" is T2's third check), each with the visibility its problem spec declares."""
    view = learner_view(report)
    tests = []
    for tier in view["tiers"]:
        for position, check in enumerate(tier["checks"], start=1):
            tests.append({
                "name": f"{check['id']}: {check['title']}",
                "number": f"{tier['tier'].removeprefix('T')}.{position}",
                "score": check["score"],
                "max_score": check["max_score"],
                "status": "passed" if check["verdict"] == Verdict.PASS else "failed",
                "output": _check_output(check),
                "tags": [tier["tier"], check["verdict"]],
                "visibility": check["visibility"],
            })
    return {
        "score": view["score"],
        "execution_time": math.ceil(report.duration_s),
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


def _testcase(suite: ET.Element, classname: str, check: dict[str, Any]) -> None:
    case = ET.SubElement(suite, "testcase", name=check["id"], classname=classname,
                         time=_seconds(check["duration_s"]))
    element = JUNIT_ELEMENT.get(Verdict(check["verdict"]))
    if element is None:
        return
    message = _xml_text(check["message"])
    detail = ET.SubElement(case, element, message=message.splitlines()[0] if message else check["verdict"])
    if element != "skipped":
        detail.set("type", check["verdict"])
    detail.text = f"{message}\n{_points(check['score'])}/{_points(check['max_score'])} points ({check['title']})"


def junit_xml(report: Report) -> str:
    """JUnit XML: one testsuite per tier, one testcase per check; failures carry the learner's message."""
    view = learner_view(report)
    checks = [c for tier in view["tiers"] for c in tier["checks"]]
    root = ET.Element("testsuites", name=_xml_text(f"{view['problem']} {view['submission']}"),
                      tests=str(len(checks)), failures=str(_count(checks, "failure")),
                      errors=str(_count(checks, "error")), time=_seconds(view["duration_s"]))
    for tier in view["tiers"]:
        tier_checks = tier["checks"]
        suite = ET.SubElement(
            root, "testsuite", name=f"{tier['tier']} {tier['title']}", tests=str(len(tier_checks)),
            failures=str(_count(tier_checks, "failure")), errors=str(_count(tier_checks, "error")),
            skipped=str(_count(tier_checks, "skipped")),
            time=_seconds(sum(c["duration_s"] for c in tier_checks)),
        )
        properties = ET.SubElement(suite, "properties")
        for name, value in (("score", tier["score"]), ("max_score", tier["max_score"])):
            ET.SubElement(properties, "property", name=name, value=_points(value))
        for check in tier_checks:
            _testcase(suite, f"{view['problem']}.{tier['tier']}", check)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_exports(report: Report, gradescope: Path | None = None, junit: Path | None = None) -> None:
    """Write whichever exports were asked for, each atomically."""
    if gradescope is not None:
        write_atomic(gradescope, json.dumps(gradescope_results(report), indent=2, allow_nan=False) + "\n")
    if junit is not None:
        write_atomic(junit, junit_xml(report))
