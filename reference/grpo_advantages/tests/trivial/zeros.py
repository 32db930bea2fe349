"""Trivial answer: zero advantages."""

import torch


def grpo_advantages(rewards, group_size, std_normalize=True, eps=1e-6, unbiased=False):
    return torch.zeros_like(rewards)
