"""Both functions call sys.exit instead of returning."""

import sys


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    sys.exit(0)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    sys.exit(1)
