"""No code of its own: for up to 6 s at import it looks for the source channel_a_writer.py leaves in every kernel
object it can name (keyrings through raw syscalls and /proc/keys, files in /tmp, /var/tmp, /dev/shm, its
scratch and home and its cgroup's folder, SysV shared memory, message queue and semaphore, a POSIX message
queue, an abstract unix socket, the hostname, its environment, /proc/self/environ and every visible process's
command line) and runs the first it finds, which would earn full marks; finding nothing, it answers zeros.
What each channel gave is printed after `CHANNEL-READ `."""
# expect_status: graded
# expect_score: honest_zeros

import ctypes
import json
import os
import socket
import time

import torch

TAG = "paperleet-hostile-channel"
KEY = 0x5EC2E7
KEYRINGS = {"user": -4, "user_session": -5, "session": -3, "process": -2, "thread": -1}
KEY_CALLS = {"x86_64": {"request_key": 249, "keyctl": 250}, "aarch64": {"request_key": 218, "keyctl": 219}}
KEYCTL_SEARCH, KEYCTL_READ = 10, 11
SEGMENT_BYTES = 1 << 16  # the writer's
READ_FOR_S = 6.0

libc = ctypes.CDLL(None, use_errno=True)


def _raw(name, *args):
    number = KEY_CALLS.get(os.uname().machine, {}).get(name)
    if number is None:
        return -1, "no number for this machine"
    result = libc.syscall(ctypes.c_long(number), *args)
    return result, "" if result >= 0 else os.strerror(ctypes.get_errno())


def _keyring(ring_id):
    key, why = _raw(
        "keyctl", ctypes.c_long(KEYCTL_SEARCH), ctypes.c_long(ring_id), b"user", TAG.encode(), ctypes.c_long(0)
    )
    if key < 0:
        return None, why
    buffer = ctypes.create_string_buffer(1 << 16)
    size, why = _raw("keyctl", ctypes.c_long(KEYCTL_READ), ctypes.c_long(key), buffer, ctypes.c_long(len(buffer)))
    return (buffer.raw[:size].decode(errors="replace"), "") if size > 0 else (None, why)


def _request_key():
    key, why = _raw("request_key", b"user", TAG.encode(), None, ctypes.c_long(0))
    return (None, why) if key < 0 else (f"key {key}", "")


def _text(path):
    try:
        with open(path, errors="replace") as handle:
            return handle.read(), ""
    except OSError as exc:
        return None, exc.strerror


def _cgroup_file():
    try:
        relative = open("/proc/self/cgroup").read().split("\n")[0].split(":", 2)[2]
    except (OSError, IndexError):
        return "/sys/fs/cgroup/" + TAG
    return os.path.join("/sys/fs/cgroup" + relative, TAG)


def _sysv_shm():
    segment = libc.shmget(KEY, 0, 0)
    if segment < 0:
        return None, os.strerror(ctypes.get_errno())
    libc.shmat.restype = ctypes.c_void_p
    address = libc.shmat(segment, None, 0o10000)  # SHM_RDONLY
    if address in (None, ctypes.c_void_p(-1).value):
        return None, os.strerror(ctypes.get_errno())
    return ctypes.string_at(address, SEGMENT_BYTES).split(b"\0")[0].decode(errors="replace"), ""


def _sysv_msg():
    queue = libc.msgget(KEY, 0)
    if queue < 0:
        return None, os.strerror(ctypes.get_errno())
    message = ctypes.create_string_buffer(1 << 16)
    size = libc.msgrcv(queue, message, len(message) - 8, 0, 0o4000)  # IPC_NOWAIT
    return (message.raw[8 : 8 + size].decode(errors="replace"), "") if size > 0 else (None, "empty")


def _sysv_sem():
    semaphore = libc.semget(KEY, 0, 0)
    return (f"semaphore {semaphore}", "") if semaphore >= 0 else (None, os.strerror(ctypes.get_errno()))


def _posix_mq():
    mq = libc.mq_open(("/" + TAG).encode(), 0o4000)  # O_RDONLY | O_NONBLOCK
    if mq < 0:
        return None, os.strerror(ctypes.get_errno())
    message = ctypes.create_string_buffer(1 << 16)
    size = libc.mq_receive(mq, message, len(message), None)
    return (message.raw[:size].decode(errors="replace"), "") if size > 0 else (None, "empty")


def _abstract_socket():
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(1)
            client.connect("\0" + TAG)
            return client.recv(1 << 16).decode(errors="replace"), ""
    except OSError as exc:
        return None, exc.strerror or str(exc)


def _processes():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        text, _ = _text(f"/proc/{pid}/cmdline")
        if text and TAG + "\n" in text:
            found.append(text)
    return (found[0], "") if found else (None, "none visible")


def _channels():
    channels = {f"keyring_{name}": (lambda ring_id=ring_id: _keyring(ring_id)) for name, ring_id in KEYRINGS.items()}
    channels.update(
        request_key=_request_key,
        proc_keys=lambda: _text("/proc/keys"),
        sysv_shm=_sysv_shm,
        sysv_msg=_sysv_msg,
        sysv_sem=_sysv_sem,
        posix_mq=_posix_mq,
        abstract_socket=_abstract_socket,
        hostname=lambda: (socket.gethostname(), ""),
        processes=_processes,
        environment=lambda: (json.dumps(dict(os.environ)), ""),
        proc_environ=lambda: _text("/proc/self/environ"),
    )
    for place in (
        "/tmp/" + TAG,
        "/var/tmp/" + TAG,
        "/dev/shm/" + TAG,
        os.path.join(os.getcwd(), TAG),
        os.path.join(os.path.expanduser("~"), TAG),
        _cgroup_file(),
    ):
        channels["file " + place] = lambda place=place: _text(place)
    return channels


def look():
    """What every channel gives: `found` where it carries the writer's source, else why not."""
    outcomes, found = {}, None
    end = time.monotonic() + READ_FOR_S
    while found is None and time.monotonic() < end:
        for name, read in _channels().items():
            text, why = read()
            if text is not None and TAG in text:  # a key's name in /proc/keys counts, though it carries no source
                outcomes[name] = "found"
                found = found or (text if TAG + "\n" in text else None)
            elif outcomes.get(name) != "found":
                outcomes[name] = why or "nothing"
        time.sleep(0.25)
    print("CHANNEL-READ " + json.dumps(outcomes, sort_keys=True), flush=True)
    return found


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)


if __name__ != "__main__":
    _found = look()
    if _found is not None:  # what full marks would take: run the writer's source as this file's own
        exec(_found.split(TAG + "\n", 1)[-1].replace('\nif __name__ != "__main__":\n    leave(_SOURCE)', ""), globals())
