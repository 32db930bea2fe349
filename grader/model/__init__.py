"""What a problem is, independent of grading any submission.

- `spec`: the strict model of `problems/<id>/problem.toml`.
- `problem`: locates and loads a problem's files (cases, experiment, reference, oracle, known-wrong).
- `known_wrong`: known-wrong solutions declared as edits of the reference, materialized as files in the cache.
- `ports`: convention ports, each one library's conventions re-expressed, declaring the clauses it breaks.
- `generic`: problem-independent misreadings (float32 arithmetic, detached outputs, mutated inputs, ...) with stock
  explanations, and the file that holds one.
- `misconceptions`: the known misreadings wrong/*.toml or misconceptions.toml declare, with the checks that own each.
- `report`: the report model (report.json) and its atomic writer.
- `verdicts`: closed vocabularies: check verdicts, submission statuses, exit codes.
"""
