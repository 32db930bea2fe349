"""What the reference and the oracle do on every case, computed once per problem and seed and cached on disk.

The cache key covers the problem's and reference's files, the grader's own source, torch and Python
versions and the seed, so any change that could alter an expected value recomputes it. The cache lives
under artifacts/, which no sandboxed worker can see.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import platform
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .cases import Call, generator_for
from .paths import PROJECT_ROOT
from .problem import Problem
from .worker import protocol

GRADER_DIR = Path(__file__).resolve().parent


def cache_dir() -> Path:
    return Path(os.environ.get("PAPERLEET_CACHE", PROJECT_ROOT / "artifacts" / ".cache"))


def _grader_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(GRADER_DIR.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key(problem: Problem, seed: int) -> str:
    parts = [problem.content_hash, _grader_hash(), torch.__version__, platform.python_version(), str(seed)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _call_to_data(call: Call) -> dict[str, Any]:
    return {"function": call.function, "kwargs": dict(call.kwargs), "label": call.label,
            "requires_grad": list(call.requires_grad), "backward": call.backward, "hidden": call.hidden}


def _call_from_data(data: dict[str, Any]) -> Call:
    return Call(data["function"], data["kwargs"], data["label"], tuple(data["requires_grad"]),
                data["backward"], data["hidden"])


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Compute expectations on one thread: a reduction's rounding then never depends on the judge's machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class Expectations:
    """Reference/oracle observations and reference series for one problem and seed; safe across threads."""

    def __init__(self, problem: Problem, seed: int, use_cache: bool = True) -> None:
        self.problem, self.seed = problem, seed
        self._lock = threading.RLock()
        self._cases: dict[str, list[Call]] = {}
        self._observations: dict[str, list[dict[str, Any]]] = {}  # "source/cases" -> per case
        self._series: dict[str, torch.Tensor] | None = None
        self._path = cache_dir() / problem.id / f"{cache_key(problem, seed)}.pt" if use_cache else None
        if self._path is not None and self._path.is_file():
            self._load(self._path)

    def _load(self, path: Path) -> None:
        try:
            data = torch.load(io.BytesIO(path.read_bytes()), weights_only=True)
            self._cases = {name: [_call_from_data(c) for c in calls] for name, calls in data["cases"].items()}
            self._observations = data["observations"]
            self._series = data["series"]
        except Exception:  # noqa: BLE001 - a damaged cache is recomputed, never trusted
            self._cases, self._observations, self._series = {}, {}, None

    def warm(self) -> None:
        """Compute every expectation the problem's checks need, and save them for the next run."""
        with self._lock:
            missing = self._series is None
            for check in self.problem.spec.checks:
                if check.cases:
                    key = f"{check.expected}/{check.cases}"
                    missing |= key not in self._observations
                    self._all_observations(check.expected, check.cases)
            if any(c.kind == "experiment" for c in self.problem.spec.checks):
                self.series()
            if missing and self._path is not None:
                self._save(self._path)

    def _save(self, path: Path) -> None:
        buffer = io.BytesIO()
        torch.save({
            "cases": {name: [_call_to_data(c) for c in calls] for name, calls in self._cases.items()},
            "observations": self._observations,
            "series": self._series,
        }, buffer)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(buffer.getvalue())
        os.replace(tmp, path)

    def cases(self, name: str) -> list[Call]:
        with self._lock:
            if name not in self._cases:
                self._cases[name] = self.problem.case_generator(name)(generator_for(self.seed, name))
            return self._cases[name]

    def _all_observations(self, source: str, name: str) -> list[dict[str, Any]]:
        key = f"{source}/{name}"
        if key not in self._observations:
            functions = self.problem.oracle if source == "oracle" else self.problem.reference
            with single_threaded():
                self._observations[key] = [
                    protocol.observe_call(functions[c.function], c.kwargs, list(c.requires_grad), c.backward)
                    for c in self.cases(name)
                ]
        return self._observations[key]

    def observation(self, source: str, name: str, index: int) -> dict[str, Any]:
        with self._lock:
            return self._all_observations(source, name)[index]

    def series(self) -> dict[str, torch.Tensor]:
        with self._lock:
            if self._series is None:
                with single_threaded():
                    raw = self.problem.experiment_module.run(**self.problem.reference)
                self._series = {k: v.detach().clone() for k, v in raw.items()}
            return self._series

