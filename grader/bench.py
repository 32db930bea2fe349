"""`make bench`: grading cost as a ratio to one `python -c "import torch"`, measured side by side in one run.

Four measurements against the same floor: a cold `grade` of one file, `grade-all` of a class (per file), and
the `watch` loop's re-grade after a save (from the save to the new report.json on disk, the debounce included).
Floor runs are interleaved with the others, so that load from elsewhere on the machine hits both alike; the
ratios are the result, the seconds only say how loaded the machine was.

Usage: python -m grader.bench [--problem ID] [--submission FILE] [--wrong FILE] [--runs N] [--batch N] [--saves N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .paths import PROJECT_ROOT

WATCH_START_TIMEOUT_S = 300.0  # the first grade of a watch computes the expectations if the cache is cold
SAVE_TIMEOUT_S = 120.0


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=PROJECT_ROOT)
    return time.perf_counter() - started


def floor_s(python: str) -> float:
    return timed([python, "-c", "import torch"])


def wrong_solution(problem: str) -> Path:
    """A known-wrong file a learner could plausibly write: one that embodies a declared misreading, if any."""
    folder = PROJECT_ROOT / "reference" / problem
    declared = folder / "misconceptions.toml"
    if declared.is_file():
        items = tomllib.loads(declared.read_text()).get("misconceptions", [])
        if items:
            return folder / "wrong" / items[0]["solution"]
    return sorted((folder / "wrong").glob("*.py"))[0]


@dataclass
class Samples:
    """Seconds per run of each measurement, and the floor runs taken between them."""

    floor: list[float] = field(default_factory=list)
    single: list[float] = field(default_factory=list)
    single_phases: list[dict[str, float]] = field(default_factory=list)
    batch_per_file: float = 0.0
    saves: list[float] = field(default_factory=list)
    save_phases: list[dict[str, float]] = field(default_factory=list)


def _report_of(path: Path, sha256: str) -> dict[str, object] | None:
    """report.json once it is the report of the file whose bytes hash to `sha256`."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # not there yet (the writer renames a finished file into place, so never half a file)
    return report if report.get("submission_sha256") == sha256 else None


