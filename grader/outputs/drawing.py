"""Start a process that draws one job's figures (`grader.outputs.figures`), with no torch imported to do it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

LIMITS = {"address_space_bytes": 1 << 30, "cpu_s": 30, "file_bytes": 32 << 20}
PACKAGE_PARENT = Path(__file__).resolve().parents[2]


def drawing_environment() -> dict[str, str]:
    return {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def start_drawing() -> subprocess.Popen[str]:
    """A drawing process that imports matplotlib at once and then waits for its one job on stdin; OSError when it
    cannot start. A `grade` starts it first, so the import runs while the judge and the worker import torch."""
    return subprocess.Popen(
        [sys.executable, "-m", "grader.outputs.figures", json.dumps(LIMITS)],
        cwd=PACKAGE_PARENT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=drawing_environment(),
    )
