"""Spins at import for up to 60 s: the import timeout must end it."""
# expect_status: import_timeout
# expect_score: 0

import time

deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    pass
