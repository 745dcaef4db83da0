"""One compiled training step: loss, gradients, global-norm clipping and Adam in one graph.

Small networks (PPO's 64x64 MLPs on minibatches of 64) spend most of an update in
per-op overhead: autograd bookkeeping, ~150 tiny kernels, the optimiser's Python loop.
``CompiledAdamStep`` traces the whole minibatch step once with ``torch.compile``
(``torch.func.grad_and_value`` over ``functional_call``, so no autograd graph exists at
run time) and replays it as a handful of fused C++ kernels plus the matmuls.

The maths is ``torch.optim.Adam`` (no weight decay, no amsgrad) after
``nn.utils.clip_grad_norm_``, on the optimiser's own state tensors (``step``,
``exp_avg``, ``exp_avg_sq``), so ``optimizer.state_dict()`` checkpoints and resumes work
unchanged and either path can continue the other's run. Random ops in the loss draw
from torch's global generator as eager code would. Results equal the eager path to
float tolerance (kernel fusion reorders float operations), not bit for bit. Needs a C++
compiler; compilation costs seconds once per process (per input shape).

An update made of several steps (SAC: critic, actor, temperature, Polyak) can be one
graph too: ``functional_grads``, ``adam_state`` / ``adam_constants`` / ``adam_update_``
are the pieces ``CompiledAdamStep`` is built from; pass every parameter and optimiser
tensor into the compiled function and swap all modules' parameters through
``functional_call`` (``LossModule``), so no tensor reaches the graph twice under two names.
An update whose losses are all taken from the pre-update parameters (CQL, IQL) can take
the gradients of their SUM in one backward pass, provided no loss reaches another's
parameters: ``detached_call`` scores actions with a critic whose parameters get no
gradient (eager and traced alike), and ``functional_grads(..., input_grads=...)``
differentiates plain tensors passed as inputs (a temperature's log) too.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, grad_and_value


def cxx_compiler() -> str | None:
    """Path of the C++ compiler torch.compile would build CPU kernels with ($CXX, g++,
    c++ or clang++), or None when there is none."""
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        path = shutil.which(name) if name else None
        if path:
            return path
    return None


def check_cxx_compiler() -> None:
    """torch.compile on the CPU builds C++ kernels: fail early, with the fix, without one.
    (Agents never get here without one: rlcore.speed resolves their ``compile`` first.)"""
    if cxx_compiler() is None:
        raise RuntimeError(
            "compile=true needs a C++ compiler for torch.compile on the CPU (none of "
            "$CXX, g++, c++, clang++ found): install one (e.g. apt install g++) or set "
            "algo.compile=false"
        )


# Inductor settings for every rlcore graph: random ops draw from torch's global generator
# exactly as eager code would (so compiled and eager runs see the same noise), and the
# generated wrapper that launches the kernels is C++ rather than Python (on small CPU
# graphs the Python wrapper's allocations and stride checks cost as much as the maths).
INDUCTOR_OPTIONS: dict[str, Any] = {"fallback_random": True, "cpp_wrapper": True}


def compile_graph(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compile`` with rlcore's CPU settings: one full graph per input shape
    (no graph breaks, no dynamic shapes) built with ``INDUCTOR_OPTIONS``."""
    check_cxx_compiler()
    # every agent compiles its own graph of the same method's code (a guard on ``self``),
    # and SAC has one per (actor burst, Polyak) pair: dynamo's default of 8 graphs per
    # code object would make the 5th compiled SAC in one process (tests, in-process
    # sweeps) a hard error under fullgraph=True
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return torch.compile(fn, dynamic=False, fullgraph=True, options=INDUCTOR_OPTIONS)


def adam_state(
    optimizer: torch.optim.Optimizer, params: list[torch.Tensor]
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """The optimiser's per-parameter ``step``, ``exp_avg``, ``exp_avg_sq`` tensors (created
    as torch's Adam would on its first step), to pass into a compiled graph."""
    steps, exp_avgs, exp_avg_sqs = [], [], []
    for param in params:
        state = optimizer.state[param]
        if not state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        steps.append(state["step"])
        exp_avgs.append(state["exp_avg"])
        exp_avg_sqs.append(state["exp_avg_sq"])
    return steps, exp_avgs, exp_avg_sqs


def adam_constants(optimizer: torch.optim.Adam) -> tuple[float, float, float]:
    """(beta1, beta2, eps) of a one-group plain Adam; anything else is an error here."""
    groups = optimizer.param_groups
    if len(groups) != 1:
        raise ValueError("a compiled Adam step needs an optimiser with one param group")
    group = groups[0]
    if group["weight_decay"] or group["amsgrad"] or group["maximize"]:
        raise ValueError("a compiled Adam step implements plain Adam only (no weight decay)")
    beta1, beta2 = (float(b) for b in group["betas"])
    return beta1, beta2, float(group["eps"])


def adam_update_(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    state: tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]],
    lr: torch.Tensor,
    constants: tuple[float, float, float],
) -> None:
    """``torch.optim.Adam``'s single-tensor update, in place, as traceable tensor code."""
    beta1, beta2, eps = constants
    for param, grad, step, exp_avg, exp_avg_sq in zip(params, grads, *state):
        step.add_(1)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1**step
        bias_correction2_sqrt = (1 - beta2**step).sqrt()
        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        param.sub_(exp_avg / denom * (lr / bias_correction1))


