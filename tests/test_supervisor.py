"""The supervisor's handling of a worker that keeps sending frames the judge refuses: a small number of restarts,
then a verdict for the remaining calls, and a frame bomb at the largest size the limits allow costing the judge
little time and memory end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import PROBLEM, ROOT

from grader.confine.intake import Submission
from grader.confine.launch import Launched
from grader.confine.session import AnswerTooLarge
from grader.judge import supervisor as supervision
from grader.judge.cases import Call
from grader.judge.failures import LearnerFailure
from grader.judge.grading import oversized_message
from grader.judge.supervisor import KEPT_SENDING_UNREADABLE, MAX_REFUSED_FRAMES, WorkerSupervisor
from grader.model.spec import Limits
from grader.model.verdicts import Verdict
from grader.worker import messages, protocol
from grader.worker.protocol import HEAD, MAGIC

BOMB = ROOT / "tests" / "hostile" / "forge_frame_empty_lists.py"
BUDGET_S = 20
AFTER_BUDGET_S = 15  # the judge's own start, the report and ending the last worker
JUDGE_PEAK_BYTES = 1536 << 20
SUBMISSION = Submission(Path("x.py"), b"")


def _payload(head: bytes) -> bytes:
    return MAGIC + HEAD.pack(len(head)) + head


HELLO = protocol.encode(messages.ready({"masked_is_weights": {"callable": True, "params": []}}))[8:]
# an answer of 200 000 lists, each holding a number the sender chose
REFUSED = _payload(b'{"D":[["op","observed"],["raised",[' + b"[4711]," * 200_000 + b"[4711]]]]}")


class _Stream:
    def text(self) -> str:
        return ""


class _Nothing:
    """Stands in for the slot and the box: nothing to free."""

    def release(self) -> None:
        pass

    def cleanup(self) -> None:
        pass


class _Forger:
    """Stands in for a worker process: says hello, then answers every call with a frame the judge must refuse."""

    started: list[_Forger] = []

    def __init__(self, *args: Any) -> None:
        self.frames = [HELLO]
        self.stdout = self.stderr = _Stream()
        _Forger.started.append(self)

    def receive(self, timeout: float) -> bytes:
        return self.frames.pop(0) if self.frames else REFUSED

    def send(self, message: Any, timeout: float) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_worker_that_keeps_sending_refused_frames_is_not_restarted_forever(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervision, "WorkerProcess", _Forger)
    _Forger.started = []
    limits = Limits()
    launched = Launched(SUBMISSION, limits, "limits-only", _Nothing(), _Nothing(), _Forger(), time.monotonic())  # type: ignore[arg-type]
    worker = WorkerSupervisor(["masked_is_weights"], SUBMISSION, limits, "limits-only", launched)
    worker.start()
    calls = [Call("masked_is_weights", {"x": 1.0}, f"case {i}") for i in range(50)]
    started = time.monotonic()
    got = list(worker.observe_all(calls))
    worker.close()
    assert time.monotonic() - started < 5
    assert len(_Forger.started) == MAX_REFUSED_FRAMES  # the launched worker and its restarts, no more
    assert all(isinstance(g, LearnerFailure) and g.verdict == Verdict.CRASHED for g in got)
    assert len(got) == MAX_REFUSED_FRAMES + 1  # then the check says the rest were not run
    last = got[-1]
    assert isinstance(last, LearnerFailure) and last.message == KEPT_SENDING_UNREADABLE
    assert not any("4711" in g.message or "200000" in g.message for g in got if isinstance(g, LearnerFailure))


def test_decoding_counts_against_the_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame read after its call's time is up is that call's timeout, not an unreadable frame."""
    monkeypatch.setattr(supervision, "WorkerProcess", _Forger)
    limits = Limits()
    launched = Launched(SUBMISSION, limits, "limits-only", _Nothing(), _Nothing(), _Forger(), time.monotonic())  # type: ignore[arg-type]
    worker = WorkerSupervisor(["masked_is_weights"], SUBMISSION, limits, "limits-only", launched)
    worker.start()
    (got,) = list(worker.observe_all([Call("masked_is_weights", {"x": 1.0}, "case")], timeout_s=1e-9))
    worker.close()
    assert isinstance(got, LearnerFailure) and got.verdict == Verdict.TIMEOUT
    assert worker.refused_frames == 0


# The CLI as a child of a fresh interpreter, which then reports the largest resident set among its children: the
# judge, and every worker it reaped.
_MEASURE = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


@pytest.mark.slow
def test_a_frame_bomb_on_every_call_costs_the_judge_little(cli_env: dict[str, str], tmp_path: Path) -> None:
    """Every answer a frame just under the result limit whose header is millions of empty lists: the grade ends
    within its budget and a margin, and no process of it grows past 1.5 GB."""
    command = [sys.executable, "-m", "grader", "grade", "--problem", PROBLEM, "--budget", str(BUDGET_S)]
    zeros = ROOT / "tests" / "hostile" / "honest_zeros.py"
    # the reference's expectations are computed once per cache, before any budget: not what is measured here
    subprocess.run([*command, str(zeros), "--out", str(tmp_path / "zeros")], cwd=ROOT, env=cli_env, check=True)
    started = time.monotonic()
    measured = subprocess.run(
        [sys.executable, "-c", _MEASURE, *command, str(BOMB), "--out", str(tmp_path / "bomb")],
        cwd=ROOT,
        env=cli_env,
        capture_output=True,
        text=True,
        check=True,
    )
    took = time.monotonic() - started
    code, peak_kib = map(int, measured.stdout.split())
    report = json.loads((tmp_path / "bomb" / "report.json").read_text())
    assert code == 0
    assert report["status"] in ("graded", "budget_exceeded")
    assert took < BUDGET_S + AFTER_BUDGET_S
    assert peak_kib << 10 < JUDGE_PEAK_BYTES


class _Hoarder(_Forger):
    """Says hello, then announces an answer over the result limit on every call."""

    def receive(self, timeout: float) -> bytes:
        if self.frames:
            return self.frames.pop(0)
        raise AnswerTooLarge("its answer was larger than the 64 MB result limit")


def test_answers_over_the_result_limit_stop_the_restarts_and_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same refusal, call after call, is not paid for with a restart each time; the cause is said once."""
    monkeypatch.setattr(supervision, "WorkerProcess", _Hoarder)
    _Forger.started = []
    limits = Limits()
    launched = Launched(SUBMISSION, limits, "limits-only", _Nothing(), _Nothing(), _Hoarder(), time.monotonic())  # type: ignore[arg-type]
    worker = WorkerSupervisor(["masked_is_weights"], SUBMISSION, limits, "limits-only", launched)
    worker.start()
    got = list(worker.observe_all([Call("masked_is_weights", {"x": 1.0}, f"case {i}") for i in range(20)]))
    worker.close()
    assert worker.oversized and len(_Forger.started) == MAX_REFUSED_FRAMES
    assert "64 MB result limit" in oversized_message(limits)
    assert all(isinstance(g, LearnerFailure) and g.verdict == Verdict.CRASHED for g in got)
