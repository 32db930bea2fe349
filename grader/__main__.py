"""`python -m grader`: the paperleet command line."""

import os
import sys

from grader.cli import main

if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # every output is written and closed, every process of the grade ended: tearing torch's modules down would
    # only add a few tenths of a second before the shell gets its answer
    os._exit(code)
