"""Fixtures shared by the harness's tests (tests/) and each problem's own (reference/<id>/tests/): project paths, a
CLI runner, batches of submissions graded once per test session, and the tiers.

Tiers: a test is `e2e` when it starts another process (a sandboxed worker, the CLI, a browser), `every_seed` when it
proves a problem on its hidden seeds beyond the first; `make test-fast` runs every other test (its proofs grade in
process, see tests/in_process.py), `make test` all of them. The e2e marker is applied here, by module or by fixture (see
`E2E_MODULES`, `E2E_FIXTURES`), so a new test in an end-to-end module is classified without marking it; a test in a
mixed module carries `@pytest.mark.e2e` itself, and one that starts a process without the marker fails, saying so."""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from grader.judge.cases import Call
from grader.judge.expectations import Expectations
from grader.model.problem import Problem
from grader.model.verdicts import Verdict
from grader.worker.protocol import observe_call

ROOT = Path(__file__).resolve().parent
PROBLEM = "glm5_offpolicy"
SAMPLES = ROOT / "tests" / "samples"
TRIVIAL = ROOT / "reference" / PROBLEM / "tests" / "trivial"  # its trivial answers, proved with every problem's
SUBMISSIONS = ROOT / "submissions" / PROBLEM
# The tests' expectations cache, kept between runs (gitignored with the rest of artifacts/): each problem's entries
# are keyed by its own files and the code that computes them, so a change elsewhere recomputes nothing of it.
TEST_CACHE = Path(os.environ.get("PAPERLEET_TEST_CACHE", ROOT / "artifacts" / "test-cache"))
# Small limits keep hostile samples cheap: a hang costs at most 40 s of one grading job.
SMALL_LIMITS = ["--call-timeout", "2", "--import-timeout", "10", "--budget", "40"]
SYNTAX_ERROR_LINE = 4
SYNTAX_ERROR = (
    '"""A missing colon after the signature."""\n'
    "\n"
    "\n"
    "def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2)\n"  # line 4
    "    return logp\n"
)


# ---------------------------------------------------------------- tiers

# Modules whose every test starts a sandboxed worker, the CLI or a browser.
E2E_MODULES = frozenset(
    {
        "test_browser",
        "test_channels",
        "test_cli",
        "test_exports",
        "test_gradescope_zip",
        "test_hostile",
        "test_zygote",
    }
)
# Fixtures that grade through the sandbox or the CLI: a test that uses one, even through another fixture, is e2e.
E2E_FIXTURES = frozenset({"run_cli"})
# Markers that imply e2e: `slow` (minutes on its own), `browser` (headless Chromium).
E2E_IMPLIED = ("slow", "browser")


def is_e2e(item: pytest.Item) -> bool:
    return (
        item.path.stem in E2E_MODULES
        or not E2E_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
        or any(item.get_closest_marker(name) for name in E2E_IMPLIED)
    )


# Session fixtures that grade a class: under pytest-xdist (`make test` runs `-n 2 --dist loadgroup`) the modules that
# read one run in one worker, so each is still graded once per run and no module fixture of theirs twice.
CLASS_BATCHES = frozenset({"sample_batch", "submission_batch", "markup_page"})


def worker_groups(items: list[pytest.Item]) -> dict[pytest.Item, str]:
    """Each test's xdist group: a problem's `proofs` batch (the costliest, one group per problem so that the workers
    share them) with the tests that read it, the modules reading a class batch together, else its module."""
    by_class = {item.path for item in items if not CLASS_BATCHES.isdisjoint(getattr(item, "fixturenames", ()))}
    groups = {}
    for item in items:
        if "proofs" in getattr(item, "fixturenames", ()):
            params = getattr(item, "callspec", None)
            problem_id = params.params.get("problem_id") if params is not None else None
            groups[item] = f"proofs-{problem_id or getattr(getattr(item, 'module', None), 'PROBLEM', PROBLEM)}"
        else:
            groups[item] = "class-batches" if item.path in by_class else item.path.relative_to(ROOT).as_posix()
    return groups


# every test collected, before `-m` or `-k` leaves any out: what the groups' own tests check
COLLECTED: list[pytest.Item] = []


# Known defects of two problems whose charges are being retuned (ppo_clip_loss and glm5_offpolicy declare
# `declared_scores = "reported"`): each test below fails for the reason given, and runs as a non-strict xfail so
# that the rest of the suite gates every change. An entry is removed with the fix that makes its test pass.
KNOWN_FAILURES_FILE = Path(__file__).resolve().parent / "tests" / "known_failures.txt"


def known_failures() -> dict[str, str]:
    """Test id -> why it fails today, from tests/known_failures.txt (`<node id>  # <reason>` per line)."""
    found = {}
    for line in KNOWN_FAILURES_FILE.read_text().splitlines() if KNOWN_FAILURES_FILE.is_file() else []:
        node, _, reason = line.partition("  # ")
        if node.strip() and not node.startswith("#"):
            found[node.strip()] = reason.strip()
    return found


