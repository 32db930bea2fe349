"""docs/batch.md's Slurm job array, copied out of the page and run as printed on a Slurm of the test's own: the merged
class equals one unsharded grade-all, and a task killed and requeued, a shard run twice and a task out of memory
lose no report and count none twice."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from cluster import Cluster, slurm_cluster
from conftest import PROBLEM, ROOT, SAMPLES, SUBMISSIONS, TEST_CACHE, TRIVIAL, problem_named

from grader.course.shards import Shard
from grader.text import submission_folder

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slurm,
    pytest.mark.skipif(os.environ.get("PAPERLEET_SLURM") != "1", reason="needs a Slurm of its own: make test-slurm"),
]

DOC = ROOT / "docs" / "batch.md"
TASKS = 10  # the documented array, 0-9
KILLED_TASK = 3
TWICE_TASK = 4
HOSTILE = ROOT / "tests" / "hostile"
# hostile files that end quickly under the problem's own limits (the script passes no smaller ones)
HOSTILE_FILES = ("exit_import_os_exit", "crash_call_segfault", "forge_frame_hello", "cheat_raise_for_credit")
MEMORY_HOG = "memory_one_process"  # touches up to 6 GiB: the submission that runs a tight task out of memory
TIGHT_MEM = "3G"  # above what a task needs for any other submission, below what the hog touches
CLASS_TIMEOUT_S = 900


def documented(caption: str) -> str:
    """The code block of docs/batch.md that follows `caption`, verbatim."""
    match = re.search(re.escape(caption) + r"\n\n```(?:bash|sh)\n(.*?)```", DOC.read_text(), re.S)
    assert match is not None, f"docs/batch.md has no code block after {caption!r}"
    return match.group(1)


@dataclass(frozen=True)
class Course:
    """The submit directory the scripts expect: a checkout's .venv, the class's submissions, and their outputs."""

    root: Path
    files: list[Path]
    env: dict[str, str]

    @property
    def out(self) -> Path:
        return self.root / "artifacts" / PROBLEM

    def slice_of(self, stem: str) -> int:
        return next(k for k in range(TASKS) if stem in {f.stem for f in Shard(k, TASKS).select(self.files)})

    def sbatch(self, cluster: Cluster, *args: str) -> str:
        return cluster.run("sbatch", "--parsable", *args, cwd=self.root).strip().split(";")[0]


def class_files(folder: Path) -> list[Path]:
    """Every known-wrong solution, the correct and trivial answers kept in the repo, and a few hostile files."""
    folder.mkdir(parents=True)
    sources = [known.path for known in problem_named(PROBLEM).known_wrong()]
    sources += sorted(SUBMISSIONS.glob("*.py")) + sorted(TRIVIAL.glob("*.py")) + sorted(SAMPLES.glob("correct_*.py"))
    sources += sorted(SAMPLES.glob("broken_*.py"))
    sources += [HOSTILE / f"{stem}.py" for stem in (*HOSTILE_FILES, MEMORY_HOG)]
    for source in sources:
        target = folder / source.name
        assert not target.exists(), f"two sources named {source.name}"
        shutil.copyfile(source, target)
    return sorted(folder.glob("*.py"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as running:
        yield running


@pytest.fixture(scope="module")
def course(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Course:
    root = tmp_path_factory.mktemp("course")
    (root / ".venv").symlink_to(ROOT / ".venv")
    files = class_files(root / "submissions" / PROBLEM)
    assert len(files) >= 60
    for name in ("grade.sbatch", "merge.sbatch"):
        (root / name).write_text(documented(f"`{name}`:"))
    env = {**cluster.env, "PAPERLEET_CACHE": str(TEST_CACHE), "PAPERLEET_ARTIFACTS": str(root / "artifacts")}
    return Course(root, files, env)


def _state(cluster: Cluster, job_id: str) -> str:
    return cluster.job(job_id).get("JobState", "")


def _finished(cluster: Cluster, job_id: str) -> bool:
    return _state(cluster, job_id) not in {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED"}


def _reports(out: Path, stems: list[str]) -> int:
    return sum((out / submission_folder(f"{stem}.py") / "report.json").is_file() for stem in stems)


def _rows(summary: Path) -> list[dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(summary.read_text())))
    for row in rows:
        del row["duration_s"]
    return rows


def _dashboard(path: Path) -> str:
    """The dashboard without its timings: each submission's row ends with its duration."""
    return re.sub(r'<td class="num" data-sort="[0-9.]+">[0-9.]+</td></tr>', "<td>duration</td></tr>", path.read_text())


