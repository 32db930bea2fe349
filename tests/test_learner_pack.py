"""The learner pack of every problem: built, unzipped in an empty folder, run on a correct and a wrong file, and
searched byte by byte for anything hidden (reference code, hidden seeds, hidden cases' inputs and expected values)."""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import types
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import expectations_of

from grader.course.learner_pack import build_pack
from grader.course.pack_check import (
    DATA_FILE,
    NO_MATPLOTLIB,
    check_main,
    finish_plots,
    plots_folder,
    public_spec,
    start_plots,
)
from grader.judge.cases import generator_for
from grader.judge.expectations import LOWER, Expectations
from grader.model.problem import Problem, list_problems
from grader.model.verdicts import ExitCode, Status, Verdict
from grader.outputs.plots import preview_file

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = list_problems()
RUNTIME_PACKAGES = {"torch", "pydantic", "rich"}  # all a learner installs to run the pack
OPTIONAL_PACKAGES = {"grader/outputs/figures.py": {"matplotlib"}}  # plots are drawn only where it is installed
SIDE_BY_SIDE = 4  # learners' `check` runs at once
SIGNIFICANT_DIGITS = 6  # a decimal in a text with fewer digits could be anything


def _members(data: bytes, prefix: str = "") -> list[tuple[str, bytes]]:
    """Every member of a zip, and of each zip inside it (a torch.save file is one), decompressed."""
    found = []
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in archive.namelist():
            content = archive.read(name)
            found.append((prefix + name, content))
            if content[:4] == b"PK\x03\x04":
                found += _members(content, f"{prefix}{name}!")
    return found


@dataclass(frozen=True)
class Pack:
    problem: Problem
    zip_path: Path
    members: list[tuple[str, bytes]]

    @property
    def blob(self) -> bytes:
        return b"\x00".join(content for _, content in self.members)

    def texts(self) -> list[tuple[str, str]]:
        found = []
        for name, content in self.members:
            try:
                found.append((name, content.decode()))
            except UnicodeDecodeError:
                continue
        return found


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pack]:
    """Each problem's pack, built from the public seed's expectations in the tests' cache (conftest.py)."""
    out = tmp_path_factory.mktemp("packs")
    built = {}
    for problem_id in PROBLEMS:
        problem = Problem(problem_id)
        expectations_of(problem_id, problem.spec.public_seed)  # computed once for the run, whichever test asks first
        path = out / f"{problem_id}.zip"
        build_pack(problem, path)
        built[problem_id] = Pack(problem, path, _members(path.read_bytes()))
    return built


# ---------------------------------------------------------------------------------------------- what it holds


def test_cli_builds_the_same_zip(packs: dict[str, Pack], run_cli, tmp_path: Path) -> None:
    problem_id = PROBLEMS[0]
    done = run_cli("learner-pack", "--problem", problem_id, "--out", tmp_path / "pack.zip")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "pack.zip").read_bytes() == packs[problem_id].zip_path.read_bytes()


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_pack_holds_what_a_learner_needs_and_no_hidden_file(packs: dict[str, Pack], problem_id: str) -> None:
    with zipfile.ZipFile(packs[problem_id].zip_path) as archive:
        infos = {info.filename.removeprefix(f"{problem_id}/"): info for info in archive.infolist()}
    assert all(info.filename.startswith(f"{problem_id}/") for info in infos.values()), "one folder, named by the id"
    for needed in (
        "check",
        "README.md",
        "statement.md",
        "starter.py",
        "experiment.py",
        "problem.toml",
        DATA_FILE,
        "grader/judge/grading.py",
        "grader/confine/session.py",
        "grader/confine/sandbox.py",
        "grader/confine/sandbox_init.py",
        "grader/confine/seccomp.py",
        "grader/worker/__main__.py",
        "grader/worker/protocol.py",
    ):
        assert needed in infos, needed
    assert (infos["check"].external_attr >> 16) & 0o111, "check must be executable"
    assert "cases.py" not in infos, "the case generators stay home"
    assert not [n for n in infos if n.startswith(("reference", "problems")) or "__pycache__" in n or n.endswith(".pyc")]


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_pack_code_needs_only_torch_pydantic_and_rich(packs: dict[str, Pack], problem_id: str) -> None:
    """...and matplotlib where the plots are drawn, which the pack asks for only once it knows it is there."""
    texts = list(packs[problem_id].texts())
    # a script run by path (the box's init) imports its siblings in its own folder by their own names
    siblings = {Path(name).stem for name, _ in texts if name.endswith(".py") and "/grader/confine/" in name}
    allowed = set(sys.stdlib_module_names) | RUNTIME_PACKAGES | {"grader"} | siblings
    for name, text in texts:
        if not name.endswith(".py") and not name.endswith("/check"):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = [node.module.split(".")[0]]
            else:
                continue
            optional = OPTIONAL_PACKAGES.get(name.partition("/")[2], set())
            assert set(roots) <= allowed | optional, f"{name} imports {roots}"


