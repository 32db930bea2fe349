"""docs/batch.md's Slurm job array, copied out of the page and run as printed on a Slurm of the test's own: the merged
class equals one unsharded grade-all, and a task cancelled, a task out of memory, a shard run twice and a task
requeued lose no report and count none twice; a merge run by hand before the failed task is rerun refuses."""

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
KILLED_TASK = 3  # its slice is quick to grade again: no hostile file in it
HOSTILE = ROOT / "tests" / "hostile"
# hostile files that end quickly under the problem's own limits (the script passes no smaller ones)
HOSTILE_FILES = ("exit_import_os_exit", "crash_call_segfault", "forge_frame_hello", "cheat_raise_for_credit")
MEMORY_HOG = "memory_one_process"  # touches up to 6 GiB: the submission that runs a tight task out of memory
TIGHT_MEM = "3G"  # above what a task needs for any other submission, below what the hog touches
CLASS_TIMEOUT_S = 900
# Verdicts that hang on the wall clock, whoever grades: this file kills its worker in every call, and each restart
# imports torch again against the submission's time budget (`submission_budget_s`), so on a loaded machine the
# budget runs out and its later checks are `skipped` (status budget_exceeded) where an idler run finds them
# `crashed`. What holds whatever the load, and is compared: its score, the checks it passes or fails on a value,
# and that every other check ended without an answer.
LOAD_BOUND = {"crash_call_segfault"}
NO_ANSWER = {"crashed", "timeout", "skipped"}


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
    """The summary's rows apart from timings, and from the status of a LOAD_BOUND file."""
    rows = list(csv.DictReader(io.StringIO(summary.read_text())))
    for row in rows:
        del row["duration_s"]
        if Path(row["submission"]).stem in LOAD_BOUND:
            assert row["status"] in {"graded", "budget_exceeded"}, row
            row["status"] = "graded or budget_exceeded"
    return rows


def _verdicts(report_json: Path) -> list[tuple[str, str]]:
    """Each check's verdict; for a LOAD_BOUND file, whether it ended without an answer rather than how."""
    report = json.loads(report_json.read_text())
    bound = report_json.parent.name in LOAD_BOUND
    return [
        (c["id"], "no answer" if bound and c["verdict"] in NO_ANSWER else c["verdict"])
        for t in report["tiers"]
        for c in t["checks"]
    ]


def _dashboard(path: Path) -> str:
    """The dashboard without its timings (each submission's row ends with its duration), nor what LOAD_BOUND files
    owe to the load: their status and their checks' verdicts without an answer."""
    text = re.sub(r'<td class="num" data-sort="[0-9.]+">[0-9.]+</td></tr>', "<td>duration</td></tr>", path.read_text())
    for stem in LOAD_BOUND:
        text = re.sub(
            rf'(<a href="{stem}/report\.html">[^<]*</a></td>)<td data-sort="(?:graded|budget_exceeded)">'
            r'<span class="badge s-\w+">\w+</span>',
            r"\1<td>graded or budget_exceeded",
            text,
        )
        text = re.sub(
            rf'(<a href="{stem}/report\.html#check-[\w-]+">[^<]*</a> )'
            r'<span class="badge v-(?:crashed|timeout|skipped)">\w+</span>',
            r"\1<span>no answer</span>",
            text,
        )
    return text


def _ended(course: Course, task: str) -> str:
    """Why a task ended before the test could act on it: its log's last lines."""
    log = course.root / "logs" / f"grade-{task}.out"
    return f"{task} ended early:\n" + (log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)")


def _merge_by_hand(course: Course) -> subprocess.CompletedProcess[str]:
    """merge.sbatch run as a shell script, outside Slurm, as someone impatient would."""
    env = {**course.env, "SLURM_SUBMIT_DIR": str(course.root)}
    return subprocess.run(
        ["bash", "merge.sbatch"], cwd=course.root, env=env, capture_output=True, text=True, timeout=300
    )


def _assert_refused(done: subprocess.CompletedProcess[str], task: int) -> None:
    """The documented refusal: exit 4, one line naming the shard and the rerun, and no class summary written."""
    assert done.returncode == 4, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f" {task}/{TASKS};" in done.stderr and f"sbatch --array={task} " in done.stderr, done.stderr


