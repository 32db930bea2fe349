"""Read a submission once: a regular file inside its folder, opened without following a link, its bytes kept.

What is graded is exactly what one open descriptor held: the file is opened once, relative to its folder, with
`O_NOFOLLOW` (a link is refused, not followed) and `O_NONBLOCK` (a FIFO cannot hold the grader), checked with
`fstat` on that descriptor, read once within `MAX_SUBMISSION_BYTES`, and those bytes are hashed for the report
and written into the box. Nothing is looked up by name afterwards, so no swap between check and copy counts.
The folder itself is taken as the command line names it (the instructor's choice); below it nothing is followed.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_SUBMISSION_BYTES = 1 << 20  # a solution is a few kilobytes; a larger file is refused rather than read whole
# Never through a link, never waiting for a FIFO's writer, never becoming the grader's controlling terminal
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
EXPECTED = "not graded: expected a regular file"
KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFDIR: "a folder",
}


@dataclass(frozen=True)
class Submission:
    """One submission as read: its path as named, and either the bytes graded or why it is not graded."""

    path: Path
    data: bytes = b""
    refusal: str = ""  # one learner-facing line saying what was expected; empty when the file is graded

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def sha256(self) -> str:
        """The hash of exactly the bytes graded; empty for a file refused unread."""
        return "" if self.refusal else hashlib.sha256(self.data).hexdigest()


def read_submission(path: Path, folder: Path | None = None) -> Submission:
    """`path`'s bytes when it is a regular file of its own inside `folder` (by default its parent as named),
    reached through real folders only; otherwise a refusal that says what it is. Never follows a link or blocks."""
    folder = path.parent if folder is None else folder
    try:
        parts = path.relative_to(folder).parts
    except ValueError:
        parts = ("..",)
    if not parts or ".." in parts:
        return _refuse(path, " inside its folder, not one outside it")
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        return _refuse(path, f" in a folder the grader can open ({exc.strerror})")
    try:
        for part in parts[:-1]:
            inner = _open_folder(fd, part)
            if inner is None:
                return _refuse(path, " inside its folder, not one reached through a symbolic link")
            os.close(fd)
            fd = inner
        return _read_entry(fd, parts[-1], path)
    finally:
        os.close(fd)


def usage_problem(path: Path) -> str | None:
    """Why a command line naming `path` is itself wrong ("no such file", "is a folder"), or None when the path
    names something to grade or to refuse in a report (a link, dangling or not, a FIFO...). Follows no link."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return exc.strerror or "cannot be read"
    return "is a folder" if stat.S_ISDIR(info.st_mode) else None


def _open_folder(fd: int, name: str) -> int | None:
    """A real subfolder of `fd`, opened; None when `name` is a link or anything but a folder."""
    try:
        return os.open(name, FOLDER_FLAGS, dir_fd=fd)
    except OSError:
        return None


def _read_entry(fd: int, name: str, path: Path) -> Submission:
    try:
        seen = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return _refuse(path, "; there was no such file when it was read")
    except OSError as exc:
        return _refuse(path, f" the grader can read ({exc.strerror})")
    if not stat.S_ISREG(seen.st_mode):
        return _refuse(path, f", not {_kind(seen.st_mode)}")  # a device or socket is never even opened
    try:
        file = os.open(name, FILE_FLAGS, dir_fd=fd)
    except OSError as exc:  # swapped since the look: ELOOP is a link now, ENXIO a socket
        kind = {errno.ELOOP: "a symbolic link", errno.ENXIO: "a socket"}.get(exc.errno or 0)
        return _refuse(path, f", not {kind}" if kind else f" the grader can read ({exc.strerror})")
    try:
        return _read_open(file, path)
    finally:
        os.close(file)


def _read_open(file: int, path: Path) -> Submission:
    """The descriptor's own type, link count and bytes decide: whatever the name now points to does not."""
    info = os.fstat(file)
    if not stat.S_ISREG(info.st_mode):
        return _refuse(path, f", not {_kind(info.st_mode)}")
    if info.st_nlink > 1:
        # its inode is also a file elsewhere, which whoever linked it may not be allowed to read: a copy is graded
        return _refuse(path, " of its own, not a hard link to another file (submit a copy)")
    if info.st_size > MAX_SUBMISSION_BYTES:
        return _too_large(path)
    chunks, size = [], 0
    while size <= MAX_SUBMISSION_BYTES:  # bounded even if the file grows while it is read
        chunk = os.read(file, MAX_SUBMISSION_BYTES + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return _too_large(path) if size > MAX_SUBMISSION_BYTES else Submission(path, b"".join(chunks))


def _kind(mode: int) -> str:
    return KINDS.get(stat.S_IFMT(mode), "anything but a regular file")


def _too_large(path: Path) -> Submission:
    return Submission(path, refusal=f"not graded: expected a Python file of at most {MAX_SUBMISSION_BYTES >> 20} MiB")


def _refuse(path: Path, expected: str) -> Submission:
    """`expected` goes on from "expected a regular file": what the file should have been, and what it is."""
    return Submission(path, refusal=EXPECTED + expected)
