"""`new-problem ID`: the skeleton of an exercise that `validate --problem ID` accepts as written, to edit from there.

The skeleton is a complete, small exercise: one function, `ID(x, scale=1.0)`, that centres a vector and scales it;
its statement, starter, vectorized reference and scalar-loop oracle; case generators built with `grader.author`;
a `problem.toml` with two tiers, its clauses and three checks (the signature, the contract, the oracle); hidden
grading seeds drawn at random; and one known-wrong solution that declares its misreading in the same file. An author
replaces the function and keeps the shape: every file already says where its kind of content goes.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from grader.model.spec import SpecError

GRADING_SEEDS = 5  # validate asks for at least this many


def skeleton_files(problem_id: str, public_seed: int, grading_seeds: list[int]) -> dict[str, str]:
    """Each file of the skeleton by its path under the project root."""
    name = problem_id
    return {
        f"problems/{name}/problem.toml": PROBLEM_TOML.format(id=name, public_seed=public_seed),
        f"problems/{name}/statement.md": STATEMENT.format(id=name),
        f"problems/{name}/starter.py": STARTER.format(id=name),
        f"problems/{name}/cases.py": CASES.format(id=name),
        f"reference/{name}/reference.py": REFERENCE.format(id=name),
        f"reference/{name}/oracle.py": ORACLE.format(id=name),
        f"reference/{name}/grading.toml": f"seeds = {grading_seeds}\n",
        f"reference/{name}/wrong/scale_ignored.toml": WRONG,
    }


def write_skeleton(root: Path, problem_id: str) -> list[Path]:
    """The skeleton's files written under `root`; an error, and nothing written, if the problem's folders exist."""
    if not problem_id.isidentifier() or not problem_id[0].isalpha() or problem_id != problem_id.lower():
        raise SpecError(f"problem id {problem_id!r} must be lowercase letters, digits and underscores, a letter first")
    taken = [root / kind / problem_id for kind in ("problems", "reference") if (root / kind / problem_id).exists()]
    if taken:
        raise SpecError(f"{', '.join(map(str, taken))} already exists; choose another id or remove it")
    seeds: list[int] = []
    while len(seeds) < GRADING_SEEDS + 1:  # the public seed first, then the hidden ones, all distinct
        seed = 1_000_000 + secrets.randbelow(9_000_000)
        seeds += [] if seed in seeds else [seed]
    written = []
    for relative, text in skeleton_files(problem_id, seeds[0], seeds[1:]).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


PROBLEM_TOML = """\
# The {id} exercise: what the learner implements and how it is graded (docs/problem-toml.md).
id = "{id}"
title = "Centred and scaled values"
source = "the paper, its section and equation numbers"
public_seed = {public_seed}
tolerances = "standard"  # float32 and float64 at the tolerances of spec.py's TOLERANCE_PRESETS

[catalog]
summary = "Centre a vector on its mean and scale it."
tags = ["skeleton"]
difficulty = "introductory"
minutes = 15

[[catalog.papers]]
title = "The paper's title"
authors = "Its authors"
year = 2026
equations = "the equations exercised"

[[functions]]
name = "{id}"
params = ["x", "scale"]
signature = "{id}(x, scale=1.0) -> Tensor[N]"

[[tiers]]
id = "T0"
title = "Contracts"
points = 10

[[tiers]]
id = "T1"
title = "Scalar-loop oracle"
points = 30

# the aspects checks compare, named once
[compare_sets]
contract = ["type", "shape", "dtype", "device"]
values = ["type", "shape", "values"]

# every check of a tier takes these unless it sets them
[check_defaults.T0]
kind = "differential"
compare = "contract"

[check_defaults.T1]
kind = "differential"
expected = "oracle"
compare = "values"

[[clauses]]
id = "signature"
kind = "return_type"
text = "{id} exists with the contract's parameter names"

[[clauses]]
id = "contract"
kind = "return_type"
text = "{id} returns a Tensor [N] in x's dtype and device"

[[clauses]]
id = "formula"
kind = "formula"
text = "The result is scale * (x - mean(x))"

# a check's clause defaults to the clause of its id, its title to that clause's text
[[checks]]
id = "signatures"
tier = "T0"
kind = "signature"
clause = "signature"
points = 4

[[checks]]
id = "contract"
tier = "T0"
points = 6

[[checks]]
id = "oracle"
tier = "T1"
clause = "formula"
points = 30
"""

STATEMENT = """\
# {id}

Implement `{id}(x, scale=1.0)`: for a 1-D floating tensor `x` of N values, return

    scale * (x - mean(x))

as a Tensor of shape [N], in x's dtype and on its device.
"""

STARTER = '''\
"""Starter for {id}: implement the function below, following statement.md."""

from __future__ import annotations

import torch  # noqa: F401 - you will need it
from torch import Tensor


def {id}(x: Tensor, scale: float = 1.0) -> Tensor:
    """scale * (x - mean(x)), a Tensor [N] in x's dtype and device."""
    raise NotImplementedError
'''

CASES = '''\
"""Case generators for {id}: each takes a seeded torch.Generator and returns the calls to make."""

from __future__ import annotations

import torch

from grader.author import F64, Call, dtype_name, dtype_variants, uniform

FUNCTION = "{id}"


def call(x: torch.Tensor, scale: float, hidden: bool = False) -> Call:
    label = f"{{dtype_name(x.dtype)}} N={{x.shape[0]}}, scale={{scale:g}}"
    return Call(FUNCTION, {{"x": x, "scale": scale}}, label, hidden=hidden)


def contract(g: torch.Generator) -> list[Call]:
    """One call per dtype: the result follows x's dtype, whatever its precision."""
    return dtype_variants([call(torch.randn(8, generator=g, dtype=F64), uniform(g, 1.5, 4.0))], ["x"])


def oracle(g: torch.Generator) -> list[Call]:
    """Random vectors, a scale never 1 (so leaving it out shows), in float32 and float64."""
    calls = []
    for size in (2, 5, 16, 64):
        x = torch.randn(size, generator=g, dtype=F64) * uniform(g, 0.5, 3.0) + uniform(g, -2.0, 2.0)
        calls.append(call(x, uniform(g, 1.5, 4.0), hidden=True))
    return dtype_variants(calls, ["x"], dtypes=(torch.float32, F64))
'''

REFERENCE = '''\
"""Hidden reference for {id}: vectorized, the behaviour every check measures against."""

from __future__ import annotations

from torch import Tensor


def {id}(x: Tensor, scale: float = 1.0) -> Tensor:
    return scale * (x - x.mean())  # [N]
'''

ORACLE = '''\
"""Scalar-loop oracle for {id}: one element at a time, in float64, independent of the reference."""

from __future__ import annotations

import torch
from torch import Tensor


def {id}(x: Tensor, scale: float = 1.0) -> Tensor:
    values = [float(v) for v in x.to(torch.float64)]
    mean = sum(values) / len(values)
    return torch.tensor([scale * (v - mean) for v in values], dtype=torch.float64).to(x.dtype)
'''

WRONG = """\
# A solution a learner could write: the reference with these edits (README, "Known-wrong solutions").
defect = "scale is ignored: the values are only centred."
breaks = ["formula"]
must_fail = ["oracle"]

[[edit]]
find = '''
    return scale * (x - x.mean())  # [N]
'''
replace = '''
    return x - x.mean()  # [N]
'''

# the misreading this solution embodies, which the judge diagnoses in learners' answers
[misconception]
id = "scale_dropped"
explanation = "The statement multiplies the centred values by scale. Leaving scale out is right only when scale is 1."
"""
