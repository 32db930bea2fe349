"""Both functions loop forever."""


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    while True:
        pass


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    while True:
        pass
