"""The one reader of a submission's bytes: only a regular file of its own folder, opened once without following a
link, is read; anything else is refused with a sentence saying what was expected, and nothing blocks."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import socket
import stat
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import PROBLEM, ROOT, SAMPLES

from grader.confine.intake import MAX_SUBMISSION_BYTES, Submission, read_submission, usage_problem
from grader.confine.sandbox import Box, Slot
from grader.model.spec import Limits
from grader.model.verdicts import ExitCode, Status

REFERENCE = ROOT / "reference" / PROBLEM / "reference.py"
SOURCE = b"def masked_is_weights(logp, rollout_logp, mask):\n    return logp\n"


def _read_within(path: Path, folder: Path | None = None, seconds: float = 5.0) -> Submission:
    """read_submission on a thread: a reader that blocks fails the test instead of hanging it."""
    found: list[Submission] = []
    thread = threading.Thread(target=lambda: found.append(read_submission(path, folder)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"reading {path.name} blocked"
    return found[0]


def _refused(submission: Submission, expected: str) -> None:
    assert submission.refusal.startswith("not graded: expected a regular file"), submission.refusal
    assert expected in submission.refusal
    assert submission.data == b"" and submission.sha256 == ""
    assert "\n" not in submission.refusal and len(submission.refusal) < 200


def test_a_regular_file_is_read_once_and_hashed_as_read(tmp_path: Path) -> None:
    path = tmp_path / "alice.py"
    path.write_bytes(SOURCE)
    submission = _read_within(path)
    assert submission.refusal == "" and submission.data == SOURCE and submission.name == "alice.py"
    assert submission.sha256 == hashlib.sha256(SOURCE).hexdigest()


def test_a_link_to_the_reference_is_refused(tmp_path: Path) -> None:
    (tmp_path / "alice.py").symlink_to(REFERENCE)
    _refused(_read_within(tmp_path / "alice.py"), "not a symbolic link")


def test_a_dangling_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "alice.py").symlink_to(tmp_path / "gone.py")
    _refused(_read_within(tmp_path / "alice.py"), "not a symbolic link")


def test_a_link_to_a_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "alice.py").symlink_to(REFERENCE.parent, target_is_directory=True)
    _refused(_read_within(tmp_path / "alice.py"), "not a symbolic link")


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "alice.py")  # no writer ever comes: an open or read that waits for one never returns
    _refused(_read_within(tmp_path / "alice.py"), "not a named pipe")


def test_a_socket_is_refused(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(tmp_path / "alice.py"))
        _refused(_read_within(tmp_path / "alice.py"), "not a socket")


def test_a_device_is_refused(tmp_path: Path) -> None:
    try:
        os.mknod(tmp_path / "alice.py", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    except PermissionError:
        pytest.skip("this user cannot create a device node")
    _refused(_read_within(tmp_path / "alice.py"), "not a device")


def test_a_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "alice.py").mkdir()
    _refused(_read_within(tmp_path / "alice.py"), "not a folder")


def test_a_hard_link_is_refused(tmp_path: Path) -> None:
    """A hard link's inode is also a file elsewhere, which whoever made the link may not be allowed to read: the
    grader, often root, does not read it on their behalf (a copy is graded)."""
    elsewhere, folder = tmp_path / "elsewhere", tmp_path / "submissions"
    elsewhere.mkdir()
    folder.mkdir()
    (elsewhere / "reference.py").write_bytes(SOURCE)
    os.link(elsewhere / "reference.py", folder / "alice.py")
    _refused(_read_within(folder / "alice.py"), "not a hard link")
    (elsewhere / "reference.py").unlink()  # its last other name gone, the file is the folder's own again
    assert _read_within(folder / "alice.py").data == SOURCE


def test_a_path_through_a_linked_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "alice").symlink_to(REFERENCE.parent, target_is_directory=True)
    _refused(_read_within(folder / "alice" / "reference.py", folder), "inside its folder")


def test_a_path_leaving_its_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "submissions"
    folder.mkdir()
    (tmp_path / "outside.py").write_bytes(SOURCE)
    _refused(_read_within(folder / ".." / "outside.py", folder), "inside its folder")
    _refused(_read_within(tmp_path / "outside.py", folder), "inside its folder")


def test_a_file_in_a_real_subfolder_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "submissions"
    (folder / "alice").mkdir(parents=True)
    (folder / "alice" / "solution.py").write_bytes(SOURCE)
    assert _read_within(folder / "alice" / "solution.py", folder).data == SOURCE


def test_a_file_swapped_for_a_link_after_listing_is_refused(tmp_path: Path) -> None:
    from grader.commands import submission_files

    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "alice.py").write_bytes(SOURCE)
    listed = submission_files(folder)
    assert listed == [folder / "alice.py"]
    (folder / "alice.py").unlink()
    (folder / "alice.py").symlink_to(REFERENCE)  # between the listing and the grade
    _refused(_read_within(listed[0]), "not a symbolic link")


def test_a_file_gone_after_listing_is_refused(tmp_path: Path) -> None:
    submission = _read_within(tmp_path / "alice.py")
    assert submission.refusal.startswith("not graded: expected a regular file") and "no such file" in submission.refusal


def test_a_file_too_large_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "alice.py"
    path.write_bytes(b"#" * (MAX_SUBMISSION_BYTES + 1))
    submission = _read_within(path)
    assert submission.data == b"" and "at most 1 MiB" in submission.refusal
    path.write_bytes(b"#" * MAX_SUBMISSION_BYTES)
    assert _read_within(path).data == b"#" * MAX_SUBMISSION_BYTES


def test_usage_problems_are_told_apart_from_refusals(tmp_path: Path) -> None:
    """What the command line rejects (nothing there, a real folder) against what gets a refused report."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "link.py").symlink_to(tmp_path / "gone.py")
    os.mkfifo(tmp_path / "pipe.py")
    assert usage_problem(tmp_path / "missing.py") == "no such file"
    assert usage_problem(tmp_path / "folder") == "is a folder"
    assert usage_problem(tmp_path / "link.py") is None  # dangling, yet a link: refused in a report
    assert usage_problem(tmp_path / "pipe.py") is None


