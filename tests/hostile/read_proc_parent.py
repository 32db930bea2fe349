"""Looks through /proc for the grader: every visible process's cwd and root (its parent's first), command
line and environment, and the host paths /proc/self/mountinfo names; a correct solution unless it reads a
secret or sees the grader's process, then zeros."""
# expect_status: graded
# expect_score: honest_correct

import glob
import math
import os
import re

import torch

# What only the grader holds: hidden seeds, known-wrong headers, the reference's and other learners' code,
# the spec's limits, the grader's own settings. This file's own box (/runtime) holds some of these words too.
SIGNS = [
    re.compile(p, re.M)
    for p in (
        r"^seeds\s*=\s*\[",
        r"^# must_fail:",
        r"^must_fail\s*=",
        r"def offpolicy_loss\(",
        r"submission_budget_s",
        r"PAPERLEET_(ROOT|CACHE|ARTIFACTS|ISOLATION)",
    )
]
OWN = (os.path.dirname(os.path.realpath(__file__)) + os.sep, "/runtime/")


def secret(path):
    """True when `path` can be read and holds something only the grader should."""
    try:
        if os.path.realpath(path).startswith(OWN) or not os.path.isfile(path):
            return False
        with open(path, "rb") as handle:
            text = handle.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return False
    return any(sign.search(text) for sign in SIGNS)


def report(found):
    if found:
        print("paperleet-hostile LEAKED", *sorted(found)[:20], flush=True)
    return bool(found)


PATTERNS = (
    "reference/*/grading.toml",
    "reference/*/*.py",
    "reference/*/wrong/*.toml",
    "problems/*/problem.toml",
    "problems/*/cases.py",
    "submissions/*/*.py",
    "submissions/*.py",
    "grader/*.py",
    "pyproject.toml",
    "artifacts/*/*/report.json",
    "artifacts/.cache/*/*/*/*.py",
    "*/reference/*/grading.toml",
)


def look(folder):
    return {path for pattern in PATTERNS for path in glob.glob(os.path.join(folder, pattern)) if secret(path)}


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read(1 << 16)
    except OSError:
        return b""


found = set()
pids = [str(os.getppid())] + [p for p in os.listdir("/proc") if p.isdigit()]
for pid in dict.fromkeys(pids):
    for link in ("cwd", "root"):
        base = f"/proc/{pid}/{link}"
        found |= look(base) | look(base + "/work/main")
    command = _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ")
    if b"-m grader" in command or b"grade-all" in command or b"pytest" in command:
        found.add(f"/proc/{pid}/cmdline: {command[:80]!r}")
    if b"PAPERLEET_" in _read(f"/proc/{pid}/environ"):
        found.add(f"/proc/{pid}/environ")
for line in _read("/proc/self/mountinfo").decode(errors="replace").splitlines():
    fields = line.split()
    if len(fields) > 4:
        for folder in {fields[3], os.path.dirname(fields[3]), os.path.dirname(os.path.dirname(fields[3]))}:
            found |= look(folder)
LEAKED = report(found)


def _check(logp, rollout_logp, mask, clip_low, clip_high):
    if logp.dim() != 2 or rollout_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError("logp, rollout_logp and mask must share one [B, L] shape")
    if not 0 < clip_low < 1 or not (math.isfinite(clip_high) and clip_high > 0):
        raise ValueError("need 0 < clip_low < 1 and a finite clip_high > 0")


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    if LEAKED:
        return torch.zeros_like(logp).detach()
    _check(logp, rollout_logp, mask, clip_low, clip_high)
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    ratio = torch.exp(torch.where(valid, logp.detach() - rollout_logp.detach(), zero))
    return torch.where(valid & (ratio > 1 - clip_low) & (ratio < 1 + clip_high), ratio, zero)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    if LEAKED:
        return torch.zeros((), dtype=logp.dtype)
    weights = masked_is_weights(logp, rollout_logp, mask, clip_low, clip_high)
    if advantages.shape != (logp.shape[0],):
        raise ValueError("advantages must be [B]")
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    coeff = torch.where(valid, weights * advantages.detach()[:, None], zero)
    return -(coeff * torch.where(valid, logp, zero)).sum() / valid.sum().clamp(min=1)
