"""Grading one submission on the trusted side.

- `grading`: `Grading`, which runs every check against a worker and assembles the report.
- `cases`: `Call`, one call of one contract function, the unit every check is built from.
- `expectations`: what the reference and the oracle do on every case, cached per problem and seed.
- `checks`: the registry of check kinds, each a function from (context, spec) to a result.
- `observation`: accepting a worker's untrusted answer and comparing it, aspect by aspect.
- `compare`: tensor comparison with tolerances, and the message that says why two values differ.
- `diagnosis`: naming the misreading behind failures, and follow-through credit.
- `experiment`: the T3 toy, driven here with the learner's functions behind proxies.
"""
