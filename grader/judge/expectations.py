"""What the reference and the oracle do on every case, computed once per problem and seed and cached on disk.

The cache key covers the problem's and reference's files, the source of the grader's modules that compute an
expected value (this one and what it imports within the grader), torch and Python versions and the seed, so any
change that could alter an expected value recomputes it, and a change to another problem, the plots, the report or
the sandbox recomputes nothing. The cache lives under artifacts/, which no sandboxed worker can see.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import os
import platform
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from grader.judge.cases import Call, generator_for
from grader.judge.experiment import run_experiment
from grader.model.misconceptions import Fitted
from grader.model.problem import Problem
from grader.paths import cache_dir
from grader.worker import protocol

GRADER_DIR = Path(__file__).resolve().parents[1]


def _module_files(name: str) -> list[Path]:
    """The files that importing grader module `name` runs: each package's `__init__.py` on the way, and the module."""
    parts = name.split(".")
    found = [GRADER_DIR.parent.joinpath(*parts[:i], "__init__.py") for i in range(1, len(parts) + 1)]
    found.append(GRADER_DIR.parent.joinpath(*parts).with_suffix(".py"))
    return [path for path in found if path.is_file()]


def _imported_grader_modules(path: Path) -> set[str]:
    """Grader modules that `path` imports by absolute name, anywhere in it (`from grader.x import y` names y too,
    in case y is a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return {name for name in names if name == "grader" or name.startswith("grader.")}


@functools.cache
def computation_files() -> list[Path]:
    """The grader's source an expected value can depend on: this module and every grader module it imports,
    followed transitively."""
    seen: set[Path] = set()
    todo = [Path(__file__).resolve()]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += [file for name in _imported_grader_modules(path) for file in _module_files(name)]
    return sorted(seen)


def _computation_hash() -> str:
    digest = hashlib.sha256()
    for path in computation_files():
        digest.update(str(path.relative_to(GRADER_DIR)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key(problem: Problem, seed: int) -> str:
    parts = [problem.content_hash, _computation_hash(), torch.__version__, platform.python_version(), str(seed)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Compute expectations on one thread: a reduction's rounding then never depends on the judge's machine.

    The judge stays on one thread afterwards: its tensors are small, and once torch's pool has been resized back
    up, every small op (a comparison, the toy's own baselines) runs about thirty times slower."""
    torch.set_num_threads(1)
    yield


