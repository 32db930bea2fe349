"""grade-all --shard K/N and merge: the slices partition a class, and merged shards equal one unsharded run."""

from __future__ import annotations

import csv
import io
import json
import random
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import PROBLEM, ROOT, SAMPLES, TRIVIAL

from grader import commands
from grader.cli import main
from grader.course.shards import USAGE, Shard, ShardError, collect, parse_shard, require_every_shard
from grader.model.report import Report
from grader.model.verdicts import ExitCode

SOURCES = {
    "correct_compact": SAMPLES / "correct_compact.py",
    "trivial_zeros": TRIVIAL / "zeros.py",
    "trivial_echo": TRIVIAL / "echo.py",
    "broken_missing_function": SAMPLES / "broken_missing_function.py",
}
FAST = list(SOURCES)
SHARDS = 3


def _slice(index: int) -> list[str]:
    """The stems of FAST that shard index/SHARDS grades."""
    return [path.stem for path in Shard(index, SHARDS).select(Path(f"{name}.py") for name in FAST)]


@pytest.fixture
def run_main(capsys: pytest.CaptureFixture[str]):
    def run(*args: str | Path) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


# ---------------------------------------------------------------------------------------------- slicing


@pytest.mark.parametrize(
    ("text", "shard"), [("0/10", Shard(0, 10)), ("9/10", Shard(9, 10)), (" 2 / 3 ", Shard(2, 3)), ("0/1", Shard(0, 1))]
)
def test_parse_shard_reads_k_of_n(text: str, shard: Shard) -> None:
    assert parse_shard(text) == shard


@pytest.mark.parametrize("text", ["10/10", "3/2", "0/0", "-1/3", "1", "a/b", "1/2/3", "", "1.0/2"])
def test_parse_shard_rejects_anything_else(text: str) -> None:
    with pytest.raises(ShardError, match=re.escape(USAGE)):
        parse_shard(text)


@pytest.mark.parametrize("count", [1, 2, 3, 7, 30])
def test_shards_partition_the_files_whatever_their_order(count: int) -> None:
    files = [Path(f"submissions/learner_{i:02d}.py") for i in range(23)]
    shuffled = random.Random(count).sample(files, len(files))
    slices = [Shard(k, count).select(shuffled) for k in range(count)]
    assert slices == [Shard(k, count).select(files) for k in range(count)], "stable: the order given does not matter"
    assert sorted(f for s in slices for f in s) == sorted(files), "every file once"
    assert max(map(len, slices)) - min(map(len, slices)) <= 1
    assert all(s == sorted(s) for s in slices)


def test_a_bad_shard_is_a_usage_error(run_main, tmp_path: Path) -> None:
    code, _, err = run_main("grade-all", "--problem", PROBLEM, "--submissions", tmp_path, "--shard", "3/3")
    assert code == ExitCode.USAGE
    assert "--shard '3/3'" in err and USAGE in err