# first: a pytest-xdist worker names each test's group in its node id in this same hook, from the markers it finds
# there, and the scheduler knows a test's group by that name alone
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    COLLECTED[:] = items
    quarantined = known_failures()
    for item, group in worker_groups(items).items():
        if is_e2e(item):
            item.add_marker(pytest.mark.e2e)
        item.add_marker(pytest.mark.xdist_group(group))
        if item.nodeid in quarantined:
            item.add_marker(pytest.mark.xfail(strict=False, reason=quarantined[item.nodeid]))


def pytest_configure(config: pytest.Config) -> None:
    # every in-process Expectations of the tests reads and fills the tests' own cache, never the repo's
    os.environ["PAPERLEET_CACHE"] = str(TEST_CACHE)
    # matplotlib lists the system's fonts with `fc-list` the first time it runs on a machine: done here, before any
    # test refuses processes, so that an in-process drawing test does not depend on an earlier e2e one
    with contextlib.suppress(ImportError):
        import matplotlib.font_manager  # noqa: F401


@contextlib.contextmanager
def _refusing_processes(item: pytest.Item) -> Iterator[None]:
    """Outside e2e, starting a process (a sandboxed worker, its zygote, the CLI, a browser) fails, saying where the
    test belongs; `subprocess.run` and every launcher of the grader go through `Popen`."""
    if item.get_closest_marker("e2e") is not None:
        yield
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{item.nodeid} starts a process: list its module in E2E_MODULES or mark it e2e")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "__init__", refuse)
        yield