def functional_grads(
    module: nn.Module,
    values: dict[str, torch.Tensor],
    trainable: list[str],
    *inputs: Any,
    input_grads: tuple[int, ...] = (),
) -> tuple[list[torch.Tensor], Any]:
    """Gradients of ``module(*inputs)[0]`` (a scalar loss) w.r.t. the parameters named in
    ``trainable``, with every parameter taken from ``values`` (``functional_call``): no
    autograd graph outlives the call, so it traces into one compiled graph. ``input_grads``
    names positions of ``inputs`` (tensors) to differentiate as well. Returns the gradients
    (``trainable`` order, then ``input_grads`` order) and the module's whole output."""
    fixed = {name: value for name, value in values.items() if name not in trainable}

    def loss_of(
        train_values: dict[str, torch.Tensor], diff_inputs: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, Any]:
        call_inputs = list(inputs)
        for position, value in zip(input_grads, diff_inputs):
            call_inputs[position] = value
        out = functional_call(module, {**fixed, **train_values}, tuple(call_inputs))
        return out[0], out

    train_values = {n: values[n] for n in trainable}
    diff_inputs = tuple(inputs[i] for i in input_grads)
    (grads, input_grad_values), (_, out) = grad_and_value(loss_of, argnums=(0, 1), has_aux=True)(
        train_values, diff_inputs
    )
    return [grads[name] for name in trainable] + list(input_grad_values), out


def detached_call(module: nn.Module, *inputs: torch.Tensor) -> Any:
    """``module(*inputs)`` with its parameters detached: gradients reach the inputs (the
    actions an actor loss scores) but not the module. Eager this equals calling it inside
    ``rlcore.utils.frozen``; inside ``functional_grads`` it detaches the swapped-in
    parameters, so a sum of losses has no cross term through this call."""
    params = {name: p.detach() for name, p in module.named_parameters()}
    return functional_call(module, params, inputs)


def adam_steps_(
    groups: list[tuple[list[torch.Tensor], list[torch.Tensor]]],
    states: list[tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]],
    lrs: torch.Tensor,
    constants: list[tuple[float, float, float]],
) -> None:
    """``adam_update_`` for several optimisers: group i = (params, grads) with state i,
    learning rate ``lrs[i]`` and constants i. A group with no params is skipped (an
    optimiser that does not step in this update)."""
    for i, (params, grads) in enumerate(groups):
        if params:
            adam_update_(params, grads, states[i], lrs[i], constants[i])


def graph_inputs(
    optimizers: list[torch.optim.Optimizer], params: list[list[torch.Tensor]]
) -> tuple[list[tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]], torch.Tensor]:
    """(each optimiser's Adam state for its ``params``, their current learning rates as
    one float32 tensor): what a compiled update reads besides parameters and data. The lr
    goes in as a tensor, so changing it (a schedule) does not recompile."""
    states = [adam_state(opt, p) for opt, p in zip(optimizers, params)]
    lrs = torch.tensor([float(opt.param_groups[0]["lr"]) for opt in optimizers])
    return states, lrs


class LossModule(nn.Module):
    """Holds the trained modules so ``functional_call`` can swap their parameters; its
    ``forward`` is ``loss_fn`` (which calls those same module objects)."""

    def __init__(self, modules: dict[str, nn.Module], loss_fn: Callable[..., Any]) -> None:
        super().__init__()
        self.parts = nn.ModuleDict(modules)
        self.loss_fn = loss_fn

    def forward(self, *inputs: torch.Tensor) -> Any:
        return self.loss_fn(*inputs)


class CompiledAdamStep:
    """``step(*inputs)`` = one ``loss_fn(*inputs)`` gradient step with clipping and Adam.

    ``loss_fn`` must call the ``modules`` (the objects themselves, e.g. ``self.actor``)
    and return a tuple whose first element is the scalar loss; the whole tuple comes back,
    detached, after the parameters were updated. ``optimizer`` is the ``torch.optim.Adam``
    over exactly these modules' parameters; its current ``lr`` is read on every call
    (annealing needs no recompilation), its betas and eps once, here.
    """

    def __init__(
        self,
        modules: dict[str, nn.Module],
        loss_fn: Callable[..., tuple[torch.Tensor, ...]],
        optimizer: torch.optim.Adam,
        max_grad_norm: float | None = None,
    ) -> None:
        self.wrapper = LossModule(modules, loss_fn)
        named = dict(self.wrapper.named_parameters())
        self.names = list(named)
        self.params = list(named.values())
        self.constants = adam_constants(optimizer)
        if {id(p) for p in optimizer.param_groups[0]["params"]} != {id(p) for p in self.params}:
            raise ValueError("CompiledAdamStep needs one Adam param group holding every parameter")
        # betas and eps are constants of the graph (reading the param group inside it
        # would make every lr change a guard failure and a recompilation); lr goes in as
        # a tensor per call
        self.optimizer = optimizer
        self.max_grad_norm = max_grad_norm
        self._compiled = compile_graph(self._step)

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        state = adam_state(self.optimizer, self.params)
        lr = torch.tensor(float(self.optimizer.param_groups[0]["lr"]), dtype=torch.float32)
        with torch.no_grad():  # the compiled graph is a pure inference graph
            return self._compiled(self.params, state, lr, *inputs)

    def _step(
        self,
        params: list[torch.Tensor],
        state: tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]],
        lr: torch.Tensor,
        *inputs: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        values = {name: p.detach() for name, p in zip(self.names, params)}
        grads, out = functional_grads(self.wrapper, values, self.names, *inputs)
        if self.max_grad_norm is not None:  # nn.utils.clip_grad_norm_
            norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
            total = torch.linalg.vector_norm(norms)
            coef = (self.max_grad_norm / (total + 1e-6)).clamp(max=1.0)
            grads = [g * coef for g in grads]
        adam_update_(params, grads, state, lr, self.constants)
        return tuple(o.detach() for o in out)
