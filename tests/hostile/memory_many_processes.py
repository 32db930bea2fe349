"""Five children each allocate and touch 1.25 GiB at import (6.25 GiB together, each under RLIMIT_AS);
the parent reports how much they held at once, then answers zeros. Children volunteer as the OOM killer's
first victims, so where nothing bounds their sum the host loses them, not something else."""
# expect_status: graded
# expect_score: honest_zeros

import os
import select
import signal
import time

import torch

CHILDREN, EACH_MIB, STEP_MIB, COUNT_FOR_S = 5, 1280, 128, 6


def _child(write_fd):
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")
    except OSError:
        pass
    held = []
    try:
        while len(held) * STEP_MIB < EACH_MIB:
            held.append(torch.ones(STEP_MIB << 20, dtype=torch.uint8))
            os.write(write_fd, f"{os.getpid()} {len(held) * STEP_MIB}\n".encode())
    except BaseException:
        pass
    os.write(write_fd, f"{os.getpid()} done\n".encode())
    time.sleep(30)  # hold it while the parent counts; killed before
    os._exit(0)


def _held_at_once():
    read_fd, write_fd = os.pipe()
    pids = []
    for _ in range(CHILDREN):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            os.close(read_fd)
            _child(write_fd)
        pids.append(pid)
    os.close(write_fd)
    progress, done, alive, buffer = {}, set(), set(pids), b""
    deadline = time.monotonic() + COUNT_FOR_S
    while alive - done and time.monotonic() < deadline:
        if select.select([read_fd], [], [], 0.1)[0]:
            buffer += os.read(read_fd, 65536)
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                pid, value = line.decode().split()
                if value == "done":
                    done.add(int(pid))
                else:
                    progress[int(pid)] = int(value)
        for pid in list(alive):
            if os.waitpid(pid, os.WNOHANG)[0]:
                alive.discard(pid)  # killed (out of memory): what it held is free again
    total = sum(progress.get(pid, 0) for pid in alive)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    os.close(read_fd)
    return total, len(pids)


total, started = _held_at_once()
print(f"paperleet-hostile held {total} MiB at once across {started} processes", flush=True)


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