def _public_checks(problem: Problem) -> list[str]:
    return [c.id for c in problem.spec.checks if c.public]


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_public_cases_are_plain_data_of_the_public_checks_only(packs: dict[str, Pack], problem_id: str) -> None:
    problem = packs[problem_id].problem
    data = torch.load(io.BytesIO(dict(packs[problem_id].members)[f"{problem_id}/{DATA_FILE}"]), weights_only=True)
    public = [c for c in problem.spec.checks if c.public]
    assert set(data["cases"]) == {c.cases for c in public if c.cases}
    # the reference's observation of each case, and of the same case computed in float32 (its tolerance's width)
    assert set(data["observations"]) == {
        f"{lower}{c.expected}/{c.cases}" for c in public if c.cases for lower in ("", LOWER)
    }
    compared = {name for c in public for name in c.series}
    drawn = {name for plot in problem.spec.plots for name in (plot.x, *(line.y for line in plot.lines))}
    assert compared <= set(data["series"]) <= compared | drawn  # the plots' axes too, at the public seed only
    assert data["seed"] == problem.spec.public_seed
    expect = Expectations(problem, problem.spec.public_seed, use_cache=False)
    for name, calls in data["cases"].items():
        assert [c["label"] for c in calls] == [c.label for c in expect.cases(name) if not c.hidden]


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_a_check_is_hidden_exactly_when_all_its_cases_are(problem_id: str) -> None:
    problem = Problem(problem_id)
    expect = Expectations(problem, problem.spec.public_seed, use_cache=False)
    for check in problem.spec.checks:
        if check.cases:
            all_hidden = all(call.hidden for call in expect.cases(check.cases))
            assert check.public != all_hidden, f"{check.id}: mark it `public = {str(not all_hidden).lower()}`"
    assert any(not c.public for c in problem.spec.checks), "every problem keeps some cases hidden"


def test_public_spec_keeps_public_checks_and_reprices_tiers() -> None:
    spec = Problem(PROBLEMS[0]).spec
    public = public_spec(spec)
    assert [c.id for c in public.checks] == [c.id for c in spec.checks if c.public]
    for tier in public.tiers:
        assert tier.points == sum(c.points for c in public.checks if c.tier == tier.id) > 0
    assert 0 < public.max_score < spec.max_score


# ---------------------------------------------------------------------------------------------- running check