@dataclass(frozen=True)
class ArrayRun:
    grade: str  # the array's job id
    merge: str
    full: Path  # one unsharded grade-all of the same folder
    killed_after: int  # reports of the killed task's slice written when it was killed
    seconds: float  # submission to the merge's end


@pytest.fixture(scope="module")
def array_run(cluster: Cluster, course: Course, tmp_path_factory: pytest.TempPathFactory) -> ArrayRun:
    """The documented submit commands, run as printed; one task is killed mid-grade and requeued, as a node failure
    or a preemption does, while the unsharded run grades the same folder beside the array."""
    full = tmp_path_factory.mktemp("unsharded")
    command = [sys.executable, "-m", "grader", "grade-all", "--problem", PROBLEM, "--jobs", "2"]
    unsharded = subprocess.Popen(
        [*command, "--submissions", str(course.root / "submissions" / PROBLEM), "--out", str(full)],
        cwd=ROOT,
        env=course.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        start = time.monotonic()
        submitted = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", documented("Submit both, the second depending on the whole array:")],
            cwd=course.root,
            env=course.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert submitted.returncode == 0, submitted.stderr
        merge = re.fullmatch(r"Submitted batch job (\d+)\s*", submitted.stdout)
        assert merge is not None, submitted.stdout
        grade = re.split(r"[_(]", cluster.job(merge.group(1))["Dependency"].split(":")[1])[0]  # afterok:7_*(...)
        killed = f"{grade}_{KILLED_TASK}"
        stems = [f.stem for f in Shard(KILLED_TASK, TASKS).select(course.files)]
        cluster.wait(lambda: _reports(course.out, stems) >= 1, f"task {killed}'s first report", CLASS_TIMEOUT_S)
        killed_after = _reports(course.out, stems)
        cluster.run("scontrol", "requeue", killed)
        cluster.wait(lambda: _state(cluster, killed) == "PENDING", f"{killed} requeued", 120)
        cluster.run("scontrol", "update", f"JobId={killed}", "StartTime=now")  # skip the requeue's hold-off
        cluster.wait(lambda: _finished(cluster, merge.group(1)), "the merge job", CLASS_TIMEOUT_S)
        seconds = time.monotonic() - start
        _, stderr = unsharded.communicate(timeout=CLASS_TIMEOUT_S)
        assert unsharded.returncode == 0, stderr[-3000:]
    finally:
        if unsharded.poll() is None:
            unsharded.kill()
        unsharded.communicate()
    assert _state(cluster, merge.group(1)) == "COMPLETED", cluster.log("slurmctld.out")[-3000:]
    return ArrayRun(grade, merge.group(1), full, killed_after, seconds)


def test_the_documented_array_merges_to_the_unsharded_result(course: Course, array_run: ArrayRun) -> None:
    assert _rows(course.out / "summary.csv") == _rows(array_run.full / "summary.csv")
    assert len(_rows(course.out / "summary.csv")) == len(course.files)
    for path in sorted(array_run.full.glob("*/report.json")):
        ours, theirs = (
            json.loads((out / path.parent.name / "report.json").read_text()) for out in (course.out, array_run.full)
        )
        verdicts = [
            [(c["id"], c["verdict"]) for t in report["tiers"] for c in t["checks"]] for report in (ours, theirs)
        ]
        assert verdicts[0] == verdicts[1], path.parent.name
    assert _dashboard(course.out / "index.html") == _dashboard(array_run.full / "index.html")
    print(f"\n{len(course.files)} submissions, {TASKS} tasks and the merge: {array_run.seconds:.0f} s")


def test_every_task_succeeded_and_wrote_its_shard_summary(
    cluster: Cluster, course: Course, array_run: ArrayRun
) -> None:
    for k in range(TASKS):
        assert _state(cluster, f"{array_run.grade}_{k}") == "COMPLETED"
        assert (course.out / "shards" / f"shard-{k}-of-{TASKS}.csv").is_file()
        assert (course.root / "logs" / f"grade-{array_run.grade}_{k}.out").is_file()


def test_the_killed_task_ran_again_and_lost_no_report(cluster: Cluster, course: Course, array_run: ArrayRun) -> None:
    killed = cluster.job(f"{array_run.grade}_{KILLED_TASK}")
    assert killed["Restarts"] == "1" and killed["JobState"] == "COMPLETED"
    stems = [f.stem for f in Shard(KILLED_TASK, TASKS).select(course.files)]
    assert 1 <= array_run.killed_after < len(stems), "killed mid-grade: some reports written, not all"
    rows = _rows(course.out / "summary.csv")
    assert sorted(row["submission"] for row in rows) == sorted(f.name for f in course.files), "each once"


def test_a_shard_run_twice_counts_once(cluster: Cluster, course: Course, array_run: ArrayRun) -> None:
    """`sbatch --array=<task> grade.sbatch` again, as the page advises for a failed task, then the merge again."""
    again = course.sbatch(cluster, f"--array={TWICE_TASK}", "grade.sbatch")
    merge = course.sbatch(cluster, f"--dependency=afterok:{again}", "merge.sbatch")
    cluster.wait(lambda: _finished(cluster, merge), "the second merge", CLASS_TIMEOUT_S)
    assert _state(cluster, f"{again}_{TWICE_TASK}") == "COMPLETED" and _state(cluster, merge) == "COMPLETED"
    assert _rows(course.out / "summary.csv") == _rows(array_run.full / "summary.csv")


def test_a_task_out_of_memory_holds_the_merge_until_rerun(
    cluster: Cluster, course: Course, array_run: ArrayRun
) -> None:
    """A node too small for one submission: Slurm kills its task, the dependent merge never starts, the class
    summary keeps its old rows; rerunning the task as printed grades the submission, and the merge completes."""
    task = course.slice_of(MEMORY_HOG)
    shutil.rmtree(course.out / MEMORY_HOG)  # as before its first grading
    tight = course.sbatch(cluster, f"--array={task}", f"--mem={TIGHT_MEM}", "grade.sbatch")
    held = course.sbatch(cluster, f"--dependency=afterok:{tight}", "merge.sbatch")
    cluster.wait(lambda: _finished(cluster, f"{tight}_{task}"), "the tight task", CLASS_TIMEOUT_S)
    assert _state(cluster, f"{tight}_{task}") in {"OUT_OF_MEMORY", "FAILED", "CANCELLED"}
    assert "exceeded memory limit" in (course.root / "logs" / f"grade-{tight}_{task}.out").read_text()
    cluster.wait(lambda: cluster.job(held).get("Reason") == "DependencyNeverSatisfied", "the merge held", 60)
    assert not (course.out / MEMORY_HOG / "report.json").exists()
    cluster.run("scancel", held)
    rerun = course.sbatch(cluster, f"--array={task}", "grade.sbatch")
    merge = course.sbatch(cluster, f"--dependency=afterok:{rerun}", "merge.sbatch")
    cluster.wait(lambda: _finished(cluster, merge), "the merge after the rerun", CLASS_TIMEOUT_S)
    assert _state(cluster, merge) == "COMPLETED"
    assert _rows(course.out / "summary.csv") == _rows(array_run.full / "summary.csv")
