"""A worker that has been sent a hidden case never gets its words into what a learner reads, and no learner-facing
output carries a value of the reference's T3 series at a grading seed."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import signal
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from conftest import expectations_of, series_fingerprints

from grader.judge.cases import Call
from grader.judge.compare import compare_series
from grader.judge.expectations import Expectations
from grader.judge.grading import grade
from grader.model.misconceptions import Misconception
from grader.model.problem import Problem, list_problems
from grader.model.report import Report
from grader.model.spec import ProblemSpec, Tolerance
from grader.model.verdicts import ExitCode, Verdict
from grader.outputs.exports import gradescope_results, junit_xml
from grader.outputs.learner_view import LEARNER_SECONDS, learner_view
from grader.outputs.plots import figure_specs, series_tolerances

HOSTILE = Path(__file__).resolve().parent / "hostile" / "leak_hidden_inputs.py"
DURATIONS = Path(__file__).resolve().parent / "hostile" / "leak_durations.py"
PROBLEM = "glm5_offpolicy"
REFERENCE = Path(__file__).resolve().parents[1] / "reference" / PROBLEM / "reference.py"


def _hidden_fingerprints(problem: Problem) -> set[str]:
    """What the hostile file writes for each hidden call: the first two values of logp, as it formats them."""
    expect = expectations_of(problem.id, problem.grading_seeds[0])
    found = set()
    for check in problem.spec.checks:
        for call in expect.cases(check.cases) if check.cases else []:
            if call.hidden and isinstance(call.kwargs.get("logp"), torch.Tensor):
                values = call.kwargs["logp"].reshape(-1)[:2].tolist()
                found.add(" ".join(f"{v:.6f}" for v in values))
    return found


def test_hidden_inputs_never_reach_learner_outputs(run_cli, tmp_path: Path) -> None:
    problem = Problem(PROBLEM)
    hidden = _hidden_fingerprints(problem)
    assert len(hidden) > 10
    out, gradescope, junit = tmp_path / "out", tmp_path / "results.json", tmp_path / "junit.xml"
    result = run_cli(
        "grade",
        str(HOSTILE),
        "--problem",
        PROBLEM,
        "--out",
        str(out),
        "--gradescope",
        str(gradescope),
        "--junit",
        str(junit),
    )
    assert result.returncode == ExitCode.OK, result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    checks = [c for tier in report["tiers"] for c in tier["checks"]]
    instructor = " ".join(c["message"] for c in checks)
    # the attack did work: instructors see the hidden inputs the file echoed
    assert any(f in instructor for f in hidden)
    learner_texts = {
        "learner_message": " ".join(c["learner_message"] for c in checks),
        "results.json": gradescope.read_text(),
        "junit.xml": junit.read_text(),
    }
    for where, text in learner_texts.items():
        leaked = [f for f in hidden if f in text]
        assert not leaked, f"{where} shows hidden inputs: {leaked[:3]}"
    # the failing cases left unexplained name visible cases only, even to instructors: a hidden one is counted
    listed = json.dumps([report["unexplained"], [d.get("unexplained", []) for d in report["diagnosis"]]])
    assert report["unexplained"], "the hostile file fails cases no misreading explains: they must be listed"
    assert sum(entry["hidden"] for entry in report["unexplained"]) > 0
    named = [label for label in _hidden_only_labels(problem) if json.dumps(label)[1:-1] in listed]
    assert not named, f"unexplained cases name hidden cases: {named[:3]}"


def _hidden_only_labels(problem: Problem) -> set[str]:
    """The labels of hidden cases that no visible case shares."""
    expect = expectations_of(problem.id, problem.grading_seeds[0])
    calls = [call for check in problem.spec.checks if check.cases for call in expect.cases(check.cases)]
    return {call.label for call in calls if call.hidden} - {call.label for call in calls if not call.hidden}


def test_visible_checks_run_before_any_hidden_case() -> None:
    from grader.judge.checks import READS_ANSWERS
    from grader.judge.grading import visible_first

    problem = Problem(PROBLEM)
    expect = expectations_of(problem.id, problem.grading_seeds[0])
    order = visible_first(problem.spec.checks, expect)
    assert order[-1].kind in READS_ANSWERS  # sends no call: it reads what the others' calls answered
    order = [check for check in order if check.kind not in READS_ANSWERS]
    hidden = [any(c.hidden for c in expect.cases(check.cases)) if check.cases else False for check in order]
    assert hidden == sorted(hidden), "a check with hidden cases runs before a visible one"
    assert any(hidden) and not all(hidden)


@pytest.mark.parametrize("problem_id", list_problems())
def test_hidden_labels_carry_no_input_value(problem_id: str) -> None:
    """A hidden case's label reaches the learner: it may name parameters (dtype, shape, flags, scalars passed as
    arguments), never a value held in one of its input tensors."""
    problem = Problem(problem_id)
    expect = expectations_of(problem.id, problem.grading_seeds[0])
    for check in problem.spec.checks:
        for call in expect.cases(check.cases) if check.cases else []:
            if not call.hidden:
                continue
            scalars = {
                float(v) for v in call.kwargs.values() if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            values = torch.cat(
                [
                    t.detach().reshape(-1).to(torch.float64)
                    for t in call.kwargs.values()
                    if isinstance(t, torch.Tensor) and t.is_floating_point()
                ]
                or [torch.zeros(0)]
            )
            values = values[torch.isfinite(values)]
            for number in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", call.label):
                x = float(number)
                if not values.numel() or any(abs(x - s) <= 1e-2 * max(1.0, abs(s)) for s in scalars):
                    continue  # a scalar argument, perhaps rounded for the label
                close = torch.isclose(values, torch.tensor(x, dtype=torch.float64), rtol=1e-3, atol=1e-4)
                assert not bool(close.any()), f"{problem_id}: hidden label {call.label!r} shows an input value {number}"


# A known-wrong solution that fails every T3 check on values (it keeps ratios above the upper bound)
T3_WRONG = "high_bound_ignored"


def test_grading_seed_series_never_reach_learner_outputs(run_cli, tmp_path: Path) -> None:
    problem = Problem(PROBLEM)
    seed = problem.grading_seeds[0]
    expected = series_fingerprints(problem, seed)
    assert len(expected) > 20
    wrong = run_cli("known-wrong", "--problem", PROBLEM, T3_WRONG)
    assert wrong.returncode == ExitCode.OK, wrong.stderr[-2000:]
    submission = Path(wrong.stdout.split()[0])
    submission = submission if submission.is_absolute() else Path(__file__).resolve().parents[1] / submission
    out, gradescope, junit = tmp_path / "out", tmp_path / "results.json", tmp_path / "junit.xml"
    result = run_cli(
        "grade",
        str(submission),
        "--problem",
        PROBLEM,
        "--seed",
        str(seed),
        "--no-follow-through",  # else the misreading charged in T2 credits the T3 cases and no message is written
        "--out",
        str(out),
        "--gradescope",
        str(gradescope),
        "--junit",
        str(junit),
    )
    assert result.returncode == ExitCode.OK, result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    t3 = [c for tier in report["tiers"] if tier["tier"] == "T3" for c in tier["checks"]]
    assert t3 and all(c["verdict"] == "fail" for c in t3)
    # instructors keep the evidence: the first failing point's expected value, as compare_tensors writes it
    assert any(f in " ".join(c["message"] for c in t3) for f in expected)
    # the learner still reads which series differs, where, and on which side
    assert all(re.search(r"\w\[\d+\]: (above|below|your value|differs)", c["learner_message"]) for c in t3)
    learner_texts = {
        "learner messages": " ".join(c["learner_message"] for tier in report["tiers"] for c in tier["checks"]),
        "report.html": (out / "report.html").read_text(),
        "results.json": gradescope.read_text(),
        "junit.xml": junit.read_text(),
        "terminal": result.stdout + result.stderr,
    }
    for where, text in learner_texts.items():
        leaked = sorted(f for f in expected if f in text)
        assert not leaked, f"{where} shows expected values of the grading seed's T3 series: {leaked[:3]}"


def test_a_t3_learner_message_carries_no_number_of_the_reference() -> None:
    """What a replaying file would read back: for every way a series can miss (off by a little, far off, NaN, inf,
    a wrong length), the learner's sentence holds no digit but the point's index, its count and the tolerance."""
    want = torch.tensor([0.390625, 0.123456789, -2.5, float("nan"), 7.75], dtype=torch.float64)
    tol = Tolerance(rtol=1e-6, atol=1e-9)
    for index, got in [(0, 0.4), (1, 0.1), (2, float("inf")), (3, 1.0), (4, float("nan"))]:
        mine = want.clone()
        mine[index] = got
        for bound in (tol, None):
            mismatch = compare_series("s", mine, want, bound)
            assert mismatch is not None
            assert repr(float(want[index])) in mismatch.message or index == 3  # the instructor's evidence
            safe = mismatch.learner_message
            assert safe.startswith(f"s[{index}]: ")
            numbers = set(re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", safe))
            allowed = {str(index), "1", "5", "1e-06", "1e-09"}
            assert numbers <= allowed, safe
    short = compare_series("s", want[:3], want, tol)
    assert short is not None and not set(re.findall(r"\d+\.\d+", short.learner_message))


@pytest.mark.e2e
def test_learner_plots_are_drawn_from_a_public_seed_run_and_carry_nothing_of_the_grading_seed() -> None:
    """Graded at a grading seed, the series a learner's plots are drawn from are a run of the toy at the public seed
    with the learner's functions (the reference's own file here, so they equal the preview's), while the verdicts
    come from the grading seed; the plot specs (every number the drawing process receives) hold no value of the
    grading seed's series."""
    problem = Problem(PROBLEM)
    seed = problem.grading_seeds[0]
    reference = Expectations(problem, seed).series()
    public = Expectations(problem, problem.spec.public_seed).series()
    sunk: list[dict[str, torch.Tensor] | None] = []
    graded = grade(problem, REFERENCE, seed, series_sink=sunk.append)
    assert graded.report.seed == seed and graded.report.score == graded.report.max_score
    (mine,) = sunk
    assert mine is not None and graded.series is mine and not graded.plot_failures
    assert mine.keys() == public.keys()
    assert all(torch.allclose(mine[name], public[name], equal_nan=True) for name in public)
    differ = [name for name in public if not torch.allclose(reference[name], public[name], equal_nan=True)]
    assert differ, "the two seeds' toys must differ for this test to tell them apart"
    specs, failures = figure_specs(
        problem.spec.plots, mine, Path("/nowhere"), "", public, series_tolerances(problem.spec.checks)
    )
    assert specs and not failures
    assert not any(spec.get("marks") for spec in specs), "the reference's own functions miss nowhere"
    drawn = json.dumps(specs)
    xs = {plot.x for plot in problem.spec.plots}
    shared = {x for value in public.values() for x in value.tolist()} | {
        x for name in xs for x in reference[name].tolist()
    }
    secret = {repr(x) for name, value in reference.items() if name not in xs for x in value.tolist() if x not in shared}
    secret = {text for text in secret if len(text) >= 6}
    assert len(secret) > 20
    leaked = sorted(text for text in secret if re.search(rf"(?<![\d.]){re.escape(text)}(?!\d)", drawn))
    assert not leaked, f"the plot specs hold values of the grading seed's series: {leaked[:3]}"


