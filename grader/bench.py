"""`make bench`: grading cost as a ratio to one `python -c "import torch"`, measured side by side in one run.

Usage: python -m grader.bench [--problem ID] [--submission FILE] [--runs N] [--batch N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .paths import PROJECT_ROOT


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=PROJECT_ROOT)
    return time.perf_counter() - started


def default_submission(problem: str) -> Path:
    reference = PROJECT_ROOT / "reference" / problem / "reference.py"
    return reference  # a correct solution by construction; graded as an ordinary learner file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", help="default: the first problem in problems/")
    parser.add_argument("--submission", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=24)
    args = parser.parse_args(argv)
    args.problem = args.problem or sorted(p.parent.name for p in (PROJECT_ROOT / "problems").glob("*/problem.toml"))[0]
    submission = args.submission or default_submission(args.problem)
    python = sys.executable
    work = Path(tempfile.mkdtemp(prefix="paperleet-bench-"))
    try:
        floor_runs, grade_runs, phases = [], [], []
        grade_cmd = [python, "-m", "grader", "grade", str(submission), "--problem", args.problem,
                     "--out", str(work / "one")]
        timed([python, "-m", "grader", "previews", "--problem", args.problem])  # as `make grade` has them
        timed(grade_cmd)  # warm the page cache and the expectations cache
        for _ in range(args.runs):  # interleaved, so load on the machine hits both alike
            floor_runs.append(timed([python, "-c", "import torch"]))
            grade_runs.append(timed(grade_cmd))
            phases.append(json.loads((work / "one" / "report.json").read_text())["phases"])
        batch_dir = work / "batch"
        batch_dir.mkdir()
        for index in range(args.batch):
            shutil.copyfile(submission, batch_dir / f"learner_{index:03d}.py")
        jobs = os.cpu_count() or 1
        batch_wall = timed([python, "-m", "grader", "grade-all", "--problem", args.problem, "--submissions",
                            str(batch_dir), "--out", str(work / "batch_out"), "--jobs", str(jobs)])
        floor_runs.append(timed([python, "-c", "import torch"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    floor = statistics.median(floor_runs)
    table = Table(title=f"{args.problem}: cost as a multiple of `import torch` ({floor:.3f} s, median of "
                        f"{len(floor_runs)}) on {os.cpu_count()} cores")
    for column in ("measurement", "seconds", "x floor", "target"):
        table.add_column(column, justify="right" if column != "measurement" else "left")
    single = statistics.median(grade_runs)
    per_submission = batch_wall / args.batch
    table.add_row("grade one submission (median)", f"{single:.3f}", f"{single / floor:.2f}", "<= 2.0 (1.5)")
    table.add_row(f"grade-all {args.batch} submissions, per submission", f"{per_submission:.3f}",
                  f"{per_submission / floor:.2f}", "<= 0.5 (0.25)")
    for name in sorted({k for p in phases for k in p}):
        value = statistics.median(p.get(name, 0.0) for p in phases)
        table.add_row(f"  phase: {name}", f"{value:.3f}", f"{value / floor:.2f}", "")
    Console(width=120).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
