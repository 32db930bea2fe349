"""Raises SystemExit(0) at import."""
# expect_status: import_error
# expect_score: 0

import sys

sys.exit(0)
