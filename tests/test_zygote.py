"""Workers forked from the zygote are confined exactly like exec'd ones, and grade the same."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from grader.confine.intake import read_submission
from grader.confine.sandbox import Box, Slot, best_level
from grader.confine.sandbox_init import ENVIRONMENT
from grader.confine.session import WorkerProcess
from grader.confine.zygote import Zygote
from grader.judge.accept import accept_frame
from grader.judge.cases import Call
from grader.model.spec import Limits
from grader.worker.messages import Op, calls_request

PROBE = """
import os, sys
print("uid", os.getuid(), "cwd", os.getcwd(), "argv", len(sys.argv), "procs", sorted(
    p for p in os.listdir("/proc") if p.isdigit()), "grader" in open("/proc/self/cmdline").read(), flush=True)

def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return logp * 2
"""


@pytest.fixture(scope="module")
def zygote():
    started = Zygote()
    yield started
    started.close()


def _run(tmp_path: Path, zygote: Zygote | None) -> tuple[dict, str]:
    source = tmp_path / "probe.py"
    source.write_text(PROBE)
    slot = Slot()
    box = Box(read_submission(source), None, Limits(), best_level(), slot)
    worker = WorkerProcess(box, ["masked_is_weights"], zygote)
    try:
        assert accept_frame(worker.receive(60))["op"] == Op.READY
        call = Call(
            "masked_is_weights",
            {"logp": torch.ones(2, 3), "rollout_logp": torch.ones(2, 3), "mask": torch.ones(2, 3)},
            "ones",
        )
        worker.send(calls_request([call.request()]), 30)
        answer = accept_frame(worker.receive(30))
        assert answer["op"] == Op.OBSERVED
    finally:
        worker.close()
        box.cleanup()
        slot.release()
    return answer, worker.stdout.text()


def test_a_forked_worker_sees_what_an_execd_one_sees(tmp_path: Path, zygote: Zygote) -> None:
    forked_answer, forked = _run(tmp_path, zygote)
    execd_answer, execd = _run(tmp_path, None)
    assert torch.equal(forked_answer["output"]["value"], torch.full((2, 3), 2.0))
    assert torch.equal(forked_answer["output"]["value"], execd_answer["output"]["value"])
    assert forked.split("uid")[1].split()[0] == execd.split("uid")[1].split()[0]  # the same identity
    assert forked.split("cwd")[1].split()[0] == execd.split("cwd")[1].split()[0]  # the same scratch
    assert forked.split()[-1] == "False", "a forked worker's command line must not name the grader"
    if best_level() != "limits-only":  # a PID namespace of its own: the same few processes, the host's unseen
        assert forked.split("procs")[1].split("]")[0] == execd.split("procs")[1].split("]")[0], (forked, execd)


def test_the_zygote_ends_when_closed_and_leaves_no_worker(tmp_path: Path) -> None:
    started = Zygote()
    _run(tmp_path, started)
    started.close()
    assert started.process.poll() is not None


def test_the_zygote_starts_from_the_workers_environment_not_the_judges(zygote: Zygote) -> None:
    """What every forked worker inherits on its stack: the fixed environment, in the root folder."""
    environ = Path(f"/proc/{zygote.process.pid}/environ").read_bytes()
    assert dict(entry.split("=", 1) for entry in environ.decode().split("\0") if entry) == ENVIRONMENT
    assert os.readlink(f"/proc/{zygote.process.pid}/cwd") == "/"
