"""Nothing passes between two submissions, or from the judge to a worker, outside the grading channel: a writer
leaves its source in every kernel object it can name and a reader graded after it (jobs=1) or beside it
(jobs=2) finds none of it; a forked or exec'd worker holds no string of the judge's environment; whatever a
slot's uid left behind is gone before the slot's next submission starts."""

from __future__ import annotations

import ctypes
import json
import math
import os
import re
import runpy
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import PROBLEM, ROOT

from grader.confine import seccomp
from grader.confine.intake import read_submission
from grader.confine.sandbox import MAX_SLOTS, SLOT_UID_BASE, Box, Level, Slot, remove_files_of
from grader.confine.sandbox_init import ENVIRONMENT
from grader.confine.session import WorkerProcess
from grader.judge.accept import accept_frame
from grader.model.spec import Limits

pytestmark = pytest.mark.slow

HOSTILE = Path(__file__).resolve().parent / "hostile"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to grant namespaces and slot uids")
BATCH = ("channel_a_writer", "channel_b_reader", "honest_zeros", "honest_correct")
# what the writer tries to leave in a kernel object; each attempt must be refused
KERNEL_OBJECTS = (
    "keyring_user",
    "keyring_user_session",
    "keyring_session",
    "keyring_process",
    "keyring_thread",
    "keyring_persistent",
    "sysv_shm",
    "sysv_msg",
    "sysv_sem",
    "posix_mq",
    "hostname",
)
# where the writer's attempts must succeed, inside its own box: the reader finding nothing there is containment,
# not a failed write
BOX_FILES = (
    "file /tmp/paperleet-hostile-channel",
    "file /dev/shm/paperleet-hostile-channel",
    "file /scratch/paperleet-hostile-channel",
)
MARKER_VARIABLE = "PAPERLEET_JUDGE_ONLY_MARKER"
TIMING_BITS_PER_S = 50_000  # an upper bound on the page-cache timing channel: docs/threat-model.md quotes the measure


