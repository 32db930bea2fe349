"""Drive a problem's T3 toy experiment on the trusted side, calling the contract functions through proxies.

The toy (`problems/<id>/experiment.py`) is a list of parts, `PARTS`, each `part(rng, **functions) -> series`.
It runs in the judge's process, never in the learner's: every call of a contract function is one observed
call of the learner's worker (or of the reference, in process), so a submission can neither replace the
driver nor compute a series with anything but its own functions. Every part draws from `rng`, a generator
seeded by the grading seed and the part's name, so the series of the public seed (in previews and the
learner pack) differ from the graded ones.

A proxy hands back plain detached tensors. Where an argument requires grad and the function returned a
0-dim tensor connected to the graph (a loss), that tensor comes back differentiable: its gradient with
respect to those arguments was computed next to the call, and `_Replayed` feeds it into the driver's graph.
A non-scalar output has no such gradient, only vector-Jacobian products: `proxy.paired(cotangent, **kwargs)`
sends the cotangent with the call, the function's side runs `output.backward(cotangent)`, and the proxy hands
back `(pairing, output)`, `pairing` the 0-dim sum of output * cotangent, differentiable in the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from grader.judge.accept import accept_series
from grader.judge.cases import Call, generator_for
from grader.judge.compare import MAX_ELEMENTS, exception_text
from grader.judge.failures import CallFailed
from grader.model.verdicts import Verdict

Observe = Callable[[Call, float], dict[str, Any]]  # (call, timeout_s) -> an accepted observation


class ToyMisuse(Exception):
    """A toy asked for something the driver does not do (a cotangent that is not a finite float tensor): the
    judge's own fault, never caught as the learner's."""


@dataclass
class PartResult:
    """What one part produced: its series, or why it has none."""

    name: str
    series: dict[str, torch.Tensor] = field(default_factory=dict)
    failure: CallFailed | None = None


class _Replayed(torch.autograd.Function):
    """A value computed elsewhere, with the gradients computed there, spliced into this process's graph."""

    @staticmethod
    def forward(
        ctx: Any, value: torch.Tensor, grads: tuple[torch.Tensor | None, ...], *inputs: torch.Tensor
    ) -> torch.Tensor:
        ctx.grads = grads
        return value.clone()

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        scaled = tuple(None if g is None else grad_output * g for g in ctx.grads)
        return (None, None, *scaled)


def describe_arguments(kwargs: Mapping[str, Any]) -> str:
    """The arguments of a toy call in a few words each: the toy's inputs are public, their values are not needed."""
    parts = []
    for name, value in kwargs.items():
        if isinstance(value, torch.Tensor):
            parts.append(f"{name}={str(value.dtype).removeprefix('torch.')}{list(value.shape)}")
        else:
            parts.append(f"{name}={value!r}"[:60])
    return ", ".join(parts)


def _value(desc: dict[str, Any], where: str) -> Any:
    """The Python value an observed output description stands for."""
    kind = desc.get("kind")
    if kind == "tensor":
        return desc["value"]
    if kind == "sequence":
        return tuple(_value(item, f"{where}[{i}]") for i, item in enumerate(desc["items"]))
    if kind == "python":
        return desc.get("value")
    raise CallFailed(
        Verdict.FAIL,
        f"{where} returned a {desc.get('type', 'value of an unknown type')}, not a tensor or a tuple of tensors",
    )


def _first_scalar(output: Any, desc: dict[str, Any]) -> tuple[torch.Tensor | None, Callable[[Any], Any]]:
    """The 0-dim tensor a backward would start from (the output, or the first item of a tuple), if connected,
    and how to put a replacement back in its place."""
    if isinstance(output, torch.Tensor) and output.dim() == 0 and desc.get("has_grad_fn"):
        return output, lambda new: new
    if isinstance(output, tuple) and output and isinstance(output[0], torch.Tensor) and output[0].dim() == 0:
        if desc["items"][0].get("has_grad_fn"):
            return output[0], lambda new: (new, *output[1:])
    return None, lambda new: output


