"""Instructor tooling around the judge.

- `validate`: proves a problem: the reference at full marks, each known-wrong solution caught as declared.
- `gradescope_zip`: the autograder zip for Gradescope.
- `learner_pack`: the learner pack (statement, starter, public cases and `check`) and the pack's `check`.
- `shards`: a class graded on many machines, and the merge of their reports.
"""