def _cli(
    cli_env: dict[str, str], *args: str | Path, level: Level | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**cli_env, **(extra_env or {})}
    if level is not None:
        env["PAPERLEET_ISOLATION"] = level
    return subprocess.run(
        [sys.executable, "-m", "grader", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _reports(out: Path) -> dict[str, dict[str, Any]]:
    return {path.parent.name: json.loads(path.read_text()) for path in out.glob("*/report.json")}


def _printed(report: dict[str, Any], prefix: str) -> dict[str, Any]:
    line = next((line for line in report["stdout"].splitlines() if line.startswith(prefix)), None)
    assert line is not None, report["stdout"][-2000:] + report["stderr"][-2000:]
    return dict(json.loads(line.removeprefix(prefix)))


# ----------------------------------------------------------------------------- the writer and the reader


@pytest.fixture(
    scope="module",
    params=[("namespaces+uid", 1), ("namespaces+uid", 2), ("user-namespace", 2)],
    ids=lambda p: f"{p[0]}-jobs{p[1]}",
)
def channel_batch(
    request: pytest.FixtureRequest, cli_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The writer, the reader and their honest twins graded in one `grade-all` at one level."""
    if os.geteuid() != 0:
        pytest.skip("needs root to choose the isolation level")
    level, jobs = request.param
    base = tmp_path_factory.mktemp("channels")
    folder = base / "submissions"
    folder.mkdir()
    for stem in BATCH:
        shutil.copyfile(HOSTILE / f"{stem}.py", folder / f"{stem}.py")
    result = _cli(
        cli_env,
        "grade-all",
        "--problem",
        PROBLEM,
        "--submissions",
        folder,
        "--out",
        base / "out",
        "--jobs",
        str(jobs),
        "--import-timeout",
        "30",
        level=level,
    )
    return {"result": result, "reports": _reports(base / "out"), "level": level}


def test_the_batch_grades_every_file(channel_batch: dict[str, Any]) -> None:
    assert channel_batch["result"].returncode == 0, channel_batch["result"].stderr[-3000:]
    assert sorted(channel_batch["reports"]) == sorted(BATCH)
    assert {r["isolation"]["level"] for r in channel_batch["reports"].values()} == {channel_batch["level"]}


def test_the_reader_finds_nothing_and_earns_what_zeros_earn(channel_batch: dict[str, Any]) -> None:
    reports = channel_batch["reports"]
    read = _printed(reports["channel_b_reader"], "CHANNEL-READ ")
    assert len(read) >= 20  # every channel was tried
    assert [channel for channel, outcome in read.items() if outcome == "found"] == []
    assert reports["channel_b_reader"]["score"] == reports["honest_zeros"]["score"] < 50


def test_the_writer_tried_for_real_and_every_kernel_object_refused_it(channel_batch: dict[str, Any]) -> None:
    reports = channel_batch["reports"]
    written = _printed(reports["channel_a_writer"], "CHANNEL-WRITE ")
    assert {name: written[name] for name in KERNEL_OBJECTS} == dict.fromkeys(KERNEL_OBJECTS, "Operation not permitted")
    assert {name: written[name] for name in BOX_FILES} == dict.fromkeys(BOX_FILES, "ok")
    assert written["abstract_socket"] == "ok"  # its daemon served the source, to no one
    assert reports["channel_a_writer"]["score"] == reports["honest_correct"]["score"] == 100


# ----------------------------------------------------------------------------- the files every box binds

INODE_BATCH = ("channel_inode_sender", "channel_inode_receiver", "honest_zeros", "honest_correct")
# how the receiver listens: each must be refused, not merely quiet
LISTENERS = ("flock", "ofd_lock", "posix_lock", "mincore", "cachestat", "inotify", "dnotify")
# what the sender changes about a shared file; opening and reading it (inotify's and F_NOTIFY's wires) stay allowed
SENDERS = ("flock", "ofd_lock", "posix_lock", "page_cache")


@pytest.fixture(scope="module", params=[1, 2], ids=lambda jobs: f"jobs{jobs}")
def inode_batch(
    request: pytest.FixtureRequest, cli_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The sender, the receiver and their honest twins in one `grade-all`: one after the other, or side by side."""
    if os.geteuid() != 0:
        pytest.skip("needs root to choose the isolation level")
    base = tmp_path_factory.mktemp("inodes")
    folder = base / "submissions"
    folder.mkdir()
    for stem in INODE_BATCH:
        shutil.copyfile(HOSTILE / f"{stem}.py", folder / f"{stem}.py")
    result = _cli(
        cli_env,
        "grade-all",
        "--problem",
        PROBLEM,
        "--submissions",
        folder,
        "--out",
        base / "out",
        "--jobs",
        str(request.param),
        "--import-timeout",
        "40",
        level="namespaces+uid",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return _reports(base / "out")


def test_the_receiver_hears_nothing_through_a_shared_file_and_earns_what_zeros_earn(
    inode_batch: dict[str, Any],
) -> None:
    heard = _printed(inode_batch["channel_inode_receiver"], "CHANNEL-RECEIVE ")
    assert {name: heard[name].endswith("Operation not permitted") for name in LISTENERS} == dict.fromkeys(
        LISTENERS, True
    ), heard
    assert inode_batch["channel_inode_receiver"]["score"] == inode_batch["honest_zeros"]["score"] < 50


def test_the_sender_changes_no_shared_file_and_still_earns_full_marks(inode_batch: dict[str, Any]) -> None:
    sent = _printed(inode_batch["channel_inode_sender"], "CHANNEL-SEND ")
    assert {name: sent[name] for name in SENDERS} == dict.fromkeys(SENDERS, "Operation not permitted")
    assert sent["inotify"] in ("sending", "sent") and sent["dnotify"] in ("sending", "sent")  # it tried for real
    assert inode_batch["channel_inode_sender"]["score"] == inode_batch["honest_correct"]["score"] == 100


def _entropy(p: float) -> float:
    return 0.0 if p in (0.0, 1.0) else -p * math.log2(p) - (1 - p) * math.log2(1 - p)


def test_the_page_cache_carries_bits_only_by_timing_at_the_rate_the_threat_model_names(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The residual channel, measured: a sender reads pages for its 1s, a receiver graded beside it times a read of
    each; their pages evicted first, as on a machine whose cache has cooled. Prints the rate; the threat model
    quotes it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to choose the isolation level")
    sender = runpy.run_path(str(HOSTILE / "channel_timing_sender.py"), run_name="__main__")  # its layout, not sent
    solution = (HOSTILE / "channel_timing_sender.py").read_text().split("# --- the bus")[0]
    sent = sender["bits"](solution)
    for path in sender["pages"]():
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    folder = tmp_path / "submissions"
    folder.mkdir()
    for stem in ("channel_timing_sender", "channel_timing_receiver"):
        shutil.copyfile(HOSTILE / f"{stem}.py", folder / f"{stem}.py")
    result = _cli(
        cli_env, "grade-all", "--problem", PROBLEM, "--submissions", folder, "--out", tmp_path / "out", "--jobs", "2"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reports = _reports(tmp_path / "out")
    heard = _printed(reports["channel_timing_receiver"], "CHANNEL-TIMING ")
    received = [int(bit) for bit in heard["bits"]]
    errors = sum(a != b for a, b in zip(sent, received, strict=False)) / len(sent)
    capacity = len(sent) * (1 - _entropy(errors)) / heard["seconds"]
    print(f"page-cache timing: {len(sent)} bits in {heard['seconds']:.3f} s, {errors:.1%} wrong: {capacity:,.0f} bit/s")
    assert reports["channel_timing_receiver"]["score"] < 50  # it runs nothing of what it hears
    assert capacity < TIMING_BITS_PER_S


def test_no_key_of_a_slot_uid_outlives_the_batch(channel_batch: dict[str, Any]) -> None:
    deadline = time.monotonic() + 10  # the kernel collects a dead process's keyrings a moment later
    while (held := _keys_held_by_slot_uids()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert held == {}  # beyond each uid's own two keyrings, which the kernel keeps (empty)


def _keys_held_by_slot_uids() -> dict[int, int]:
    """Keys each slot uid owns beyond its user and user-session keyrings (/proc/key-users), leaving out the uids
    of gradings going on (each of its processes holds a session keyring of its own)."""
    held = {}
    for line in Path("/proc/key-users").read_text().splitlines():
        uid, _, fields = line.partition(":")
        keys = int(fields.split()[1].split("/")[0])
        if SLOT_UID_BASE <= int(uid) < SLOT_UID_BASE + MAX_SLOTS and keys > 2 and not _running_as(int(uid)):
            held[int(uid)] = keys
    return held


def _running_as(uid: int) -> bool:
    """Whether a live process has `uid` (its status, not its /proc folder, which an undumpable one gives root)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path("/proc", pid, "status").read_text()
        except OSError:
            continue
        if re.search(rf"^Uid:\s+{uid}\s", status, re.M):
            return True
    return False


# ----------------------------------------------------------------------------- the judge's environment

# Imported as a submission: reports its environment and every match of the marker's pattern in its own
# writable memory. The pattern cannot match its own text; the control, built at run time, shows the scan works.
ENV_PROBE = r"""
import ctypes, json, os, re

PATTERN = re.compile(rb"JUDGE_ONLY_[0-9a-f]{32}")
CONTROL = ("JUDGE" + "_ONLY_" + format(0xC0FFEE, "032x")).encode()


def writable_regions():
    for line in open("/proc/self/maps"):
        fields = line.split()
        if fields[1].startswith("rw") and (len(fields) < 6 or not fields[5].startswith("[v")):
            yield (int(x, 16) for x in fields[0].split("-"))


found = set()
for start, end in writable_regions():
    for at in range(start, end, 1 << 22):  # chunks overlap by a marker's length, so none is cut in two
        found.update(m.group() for m in PATTERN.finditer(ctypes.string_at(at, min(end - at, (1 << 22) + 43))))
try:
    environ = open("/proc/self/environ", "rb").read().decode(errors="replace")
except OSError as exc:
    environ = exc.strerror
print("ENV " + json.dumps({"control": CONTROL in found, "matches": sorted(m.decode() for m in found - {CONTROL}),
                           "environ": environ, "os_environ": dict(os.environ)}), flush=True)
"""


@pytest.fixture(scope="module")
def judge_marker_reports(cli_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The probe graded with a marker in the judge's environment: twice in one batch (workers forked from the
    zygote) and alone (an exec'd worker)."""
    marker = "JUDGE_ONLY_" + secrets.token_hex(16)
    base = tmp_path_factory.mktemp("environment")
    folder = base / "submissions"
    folder.mkdir()
    for name in ("env_probe.py", "env_probe_twin.py"):
        (folder / name).write_text(ENV_PROBE)
    marked = {MARKER_VARIABLE: marker}
    batch = _cli(
        cli_env,
        "grade-all",
        "--problem",
        PROBLEM,
        "--submissions",
        folder,
        "--out",
        base / "batch",
        "--jobs",
        "2",
        extra_env=marked,
    )
    alone = _cli(
        cli_env, "grade", folder / "env_probe.py", "--problem", PROBLEM, "--out", base / "alone", extra_env=marked
    )
    assert batch.returncode == 0 and alone.returncode == 0, batch.stderr[-2000:] + alone.stderr[-2000:]
    reports = {f"forked {stem}": report for stem, report in _reports(base / "batch").items()}
    reports["exec'd env_probe"] = json.loads((base / "alone" / "report.json").read_text())
    return {"marker": marker, "reports": reports}


@pytest.mark.parametrize("which", ["forked env_probe", "forked env_probe_twin", "exec'd env_probe"])
def test_no_worker_holds_a_string_of_the_judges_environment(judge_marker_reports: dict[str, Any], which: str) -> None:
    seen = _printed(judge_marker_reports["reports"][which], "ENV ")
    assert seen["control"], "the memory scan missed the control it planted"
    assert seen["matches"] == []
    assert judge_marker_reports["marker"] not in seen["environ"] + json.dumps(seen["os_environ"])
    assert MARKER_VARIABLE not in seen["environ"] + json.dumps(seen["os_environ"])
    assert set(seen["os_environ"]) <= {*ENVIRONMENT, "NUMEXPR_NUM_THREADS"}  # the worker pins that one itself


# ----------------------------------------------------------------------------- what a slot's uid leaves


KEYCTL_SEARCH, KEY_SPEC_USER_KEYRING = 10, -4


def _as_uid(uid: int, action: str) -> int:
    """In a child of this process running as `uid`: plant a key in its user keyring, or look for it. Returns
    the child's exit status: 0 for done or found."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            libc = ctypes.CDLL(None, use_errno=True)
            calls = seccomp.numbers(os.uname().machine)
            if action == "plant":
                payload = b"def masked_is_weights(*args): ..."
                result = libc.syscall(
                    ctypes.c_long(calls["add_key"]),
                    b"user",
                    b"paperleet-planted",
                    payload,
                    ctypes.c_size_t(len(payload)),
                    ctypes.c_long(KEY_SPEC_USER_KEYRING),
                )
            else:
                result = libc.syscall(
                    ctypes.c_long(calls["keyctl"]),
                    ctypes.c_long(KEYCTL_SEARCH),
                    ctypes.c_long(KEY_SPEC_USER_KEYRING),
                    b"user",
                    b"paperleet-planted",
                    ctypes.c_long(0),
                )
            os._exit(0 if result >= 0 else 1)
        finally:
            os._exit(2)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@ROOT_ONLY
@pytest.mark.parametrize("level", ["namespaces+uid", "limits-only"])
def test_a_key_left_in_a_slot_uids_keyring_is_gone_when_the_slot_is_next_used(level: Level, tmp_path: Path) -> None:
    submission = tmp_path / "zeros.py"
    shutil.copyfile(HOSTILE / "honest_zeros.py", submission)
    slot = Slot()
    try:
        box = Box(read_submission(submission), None, Limits(), level, slot)
        if not box.drops_uid:
            box.cleanup()
            pytest.skip("at this level the worker keeps the grading user's uid here")
        assert _as_uid(box.uid, "plant") == 0 and _as_uid(box.uid, "find") == 0  # as an older grader left it
        worker = WorkerProcess(box, ["masked_is_weights"])
        try:
            assert accept_frame(worker.receive(60))["op"] == "ready", worker.stderr.text()
        finally:
            worker.close()
            box.cleanup()
        assert _as_uid(box.uid, "find") == 1
    finally:
        slot.release()


@ROOT_ONLY
def test_what_a_slot_uid_left_in_shared_folders_is_removed(tmp_path: Path) -> None:
    uid = SLOT_UID_BASE + MAX_SLOTS - 1
    shared, public, closed = tmp_path / "tmp", tmp_path / "tmp" / "public", tmp_path / "tmp" / "closed"
    for folder, mode in ((shared, 0o1777), (public, 0o1777), (closed, 0o755)):
        folder.mkdir()
        folder.chmod(mode)
    kept = tmp_path / "kept.txt"
    kept.write_text("the grading user's")
    left = {shared / "left.txt", public / "deep.txt", shared / "tree", shared / "link"}
    (shared / "left.txt").write_text("x")
    (public / "deep.txt").write_text("x")
    (shared / "tree" / "inner").mkdir(parents=True)
    (shared / "tree" / "inner" / "f").write_text("x")
    (shared / "link").symlink_to(kept)
    (public / "theirs.txt").write_text("someone else's")
    (closed / "unreachable.txt").write_text("x")  # a folder the uid cannot write: it cannot have made this
    for path in [*left, shared / "tree" / "inner", shared / "tree" / "inner" / "f", closed / "unreachable.txt"]:
        os.lchown(path, uid, uid)
    removed = remove_files_of(uid, [str(shared)])
    assert {Path(p) for p in removed} == left
    assert not any(p.exists() or p.is_symlink() for p in left)
    assert kept.read_text() == "the grading user's"  # a link is removed, never followed
    assert (public / "theirs.txt").exists() and (closed / "unreachable.txt").exists()


def test_the_hostile_files_name_no_machine_they_do_not_know() -> None:
    """The writer's and reader's raw keyring calls use the numbers of the filter's own tables."""
    for stem in ("channel_a_writer", "channel_b_reader"):
        text = (HOSTILE / f"{stem}.py").read_text()
        for machine, calls in re.findall(r'"(x86_64|aarch64)": (\{[^}]*\})', text):
            for name, number in json.loads(calls).items():
                assert seccomp.numbers(machine)[name] == number, (stem, machine, name)