def test_the_box_holds_exactly_the_bytes_read(tmp_path: Path) -> None:
    path = tmp_path / "alice.py"
    path.write_bytes(SOURCE)
    submission = read_submission(path)
    path.write_bytes(b"raise SystemExit  # written after the read\n")
    slot = Slot()
    box = Box(submission, None, Limits(), "limits-only", slot)
    try:
        assert (box.home / "runtime" / "submission.py").read_bytes() == SOURCE
    finally:
        box.cleanup()
        slot.release()


def test_the_box_never_takes_a_refused_file(tmp_path: Path) -> None:
    (tmp_path / "alice.py").symlink_to(REFERENCE)
    slot = Slot()
    try:
        with pytest.raises(ValueError, match="refused"):
            Box(read_submission(tmp_path / "alice.py"), None, Limits(), "limits-only", slot)
    finally:
        slot.release()


# ---------------------------------------------------------------------------------------------- end to end


def test_grade_all_refuses_a_link_and_a_fifo_and_grades_the_honest_file(run_cli, tmp_path: Path) -> None:
    folder, out = tmp_path / "submissions", tmp_path / "out"
    folder.mkdir()
    (folder / "copycat.py").symlink_to(REFERENCE)
    (folder / "dangling.py").symlink_to(tmp_path / "gone.py")
    os.mkfifo(folder / "pipe.py")  # no writer: a grader that opens it to wait for one never finishes
    shutil.copyfile(SAMPLES / "correct_compact.py", folder / "honest.py")
    result = run_cli(
        "grade-all",
        "--problem",
        PROBLEM,
        "--submissions",
        folder,
        "--out",
        out,
        "--junit",
        tmp_path / "junit.xml",
        timeout=300,
    )
    assert result.returncode == ExitCode.OK, result.stderr[-3000:]
    reports = {path.parent.name: json.loads(path.read_text()) for path in out.glob("*/report.json")}
    assert sorted(reports) == ["copycat", "dangling", "honest", "pipe"]
    assert reports["honest"]["status"] == Status.GRADED and reports["honest"]["score"] == 100
    assert reports["honest"]["submission_sha256"] == hashlib.sha256((folder / "honest.py").read_bytes()).hexdigest()
    for stem, what in (("copycat", "symbolic link"), ("dangling", "symbolic link"), ("pipe", "named pipe")):
        report = reports[stem]
        assert report["status"] == Status.REFUSED and report["score"] == 0 and report["submission_sha256"] == ""
        assert report["message"].startswith("not graded: expected a regular file, not a") and what in report["message"]
        assert all(check["verdict"] == "skipped" for tier in report["tiers"] for check in tier["checks"])
        assert report["message"] in (out / stem / "report.html").read_text()
    rows = {row["submission"]: row for row in csv.DictReader(io.StringIO((out / "summary.csv").read_text()))}
    assert rows["copycat.py"]["status"] == "refused" and float(rows["copycat.py"]["score"]) == 0
    assert rows["pipe.py"]["status"] == "refused" and rows["honest.py"]["status"] == "graded"
    assert "refused" in (out / "index.html").read_text()
    junit = ET.fromstring((tmp_path / "junit.xml").read_text())
    refused = [e for e in junit.iter("error") if e.get("type") == "refused"]
    assert refused and all("regular file" in (e.get("message") or "") for e in refused)


def test_grade_refuses_a_link_with_its_own_exit_code_and_a_zero_on_gradescope(run_cli, tmp_path: Path) -> None:
    (tmp_path / "copycat.py").symlink_to(REFERENCE)
    result = run_cli(
        "grade",
        tmp_path / "copycat.py",
        "--problem",
        PROBLEM,
        "--out",
        tmp_path / "out",
        "--gradescope",
        tmp_path / "results.json",
        timeout=300,
    )
    assert result.returncode == ExitCode.REFUSED, result.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["status"] == Status.REFUSED and report["score"] == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["score"] == 0 and "not a symbolic link" in results["output"]
    assert "refused" in result.stdout and "not a symbolic link" in result.stdout


def test_grade_names_a_missing_file_or_a_folder_as_a_usage_error(run_cli, tmp_path: Path) -> None:
    for path in (tmp_path / "nowhere.py", tmp_path):
        result = run_cli("grade", path, "--problem", PROBLEM, "--out", tmp_path / "out", timeout=120)
        assert result.returncode == ExitCode.USAGE and not (tmp_path / "out" / "report.json").exists()


def test_watching_a_fifo_refuses_each_version_without_blocking(tmp_path: Path) -> None:
    from grader.watch.loop import SaveWatcher, fingerprint

    os.mkfifo(tmp_path / "pipe.py")
    found: list[Submission] = []

    def look() -> None:
        seen = fingerprint(tmp_path / "pipe.py")
        assert seen is not None and stat.S_ISFIFO(seen.mode)
        snapshot = SaveWatcher(tmp_path / "pipe.py", poll_s=0.01).next_version()
        assert snapshot.matches()
        found.append(snapshot.submission)

    thread = threading.Thread(target=look, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive() and found, "watching a FIFO blocked"
    _refused(found[0], "not a named pipe")
