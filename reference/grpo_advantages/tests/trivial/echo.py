"""Trivial answer: the rewards echoed back."""


def grpo_advantages(rewards, group_size, std_normalize=True, eps=1e-6, unbiased=False):
    return rewards.detach().clone()
