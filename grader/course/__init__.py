"""Instructor tooling around the judge.

- `validate`: proves a problem: every line of the reference reached, the reference at full marks, each known-wrong
  solution caught as declared.
- `authoring`: the rules `validate` checks without grading: misreadings well explained and owned, seeds hidden.
- `new_problem`: `new-problem ID`, the skeleton of an exercise that `validate` accepts as written.
- `clauses`: each problem's clause-to-check table, with the weight each clause carries.
- `coverage`: which lines and branches of a reference no case reaches (a clause broken for free).
- `gradescope_zip`: the autograder zip for Gradescope.
- `learner_pack`: building the learner pack (statement, starter, public cases and `check`).
- `pack_check`: inside the pack: `check FILE` and `check --watch FILE` on the public cases, in the official sandbox.
- `shards`: a class graded on many machines, and the merge of their reports.
- `catalog`: every problem's `[catalog]` table, checked across problems, in a suggested order (`problems`).
- `mutants`: mutants of a reference, one small change each, named by operator and line (`mutate`).
- `mutation`: each mutant graded in process on the problem's cases: killed, diagnosed, survived, likely equivalent.
- `course_set`: a set of problems' packs, zips and handout index, built in one command (`course-set`).
"""
