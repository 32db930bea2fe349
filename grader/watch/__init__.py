"""Grading a file again each time it is saved.

- `loop`: notices saves, grades a snapshot, prints what changed; knows nothing of how a file is graded.
- `warm`: the grader's `watch`: a judge, its expectations and a zygote kept warm between grades.
"""