class Driver:
    """Runs every part of one problem's toy against one set of functions, within one deadline."""

    def __init__(
        self,
        module: Any,
        function_names: list[str],
        observe: Observe,
        seed: int,
        timeout_s: float,
        call_timeout_s: float,
    ) -> None:
        parts = getattr(module, "PARTS", None)
        if not isinstance(parts, tuple) or not parts or not all(callable(p) for p in parts):
            raise TypeError("the problem's experiment.py must define PARTS, a tuple of functions")
        self.parts, self.names, self.observe, self.seed = parts, function_names, observe, seed
        self.deadline = time.monotonic() + timeout_s
        self.call_timeout_s = call_timeout_s
        self.calls = 0

    def run(self) -> list[PartResult]:
        return [self._run_part(part) for part in self.parts]

    def _run_part(self, part: Callable[..., dict[str, torch.Tensor]]) -> PartResult:
        result = PartResult(part.__name__)
        rng = generator_for(self.seed, f"experiment:{part.__name__}")
        proxies = {name: self._proxy(name, part.__name__) for name in self.names}
        try:
            with torch.enable_grad():
                raw = part(rng, **proxies)
            result.series = accept_series(raw, part.__name__)
        except CallFailed as failed:
            result.failure = failed
        except (TypeError, ValueError, IndexError, RuntimeError) as exc:
            # the toy's own checks of what a function returned (a wrong shape, a non-tensor), or torch refusing it
            result.failure = CallFailed(
                Verdict.FAIL,
                f"the toy's {part.__name__} could not use what your functions returned: {type(exc).__name__}: {exc}"[
                    :600
                ],
            )
        return result

    def _proxy(self, function: str, part: str) -> _Proxy:
        return _Proxy(self, function, part)

    def call(self, function: str, part: str, kwargs: dict[str, Any], cotangent: torch.Tensor | None) -> Any:
        """One observed call of `function`; with a cotangent, `(pairing, output)` instead of the output."""
        wrt = tuple(k for k, v in kwargs.items() if isinstance(v, torch.Tensor) and v.requires_grad)
        sent = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        self.calls += 1
        remaining = self.deadline - time.monotonic()
        where = f"{function}({describe_arguments(sent)}) in the toy's {part}"
        if remaining <= 0:
            raise CallFailed(Verdict.TIMEOUT, f"the toy experiment ran out of time before {where}")
        backward: bool | torch.Tensor = bool(wrt) if cotangent is None else cotangent
        observation = self.observe(
            Call(function, sent, f"T3 {part}: {function}", wrt, backward), min(self.call_timeout_s, remaining)
        )
        inputs = [kwargs[k] for k in wrt]
        if cotangent is None:
            return self._output(observation, where, wrt, inputs)
        return self._paired(observation, where, wrt, inputs, cotangent)

    def _output(self, observation: dict[str, Any], where: str, wrt: tuple[str, ...], inputs: list[torch.Tensor]) -> Any:
        output = _value(_described(observation, where), where)
        scalar, put_back = _first_scalar(output, observation["output"])
        if scalar is None or not inputs:
            return output
        return put_back(_differentiable(scalar, observation, where, wrt, inputs))

    def _paired(
        self,
        observation: dict[str, Any],
        where: str,
        wrt: tuple[str, ...],
        inputs: list[torch.Tensor],
        cotangent: torch.Tensor,
    ) -> tuple[torch.Tensor, Any]:
        desc = _described(observation, where)
        output = _value(desc, where)
        first, first_desc = (output[0], desc["items"][0]) if isinstance(output, tuple) and output else (output, desc)
        if not isinstance(first, torch.Tensor) or not first.is_floating_point():
            raise CallFailed(Verdict.FAIL, f"{where} returned no floating tensor for the toy to differentiate")
        if first.shape != cotangent.shape:
            raise CallFailed(
                Verdict.FAIL, f"{where} returned shape {list(first.shape)}, the toy expects {list(cotangent.shape)}"
            )
        pairing = (first * cotangent.to(first.dtype)).sum()  # 0-dim, the value the learner's side backpropagated
        if not inputs:
            return pairing, output
        if not first_desc.get("has_grad_fn"):
            raise CallFailed(
                Verdict.FAIL,
                f"{where} returned a tensor detached from the graph (no grad_fn): the toy takes its gradient with "
                "respect to the arguments that require grad",
            )
        return _differentiable(pairing, observation, where, wrt, inputs), output


class _Proxy:
    """A contract function as a toy sees it: called like the function itself, or `paired` with a cotangent."""

    def __init__(self, driver: Driver, function: str, part: str) -> None:
        self.driver, self.function, self.part = driver, function, part
        self.__name__ = function

    def __call__(self, **kwargs: Any) -> Any:
        return self.driver.call(self.function, self.part, kwargs, None)

    def paired(self, cotangent: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        """`(sum of output * cotangent, output)`: the first, 0-dim, carries the function's own vector-Jacobian
        product into the toy's graph; the output (its first item, for a tuple) must have the cotangent's shape."""
        pairing, output = self.driver.call(self.function, self.part, kwargs, _checked_cotangent(cotangent))
        return pairing, output


def _checked_cotangent(cotangent: Any) -> torch.Tensor:
    """A plain copy of a toy's cotangent; ToyMisuse unless it is a finite, dense float tensor of bounded size."""
    if type(cotangent) is not torch.Tensor or cotangent.layout != torch.strided or cotangent.device.type != "cpu":
        raise ToyMisuse(f"a cotangent must be a dense CPU torch.Tensor, got {type(cotangent).__name__}")
    if not cotangent.is_floating_point() or cotangent.numel() > MAX_ELEMENTS:
        raise ToyMisuse(f"a cotangent must be floating with at most {MAX_ELEMENTS} elements")
    if not bool(cotangent.isfinite().all()):
        raise ToyMisuse("a cotangent must be finite")
    return cotangent.detach().clone()


def _described(observation: dict[str, Any], where: str) -> dict[str, Any]:
    """The output description of an observation; CallFailed when the call raised."""
    if "raised" in observation:
        raise CallFailed(Verdict.ERROR, f"{where} raised {exception_text(observation['raised'])}")
    desc: dict[str, Any] = observation["output"]
    return desc


def _differentiable(
    value: torch.Tensor, observation: dict[str, Any], where: str, wrt: tuple[str, ...], inputs: list[torch.Tensor]
) -> torch.Tensor:
    """`value` spliced into the driver's graph with the gradients observed next to the call."""
    if "backward_error" in observation:
        error = observation["backward_error"]
        raise CallFailed(Verdict.ERROR, f"backward through {where} raised {error.get('type')}: {error.get('message')}")
    grads = observation.get("grads", {})
    ordered = tuple(grads.get(name) for name in wrt)
    spliced: torch.Tensor = _Replayed.apply(value, ordered, *inputs)  # type: ignore[no-untyped-call]  # torch leaves it bare
    return spliced


def run_experiment(
    module: Any, function_names: list[str], observe: Observe, seed: int, timeout_s: float, call_timeout_s: float
) -> list[PartResult]:
    """Every part's series or failure, in the order of `PARTS`."""
    return Driver(module, function_names, observe, seed, timeout_s, call_timeout_s).run()
