"""The authoring rules `validate` enforces without grading: misreadings well explained and owned, hidden seeds hidden.

Each rule is a sentence a problem author can act on, naming the file or the misreading it is about:

- a misreading's explanation is one or two sentences, under MAX_EXPLANATION_CHARS characters, ending its last
  sentence, and names neither its known-wrong file nor a hidden seed (a learner reads it in every report);
- a misreading's id names the misreading, not the file that embodies it;
- a misreading's owner checks (those of the clauses its solution breaks) are among the checks its solution must or
  may fail: a misreading charged where its own solution passes would be charged for nothing;
- the hidden seeds are distinct, the public seed is not one of them, and no learner-visible file (the problems'
  folders, the sample submissions) quotes one as a number of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

from grader.model.misconceptions import Misconception
from grader.model.problem import Problem

MAX_EXPLANATION_CHARS = 400
# A sentence ends at . ! or ? followed by whitespace or the end; `torch.std` and 1e-6 end none.
SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
# What a learner may read: every problem's statement, starter, toy and public cases, and the sample submissions.
LEARNER_VISIBLE = ("problems", "submissions")


def quoted_seeds(text: str, seeds: list[int]) -> list[int]:
    """The seeds `text` quotes as a number of their own (not as digits of a longer number or a decimal)."""
    return [seed for seed in seeds if re.search(rf"(?<![\w.]){seed}(?![\w.])", text)]


def explanation_findings(misconception: Misconception, seeds: list[int]) -> list[str]:
    """What is wrong with one misreading's learner-facing text: its explanation and its convention."""
    text = misconception.explanation.strip()
    stem = Path(misconception.solution).stem if misconception.solution else None
    found = []
    if not 0 < len(text) < MAX_EXPLANATION_CHARS:
        found.append(f"its explanation is {len(text)} characters; say it in fewer than {MAX_EXPLANATION_CHARS}")
    if text and text[-1] not in ".!?":
        found.append("its explanation must end its last sentence")
    sentences = len(SENTENCE_END.findall(text))
    if not 1 <= sentences <= 2:
        found.append(f"its explanation has {sentences} sentences; say it in one or two")
    convention = misconception.convention
    for where, words in (("explanation", text), ("convention", convention.sentence() if convention else "")):
        if quoted_seeds(words, seeds):
            found.append(f"its {where} quotes a hidden seed")
        if (stem and stem in words) or ".py" in words:
            found.append(f"its {where} names the known-wrong file {stem}")
    if misconception.id == stem:
        found.append("its id repeats the known-wrong file's name; name the misreading instead")
    return found


def misreading_findings(problem: Problem) -> list[tuple[str, str]]:
    """(misreading id, what is wrong) for every misreading of the problem that breaks a rule."""
    seeds = problem.grading_seeds
    known = {k.path.name: k for k in problem.known_wrong()}
    found = []
    for misconception in problem.misconceptions:
        problems = explanation_findings(misconception, seeds)
        if misconception.solution is None:  # a generic misreading's owners are those of the clauses it names
            found += [(misconception.id, problem_) for problem_ in problems]
            continue
        solution = known[misconception.solution]
        undeclared = set(misconception.owners) - solution.must_fail - solution.may_fail
        if undeclared:
            problems.append(
                f"its owner checks {sorted(undeclared)} are in neither must_fail nor may_fail of {solution.path.stem}"
            )
        found += [(misconception.id, problem_) for problem_ in problems]
    return found


def seed_findings(problem: Problem) -> list[str]:
    """The hidden seeds distinct, apart from the public one, and quoted in no learner-visible file."""
    seeds = problem.grading_seeds
    found = []
    if len(set(seeds)) != len(seeds):
        found.append("reference/<id>/grading.toml lists a seed twice")
    if problem.spec.public_seed in seeds:
        found.append(f"the public seed {problem.spec.public_seed} is also a hidden grading seed")
    for folder in LEARNER_VISIBLE:
        for path in sorted((problem.root / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                if quoted_seeds(path.read_text(errors="replace"), seeds):
                    found.append(f"{path.relative_to(problem.root)} quotes a hidden seed of {problem.id}")
    return found
