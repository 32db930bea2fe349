"""Runs UNTRUSTED learner code.

This package is the only part of the harness that imports a learner's file. It depends on torch and
its own `protocol` module alone, never on the judge, the checks or `reference/`, so that a sandbox can
hand a worker a copy of this folder and nothing else.
"""