def _wait_for_report(path: Path, sha256: str, watcher: subprocess.Popen[bytes], timeout: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        report = _report_of(path, sha256)
        if report is not None:
            return report
        if watcher.poll() is not None:
            raise RuntimeError(f"watch ended with status {watcher.returncode} before writing the report")
        time.sleep(0.005)
    raise RuntimeError(f"watch wrote no report within {timeout:g} s")


def save(path: Path, source: Path) -> str:
    """Save as an editor does: write a temporary file beside `path`, then rename it over `path`."""
    data = source.read_bytes()
    tmp = path.with_name(f".{path.name}.swp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return hashlib.sha256(data).hexdigest()


def measure_watch(python: str, problem: str, versions: tuple[Path, Path], saves: int, work: Path,
                  samples: Samples) -> None:
    """Start `watch` on a file, then save the two versions in turn; a floor run after each re-grade."""
    folder = work / "watched"
    folder.mkdir()
    file = folder / "learner.py"
    out = work / "watch_out"
    sha = save(file, versions[0])
    watcher = subprocess.Popen([python, "-m", "grader", "watch", str(file), "--problem", problem, "--out", str(out)],
                               cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_report(out / "report.json", sha, watcher, WATCH_START_TIMEOUT_S)
        for index in range(saves):
            time.sleep(0.5)  # a learner reads the table before saving again
            started = time.perf_counter()
            sha = save(file, versions[(index + 1) % 2])
            report = _wait_for_report(out / "report.json", sha, watcher, SAVE_TIMEOUT_S)
            samples.saves.append(time.perf_counter() - started)
            samples.save_phases.append(dict(report.get("phases", {})))  # type: ignore[arg-type]
            samples.floor.append(floor_s(python))
    finally:
        watcher.send_signal(signal.SIGINT)
        try:
            watcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()


def measure(args: argparse.Namespace, work: Path) -> Samples:
    python = sys.executable
    samples = Samples()
    grade_cmd = [python, "-m", "grader", "grade", str(args.submission), "--problem", args.problem,
                 "--out", str(work / "one")]
    timed([python, "-m", "grader", "previews", "--problem", args.problem])  # as `make grade` has them
    subprocess.run(grade_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=PROJECT_ROOT)  # caches
    for _ in range(args.runs):  # interleaved, so load on the machine hits both alike
        samples.floor.append(floor_s(python))
        samples.single.append(timed(grade_cmd))
        samples.single_phases.append(json.loads((work / "one" / "report.json").read_text())["phases"])
    batch_dir = work / "batch"
    batch_dir.mkdir()
    for index in range(args.batch):
        shutil.copyfile(args.submission, batch_dir / f"learner_{index:03d}.py")
    batch_wall = timed([python, "-m", "grader", "grade-all", "--problem", args.problem, "--submissions",
                        str(batch_dir), "--out", str(work / "batch_out"), "--jobs", str(os.cpu_count() or 1)])
    samples.batch_per_file = batch_wall / args.batch
    samples.floor.append(floor_s(python))
    measure_watch(python, args.problem, (args.submission, args.wrong), args.saves, work, samples)
    return samples


def _phase_rows(table: Table, phases: list[dict[str, float]], floor: float, prefix: str) -> None:
    for name in sorted({k for p in phases for k in p}):
        value = statistics.median(p.get(name, 0.0) for p in phases)
        table.add_row(f"  {prefix} phase: {name}", f"{value:.3f}", f"{value / floor:.2f}", "")


def show(args: argparse.Namespace, samples: Samples) -> None:
    floor = statistics.median(samples.floor)
    table = Table(title=f"{args.problem}: cost as a multiple of `import torch` ({floor:.3f} s, median of "
                        f"{len(samples.floor)} interleaved runs) on {os.cpu_count()} cores")
    for column in ("measurement", "seconds", "x floor", "target (stretch)"):
        table.add_column(column, justify="right" if column != "measurement" else "left")
    single = statistics.median(samples.single)
    table.add_row(f"grade one submission, cold (median of {len(samples.single)})", f"{single:.3f}",
                  f"{single / floor:.2f}", "<= 2.0 (1.5)")
    _phase_rows(table, samples.single_phases, floor, "grade")
    table.add_row(f"grade-all {args.batch} submissions, per submission", f"{samples.batch_per_file:.3f}",
                  f"{samples.batch_per_file / floor:.2f}", "<= 0.35 (0.25)")
    if samples.saves:
        regrade = statistics.median(samples.saves)
        table.add_row(f"watch: save to new report.json (median of {len(samples.saves)}, max "
                      f"{max(samples.saves):.2f} s)", f"{regrade:.3f}", f"{regrade / floor:.2f}", "<= 0.3")
        _phase_rows(table, samples.save_phases, floor, "watch")
    Console(width=120).print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", help="default: the first problem in problems/")
    parser.add_argument("--submission", type=Path, help="default: the problem's reference, graded as a learner file")
    parser.add_argument("--wrong", type=Path, help="the other version saved in turn under watch (default: a "
                        "known-wrong file that embodies a declared misreading)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--saves", type=int, default=6)
    args = parser.parse_args(argv)
    args.problem = args.problem or sorted(p.parent.name for p in (PROJECT_ROOT / "problems").glob("*/problem.toml"))[0]
    args.submission = (args.submission or PROJECT_ROOT / "reference" / args.problem / "reference.py").resolve()
    args.wrong = (args.wrong or wrong_solution(args.problem)).resolve()
    work = Path(tempfile.mkdtemp(prefix="paperleet-bench-"))
    try:
        samples = measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    show(args, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
