"""At import, replaces the worker's observation of a call (`observe_call` of its protocol module) with a forged
one that is the same for every case: zeros of the promised shape and dtype, reported graph-connected, a zero
gradient for every input that requires grad, and every input reported unchanged. It answers for the functions
of every problem it knows. Such an answer must earn no more than honest zeros beyond the signatures."""
# expect_status: graded

import sys

import torch

# function -> its outputs, each (input whose shape it has or None for 0-dim, input whose dtype it has)
OUTPUTS = {
    "masked_is_weights": ("logp", "logp"),
    "offpolicy_loss": (None, "logp"),
    "behavior_weights": [("train_logp", "train_logp"), (None, "train_logp")],
    "grpo_advantages": ("rewards", "rewards"),
    "ppo_clip_loss": [(None, "logp"), (None, "logp")],
    "score_centering_loss": ("advantages", "logits"),
}


def _zeros(recipe, kwargs):
    if isinstance(recipe, list):
        return tuple(_zeros(item, kwargs) for item in recipe)
    shape_from, dtype_from = recipe
    dtype = kwargs[dtype_from].dtype if isinstance(kwargs.get(dtype_from), torch.Tensor) else torch.float32
    shape = kwargs[shape_from].shape if isinstance(kwargs.get(shape_from), torch.Tensor) else ()
    return torch.zeros(shape, dtype=dtype)


def _connected(description):
    if description.get("kind") == "tensor":
        description.update(requires_grad=False, has_grad_fn=True)
    for item in description.get("items", []):
        _connected(item)
    return description


def _forge(protocol):
    def observe_call(function, kwargs, requires_grad, backward, source=None):
        recipe = OUTPUTS.get(getattr(function, "__name__", ""), (None, None))
        observation = {"output": _connected(protocol.describe(_zeros(recipe, kwargs)))}
        if backward:
            observation["grads"] = {name: torch.zeros_like(kwargs[name]) for name in requires_grad}
        observation["inputs_after"] = {
            name: value.detach().clone() for name, value in kwargs.items() if type(value) is torch.Tensor
        }
        return observation

    return observe_call


for _module in list(sys.modules.values()):
    if all(hasattr(_module, name) for name in ("observe_call", "describe", "write_frame")):
        _module.observe_call = _forge(_module)
        print(f"forged observe_call of {_module.__name__}")


def __getattr__(name):
    if name not in OUTPUTS:
        raise AttributeError(name)

    def function(**kwargs):
        raise NotImplementedError("never called: the forged observation answers instead")

    function.__name__ = name
    return function
