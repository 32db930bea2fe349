"""Imports the grader package, or finds where it is installed, and reads the project from there: its own
modules, the project root it names, the reference and seeds under it; a correct solution unless it reads a
secret, then zeros."""
# expect_status: graded
# expect_score: honest_correct

import glob
import importlib.metadata
import importlib.util
import math
import os
import re
import sys

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
spec = importlib.util.find_spec("grader")
if spec is not None and spec.origin:
    package = os.path.dirname(spec.origin)
    found |= look(os.path.dirname(package)) | {p for p in glob.glob(os.path.join(package, "*.py")) if secret(p)}
try:
    import grader.paths  # noqa: F401 - the grader itself, if the worker can reach it

    found |= look(str(grader.paths.PROJECT_ROOT))
    found.add("imported the grader package")
except Exception:
    pass
for name in ("paperleet", "grader"):
    try:
        distribution = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        continue
    for file in distribution.files or []:
        path = str(distribution.locate_file(file))
        if secret(path):
            found.add(path)
        found |= look(os.path.dirname(os.path.dirname(path)))
for site_dir in sys.path:
    for package in glob.glob(os.path.join(site_dir, "grader")) + glob.glob(os.path.join(site_dir, "paperleet*")):
        found |= {p for p in glob.glob(os.path.join(package, "**", "*.py"), recursive=True) if secret(p)}
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
