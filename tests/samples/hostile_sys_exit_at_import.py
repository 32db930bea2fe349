"""Calls sys.exit while being imported."""

import sys

sys.exit("leaving before the functions exist")
