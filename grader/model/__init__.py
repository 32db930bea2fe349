"""What a problem is, independent of grading any submission.

- `spec`: the strict model of `problems/<id>/problem.toml`.
- `problem`: locates and loads a problem's files (cases, experiment, reference, oracle, known-wrong).
- `verdicts`: closed vocabularies: check verdicts, submission statuses, exit codes.
"""
