"""Start a submission's worker before the judge pays for its own `import torch`, so the two overlap."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from grader.confine.intake import Submission
from grader.confine.sandbox import Box, Level, Slot, best_level
from grader.confine.session import WorkerProcess
from grader.model.spec import Limits, ProblemSpec

LIMIT_FIELDS = {
    "call_timeout": "call_timeout_s",
    "experiment_timeout": "experiment_timeout_s",
    "budget": "submission_budget_s",
    "import_timeout": "import_timeout_s",
    "cpu_time": "cpu_time_s",
    "memory_mb": "memory_mb",
    "output_kb": "output_kb",
    "file_size_mb": "file_size_mb",
    "max_processes": "max_processes",
}


def limits_from(args: argparse.Namespace, base: Limits) -> Limits:
    """The spec's limits with the command line's overrides applied."""
    changes = {field: getattr(args, name) for name, field in LIMIT_FIELDS.items() if getattr(args, name, None)}
    return Limits.model_validate({**base.model_dump(), **changes}) if changes else base


@dataclass
class Launched:
    """A worker already importing one submission, with the box and slot it runs in."""

    submission: Submission
    limits: Limits
    level: Level
    slot: Slot
    box: Box
    worker: WorkerProcess
    started: float

    def discard(self) -> None:
        self.worker.close()
        self.box.cleanup()
        self.slot.release()


def launch(
    spec: ProblemSpec, experiment: Path | None, submission: Submission, limits: Limits, level: Level | None = None
) -> Launched:
    level = level or best_level()
    slot = Slot()
    box = Box(submission, experiment, limits, level, slot)
    worker = WorkerProcess(box, [f.name for f in spec.functions])
    return Launched(submission, limits, level, slot, box, worker, time.monotonic())