@dataclass(frozen=True)
class ArrayRun:
    grade: str  # the array's job id
    held: str  # the merge submitted with it, held when a task was cancelled
    rerun: str  # the cancelled task, submitted again
    merge: str  # the merge after the rerun
    full: Path  # one unsharded grade-all of the same folder
    killed_after: int  # reports of the cancelled task's slice written when it was cancelled
    held_reason: str  # why the first merge had not started once the rest of the array ended
    by_hand: subprocess.CompletedProcess[str]  # the merge run by hand then
    seconds: float  # submission to the last merge's end


@pytest.fixture(scope="module")
def array_run(cluster: Cluster, course: Course, tmp_path_factory: pytest.TempPathFactory) -> ArrayRun:
    """The documented submit commands, run as printed, while the unsharded run grades the same folder beside the
    array; one task is cancelled mid-grade, and recovered from as docs/batch.md says: the held merge cancelled, the
    task submitted again, the merge after it."""
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
        cluster.wait(
            lambda: _reports(course.out, stems) >= 1 or _finished(cluster, killed),
            f"task {killed}'s first report",
            CLASS_TIMEOUT_S,
        )
        assert not _finished(cluster, killed), _ended(course, killed)
        killed_after = _reports(course.out, stems)
        cluster.run("scancel", killed)
        tasks = [f"{grade}_{k}" for k in range(TASKS)]
        cluster.wait(lambda: all(_finished(cluster, task) for task in tasks), "the array", CLASS_TIMEOUT_S)
        held = merge.group(1)
        cluster.wait(lambda: cluster.job(held).get("Reason") == "DependencyNeverSatisfied", "the merge held", 60)
        held_reason = f"{_state(cluster, held)} {cluster.job(held).get('Reason')}"
        by_hand = _merge_by_hand(course)
        cluster.run("scancel", held)
        rerun = course.sbatch(cluster, f"--array={KILLED_TASK}", "grade.sbatch")
        last = course.sbatch(cluster, f"--dependency=afterok:{rerun}", "merge.sbatch")
        cluster.wait(lambda: _finished(cluster, last), "the merge after the rerun", CLASS_TIMEOUT_S)
        seconds = time.monotonic() - start
        _, stderr = unsharded.communicate(timeout=CLASS_TIMEOUT_S)
        assert unsharded.returncode == 0, stderr[-3000:]
    finally:
        if unsharded.poll() is None:
            unsharded.kill()
        unsharded.communicate()
    assert _state(cluster, last) == "COMPLETED", cluster.log("slurmctld.out")[-3000:]
    return ArrayRun(grade, held, rerun, last, full, killed_after, held_reason, by_hand, seconds)


def test_the_documented_array_merges_to_the_unsharded_result(course: Course, array_run: ArrayRun) -> None:
    assert _rows(course.out / "summary.csv") == _rows(array_run.full / "summary.csv")
    assert len(_rows(course.out / "summary.csv")) == len(course.files)
    for path in sorted(array_run.full.glob("*/report.json")):
        assert _verdicts(course.out / path.parent.name / "report.json") == _verdicts(path), path.parent.name
    assert _dashboard(course.out / "index.html") == _dashboard(array_run.full / "index.html")
    print(f"\n{len(course.files)} submissions, {TASKS} tasks and the merge: {array_run.seconds:.0f} s")


def test_every_task_succeeded_and_wrote_its_shard_summary(
    cluster: Cluster, course: Course, array_run: ArrayRun
) -> None:
    for k in range(TASKS):
        job = f"{array_run.rerun}_{k}" if k == KILLED_TASK else f"{array_run.grade}_{k}"
        assert _state(cluster, job) == "COMPLETED"
        assert (course.out / "shards" / f"shard-{k}-of-{TASKS}.csv").is_file()
        assert (course.root / "logs" / f"grade-{job}.out").is_file()