@contextlib.contextmanager
def trusted_run() -> Iterator[None]:
    """The reference, the oracle and the known-wrong solutions run in the judge on one thread, their warnings
    dropped: a warning quotes the source line that raised it, code of the hidden reference or derived from it,
    and the terminal of whoever grades is no place for it."""
    with single_threaded(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class Expectations:
    """Reference/oracle observations and reference series for one problem and seed; safe across threads."""

    def __init__(
        self, problem: Problem, seed: int, use_cache: bool = True, say: Callable[[str], None] | None = None
    ) -> None:
        self.problem, self.seed = problem, seed
        # one line per stage computed rather than read from the cache (a first run), for the terminal
        self._say = say or (lambda text: None)
        self._warming = False
        self._said_misreadings = False
        self._lock = threading.RLock()
        self._cases: dict[str, list[Call]] = {}
        self._observations: dict[str, list[dict[str, Any]]] = {}  # "source/cases" -> per case
        self._series: dict[str, torch.Tensor] | None = None
        self._series_parts: dict[str, str] = {}
        self._wrong_series: dict[str, dict[str, torch.Tensor]] | None = None
        self._wrong_functions: dict[str, dict[str, Any]] = {}
        # (ids, fitted parameters) -> functions; (ids, fitted parameters, generator, case) -> observation
        self._combined_functions: dict[tuple[tuple[str, ...], Fitted], dict[str, Any] | None] = {}
        self._combined: dict[tuple[tuple[str, ...], Fitted, str, int], dict[str, Any]] = {}
        self._dirty = False
        self._path = cache_dir() / problem.id / f"{cache_key(problem, seed)}.pt" if use_cache else None
        self._groups_read: set[str] = set()  # generators whose misconception observations were looked up on disk
        self._groups_unsaved: set[str] = set()
        self._interned: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}  # see `misconception_observations`
        if self._path is not None and self._path.is_file():
            self._load(self._path)

    def _load(self, path: Path) -> None:
        try:
            data = load_cache_file(path)
            self._cases = {name: [Call.from_data(c) for c in calls] for name, calls in data["cases"].items()}
            self._observations = data["observations"]
            self._series = data["series"]
            self._series_parts = dict(data["series_parts"])
            self._wrong_series = data.get("wrong_series")
        except Exception:  # a damaged cache is recomputed, never trusted
            self._cases, self._observations, self._series, self._series_parts = {}, {}, None, {}

    def warm(self) -> None:
        """Compute every expectation the problem's checks need, and save them for the next run."""
        with self._lock:
            toy = any(c.kind == "experiment" for c in self.problem.spec.checks)
            keys = [f"{c.expected}/{c.cases}" for c in self.problem.spec.checks if c.cases]
            keys += [f"{LOWER}{c.expected}/{c.cases}" for c in self.problem.spec.checks if c.cases]
            missing = (toy and self._series is None) or any(key not in self._observations for key in keys)
            started = time.monotonic()
            if missing:
                self._say(f"{self.problem.id}: computing the reference's answers and toy series (first run: cached)")
            self._warming = True
            try:
                for check in self.problem.spec.checks:
                    if check.cases:
                        self._all_observations(check.expected, check.cases)
                        self._lower_observations(check.expected, check.cases)
                if toy:
                    self.series()
            finally:
                self._warming = False
            if missing and self._path is not None:
                self._save(self._path)
            if missing:
                self._say(f"{self.problem.id}: reference answers ready in {time.monotonic() - started:.0f} s")

    def _save(self, path: Path) -> None:
        """The main file, and beside it one file per generator of the misconception observations computed here."""
        _write(
            path,
            {
                "cases": {name: [c.to_data() for c in calls] for name, calls in self._cases.items()},
                "observations": {k: v for k, v in self._observations.items() if not k.startswith("misconception:")},
                "series": self._series,
                "series_parts": self._series_parts,
                "wrong_series": self._wrong_series,
            },
        )
        for name in sorted(self._groups_unsaved):
            _write(
                self._group_path(path, name),
                {
                    k: v
                    for k, v in self._observations.items()
                    if k.startswith("misconception:") and k.endswith(f"/{name}")
                },
            )
        self._groups_unsaved.clear()
        self._dirty = False

    @staticmethod
    def _group_path(path: Path, name: str) -> Path:
        return path.with_suffix("") / f"misconceptions-{name}.pt"

    def _read_group(self, name: str) -> None:
        """Generator `name`'s misconception observations, read the first time one of its cases fails: they are
        many times the size of everything else, so a grade in which nothing fails never pays for them."""
        if name in self._groups_read or self._path is None:
            return
        self._groups_read.add(name)
        path = self._group_path(self._path, name)
        if not path.is_file():
            return
        try:
            data = load_cache_file(path)
        except Exception:  # a damaged cache is recomputed, never trusted
            return
        self._observations.update(
            {k: v for k, v in data.items() if k.startswith("misconception:") and k.endswith(f"/{name}")}
        )

    def cases(self, name: str) -> list[Call]:
        with self._lock:
            if name not in self._cases:
                self._cases[name] = self.problem.case_generator(name)(generator_for(self.seed, name))
            return self._cases[name]

    def _all_observations(self, source: str, name: str) -> list[dict[str, Any]]:
        key = f"{source}/{name}"
        if key not in self._observations:
            functions = self._functions(source)
            with trusted_run():
                self._observations[key] = [
                    protocol.observe_call(functions[c.function], c.kwargs, list(c.requires_grad), c.backward)
                    for c in self.cases(name)
                ]
        return self._observations[key]

    def _lower_observations(self, source: str, name: str) -> list[dict[str, Any]]:
        """`source` on each case whose inputs hold a float64 tensor, with those inputs rounded to float32 and
        computed in float32; {} for the other cases."""
        key = f"{LOWER}{source}/{name}"
        if key not in self._observations:
            functions = self._functions(source)
            with trusted_run():
                self._observations[key] = [
                    protocol.observe_call(functions[c.function], lowered, list(c.requires_grad), c.backward)
                    if (lowered := in_float32(c.kwargs)) is not None
                    else {}
                    for c in self.cases(name)
                ]
        return self._observations[key]

    def lower_observation(self, source: str, name: str, index: int) -> dict[str, Any] | None:
        """What `source` gives on case `index` computed in float32 (see `_lower_observations`), or None."""
        with self._lock:
            return self._lower_observations(source, name)[index] or None

    def _functions(self, source: str) -> dict[str, Any]:
        """ "reference", "oracle", or "misconception:<id>" (the known-wrong solution that embodies it)."""
        if source.startswith("misconception:"):
            wanted = source.removeprefix("misconception:")
            (misconception,) = [m for m in self.problem.misconceptions if m.id == wanted]
            if source not in self._wrong_functions:
                self._wrong_functions[source] = self.problem.misconception_functions(misconception)
            return self._wrong_functions[source]
        return self.problem.oracle if source == "oracle" else self.problem.reference

    def observation(self, source: str, name: str, index: int) -> dict[str, Any]:
        with self._lock:
            return self._all_observations(source, name)[index]

    def misconception_observations(self, name: str, index: int) -> dict[str, dict[str, Any]]:
        """What each declared misconception's solution observes on case `index` of generator `name`. Misreadings
        that observe the same (most answer as the reference does on most cases) share one observation object, so
        that a judge matching a learner's answer against each compares each distinct answer once."""
        with self._lock:
            if (name, index) not in self._interned:
                self._interned[(name, index)] = _interned(self._misconception_observations(name, index))
            return self._interned[(name, index)]

    def _misconception_observations(self, name: str, index: int) -> dict[str, dict[str, Any]]:
        """Each misreading's own observation of the case, computed where the cache lacks it; under the lock."""
        found = {}
        self._read_group(name)
        for misconception in self.problem.misconceptions:
            source = f"misconception:{misconception.id}"
            if f"{source}/{name}" not in self._observations:
                if not self._said_misreadings:  # one line for all case sets: they come a few at a time
                    self._said_misreadings = True
                    self._say(f"{self.problem.id}: computing the known misreadings' answers where cases fail (once)")
                self._dirty = True
                self._groups_unsaved.add(name)
            found[misconception.id] = self._all_observations(source, name)[index]
        return found

    def combination_observation(
        self, ids: tuple[str, ...], name: str, index: int, fitted: Fitted = ()
    ) -> dict[str, Any] | None:
        """What one solution holding every misreading `ids` at once observes on case `index` of generator `name`,
        with the parameters `fitted` sets ((misreading, value) pairs); None when their edits cannot be made in one
        file. Kept in memory only: which combinations a grade tries depends on the learner's failures, and each
        costs a call per case it is asked about."""
        with self._lock:
            variant = (ids, fitted)
            if variant not in self._combined_functions:
                chosen = {m.id: m for m in self.problem.misconceptions}
                self._combined_functions[variant] = self.problem.combination_functions(
                    [chosen[i] for i in ids], dict(fitted)
                )
            functions = self._combined_functions[variant]
            if functions is None:
                return None
            key = (ids, fitted, name, index)
            if key not in self._combined:
                call = self.cases(name)[index]
                with trusted_run():
                    self._combined[key] = protocol.observe_call(
                        functions[call.function], call.kwargs, list(call.requires_grad), call.backward
                    )
            return self._combined[key]

    def misconception_series(self) -> dict[str, dict[str, torch.Tensor]]:
        """Each misconception's toy series (a part its solution cannot run is missing)."""
        with self._lock:
            if self._wrong_series is None:
                self._say(f"{self.problem.id}: running the toy with each known misreading (once)")
                self._wrong_series = {}
                with trusted_run():
                    for misconception in self.problem.misconceptions:
                        functions = self._functions(f"misconception:{misconception.id}")
                        self._wrong_series[misconception.id] = run_series(self.problem, self.seed, functions)[0]
                self._dirty = True
            return self._wrong_series

    def persist(self) -> None:
        """Save what was computed lazily (misconception observations) for the next run."""
        with self._lock:
            if self._dirty and self._path is not None:
                self._save(self._path)
                self._dirty = False

    def series(self) -> dict[str, torch.Tensor]:
        """The reference's toy series for this seed, driven exactly as a learner's are."""
        with self._lock:
            if self._series is None:
                if not self._warming:
                    which = "public" if self.seed == self.problem.spec.public_seed else "grading"
                    self._say(f"{self.problem.id}: running the reference's toy at the {which} seed (first run: cached)")
                with trusted_run():
                    self._series, self._series_parts = reference_series(self.problem, self.seed)
                self._dirty = True  # `persist` keeps them (the public seed's, drawn beside every plot, say)
            return self._series

    def series_parts(self) -> dict[str, str]:
        """Which part of the toy makes each series."""
        self.series()
        return self._series_parts


