"""`make bench`: grading cost as a ratio to one `python -c "import torch"`, measured side by side in one run.

Measurements against the same floor: a cold `grade` of one file, `grade-all` of a class (per file) of copies of
one correct file and of a mixed class as it really comes (mostly wrong files, each one unique), a cold grade of a
file holding a declared misreading with follow-through credit and without, and the `watch` loop's re-grade after
a save (from the save to the new report.json on disk, the debounce included).
Floor runs are interleaved with the others, so that load from elsewhere on the machine hits both alike; the
ratios are the result, the seconds only say how loaded the machine was. Beside each wall-time ratio, the ratio
of CPU time (every process of the measurement, against the floor's), which load from elsewhere barely moves.

Usage: python -m grader.bench [--problem ID] [--submission FILE] [--runs N] [--batch N] [--mixed N] [--saves N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from grader.model.problem import Problem
from grader.paths import PROJECT_ROOT

WATCH_START_TIMEOUT_S = 300.0  # the first grade of a watch computes the expectations if the cache is cold
SAVE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float  # user + system seconds of every process of the run


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str]) -> Run:
    started, cpu = time.perf_counter(), _children_cpu()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=PROJECT_ROOT)
    return Run(time.perf_counter() - started, _children_cpu() - cpu)


def floor_run(python: str) -> Run:
    return timed([python, "-c", "import torch"])


def tree_cpu(root: int) -> float:
    """CPU seconds of a live process, its live descendants and the children they have reaped, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        try:
            text = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        if text:
            stats[int(entry.name)] = text[text.rindex(")") + 2 :].split()
    below, pending, total = {root}, [root], 0.0
    while pending:
        pid = pending.pop()
        fields = stats.get(pid)
        if fields is not None:
            total += sum(int(v) for v in fields[11:15]) / ticks  # utime, stime, cutime, cstime
        for child, child_fields in stats.items():
            if int(child_fields[1]) == pid and child not in below:
                below.add(child)
                pending.append(child)
    return total


@dataclass
class Samples:
    """Each measurement's runs, and the floor runs taken between them."""

    floor: list[Run] = field(default_factory=list)
    single: list[Run] = field(default_factory=list)
    single_phases: list[dict[str, float]] = field(default_factory=list)
    batch_per_file: Run = Run(0.0, 0.0)
    mixed_per_file: Run = Run(0.0, 0.0)
    mixed_diagnosis: tuple[float, float] = (0.0, 0.0)  # seconds the mixed class's diagnoses took, of its grading
    misread: dict[str, list[Run]] = field(default_factory=dict)  # a misreading's file, with follow-through or not
    misread_phases: list[dict[str, float]] = field(default_factory=list)
    saves: dict[str, list[Run]] = field(default_factory=dict)  # per kind of edit
    save_phases: dict[str, list[dict[str, float]]] = field(default_factory=dict)


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


def _settle(pid: int, quiet_s: float = 0.5, limit_s: float = 20.0) -> None:
    """Wait until the watch's processes use no CPU for `quiet_s`: a learner reads the table before saving again,
    and meanwhile the next plotting process has started."""
    deadline, last = time.monotonic() + limit_s, tree_cpu(pid)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = tree_cpu(pid)
        if now - last < 0.02:
            return
        last = now


