"""Closed vocabularies: check verdicts, submission statuses and CLI exit codes."""

from __future__ import annotations

import enum


class Verdict(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"  # the learner's code raised
    TIMEOUT = "timeout"
    CRASHED = "crashed"  # the worker process died
    SKIPPED = "skipped"  # not run: import failed or the budget ran out
    JUDGE_ERROR = "judge_error"  # a bug of the harness, never the learner's fault


class Status(enum.StrEnum):
    GRADED = "graded"
    IMPORT_ERROR = "import_error"
    IMPORT_TIMEOUT = "import_timeout"
    IMPORT_CRASHED = "import_crashed"
    BUDGET_EXCEEDED = "budget_exceeded"
    JUDGE_ERROR = "judge_error"
    REFUSED = "refused"  # not a regular file of its own inside its folder (a link, a FIFO...): never run, 0 points


class ExitCode(enum.IntEnum):
    OK = 0  # grading finished, whatever the score
    VALIDATION_FAILED = 1  # `validate`: the reference or a known-wrong solution misbehaved
    JUDGE_ERROR = 3  # the harness itself failed; no learner lost points for it
    USAGE = 4  # bad command line, unknown problem, unreadable file
    IMPORT_FAILED = 5  # `grade`: the submission could not be imported (import_error, import_timeout, import_crashed)
    BELOW_FAIL_UNDER = 6  # `--fail-under SCORE`: a submission scored below SCORE
    REFUSED = 7  # `grade`: the file named is not a regular file (a link, a FIFO...); its report says so, 0 points