# ---------------------------------------------------------------- durations


def _spelled_sleep_s(problem: Problem, seed: int) -> dict[str, float]:
    """By check, how long leak_durations.py sleeps in it at `seed`: its step per digit spelled, per hidden call."""
    (step_s,) = [
        ast.literal_eval(node.value)
        for node in ast.parse(DURATIONS.read_text()).body
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["STEP_S"]
    ]
    expect = expectations_of(problem.id, seed)
    slept: dict[str, float] = {}
    for check in problem.spec.checks:
        for call in expect.cases(check.cases) if check.cases else []:
            logp = call.kwargs.get("logp")
            if isinstance(logp, torch.Tensor) and tuple(logp.shape) == (16, 64) and logp.dtype == torch.float64:
                assert call.hidden, "only hidden cases are spelled"
                digit = int(abs(float(logp.reshape(-1)[0])) * 10) % 10
                slept[check.id] = slept.get(check.id, 0.0) + step_s * digit
    return slept


def test_no_learner_output_times_a_check_with_hidden_cases(run_cli, tmp_path: Path) -> None:
    """leak_durations.py sleeps on one hidden case per check for a time that spells a digit of its inputs."""
    out, gradescope, junit = tmp_path / "out", tmp_path / "results.json", tmp_path / "junit.xml"
    result = run_cli(
        "grade", DURATIONS, "--problem", PROBLEM, "--out", out, "--gradescope", gradescope, "--junit", junit
    )
    assert result.returncode == ExitCode.OK, result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    checks = {c["id"]: c for tier in report["tiers"] for c in tier["checks"]}
    hidden = {c for c in checks if c.startswith("oracle_")}
    # the attack did work: instructors see each sleep in its check's time. A sleep is a lower bound whatever the
    # machine's load, so the bound is the sleeps the graded seed's cases ask for, not a margin measured somewhere
    slept = _spelled_sleep_s(Problem(PROBLEM), report["seed"])
    assert slept.keys() <= hidden and max(slept.values()) >= 1.0, "some check must sleep long enough to be seen"
    rounding_s = 1e-4  # a check's duration_s is rounded to 4 decimals
    assert {c: checks[c]["duration_s"] for c in slept if checks[c]["duration_s"] < slept[c] - rounding_s} == {}
    assert not any(checks[c]["duration_public"] for c in hidden)
    assert checks["weights_contract"]["duration_public"], "a check that ran before any hidden case keeps its time"

    view = learner_view(Report.model_validate(report))
    timed = {c["id"]: c["duration_s"] for tier in view["tiers"] for c in tier["checks"]}
    assert all(timed[c] is None for c in hidden)
    assert timed["weights_contract"] == checks["weights_contract"]["duration_s"]
    assert view["duration_s"] % LEARNER_SECONDS == 0 and view["duration_s"] >= report["duration_s"]

    root = ET.fromstring(junit.read_text())
    for suite in root.iter("testsuite"):
        names = {case.get("name") for case in suite.iter("testcase")}
        if names & hidden:
            assert "time" not in suite.attrib, suite.get("name")
        for case in suite.iter("testcase"):
            assert (case.get("time") is None) == (case.get("name") in hidden), case.get("name")
    assert float(root.get("time", "nan")) % LEARNER_SECONDS == 0

    results = json.loads(gradescope.read_text())
    assert results["execution_time"] % LEARNER_SECONDS == 0
    for test in results["tests"]:
        assert not {"execution_time", "time", "duration_s"} & set(test)