# fixtures are set up inside `pytest_runtest_setup`: a module's fixture that starts a process is refused too
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _refusing_processes(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _refusing_processes(item):
        return (yield)


# ---------------------------------------------------------------- one problem's facts

_PROBLEMS: dict[str, Problem] = {}


def problem_named(problem_id: str) -> Problem:
    """Each problem loaded once for the whole run, whichever module asks."""
    if problem_id not in _PROBLEMS:
        _PROBLEMS[problem_id] = Problem(problem_id)
    return _PROBLEMS[problem_id]


_EXPECTATIONS: dict[tuple[str, int], Expectations] = {}


def expectations_of(problem_id: str, seed: int) -> Expectations:
    """One problem's expectations at `seed`, one object for the whole run whichever module asks, warmed: what it
    computes is saved in the tests' cache at once. Under pytest-xdist, the worker that computes them holds a lock
    on them meanwhile, and the other, asking too, then reads them from the cache rather than computing them again."""
    key = (problem_id, seed)
    if key not in _EXPECTATIONS:
        TEST_CACHE.mkdir(parents=True, exist_ok=True)
        with open(TEST_CACHE / f".{problem_id}-{seed}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            expectations = Expectations(problem_named(problem_id), seed)
            expectations.warm()
        _EXPECTATIONS[key] = expectations
    return _EXPECTATIONS[key]


@pytest.fixture(scope="module")
def problem(request: pytest.FixtureRequest) -> Problem:
    """The problem named by the test module's `PROBLEM`, glm5_offpolicy where it names none."""
    return problem_named(getattr(request.module, "PROBLEM", PROBLEM))


def all_seeds(problem: Problem) -> list[int]:
    """The public seed and every hidden one: a lucky seed cannot hide behind the first."""
    return [problem.spec.public_seed, *problem.grading_seeds]


def observe(function: Callable[..., Any], call: Call) -> dict[str, Any]:
    """`function` on `call` in process, observed as the worker observes a learner's."""
    return observe_call(function, call.kwargs, list(call.requires_grad), call.backward)


def assert_full_marks(report: dict[str, Any]) -> None:
    lost = {c["id"]: c["message"] for c in checks_of(report).values() if c["verdict"] != Verdict.PASS}
    assert report["score"] == report["max_score"] == 100, lost


@dataclass(frozen=True)
class Batch:
    """One `grade-all` run: its process result, output folder and every report.json, keyed by file stem."""

    result: subprocess.CompletedProcess[str]
    out: Path
    reports: dict[str, dict[str, Any]]


def checks_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["id"]: check for tier in report["tiers"] for check in tier["checks"]}


def tier_scores(report: dict[str, Any]) -> dict[str, float]:
    return {tier["tier"]: tier["score"] for tier in report["tiers"]}


@pytest.fixture(scope="session")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for CLI runs: artifacts in a private folder, the expectations in the tests' cache, never the
    repo's."""
    home = tmp_path_factory.mktemp("cli")
    return {
        **os.environ,
        "PAPERLEET_ARTIFACTS": str(home / "artifacts"),
        "PAPERLEET_CACHE": str(TEST_CACHE),
        "COLUMNS": "160",
    }


@pytest.fixture(scope="session")
def run_cli(cli_env: dict[str, str]):
    """Run `python -m grader ARGS...` from the project root, as a user would."""

    def run(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "grader", *map(str, args)],
            cwd=ROOT,
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


def grade_folder(run_cli, folder: Path, out: Path, *extra: str, problem: str = PROBLEM) -> Batch:
    result = run_cli("grade-all", "--problem", problem, "--submissions", folder, "--out", out, "--jobs", "2", *extra)
    reports = {path.parent.name: json.loads(path.read_text()) for path in out.glob("*/report.json")}
    return Batch(result, out, reports)


def grade_samples(
    run_cli, tmp_path_factory: pytest.TempPathFactory, problem: str, extra: dict[str, str] | None = None
) -> Batch:
    """submissions/<problem>, and `extra` files (name -> source) beside them, graded in one `grade-all` run with
    the problem's own limits, as a class is graded."""
    folder = tmp_path_factory.mktemp(f"{problem}_submissions")
    for path in (ROOT / "submissions" / problem).glob("*.py"):
        shutil.copyfile(path, folder / path.name)
    for name, source in (extra or {}).items():
        (folder / name).write_text(source)
    batch = grade_folder(run_cli, folder, tmp_path_factory.mktemp(f"{problem}_graded"), problem=problem)
    assert batch.result.returncode == 0, batch.result.stderr[-3000:]
    return batch


@pytest.fixture(scope="session")
def submission_batch(run_cli, tmp_path_factory: pytest.TempPathFactory) -> Batch:
    """submissions/glm5_offpolicy graded with the problem's own limits."""
    return grade_folder(run_cli, SUBMISSIONS, tmp_path_factory.mktemp("graded") / "submissions")


@pytest.fixture(scope="session")
def sample_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/samples plus files whose names or contents cannot live in the repo's tests folder."""
    folder = tmp_path_factory.mktemp("samples")
    for path in SAMPLES.glob("*.py"):
        shutil.copyfile(path, folder / path.name)
    for name in ("torch.py", "grader.py"):  # must shadow nothing inside the worker
        shutil.copyfile(SAMPLES / "correct_compact.py", folder / name)
    (folder / "broken_syntax.py").write_text(SYNTAX_ERROR)  # kept out of the repo so linters stay quiet
    return folder


@pytest.fixture(scope="session")
def sample_batch(run_cli, sample_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Batch:
    """Every sample (hostile, broken, correct) graded in one `grade-all` call with small limits."""
    return grade_folder(run_cli, sample_folder, tmp_path_factory.mktemp("graded") / "samples", *SMALL_LIMITS)


# Learner text that would run or restyle a page if it were ever read as markup: the report page of `markup_page` holds
# it in stdout, stderr and each check's message.
MARKUP = '<script>window.injected = 1</script><img src=x onerror="window.injected = 2"> [/bold] &amp; </pre>'
MARKUP_SUBMISSION = f"""
import sys

PAYLOAD = {MARKUP!r}
print("stdout " + PAYLOAD)
print("stderr " + PAYLOAD, file=sys.stderr)


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    raise RuntimeError(PAYLOAD)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    raise RuntimeError(PAYLOAD)
"""


@pytest.fixture(scope="session")
def markup_page(run_cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output folder of one `grade` of a submission whose output and exception messages carry `MARKUP`, read by
    the page tests in process and by the browser tests in Chromium."""
    base = tmp_path_factory.mktemp("markup")
    (base / "mallory_inject.py").write_text(MARKUP_SUBMISSION)
    result = run_cli("grade", base / "mallory_inject.py", "--problem", PROBLEM, "--out", base / "out")
    assert result.returncode == 0, result.stdout + result.stderr  # its markup cannot break the terminal table
    return base / "out"


# ---------------------------------------------------------------------------------------------- hidden evidence


def t3_series_names(problem: Problem) -> list[str]:
    return [name for check in problem.spec.checks if check.kind == "experiment" for name in check.series]


def series_fingerprints(problem: Problem, seed: int) -> set[str]:
    """Each expected value of the T3 series at `seed`, as messages format numbers (repr, %.10g, %.6g), left out
    when it is too short to be told apart from other numbers of a report or when the public seed's series hold it
    too (those are public: the previews show them)."""
    public = expectations_of(problem.id, problem.spec.public_seed).series()
    shared = {x for name in t3_series_names(problem) for x in public[name].tolist()}
    found = set()
    for name, value in expectations_of(problem.id, seed).series().items():
        if name not in t3_series_names(problem):
            continue
        for x in value.tolist():
            if not math.isfinite(x) or x == round(x) or x in shared:
                continue
            found |= {text for text in (repr(x), f"{x:.10g}", f"{x:.6g}") if len(text.lstrip("-")) >= 6}
    return found
