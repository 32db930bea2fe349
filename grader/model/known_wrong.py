"""Known-wrong solutions: declared as small edits of the reference, graded as the real files they make.

`reference/<id>/wrong/<name>.toml` declares one solution: the defect it embodies, the clauses of the statement it
breaks (so the score it declares), the checks it must fail and may fail, and its edits, each a `find` text that
occurs exactly once in the reference's code and its `replace`. The solution a learner could have written,
`<name>.py`, is the reference with those edits, under a docstring that names the defect. It is written into the
cache, in a folder named by the hash of the reference, every declaration and this module, so the same sources always
give the same path and a stale copy is never graded.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import tempfile
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grader.model.misconceptions import Misreading
from grader.model.spec import SpecError
from grader.paths import cache_dir

WIDTH = 116  # the project's line length, less the docstring's indent and quotes


@dataclass(frozen=True)
class KnownWrong:
    """A solution that must fail `must_fail` and may fail `may_fail`, and nothing else.

    `path` is the materialized file (what is graded), `declaration` the TOML it is made from."""

    path: Path
    defect: str
    must_fail: frozenset[str]
    may_fail: frozenset[str]
    declaration: Path | None = None
    breaks: frozenset[str] = frozenset()  # the clauses it breaks: it declares the score that loses their weights


class Edit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    find: str = Field(min_length=1)  # occurs exactly once in the reference's code (after its docstring)
    replace: str


class Declaration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    defect: str = Field(min_length=1)  # one sentence: what the solution does wrong
    breaks: list[str] = Field(min_length=1)  # clause ids of the problem's statement
    note: str = ""  # why a learner writes it, or where the defect shows; goes into the docstring
    must_fail: list[str] = Field(min_length=1)
    may_fail: list[str] = []
    edit: list[Edit] = Field(min_length=1)
    # the misreading this solution embodies, declared here rather than in misconceptions.toml
    misconception: Misreading | None = None


def load_declaration(path: Path) -> Declaration:
    try:
        return Declaration.model_validate(tomllib.loads(path.read_text()))
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise SpecError(f"{path}: not a known-wrong declaration: {' '.join(str(exc).split())}") from None


def split_docstring(source: str) -> tuple[str, str]:
    """The module's leading docstring (with the lines before it) and the code after it."""
    tree = ast.parse(source)
    first = tree.body[0] if tree.body else None
    if not (
        isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    ):
        return "", source
    lines = source.splitlines(keepends=True)
    end = first.end_lineno or 0
    return "".join(lines[:end]), "".join(lines[end:])


def apply_edits(code: str, edits: list[Edit], where: Path) -> str:
    """`code` with every edit made; each `find` must occur exactly once in `code`, and no two may overlap."""
    spans = []
    for number, edit in enumerate(edits, 1):
        count = code.count(edit.find)
        if count != 1:
            raise SpecError(
                f"{where}: edit {number}'s find text occurs {count} times in the reference's code, "
                f"not exactly once: {(edit.find.strip().splitlines() or [edit.find])[0][:80]!r}"
            )
        start = code.index(edit.find)
        spans.append((start, start + len(edit.find), edit.replace))
    spans.sort()
    for (_, end, _), (start, _, _) in zip(spans, spans[1:], strict=False):
        if start < end:
            raise SpecError(f"{where}: two edits overlap in the reference's code")
    for start, end, replace in reversed(spans):
        code = code[:start] + replace + code[end:]
    return code


def render(problem_id: str, name: str, declaration: Declaration, reference: str, where: Path) -> str:
    """The known-wrong file: a header and a docstring that name the defect and its checks, then the edited code."""
    _, code = split_docstring(reference)
    paragraphs = [f"Known-wrong {problem_id} solution ({name}).", declaration.defect, *declaration.note.split("\n\n")]
    docstring = "\n\n".join(textwrap.fill(" ".join(p.split()), WIDTH) for p in paragraphs if p.strip())
    header = [
        f"# defect: {' '.join(declaration.defect.split())}",
        f"# must_fail: {', '.join(declaration.must_fail)}",
        f"# may_fail: {', '.join(declaration.may_fail)}",
    ]
    return (
        "\n".join(line.rstrip() for line in header)
        + f'\n"""{docstring}\n"""\n'
        + apply_edits(code, declaration.edit, where)
    )


def declarations(reference_dir: Path) -> list[Path]:
    return sorted((reference_dir / "wrong").glob("*.toml"))


def sources_hash(reference_dir: Path) -> str:
    """What the materialized files depend on: the reference, each declaration by name, and this module."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update((reference_dir / "reference.py").read_bytes())
    for path in declarations(reference_dir):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def materialize(problem_id: str, reference_dir: Path, cache: Path | None = None) -> list[KnownWrong]:
    """Every known-wrong solution of the problem, written once per version of its sources, sorted by name."""
    paths = declarations(reference_dir)
    parsed = {path: load_declaration(path) for path in paths}
    folder = (cache or cache_dir()) / "known_wrong" / problem_id / sources_hash(reference_dir)
    if not folder.is_dir():
        reference = (reference_dir / "reference.py").read_text()
        texts = {path.stem: render(problem_id, path.stem, parsed[path], reference, path) for path in paths}
        _write_folder(folder, texts)
    return [
        KnownWrong(
            folder / f"{path.stem}.py",
            " ".join(d.defect.split()),
            frozenset(d.must_fail),
            frozenset(d.may_fail),
            path,
            frozenset(d.breaks),
        )
        for path, d in parsed.items()
    ]


def combined(problem_id: str, reference_dir: Path, names: tuple[str, ...], cache: Path | None = None) -> Path | None:
    """The solution that makes every edit of the known-wrong solutions `names` (stems) at once, written once per
    version of the sources; None when two of their edits touch the same text, so that no one file can hold both.

    A learner who departs from the statement in several places at once wrote this file, not any one of them."""
    paths = [reference_dir / "wrong" / f"{name}.toml" for name in names]
    folder = (cache or cache_dir()) / "known_wrong" / problem_id / sources_hash(reference_dir) / "combined"
    target = folder / f"{'+'.join(names)}.py"
    if target.is_file():
        return target
    _, code = split_docstring((reference_dir / "reference.py").read_text())
    edits = [edit for path in paths for edit in load_declaration(path).edit]
    try:
        text = apply_edits(code, edits, reference_dir / "wrong")
    except SpecError:  # two edits overlap, or one edit's text is another's
        return None
    defects = " ".join(" ".join(load_declaration(path).defect.split()) for path in paths)
    docstring = textwrap.fill(f"Known-wrong {problem_id} solutions {', '.join(names)} at once. {defects}", WIDTH)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(f'"""{docstring}\n"""\n{text}')
    os.replace(tmp, target)  # a concurrent grader writes the same bytes: either copy is the file
    return target


def _write_folder(folder: Path, texts: dict[str, str]) -> None:
    """All files at once: a folder is renamed into place complete, so a concurrent grader sees all or nothing."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
    tmp.chmod(0o755)
    for stem, text in texts.items():
        (tmp / f"{stem}.py").write_text(text)
    try:
        os.rename(tmp, folder)
    except OSError:  # another process put the same content there first
        shutil.rmtree(tmp, ignore_errors=True)
        if not folder.is_dir():
            raise