# ---------------------------------------------------------------- deaths and hangs


@dataclasses.dataclass(frozen=True)
class ProblemView:
    """A problem graded on some of its checks only, without a diagnosis."""

    id: str
    spec: ProblemSpec
    content_hash: str
    misconceptions: Sequence[Misconception]
    experiment_module: ModuleType


class PartlyVisible:
    """The grading seed's expectations, the first VISIBLE cases of each generator made visible: a check that holds
    visible and hidden cases, whose visible cases run once an earlier check's hidden ones have been sent."""

    VISIBLE = 4

    def __init__(self, inner: Expectations) -> None:
        self.inner = inner
        self.seed = inner.seed

    def warm(self) -> None:
        pass  # expectations are computed as the checks ask for them

    def cases(self, name: str) -> list[Call]:
        calls = self.inner.cases(name)
        return [dataclasses.replace(c, hidden=False) if i < self.VISIBLE else c for i, c in enumerate(calls)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# After the first check's hidden cases, the learner's first call of the second check (a visible case) ends the way
# it chooses, with a number drawn from the last hidden input it saw, and prints the number for the test to find.
CHOOSER = """
import os, signal, time, torch

def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    with open("seen", "a") as seen:
        seen.write(f"{{float(logp.reshape(-1)[0]):.6f}}\\n")
    return torch.zeros_like(logp)

def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    if not os.path.exists("acted"):
        open("acted", "w").close()
        number = 100 + int(abs(float(open("seen").read().split()[-1])) * 1e4) % 100
        chosen = {act}
        print(f"chose {{getattr(chosen, 'name', chosen)}}", flush=True)
        {then}
    return torch.zeros((), dtype=logp.dtype)
"""
# Signals whose numbers no learner-facing duration can equal (those are whole multiples of LEARNER_SECONDS), so a
# number found in what a learner reads is the learner's choice, however long the grade took on a loaded machine.
SIGNALS = (signal.SIGUSR2, signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF)
ENDINGS = {
    "exit": ("number", "os._exit(number)"),
    "signal": (
        f"[{', '.join(f'signal.{s.name}' for s in SIGNALS)}][number % {len(SIGNALS)}]",
        "os.kill(os.getpid(), chosen)",
    ),
    "raise": ("number", "raise ValueError(f'{chosen} {chosen}')"),
    "hang": ("number", "time.sleep(number)"),
}
VERDICT = {"exit": Verdict.CRASHED, "signal": Verdict.CRASHED, "raise": Verdict.ERROR, "hang": Verdict.TIMEOUT}


@pytest.mark.e2e
@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_death_or_hang_after_a_hidden_case_quotes_nothing_the_learner_chose(tmp_path: Path, ending: str) -> None:
    assert all(int(s) % LEARNER_SECONDS for s in SIGNALS)
    act, then = ENDINGS[ending]
    submission = tmp_path / "chooser.py"
    submission.write_text(CHOOSER.format(act=act, then=then))
    problem = Problem(PROBLEM)
    spec = problem.spec.model_copy(
        update={
            "checks": [c for c in problem.spec.checks if c.id in ("oracle_weights", "oracle_loss")],
            "limits": problem.spec.limits.model_copy(update={"call_timeout_s": 2.0}),
        }
    )
    view = ProblemView(problem.id, spec, problem.content_hash, [], problem.experiment_module)
    expectations = PartlyVisible(Expectations(problem, problem.grading_seeds[0]))
    report = grade(view, submission, expectations.seed, expectations=expectations).report

    chosen = re.search(r"chose (\S+)", report.stdout)
    assert chosen is not None, report.stdout[-500:]
    word = chosen.group(1)
    words = {word, str(int(signal.Signals[word]))} if ending == "signal" else {word}
    loss = next(c for c in report.checks() if c.id == "oracle_loss")
    assert loss.verdict == VERDICT[ending]
    if ending != "hang":  # the attack did work: the instructor's message quotes what the learner chose
        assert word in loss.message
    learner_texts = {
        "learner_message": " ".join(c.learner_message for c in report.checks()),
        "learner view": json.dumps(learner_view(report)),
        "results.json": json.dumps(gradescope_results(report)),
        "junit.xml": junit_xml(report),
    }
    for where, text in learner_texts.items():
        for word in words:
            assert not re.search(rf"(?<![\w.]){re.escape(word)}(?![\w.])", text), f"{where} quotes {word}: {text[:400]}"