def test_an_empty_slice_grades_nothing_and_succeeds(run_main, tmp_path: Path) -> None:
    (tmp_path / "subs").mkdir()
    shutil.copyfile(SOURCES["trivial_zeros"], tmp_path / "subs" / "trivial_zeros.py")
    code, out, _ = run_main(
        "grade-all",
        "--problem",
        PROBLEM,
        "--submissions",
        tmp_path / "subs",
        "--out",
        tmp_path / "out",
        "--shard",
        "1/2",
    )
    assert code == ExitCode.OK and "nothing to grade" in out
    written = [p.relative_to(tmp_path / "out") for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert written == [Path("shards/shard-1-of-2.csv")], "no report, but the mark that this shard finished"
    assert len(_rows(tmp_path / "out" / "shards" / "shard-1-of-2.csv")) == 0


def test_a_shard_removes_its_old_summary_before_grading(
    run_main, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard killed mid-grade must leave no summary behind, not even one from an earlier run of it."""
    (tmp_path / "subs").mkdir()
    shutil.copyfile(SOURCES["trivial_zeros"], tmp_path / "subs" / "trivial_zeros.py")
    stale = tmp_path / "out" / "shards" / "shard-0-of-1.csv"
    stale.parent.mkdir(parents=True)
    stale.write_text("submission\nfrom_an_earlier_run.py\n")
    seen: list[bool] = []

    def killed_mid_grade(*args: object, **kwargs: object) -> list[Report]:
        seen.append(stale.exists())
        raise KeyboardInterrupt  # as a task killed by its scheduler ends, before writing anything more

    monkeypatch.setattr(commands, "grade_many", killed_mid_grade)
    with pytest.raises(KeyboardInterrupt):
        run_main(
            "grade-all",
            "--problem",
            PROBLEM,
            "--submissions",
            tmp_path / "subs",
            "--out",
            tmp_path / "out",
            "--shard",
            "0/1",
        )
    assert seen == [False] and not stale.exists()


# ---------------------------------------------------------------------------------------------- shard, then merge


@dataclass(frozen=True)
class Runs:
    full: Path  # one unsharded grade-all
    shared: Path  # shards 0 and 1, writing into one folder
    alone: Path  # shard 2, in a folder of its own
    merged: Path
    merge: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def runs(run_cli, cli_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Runs:
    base = tmp_path_factory.mktemp("shards")
    folder = base / "submissions"
    folder.mkdir()
    for name in FAST:
        shutil.copyfile(SOURCES[name], folder / f"{name}.py")
    full, shared, alone, merged = base / "full", base / "shared", base / "alone", base / "merged"
    common = ["grade-all", "--problem", PROBLEM, "--submissions", str(folder)]
    # the three shards run side by side, as the tasks of an array job do, while the unsharded run waits its turn
    shards = [
        subprocess.Popen(
            [sys.executable, "-m", "grader", *common, "--out", str(out), "--jobs", "1", "--shard", f"{k}/{SHARDS}"],
            cwd=ROOT,
            env=cli_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k, out in enumerate([shared, shared, alone])
    ]
    for process in shards:
        stdout, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stdout + stderr
    done = run_cli(*common, "--out", full, "--jobs", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    merge = run_cli("merge", shared, alone, "--out", merged)
    assert merge.returncode == 0, merge.stdout + merge.stderr
    return Runs(full, shared, alone, merged, merge)


def _rows(summary: Path) -> list[dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(summary.read_text())))
    for row in rows:
        del row["duration_s"]
    return rows


def test_merged_shards_equal_one_unsharded_run(runs: Runs) -> None:
    merged, full = _rows(runs.merged / "summary.csv"), _rows(runs.full / "summary.csv")
    assert merged == full and [row["submission"] for row in full] == sorted(f"{name}.py" for name in FAST)
    for name in FAST:
        ours, theirs = (json.loads((out / name / "report.json").read_text()) for out in (runs.merged, runs.full))
        assert [(c["id"], c["verdict"], c["score"]) for t in ours["tiers"] for c in t["checks"]] == [
            (c["id"], c["verdict"], c["score"]) for t in theirs["tiers"] for c in t["checks"]
        ]


def test_shards_write_the_same_layout_and_no_class_summary(runs: Runs) -> None:
    shared = sorted(p.parent.name for p in runs.shared.glob("*/report.json"))
    alone = sorted(p.parent.name for p in runs.alone.glob("*/report.json"))
    assert shared == sorted(_slice(0) + _slice(1)) and alone == _slice(2)
    for out in (runs.shared, runs.alone):
        assert not (out / "summary.csv").exists() and not (out / "index.html").exists()
    assert (runs.shared / "shards" / "shard-0-of-3.csv").is_file()


def test_merge_writes_the_dashboard_with_working_links(runs: Runs) -> None:
    page = (runs.merged / "index.html").read_text()
    links = re.findall(r'href="([^"#:]+/report\.html)"', page)
    assert sorted(links) == sorted(f"{name}/report.html" for name in FAST)
    assert all((runs.merged / link).is_file() for link in links)
    assert "summary.csv" in runs.merge.stdout


def test_merging_again_into_a_shard_folder_changes_nothing(runs: Runs, run_main, tmp_path: Path) -> None:
    target = tmp_path / "into-shared"
    shutil.copytree(runs.shared, target)
    assert run_main("merge", target, runs.alone, "--out", target)[0] == ExitCode.OK
    first = (target / "summary.csv").read_text()
    assert run_main("merge", target, runs.alone, "--out", target)[0] == ExitCode.OK, "identical copies are one grade"
    assert (target / "summary.csv").read_text() == first
    assert _rows(target / "summary.csv") == _rows(runs.full / "summary.csv")


def _edited_copy(source: Path, target: Path, **changes: object) -> Path:
    shutil.copytree(source, target)
    report = json.loads((target / "report.json").read_text())
    (target / "report.json").write_text(json.dumps({**report, **changes}))
    return target.parent


def test_merge_refuses_what_does_not_belong_together(runs: Runs, tmp_path: Path) -> None:
    stem = _slice(2)[0]
    with pytest.raises(ShardError, match="no such folder"):
        collect([tmp_path / "nowhere"])
    with pytest.raises(ShardError, match="no <submission>/report.json"):
        collect([tmp_path])
    twice = _edited_copy(runs.alone / stem, tmp_path / "twice" / stem, score=0.5)
    with pytest.raises(ShardError, match=f"{stem} was graded twice"):
        collect([runs.alone, twice])
    other_seed = _edited_copy(runs.alone / stem, tmp_path / "seed" / "renamed", seed=12345)
    with pytest.raises(ShardError, match="disagree on seed"):
        collect([runs.shared, other_seed])
    (tmp_path / "broken" / "x").mkdir(parents=True)
    (tmp_path / "broken" / "x" / "report.json").write_text("{")
    with pytest.raises(ShardError, match="not a readable report.json"):
        collect([tmp_path / "broken"])


def test_merge_refuses_an_array_with_a_shard_missing(runs: Runs, run_main, tmp_path: Path) -> None:
    """Shard 2 killed before it finished: merged by hand, the class would silently lack its submissions."""
    killed = tmp_path / "killed"
    shutil.copytree(runs.alone, killed)
    Shard(2, SHARDS).summary(killed).unlink()  # what a shard killed mid-grade leaves: reports, no summary
    code, out, err = run_main("merge", runs.shared, killed, "--out", tmp_path / "class")
    assert code == ExitCode.USAGE and out == ""
    assert err.count("\n") == 1, "one line"
    assert f"1 of {SHARDS} shards did not finish" in err and f"2/{SHARDS};" in err
    assert f"grade-all --shard K/{SHARDS}" in err and "sbatch --array=2 " in err
    assert not (tmp_path / "class" / "summary.csv").exists() and not (tmp_path / "class" / "index.html").exists()
    assert run_main("merge", runs.shared, runs.alone, "--out", tmp_path / "class")[0] == ExitCode.OK, "once rerun"


def _summaries(folder: Path, *names: str) -> Path:
    (folder / "shards").mkdir(parents=True)
    for name in names:
        (folder / "shards" / name).write_text("submission\n")
    return folder


def test_merge_names_every_missing_shard_and_refuses_mixed_arrays(tmp_path: Path) -> None:
    done = [f"shard-{k}-of-30.csv" for k in (*range(0, 3), 5, *range(8, 13), 14)]
    with pytest.raises(
        ShardError,
        match=r"20 of 30 shards did not finish .*: 3/30, 4/30, 6/30, 7/30, 13/30, 15/30, "
        r"16/30, 17/30, 18/30, 19/30, \.\.\.; .*sbatch --array=3-4,6-7,13,15-29 ",
    ):
        require_every_shard([_summaries(tmp_path / "some", *done)])
    with pytest.raises(ShardError, match="arrays of 2 and 3 shards: merge the shards of one run only"):
        require_every_shard(
            [_summaries(tmp_path / "mixed", "shard-0-of-2.csv", "shard-1-of-2.csv", "shard-0-of-3.csv")]
        )
    with pytest.raises(ShardError, match="no grade-all --shard run finished there"):
        require_every_shard([_summaries(tmp_path / "none")])


def test_merge_of_a_missing_folder_is_a_usage_error(run_main, tmp_path: Path) -> None:
    code, _, err = run_main("merge", tmp_path / "nowhere")
    assert code == ExitCode.USAGE and "no such folder" in err
