"""Recurses through C frames at import with no recursion limit, until the C stack overflows."""
# expect_status: import_crashed, import_error
# expect_score: 0

import sys

sys.setrecursionlimit(10**7)


class Deep:
    def __repr__(self):
        return repr(Deep())  # repr() is C: every level costs C stack, not only a Python frame


repr(Deep())