def measure_watch(
    python: str, problem: str, pairs: dict[str, tuple[Path, Path]], saves: int, work: Path, samples: Samples
) -> None:
    """For each kind of edit, start `watch` on a file and save its two versions in turn, once untimed (the first
    grade of a version computes what the cache lacks), then `saves` times; a floor run after each re-grade."""
    for kind, versions in pairs.items():
        folder = work / f"watched-{len(samples.saves)}"
        folder.mkdir()
        file, out = folder / "learner.py", folder / "out"
        sha = save(file, versions[0])
        watcher = subprocess.Popen(
            [python, "-m", "grader", "watch", str(file), "--problem", problem, "--out", str(out)],
            cwd=PROJECT_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        runs, phases = samples.saves.setdefault(kind, []), samples.save_phases.setdefault(kind, [])
        try:
            _wait_for_report(out / "report.json", sha, watcher, WATCH_START_TIMEOUT_S)
            for index in range(saves + 1):
                _settle(watcher.pid)
                started, cpu = time.perf_counter(), tree_cpu(watcher.pid)
                sha = save(file, versions[(index + 1) % 2])
                report = _wait_for_report(
                    out / "report.json", sha, watcher, WATCH_START_TIMEOUT_S if index == 0 else SAVE_TIMEOUT_S
                )
                if index > 0:
                    runs.append(Run(time.perf_counter() - started, tree_cpu(watcher.pid) - cpu))
                    found = report.get("phases", {})
                    phases.append(dict(found) if isinstance(found, dict) else {})
                    samples.floor.append(floor_run(python))
        finally:
            watcher.send_signal(signal.SIGINT)
            try:
                watcher.wait(timeout=30)
            except subprocess.TimeoutExpired:
                watcher.kill()
                watcher.wait()


def edit_pairs(args: argparse.Namespace) -> dict[str, tuple[Path, Path]]:
    """The two kinds of edit a learner makes, each as the problem's reference and a known-wrong file that differs
    from it that way: one leaves the toy's series as they were (a fix of an edge case: the plots stay), the
    other changes them (the plots are drawn again). Known-wrong files that embody a declared misreading first."""
    problem = Problem(args.problem)
    experiment = {check.id for check in problem.spec.checks if check.kind == "experiment"}
    declared = {m.solution for m in problem.misconceptions}
    wrong = sorted(problem.known_wrong(), key=lambda w: (w.path.name not in declared, w.path.name))
    unchanged = next((w.path for w in wrong if not (w.must_fail | w.may_fail) & experiment), None)
    changed = next((w.path for w in wrong if w.must_fail & experiment), None)
    return {
        kind: (args.submission, path)
        for kind, path in (("toy unchanged", unchanged), ("toy changed", changed))
        if path is not None
    }


def misreading_file(problem_id: str) -> Path | None:
    """The known-wrong file of the problem's first declared misreading: a grade that diagnoses and follows through."""
    problem = Problem(problem_id)
    declared = [m.solution for m in problem.misconceptions if m.solution is not None]
    wrong = {w.path.name: w.path for w in problem.known_wrong()}
    return next((wrong[name] for name in declared if name in wrong), None)


def measure_follow_through(python: str, args: argparse.Namespace, work: Path, samples: Samples) -> None:
    """A cold grade of a file that holds a misreading, with follow-through credit (the default) and without,
    interleaved; the diagnosis phase of the first says what naming the misreading costs."""
    file = misreading_file(args.problem)
    if file is None:
        return
    grade = [python, "-m", "grader", "grade", str(file), "--problem", args.problem, "--out", str(work / "misread")]
    subprocess.run(grade, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=PROJECT_ROOT)  # caches
    for _ in range(args.runs):
        samples.misread.setdefault("with follow-through", []).append(timed(grade))
        samples.misread_phases.append(json.loads((work / "misread" / "report.json").read_text())["phases"])
        samples.misread.setdefault("without", []).append(timed([*grade, "--no-follow-through"]))
        samples.floor.append(floor_run(python))


def mixed_sources(problem_id: str, correct: Path) -> list[Path]:
    """A class as it really comes: one correct file, the first three declared misreadings, and the starter."""
    problem = Problem(problem_id)
    wrong = {w.path.name: w.path for w in problem.known_wrong()}
    misread = [wrong[m.solution] for m in problem.misconceptions if m.solution is not None and m.solution in wrong][:3]
    return [correct, *misread, problem.problem_dir / "starter.py"]


def write_class(sources: list[Path], count: int, folder: Path) -> None:
    """`count` files cycling through `sources`, each made unique by a comment, as no two learners' files agree
    byte for byte: nothing keyed by a file's hash is shared between them."""
    folder.mkdir()
    for index in range(count):
        text = sources[index % len(sources)].read_text()
        (folder / f"learner_{index:03d}.py").write_text(f"{text}\n# learner {index:03d}\n")


def grade_all(python: str, problem: str, folder: Path, out: Path) -> list[str]:
    return [
        python,
        "-m",
        "grader",
        "grade-all",
        "--problem",
        problem,
        "--submissions",
        str(folder),
        "--out",
        str(out),
        "--jobs",
        str(os.cpu_count() or 1),
    ]


def diagnosis_time(out: Path) -> tuple[float, float]:
    """The seconds the diagnoses of the reports under `out` took, and the seconds their grades took in all."""
    reports = [json.loads(path.read_text()) for path in sorted(out.rglob("report.json"))]
    diagnosing = sum(float(report.get("phases", {}).get("diagnosis", 0.0)) for report in reports)
    return diagnosing, sum(float(report.get("duration_s", 0.0)) for report in reports)


def measure_mixed(python: str, args: argparse.Namespace, work: Path, samples: Samples) -> None:
    """`grade-all` of a mixed class, per file, with a floor run on each side."""
    if args.mixed <= 0:
        return
    folder = work / "mixed"
    write_class(mixed_sources(args.problem, args.submission), args.mixed, folder)
    samples.floor.append(floor_run(python))
    run = timed(grade_all(python, args.problem, folder, work / "mixed_out"))
    samples.mixed_per_file = Run(run.wall / args.mixed, run.cpu / args.mixed)
    samples.mixed_diagnosis = diagnosis_time(work / "mixed_out")
    samples.floor.append(floor_run(python))


def measure(args: argparse.Namespace, work: Path) -> Samples:
    python = sys.executable
    samples = Samples()
    grade_cmd = [
        python,
        "-m",
        "grader",
        "grade",
        str(args.submission),
        "--problem",
        args.problem,
        "--out",
        str(work / "one"),
    ]
    timed([python, "-m", "grader", "previews", "--problem", args.problem])  # as `make grade` has them
    subprocess.run(grade_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=PROJECT_ROOT)  # caches
    for _ in range(args.runs):  # interleaved, so load on the machine hits both alike
        samples.floor.append(floor_run(python))
        samples.single.append(timed(grade_cmd))
        samples.single_phases.append(json.loads((work / "one" / "report.json").read_text())["phases"])
    batch_dir = work / "batch"
    batch_dir.mkdir()
    for index in range(args.batch):
        shutil.copyfile(args.submission, batch_dir / f"learner_{index:03d}.py")
    batch_wall = timed(grade_all(python, args.problem, batch_dir, work / "batch_out"))
    samples.batch_per_file = Run(batch_wall.wall / args.batch, batch_wall.cpu / args.batch)
    samples.floor.append(floor_run(python))
    measure_follow_through(python, args, work, samples)
    measure_mixed(python, args, work, samples)  # after a misreading's grade has cached what the class shares
    measure_watch(python, args.problem, edit_pairs(args), args.saves, work, samples)
    return samples


def _median(runs: list[Run]) -> Run:
    return Run(statistics.median(r.wall for r in runs), statistics.median(r.cpu for r in runs))


def show(args: argparse.Namespace, samples: Samples) -> None:
    floor = _median(samples.floor)
    table = Table(
        title=f'{args.problem}: cost as a multiple of `python -c "import torch"` ({floor.wall:.3f} s wall, '
        f"{floor.cpu:.3f} s CPU; median of {len(samples.floor)} interleaved runs) on "
        f"{os.cpu_count()} cores"
    )
    for column in ("measurement", "seconds", "x floor", "CPU s", "CPU x floor", "target (stretch)"):
        table.add_column(column, justify="right" if column != "measurement" else "left")

    def row(label: str, run: Run, target: str) -> None:
        table.add_row(
            label,
            f"{run.wall:.3f}",
            f"{run.wall / floor.wall:.2f}",
            f"{run.cpu:.3f}",
            f"{run.cpu / floor.cpu:.2f}",
            target,
        )

    def phases(found: list[dict[str, float]], prefix: str) -> None:
        for name in sorted({k for p in found for k in p}):
            value = statistics.median(p.get(name, 0.0) for p in found)
            table.add_row(f"  {prefix} phase: {name}", f"{value:.3f}", f"{value / floor.wall:.2f}", "", "", "")

    row(f"grade one submission, cold (median of {len(samples.single)})", _median(samples.single), "<= 1.6")
    phases(samples.single_phases, "grade")
    row(f"grade-all {args.batch} submissions, per submission", samples.batch_per_file, "<= 0.35 (0.25)")
    if args.mixed > 0:
        row(f"grade-all a mixed class of {args.mixed}, per submission", samples.mixed_per_file, "<= 0.35")
        diagnosing, graded = samples.mixed_diagnosis
        share = f"{diagnosing / graded:.1%}" if graded > 0 else "-"
        table.add_row(
            f"  mixed class: diagnosis, {share} of its grading time", f"{diagnosing:.3f}", "", "", "", "<= 10%"
        )
    for how, runs in samples.misread.items():
        row(f"grade a misreading's file, cold, {how} (median of {len(runs)})", _median(runs), "")
    phases([{k: v for k, v in p.items() if k == "diagnosis"} for p in samples.misread_phases], "misreading")
    for kind, runs in samples.saves.items():
        if runs:
            row(
                f"watch, {kind}: save to new report.json (median of {len(runs)}, slowest "
                f"{max(r.wall for r in runs):.2f} s)",
                _median(runs),
                "<= 0.3",
            )
            phases(samples.save_phases[kind], "watch")
    Console(width=140).print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", help="default: the first problem in problems/")
    parser.add_argument("--submission", type=Path, help="default: the problem's reference, graded as a learner file")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--mixed", type=int, default=48, help="files of the mixed class (0: not measured)")
    parser.add_argument("--saves", type=int, default=6)
    args = parser.parse_args(argv)
    args.problem = args.problem or sorted(p.parent.name for p in (PROJECT_ROOT / "problems").glob("*/problem.toml"))[0]
    args.submission = (args.submission or PROJECT_ROOT / "reference" / args.problem / "reference.py").resolve()
    work = Path(tempfile.mkdtemp(prefix="paperleet-bench-"))
    try:
        samples = measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    show(args, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
