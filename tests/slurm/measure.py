"""The figures of docs/batch.md, measured: `python tests/slurm/measure.py` (root, slurm-wlm and munge installed).

Shard start overhead, merge time for 1,000 reports, and the scheduler's cost of an array of 100 tasks that do
nothing, on a single-node Slurm of its own in a temporary folder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cluster import slurm_cluster

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = "glm5_offpolicy"
REPORTS = 1000
ARRAY = 100


def timed(*args: str, env: dict[str, str] | None = None) -> float:
    start = time.monotonic()
    subprocess.run(args, cwd=ROOT, env=env, check=True, capture_output=True)
    return time.monotonic() - start


def shard_overhead(home: Path) -> float:
    """A shard's wall time on one submission, less the time its report says grading took."""
    folder = home / "one"
    folder.mkdir()
    shutil.copyfile(ROOT / "submissions" / PROBLEM / "bob_vectorized.py", folder / "bob_vectorized.py")
    python = sys.executable
    wall = timed(python, "-m", "grader", "grade-all", "--problem", PROBLEM, "--submissions", str(folder), "--out",
                 str(home / "one-out"), "--shard", "0/1", "--jobs", "1")  # fmt: skip
    graded = json.loads((home / "one-out" / "bob_vectorized" / "report.json").read_text())["duration_s"]
    return wall - float(graded)


def merge_time(home: Path) -> float:
    """`merge` of 1,000 reports: one graded folder copied under 1,000 names, each report renamed to match."""
    shards = home / "many"
    for k in range(REPORTS):
        target = shards / f"learner_{k:04d}"
        shutil.copytree(home / "one-out" / "bob_vectorized", target)
        report = json.loads((target / "report.json").read_text())
        report["submission"] = f"learner_{k:04d}.py"
        (target / "report.json").write_text(json.dumps(report))
    summary = Path("shards") / "shard-0-of-1.csv"  # the 1,000 stand for one finished shard: merge asks for its mark
    (shards / summary).parent.mkdir()
    shutil.copyfile(home / "one-out" / summary, shards / summary)
    return timed(sys.executable, "-m", "grader", "merge", str(shards))


def array_cost(home: Path) -> float:
    """Seconds from submitting an array of 100 tasks that do nothing to the last one's end."""
    with slurm_cluster(home / "slurm") as cluster:
        start = time.monotonic()
        job = cluster.run("sbatch", "--parsable", f"--array=0-{ARRAY - 1}", "--output=/dev/null", "--wrap=true")
        cluster.wait(lambda: not cluster.run("squeue", "-h", "-j", job.strip()).strip(), "the array", 600)
        return time.monotonic() - start


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="paperleet-measure-") as tmp:
        home = Path(tmp)
        print(f"shard start overhead: {shard_overhead(home):.1f} s")
        print(f"merge of {REPORTS} reports: {merge_time(home):.1f} s")
        seconds = array_cost(home)
        print(f"array of {ARRAY} empty tasks: {seconds:.1f} s, {seconds / ARRAY:.2f} s per task")


if __name__ == "__main__":
    main()
