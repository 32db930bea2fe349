"""Grading one submission on the trusted side.

- `grading`: `grade`, one submission from its worker's start to the assembled report.
- `supervisor`: `WorkerSupervisor`, the submission's worker: start, restart, time budget, streaming calls.
- `context`: `CheckContext`, what a check may ask: cases, expectations, the learner's answers, the toy's series;
  `GradedProblem` and `ExpectedSide`, what grading reads of a problem and of its expected side.
- `accept`: accepting what crosses from the worker (frames, answers, observations) and the toy's series.
- `cases`: `Call`, one call of one contract function, the unit every check is built from.
- `expectations`: what the reference and the oracle do on every case, cached per problem and seed.
- `checks`: the registry of check kinds, each a function from (context, spec) to a result.
- `failures`: `LearnerFailure` and `CallFailed`, why the learner's side gave no observation, and their hidden-safe
  text.
- `compare`: comparing an accepted observation with the expected one, aspect by aspect, with the evidence.
- `diagnosis`: naming the misreadings behind failures, ranked by the points they explain, and follow-through credit.
- `combinations`: two or three misreadings held together, searched for the failures no single one explains.
- `localise`: the failing cases no misreading explains, and the case features that separate them.
- `experiment`: the T3 toy, driven here with the learner's functions behind proxies.
"""
