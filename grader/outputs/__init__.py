"""What a grade produces, all built from the report.

- `learner_view`: the learner's view of a report: scores and hidden-safe messages only.
- `exports`: Gradescope's results.json and JUnit XML.
- `terminal`: rich tables of one report and of a class.
- `progress`: a learner's reports summed up per problem (`progress`, the pack's `check --progress`).
- `plots`, `figures`: series made plain and bounded, then drawn in a process of their own (forked, in a batch,
  from one plotting server that has imported matplotlib); `drawing` starts a drawing process without torch, so
  that `grade` starts it before its own imports.
- `containment`: the `judge_error` report of one file the judge itself failed on.
- `pages/`: the HTML report page and the class dashboard.
"""
