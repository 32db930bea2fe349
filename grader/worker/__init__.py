"""Runs UNTRUSTED learner code.

This package is the only part of the harness that imports a learner's file. It depends on torch and its own
modules alone, never on the judge, the checks or `reference/`, so that a sandbox can hand a worker a copy of this
folder and nothing else. The judge imports from here what both sides share:

- `messages`: the ops, the messages and the worker's config (standard library only).
- `framing`: the frame header and `ProtocolError` (standard library only).
- `protocol`: frames (a JSON header and raw tensor bytes), and the observation of one call.
- `__main__`: the worker itself: import the submission, then answer calls.
"""
