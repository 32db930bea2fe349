"""Every call raises a ValueError whose message holds lone surrogates, terminal escapes (clear screen, a title
change, colours), a bidi override, rich markup and an HTML tag; the file also prints undecodable bytes and escapes
to both streams. None of it may break a report, a page, the CSV or the terminal, or reach them unescaped."""
# expect_status: graded, budget_exceeded

import os

import torch

HOSTILE = (
    "lone \udcff\ud800 surrogates, \x1b[2J\x1b]0;owned\x07 escapes, \u202eevil\u202c bidi, "
    "[bold red]markup[/bold red], <script>alert(1)</script>, \x9b C1"
)
os.write(1, b"stdout: \xff\xfe undecodable, \x1b[31m red \x1b[0m, \r overwritten\n")
os.write(2, b"stderr: \xc3\x28 invalid, \x1b]8;;http://x\x07link\x1b]8;;\x07\n")


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    raise ValueError(HOSTILE)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    raise ValueError(HOSTILE + str(torch.__version__))