def test_a_cancelled_task_holds_the_merge_and_a_merge_by_hand_refuses(
    cluster: Cluster, course: Course, array_run: ArrayRun
) -> None:
    """`scancel <job>_<task>` mid-grade: afterok never starts the merge, and merge.sbatch run by hand names the
    task instead of writing a class summary without its ungraded submissions."""
    assert _state(cluster, f"{array_run.grade}_{KILLED_TASK}") == "CANCELLED"
    stems = [f.stem for f in Shard(KILLED_TASK, TASKS).select(course.files)]
    assert 1 <= array_run.killed_after < len(stems), "cancelled mid-grade: some reports written, not all"
    assert array_run.held_reason == "PENDING DependencyNeverSatisfied"
    _assert_refused(array_run.by_hand, KILLED_TASK)
    assert _state(cluster, array_run.held) == "CANCELLED" and _state(cluster, array_run.merge) == "COMPLETED"
    rows = _rows(course.out / "summary.csv")
    assert sorted(row["submission"] for row in rows) == sorted(f.name for f in course.files), "each once"


def _rewritten(course: Course, stems: list[str], since: float) -> int:
    paths = [course.out / submission_folder(f"{stem}.py") / "report.json" for stem in stems]
    return sum(path.is_file() and path.stat().st_mtime >= since for path in paths)


def test_a_task_out_of_memory_holds_the_merge_until_rerun_twice_and_requeued(
    cluster: Cluster, course: Course, array_run: ArrayRun
) -> None:
    """A node too small for one submission: Slurm kills its task, the dependent merge never starts and a merge by
    hand refuses. The task rerun as printed runs its shard a second time over the array's reports, and is
    requeued mid-grade as a node failure or a preemption does; the merge after it counts every submission once."""
    task = course.slice_of(MEMORY_HOG)
    stems = [f.stem for f in Shard(task, TASKS).select(course.files)]
    shutil.rmtree(course.out / MEMORY_HOG)  # as before its first grading
    tight = course.sbatch(cluster, f"--array={task}", f"--mem={TIGHT_MEM}", "grade.sbatch")
    held = course.sbatch(cluster, f"--dependency=afterok:{tight}", "merge.sbatch")
    cluster.wait(lambda: _finished(cluster, f"{tight}_{task}"), "the tight task", CLASS_TIMEOUT_S)
    assert _state(cluster, f"{tight}_{task}") in {"OUT_OF_MEMORY", "FAILED", "CANCELLED"}
    assert "exceeded memory limit" in (course.root / "logs" / f"grade-{tight}_{task}.out").read_text()
    cluster.wait(lambda: cluster.job(held).get("Reason") == "DependencyNeverSatisfied", "the merge held", 60)
    assert not (course.out / MEMORY_HOG / "report.json").exists()
    _assert_refused(_merge_by_hand(course), task)
    cluster.run("scancel", held)
    since = time.time()
    rerun = course.sbatch(cluster, f"--array={task}", "grade.sbatch")
    merge = course.sbatch(cluster, f"--dependency=afterok:{rerun}", "merge.sbatch")
    requeued = f"{rerun}_{task}"
    cluster.wait(
        lambda: _rewritten(course, stems, since) >= 1 or _finished(cluster, requeued),
        f"{requeued}'s first report",
        CLASS_TIMEOUT_S,
    )
    assert not _finished(cluster, requeued), _ended(course, requeued)
    cluster.run("scontrol", "requeue", requeued)
    cluster.wait(lambda: _state(cluster, requeued) == "PENDING", f"{requeued} requeued", 120)
    cluster.run("scontrol", "update", f"JobId={requeued}", "StartTime=now")  # skip the requeue's hold-off
    cluster.wait(lambda: _finished(cluster, merge), "the merge after the rerun", CLASS_TIMEOUT_S)
    assert _state(cluster, merge) == "COMPLETED"
    assert cluster.job(requeued)["Restarts"] == "1" and _state(cluster, requeued) == "COMPLETED"
    assert _rewritten(course, stems, since) == len(stems), "the whole slice graded again, in the same folders"
    assert _rows(course.out / "summary.csv") == _rows(array_run.full / "summary.csv")
