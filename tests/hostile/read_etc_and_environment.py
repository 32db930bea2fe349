"""Reads the host's configuration (/etc: shadow, keys, package-index settings) and its own environment for
the grader's settings; a correct solution unless it reads any of them, then zeros."""
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


found = set()
for path in [
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/pip.conf",
    "/etc/gitconfig",
    "/etc/npmrc",
    *glob.glob("/etc/ssh/*key*"),
    *glob.glob("/etc/ssl/private/*"),
]:
    try:
        with open(path, "rb") as handle:
            if handle.read(1):
                found.add(path)
    except OSError:
        pass
for folder, _, names in os.walk("/etc"):
    found |= {os.path.join(folder, n) for n in names if secret(os.path.join(folder, n))}
if any(key.startswith("PAPERLEET") for key in os.environ):
    found.add("environment")
print(f"paperleet-hostile sees {len(os.listdir('/etc'))} entries in /etc", flush=True)
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
