"""PaperLeet: grade PyTorch implementations of paper equations against a hidden reference.

The package, by part (each subpackage's docstring maps its modules; docs/architecture.md follows one case
from the command line to the report):

- `cli`, `commands`: the command line, and the work behind each command.
- `engine`: the batch and output engine: one file or a batch graded into its outputs, whatever the judge does,
  and the exit code.
- `model/`: what a problem is: its spec, its files, the closed vocabularies of verdicts and exit codes.
- `judge/`: grading one submission: cases, expectations, checks, comparison, diagnosis, the toy experiment.
- `confine/`: the trusted side of the sandbox: the box, its init, the syscall filter, control groups, the
  zygote and the judge's handle on one worker process.
- `worker/`: the untrusted side: the only code that imports a learner's file.
- `outputs/`: what a grade produces: report.json, the learner's view, exports, terminal tables, plots, pages.
- `course/`: instructor tooling: validating a problem, Gradescope and learner packs, sharded batches.
- `watch/`: grading a file again on every save.
- `author`: the one import of a problem's case generators: dtypes, seeded draws, masks, derived case variants.
- `text`: learner-controlled text made safe; `paths`: where the project's folders are; `bench`: `make bench`.
"""

__version__ = "0.1.0"