@pytest.fixture(scope="module")
def learner_python() -> Iterator[Path]:
    """A fresh venv that sees this environment's packages through a plain path (no .pth of theirs runs, so the
    repository's own grader cannot be imported): the pack must run on what it carries. Not under /tmp: the
    sandbox mounts a fresh /tmp for the worker, which would hide a Python installed there."""
    base = Path(
        tempfile.mkdtemp(prefix="paperleet-pack-", dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else Path.home())
    )
    try:
        venv = base / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        site = next((venv / "lib").glob("python3*/site-packages"))
        (site / "host-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        python = venv / "bin" / "python"
        probe = subprocess.run([str(python), "-c", "import grader"], cwd=base, capture_output=True, timeout=60)
        assert probe.returncode != 0, "the repository's grader must not be importable here"
        yield python
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _known_wrong(problem: Problem) -> tuple[Path, set[str]]:
    """The first known-wrong solution that must fail some public check, and those checks."""
    public = set(_public_checks(problem))
    for wrong in problem.known_wrong():
        if wrong.must_fail & public:
            return wrong.path, set(wrong.must_fail & public)
    raise AssertionError(f"{problem.id}: no known-wrong solution fails a public check")


@dataclass(frozen=True)
class Checked:
    result: subprocess.CompletedProcess[str]
    report: dict[str, Any]
    report_path: Path


@pytest.fixture(scope="module")
def checked(
    packs: dict[str, Pack], learner_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], Checked]:
    """`check` run on the reference (copied as solution.py) and on a known-wrong file, for every problem, from
    the pack unzipped in an empty folder; the runs go side by side, as separate learners' would, a few at a time (a
    dozen at once on two cores would hold each import past its deadline)."""
    started = []
    for problem_id, pack in packs.items():
        folder = tmp_path_factory.mktemp(f"unzipped-{problem_id}")
        with zipfile.ZipFile(pack.zip_path) as archive:
            archive.extractall(folder)
        root = folder / problem_id
        (root / "check").chmod(0o755)  # zipfile keeps no modes
        shutil.copyfile(pack.problem.reference_dir / "reference.py", folder / "solution.py")
        wrong, _ = _known_wrong(pack.problem)
        for kind, file in (("correct", folder / "solution.py"), ("wrong", wrong)):
            started.append(((problem_id, kind), root, file))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAPERLEET_")} | {"COLUMNS": "160"}
    done: dict[tuple[str, str], Checked] = {}
    for wave in range(0, len(started), SIDE_BY_SIDE):
        running = {
            key: (
                root / "reports" / f"{file.stem}.json",
                subprocess.Popen(
                    [str(learner_python), "check", str(file)],
                    cwd=root,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
            for key, root, file in started[wave : wave + SIDE_BY_SIDE]
        }
        for key, (report, process) in running.items():
            stdout, stderr = process.communicate(timeout=600)
            result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
            assert process.returncode == 0, f"{key}: {stdout}\n{stderr}"
            done[key] = Checked(result, json.loads(report.read_text()), report)
    return done


def _verdicts(report: dict[str, Any]) -> dict[str, str]:
    return {check["id"]: check["verdict"] for tier in report["tiers"] for check in tier["checks"]}


@pytest.mark.e2e
@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_check_gives_the_reference_every_public_point(checked, packs: dict[str, Pack], problem_id: str) -> None:
    problem = packs[problem_id].problem
    run = checked[problem_id, "correct"]
    report = run.report
    assert (
        report["status"] == Status.GRADED
        and report["score"] == report["max_score"] == public_spec(problem.spec).max_score
    )
    assert _verdicts(report) == {check: Verdict.PASS for check in _public_checks(problem)}
    assert [c["id"] for c in report["hidden_checks"]] == [c.id for c in problem.spec.checks if not c.public]
    assert report["official_max_score"] == problem.spec.max_score
    assert "seed" not in report and "command" not in report
    table = run.result.stdout
    assert "hidden" in table and f"{report['score']:g}/{report['max_score']:g}" in table


@pytest.mark.e2e
@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_check_fails_a_known_wrong_file_where_it_must(checked, packs: dict[str, Pack], problem_id: str) -> None:
    _, must_fail = _known_wrong(packs[problem_id].problem)
    report = checked[problem_id, "wrong"].report
    verdicts = _verdicts(report)
    assert report["status"] == Status.GRADED and report["score"] < report["max_score"]
    assert {check for check in must_fail if verdicts[check] != Verdict.PASS} == must_fail
    table = checked[problem_id, "wrong"].result.stdout
    assert all(check in table for check in must_fail) and "fail" in table


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_pack_readme_installs_the_cpu_build_and_says_what_it_draws(packs: dict[str, Pack], problem_id: str) -> None:
    readme = dict(packs[problem_id].texts())[f"{problem_id}/README.md"]
    assert "python -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in readme
    assert "python -m pip install numpy pydantic rich" in readme
    if packs[problem_id].problem.spec.plots:
        assert "python -m pip install matplotlib" in readme and "_plots/" in readme


@pytest.mark.e2e
@pytest.mark.parametrize("problem_id", [p for p in PROBLEMS if Problem(p).spec.plots])
def test_check_draws_the_toy_plots_beside_the_reference_preview(checked, problem_id: str) -> None:
    """The learner's plots at the public seed, each beside the reference's preview, in the folder the table names;
    a wrong file's plot may be missing (its toy part failed), and the line under the table then says which."""
    problem = Problem(problem_id)
    correct = checked[problem_id, "correct"]
    folder = plots_folder(correct.report_path)
    for plot in problem.spec.plots:
        assert (folder / plot.file).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot.file
        assert (folder / preview_file(plot.file)).is_file(), plot.file
    assert f"plots: {len(problem.spec.plots)} in " in " ".join(correct.result.stdout.split())
    wrong = checked[problem_id, "wrong"]
    said = " ".join(wrong.result.stdout.split())
    missing = [plot.file for plot in problem.spec.plots if not (plots_folder(wrong.report_path) / plot.file).is_file()]
    assert "plots: " in said and (not missing or "No plot of the toy's" in said), (missing, said[-600:])


def test_check_without_matplotlib_says_the_plots_are_not_drawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """matplotlib is optional in the pack: without it no drawing starts and the line under the table says why."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    problem = types.SimpleNamespace(full_spec=Problem("glm5_offpolicy").spec)
    job = start_plots(problem, None, tmp_path / "reports" / "mine.json")  # type: ignore[arg-type]
    assert job is None
    assert finish_plots(problem, job, tmp_path / "mine.json") == NO_MATPLOTLIB  # type: ignore[arg-type]


def test_check_help_and_usage_speak_to_a_learner(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        check_main([])
    assert exited.value.code == ExitCode.USAGE
    with pytest.raises(SystemExit) as exited:
        check_main(["--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert "validation" not in shown and "judge_error" not in shown
    for code in (ExitCode.OK, ExitCode.JUDGE_ERROR, ExitCode.USAGE, ExitCode.IMPORT_FAILED):
        assert f"  {code.value}: " in shown


def _unzipped(pack: Pack, folder: Path) -> Path:
    with zipfile.ZipFile(pack.zip_path) as archive:
        archive.extractall(folder)
    return folder / pack.problem.id


@pytest.mark.e2e
def test_check_without_torch_gives_a_one_line_install_hint(packs: dict[str, Pack], tmp_path: Path) -> None:
    root = _unzipped(packs[PROBLEMS[0]], tmp_path)
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    done = subprocess.run(
        [str(venv / "bin" / "python"), "check", "solution.py"], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == ExitCode.USAGE
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "--index-url https://download.pytorch.org/whl/cpu" in done.stderr


@pytest.mark.e2e
def test_check_of_a_file_that_does_not_import_exits_5(
    packs: dict[str, Pack], learner_python: Path, tmp_path: Path
) -> None:
    root = _unzipped(packs[PROBLEMS[0]], tmp_path)
    (tmp_path / "broken.py").write_text("def masked_is_weights(:\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAPERLEET_")} | {"COLUMNS": "160"}
    done = subprocess.run(
        [str(learner_python), "check", str(tmp_path / "broken.py")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == ExitCode.IMPORT_FAILED, done.stdout + done.stderr
    assert "SyntaxError" in done.stdout


@pytest.mark.e2e
def test_check_of_a_link_exits_7_with_a_refused_report(
    packs: dict[str, Pack], learner_python: Path, tmp_path: Path
) -> None:
    root = _unzipped(packs[PROBLEMS[0]], tmp_path)
    (tmp_path / "solution.py").symlink_to(root / "starter.py")  # the learner's own file, yet a link: not read
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAPERLEET_")} | {"COLUMNS": "160"}
    done = subprocess.run(
        [str(learner_python), "check", str(tmp_path / "solution.py"), "--report", str(tmp_path / "report.json")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == ExitCode.REFUSED, done.stdout + done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "refused" and report["score"] == 0 and "not a symbolic link" in report["message"]


def test_check_says_when_the_file_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_main([str(tmp_path / "nowhere.py")]) == ExitCode.USAGE
    assert "no such file" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- nothing hidden


def _distinctive_lines(path: Path, public_texts: list[str]) -> list[str]:
    """Lines of `path` long enough to identify it and found in no file a learner may see anyway."""
    lines = []
    for line in path.read_text().splitlines():
        text = line.strip()
        if len(text) < 24 or text.startswith(("#", '"""', "import ", "from ")):
            continue
        if not any(text in public for public in public_texts):
            lines.append(text)
    return lines


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_no_reference_or_oracle_code_in_the_pack(packs: dict[str, Pack], problem_id: str) -> None:
    pack = packs[problem_id]
    blob = pack.blob
    public_texts = [p.read_text() for p in pack.problem.problem_dir.iterdir() if p.suffix in (".py", ".md", ".toml")]
    public_texts += [p.read_text() for p in (ROOT / "grader").rglob("*.py")]
    for name in ("reference.py", "oracle.py"):
        path = pack.problem.reference_dir / name
        lines = _distinctive_lines(path, public_texts)
        assert len(lines) >= 5, f"{name}: too few distinctive lines to prove anything"
        leaked = [line for line in lines if line.encode() in blob]
        assert not leaked, f"lines of {name} in the pack: {leaked[:3]}"
        codes = [c.co_code for c in _code_objects(compile(path.read_text(), str(path), "exec")) if len(c.co_code) >= 32]
        assert codes and not [c for c in codes if c in blob], f"bytecode of {name} in the pack"
    # the search itself works: the starter's own lines are found
    assert all(line.encode() in blob for line in _distinctive_lines(pack.problem.problem_dir / "starter.py", []))


def _data(pack: Pack) -> Any:
    return torch.load(io.BytesIO(dict(pack.members)[f"{pack.problem.id}/{DATA_FILE}"]), weights_only=True)


def _plain_values(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _plain_values(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _plain_values(item)
    elif not isinstance(value, torch.Tensor):
        yield value


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_no_hidden_seed_in_the_pack(packs: dict[str, Pack], problem_id: str) -> None:
    """A seed of three digits or more appears nowhere as a number; a shorter one, which a bare number cannot
    prove, appears in no seed-like context and in no value of the public data. The seeds the case generators
    derive from each hidden seed appear nowhere, in decimal or in binary."""
    pack = packs[problem_id]
    problem, blob, texts = pack.problem, pack.blob, pack.texts()
    names = sorted({c.cases for c in problem.spec.checks if c.cases})
    plain = list(_plain_values(_data(pack)))
    for seed in problem.grading_seeds:
        number = re.compile(rf"(?<![0-9]){seed}(?![0-9])")
        context = re.compile(rf"seed\D{{0,24}}(?<![0-9]){seed}(?![0-9])", re.I)
        for name, text in texts:
            assert not (len(str(seed)) >= 3 and number.search(text)), f"hidden seed {seed} in {name}"
            assert not context.search(text), f"hidden seed {seed} in {name}"
        assert seed not in [v for v in plain if type(v) is int]
        assert not [v for v in plain if isinstance(v, str) and number.search(v)]
        for case_name in names:
            derived = generator_for(seed, case_name).initial_seed()
            for form in (str(derived).encode(), derived.to_bytes(8, "little"), derived.to_bytes(8, "big")):
                assert form not in blob, f"the RNG seed of {case_name} under hidden seed {seed}"
    public_seed = problem.spec.public_seed
    assert any(re.search(rf"public_seed = {public_seed}\b", text) for _, text in texts)  # the search works


# A hidden tensor counts as leaked when one of its 8-byte windows (one float64, two float32, four 16-bit floats,
# together carrying WINDOW_BITS significant mantissa bits or more) lies anywhere in the pack's bytes while no
# public tensor holds it; or when one of its values with VALUE_BITS significant bits or more, as a float64 either
# way round (a pickled Python float is big-endian) or written out in decimal, lies there while no public value
# equals it. Fewer bits are too little evidence: a value like 55/256 turns up in any batch of data.
WINDOW_BITS = 40
VALUE_BITS = 20
MANTISSA_BITS = {torch.float64: 52, torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}
SAME_SIZE_INT = {8: torch.int64, 4: torch.int32, 2: torch.int16}


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            yield value.detach()
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)


def _seeded_tensors(problem: Problem, seed: int, public_only: bool) -> list[torch.Tensor]:
    """Every case input and expected output (values and gradients) of the problem's checks under `seed`."""
    expect = expectations_of(problem.id, seed)  # shared with the proofs
    found: list[torch.Tensor] = []
    for check in problem.spec.checks:
        if not check.cases or (public_only and not check.public):
            continue
        for index, call in enumerate(expect.cases(check.cases)):
            if public_only and call.hidden:
                continue
            found += _tensors(dict(call.kwargs))
            for source in {check.expected, "reference"}:
                observation = expect.observation(source, check.cases, index)
                found += _tensors({k: observation[k] for k in ("output", "grads") if k in observation})
            lower = expect.lower_observation(check.expected, check.cases, index) or {}  # the same call in float32
            found += _tensors({k: lower[k] for k in ("output", "grads") if k in lower})
    if not public_only:
        found += _tensors(expect.series())
    return found


def _byte_windows(raw: torch.Tensor, step: int) -> torch.Tensor:
    """Every 8-byte window of a flat uint8 tensor starting at a multiple of `step`, as int64."""
    if raw.numel() < 8:
        return torch.empty(0, dtype=torch.int64)
    starts = torch.arange(0, raw.numel() - 7, step)
    return raw[starts[:, None] + torch.arange(8)].contiguous().view(torch.int64).flatten()


def _significant_bits(flat: torch.Tensor) -> torch.Tensor:
    """Per element of a flat float tensor: the mantissa bits up to its lowest set one (0 if not finite)."""
    bits = MANTISSA_BITS[flat.dtype]
    mantissa = flat.view(SAME_SIZE_INT[flat.element_size()]).to(torch.int64) & ((1 << bits) - 1)
    lowest = torch.log2((mantissa & -mantissa).double()).round().to(torch.int64)
    significant = torch.where(mantissa == 0, 0, bits - lowest)
    # a subnormal has no implicit leading bit: it carries only the bits from its highest set one down (the bytes
    # of a small integer read as floats are subnormals, and carry a few bits, not the whole mantissa)
    highest = torch.log2(mantissa.clamp(min=1).double()).floor().to(torch.int64)
    subnormal = (flat != 0) & (flat.abs() < torch.finfo(flat.dtype).tiny)
    significant = torch.where(subnormal, highest - lowest + 1, significant)
    return torch.where(flat.isfinite(), significant, 0)


def _with_storage(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor, and all of the storage it is a view of (torch.save writes the whole storage)."""
    found = []
    for t in tensors:
        if t.dtype not in MANTISSA_BITS:
            continue
        storage = t.untyped_storage()
        whole = torch.empty(0, dtype=t.dtype).set_(storage, 0, (storage.nbytes() // t.element_size(),), (1,))
        found += [t.contiguous().flatten(), whole]
    return found


def _windows(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The 8-byte windows of each tensor's elements, in memory order, that carry WINDOW_BITS or more."""
    found = [torch.empty(0, dtype=torch.int64)]
    for flat in _with_storage(tensors):
        size = flat.element_size()
        per = 8 // size
        if flat.numel() < per:
            continue
        bits = _significant_bits(flat).double()[None, None]
        carried = torch.nn.functional.conv1d(bits, torch.ones(1, 1, per, dtype=torch.float64)).flatten()
        found.append(_byte_windows(flat.view(torch.uint8), size)[carried >= WINDOW_BITS])
    return torch.unique(torch.cat(found))


def _values(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The float64 bits of every float64 element carrying VALUE_BITS or more. A float32 element is left to the
    windows: one of about 2^23 values an octave, it equals some public answer widened to float64 by chance (a
    hidden log-probability of -2.1391773 did, in a public case's gradient), while a copied float32 tensor shows as
    runs of its 4-byte elements."""
    found = [
        flat[_significant_bits(flat) >= VALUE_BITS] for flat in _with_storage(tensors) if flat.dtype == torch.float64
    ]
    return torch.unique(torch.cat([torch.empty(0, dtype=torch.float64), *found]).view(torch.int64))


def _short_decimal(value: float) -> bool:
    """Whether `value` is a decimal of at most two significant digits, in float64 or rounded from float32."""
    short = float(f"{value:.2g}")
    return value in (short, float(torch.tensor(short, dtype=torch.float32)))


def _decimals(texts: list[tuple[str, str]]) -> torch.Tensor:
    """Every decimal number with enough significant digits in the pack's texts, as float64 bits."""
    found = []
    for _, text in texts:
        for token in re.findall(r"-?\d+\.\d+(?:[eE][-+]?\d+)?", text):
            if len(re.sub(r"[^0-9]", "", token.split("e")[0].split("E")[0]).lstrip("0")) >= SIGNIFICANT_DIGITS:
                value = float(token)
                found += [value, float(torch.tensor(value, dtype=torch.float32))]
    return torch.tensor(found, dtype=torch.float64).view(torch.int64)


def _leaks(hidden: list[torch.Tensor], public: list[torch.Tensor], pack: Pack) -> dict[str, int]:
    blob = torch.frombuffer(bytearray(pack.blob), dtype=torch.uint8)
    in_blob = _byte_windows(blob, 1)
    windows = _windows(hidden)
    windows = windows[~torch.isin(windows, _windows(public))]
    values = _values(hidden)
    values = values[~torch.isin(values, _values(public))]
    # a value like 0.3 or 0.25 is as likely a parameter written in the pack (a width, a bound) as a leak
    values = values[[not _short_decimal(v) for v in values.view(torch.float64).tolist()]] if values.numel() else values
    swapped = values.view(torch.uint8).view(-1, 8).flip(1).contiguous().view(torch.int64).flatten()
    return {
        "windows": int(torch.isin(windows, in_blob).sum()),
        "windows_searched": windows.numel(),
        "values": int(torch.isin(values, in_blob).sum() + torch.isin(swapped, in_blob).sum()),
        "decimals": int(torch.isin(values, _decimals(pack.texts())).sum()),
        "values_searched": values.numel(),
    }


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_no_hidden_case_input_or_expected_value_in_the_pack(packs: dict[str, Pack], problem_id: str) -> None:
    pack = packs[problem_id]
    problem = pack.problem
    public = _seeded_tensors(problem, problem.spec.public_seed, public_only=False)
    hidden = _seeded_tensors(problem, problem.grading_seeds[0], public_only=False)  # the seed that grades
    leaks = _leaks(hidden, public, pack)
    assert leaks["windows_searched"] > 1000 and leaks["values_searched"] > 1000, leaks
    assert leaks["windows"] == leaks["values"] == leaks["decimals"] == 0, leaks
    # the search itself works: the public cases the pack carries are found in it, nearly all of their windows
    shown = _seeded_tensors(problem, problem.spec.public_seed, public_only=True)
    found = _leaks(shown, [], pack)
    assert found["windows"] >= 0.9 * found["windows_searched"] > 100, found
