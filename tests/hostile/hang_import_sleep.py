"""Sleeps at import for 60 s: the import timeout must end it."""
# expect_status: import_timeout
# expect_score: 0

import time

time.sleep(60)