# the key prefix of the expected side computed in float32
LOWER = "float32:"


def in_float32(kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The inputs with every float64 tensor rounded to float32, or None when there is none: the case a solution
    that computes in float32 (`.float()` on its inputs) actually computes."""
    if not any(type(v) is torch.Tensor and v.dtype == torch.float64 for v in kwargs.values()):
        return None
    return {
        name: value.to(torch.float32) if type(value) is torch.Tensor and value.dtype == torch.float64 else value
        for name, value in kwargs.items()
    }


def _interned(observations: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`observations` with those that are identical (see `identical`) replaced by one of them."""
    distinct: list[dict[str, Any]] = []
    found = {}
    for mid, observation in observations.items():
        found[mid] = next((kept for kept in distinct if identical(kept, observation)), observation)
        if found[mid] is observation:
            distinct.append(observation)
    return found


def identical(a: Any, b: Any) -> bool:
    """Whether two observations hold the same data: every tensor the same dtype, size, strides and bytes (NaN equal
    to itself, -0.0 not to 0.0), every other value equal and of the same type."""
    if type(a) is not type(b):
        return False
    if type(a) is torch.Tensor:
        return protocol.same_bits(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(identical(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return bool(a.hex() == b.hex())  # every NaN is 'nan', and -0.0 is not 0.0
    return bool(a == b)


def load_cache_file(path: Path) -> Any:
    """A cache file read back: the frame format of `grader.worker.protocol` (JSON and raw tensor bytes), which
    reads the tens of thousands of small tensors of a problem's misreadings in less than half the time
    `torch.load` takes; no tensor limit, as the judge wrote the file itself."""
    return protocol.decode(path.read_bytes(), max_tensors=None)


def _write(path: Path, data: dict[str, Any]) -> None:
    payload = protocol.encode(data)[protocol.HEADER.size :]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(payload)
    os.replace(tmp, path)


def reference_series(problem: Problem, seed: int) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    series, owners, failures = run_series(problem, seed, problem.reference)
    if failures:
        raise RuntimeError(f"the reference failed the toy: {'; '.join(failures)}")
    return series, owners


def run_series(
    problem: Problem,
    seed: int,
    functions: dict[str, Any],
) -> tuple[dict[str, torch.Tensor], dict[str, str], list[str]]:
    """The toy's series with trusted in-process functions, which part made each, and the parts that failed."""

    def observe(call: Call, timeout_s: float) -> dict[str, Any]:
        return protocol.observe_call(functions[call.function], call.kwargs, list(call.requires_grad), call.backward)

    names = [f.name for f in problem.spec.functions]
    limits = problem.spec.limits
    series: dict[str, torch.Tensor] = {}
    owners: dict[str, str] = {}
    failures = []
    for part in run_experiment(problem.experiment_module, names, observe, seed, float("inf"), limits.call_timeout_s):
        if part.failure is not None:
            failures.append(f"{part.name}: {part.failure.message}")
        series.update(part.series)
        owners.update(dict.fromkeys(part.series, part.name))
    return series, owners, failures
