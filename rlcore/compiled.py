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

An agent's whole update (SAC: critic steps, actor, temperature, Polyak) is one graph
too, without a second copy of it: the agent writes its update once, as a function of a
``Steps`` object (``minimise(optimisers, loss_fn, *inputs)``, ``polyak(target, source,
tau)``). Eager it runs with ``EagerSteps`` (backward, the optimisers' own ``step``,
``polyak_update``); ``CompiledUpdate`` traces the same function with ``GraphSteps``, which
take the gradients by ``torch.func`` (every module's parameters swapped in through
``functional_call``, so no tensor reaches the graph twice under two names) and step Adam
in place on the optimisers' state tensors. A summed loss is right when no loss reaches
another's parameters: ``detached_call`` scores actions with a critic whose parameters get
no gradient, eager and traced alike.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn
from torch.func import functional_call, grad_and_value
from torch.optim.adam import adam as functional_adam

from rlcore.nets import polyak_update
from rlcore.utils import frozen as frozen_params
from rlcore.utils import step_summed


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
    as torch's fused / capturable Adam would on its first step: all on the parameter's
    device, since a graph compiled for a GPU cannot read a CPU tensor), to pass into a
    compiled graph."""
    steps, exp_avgs, exp_avg_sqs = [], [], []
    for param in params:
        state = optimizer.state[param]
        if not state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32, device=param.device)
            state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        if state["step"].device != param.device:  # loaded onto the CPU (an eager run's)
            state["step"] = state["step"].to(param.device)
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
    """``torch.optim.Adam``'s update, in place: torch's own functional ``adam`` in its
    capturable form (step count, lr and bias corrections stay tensors), which traces into
    a compiled graph."""
    beta1, beta2, eps = constants
    steps, exp_avgs, exp_avg_sqs = state
    functional_adam(
        params, grads, exp_avgs, exp_avg_sqs, [], steps, foreach=False, capturable=True,
        amsgrad=False, beta1=beta1, beta2=beta2, lr=lr, weight_decay=0.0, eps=eps,
        maximize=False,
    )  # fmt: skip


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


def graph_inputs(
    optimizers: list[torch.optim.Optimizer], params: list[list[torch.Tensor]]
) -> tuple[list[tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]], torch.Tensor]:
    """(each optimiser's Adam state for its ``params``, their current learning rates as
    one float32 tensor): what a compiled update reads besides parameters and data. The lr
    goes in as a tensor, so changing it (a schedule) does not recompile."""
    states = [adam_state(opt, p) for opt, p in zip(optimizers, params)]
    device = next((p.device for group in params for p in group), torch.device("cpu"))
    lrs = torch.tensor([float(opt.param_groups[0]["lr"]) for opt in optimizers], device=device)
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
        lr = torch.tensor(
            float(self.optimizer.param_groups[0]["lr"]), dtype=torch.float32,
            device=self.params[0].device,
        )  # fmt: skip
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


class Steps(Protocol):
    """What an update function asks of its gradient steps (``EagerSteps``, ``GraphSteps``)."""

    def minimise(
        self, names: tuple[str, ...], loss_fn: Callable[..., Any], *inputs: Any,
        frozen: tuple[str, ...] = (),
    ) -> Any: ...  # fmt: skip

    def polyak(self, target: str, source: str, tau: float) -> None: ...


class EagerSteps:
    """The gradient steps an update function takes, as torch runs them: backward, then
    each optimiser's own ``step``; Polyak averages on the modules' parameters.

    An agent's update is written once, against ``minimise`` and ``polyak`` (the
    ``Steps`` both classes here provide): eager it runs with this class, compiled with
    ``GraphSteps`` inside one ``CompiledUpdate`` graph."""

    def __init__(
        self, modules: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer]
    ) -> None:
        self.modules = modules
        self.optimizers = optimizers

    def minimise(
        self, names: tuple[str, ...], loss_fn: Callable[..., Any], *inputs: Any,
        frozen: tuple[str, ...] = (),
    ) -> Any:  # fmt: skip
        """``loss_fn(*inputs)`` = (named losses, anything else): the losses checked finite,
        one backward pass of their sum, a step of the optimisers ``names``; the modules
        ``frozen`` get no gradient (gradients still flow through them). Returns the output."""
        params = [p for part in frozen for p in self.modules[part].parameters()]
        with frozen_params(params):
            out = loss_fn(*inputs)
            step_summed(out[0], [self.optimizers[name] for name in names])
        return out

    def polyak(self, target: str, source: str, tau: float) -> None:
        """Module ``target`` <- (1 - tau) target + tau ``source``."""
        polyak_update(self.modules[target], self.modules[source], tau)


class GraphSteps:
    """``EagerSteps`` inside a compiled graph (``CompiledUpdate``): gradients by torch.func
    (``functional_grads``: no autograd graph outlives a step), Adam in place on the
    optimisers' own state tensors, Polyak on the parameters' values. Tensors that an
    optimiser steps but no module holds (a temperature's log) are found among the loss's
    inputs and differentiated there."""

    def __init__(
        self,
        update: CompiledUpdate,
        values: dict[str, torch.Tensor],
        free: list[torch.Tensor],
        states: list[tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]],
        lrs: torch.Tensor,
    ) -> None:
        self.update, self.values, self.free, self.states, self.lrs = (
            update, values, free, states, lrs
        )  # fmt: skip

    def _value(self, slot: tuple[str, str | int]) -> torch.Tensor:
        kind, key = slot
        return self.values[key] if kind == "param" else self.free[key]  # type: ignore[index]

    def minimise(
        self, names: tuple[str, ...], loss_fn: Callable[..., Any], *inputs: Any,
        frozen: tuple[str, ...] = (),
    ) -> Any:  # fmt: skip
        """As ``EagerSteps.minimise``; ``frozen`` needs nothing here (only the stepped
        tensors are differentiated)."""
        slots = [slot for name in names for slot in self.update.slots[name]]
        params = [slot for slot in slots if slot[0] == "param"]
        free = [slot for slot in slots if slot[0] == "free"]
        positions = [_position(inputs, self._value(slot)) for slot in free]
        grads, (_, out) = functional_grads(
            self.update.module, self.values, [key for _, key in params], loss_fn, *inputs,  # type: ignore[misc]
            input_grads=tuple(1 + i for i in positions),
        )  # fmt: skip
        grad_of = dict(zip(params + free, grads))
        for name in names:
            index = self.update.order.index(name)
            adam_update_(
                [self._value(slot) for slot in self.update.slots[name]],
                [grad_of[slot] for slot in self.update.slots[name]],
                self.states[index], self.lrs[index], self.update.constants[index],
            )  # fmt: skip
        return out

    def polyak(self, target: str, source: str, tau: float) -> None:
        """As ``EagerSteps.polyak``, on the parameters' values."""
        names = self.update.part_names
        values = self.values
        torch._foreach_lerp_(
            [values[n] for n in names[target]], [values[n] for n in names[source]], tau
        )


def _position(inputs: tuple[Any, ...], tensor: torch.Tensor) -> int:
    return next(i for i, x in enumerate(inputs) if x is tensor)


class _SummedLosses(nn.Module):
    """Holds an agent's modules so ``functional_call`` can swap their parameters; its
    ``forward(loss_fn, *inputs)`` is (sum of the named losses, ``loss_fn``'s output)."""

    def __init__(self, modules: dict[str, nn.Module]) -> None:
        super().__init__()
        self.parts = nn.ModuleDict(modules)

    def forward(self, loss_fn: Callable[..., Any], *inputs: Any) -> tuple[torch.Tensor, Any]:
        out = loss_fn(*inputs)
        return sum(out[0].values()), out


class CompiledUpdate:
    """An agent's update function, the one its eager path runs, as one compiled graph.

    ``body(steps, *free, *args)`` takes its gradient steps through ``steps``
    (``EagerSteps`` eager, ``GraphSteps`` here) and calls the agent's modules, which must
    be the ``modules`` given here (the objects themselves); ``optimizers`` (one plain Adam
    param group each) step their parameters or the ``free`` tensors (e.g. a log
    temperature), which ``body`` receives first and passes to the losses that use them.
    Every parameter, Adam moment and free tensor goes into the graph as an input and is
    updated in place, so checkpoints are the optimisers' own and either path continues
    the other's run. Only the optimisers given here get Adam state (as eager, give those
    that step)."""

    def __init__(
        self,
        body: Callable[..., Any],
        modules: dict[str, nn.Module],
        optimizers: dict[str, torch.optim.Adam],
        free: tuple[torch.Tensor, ...] = (),
    ) -> None:
        self.body = body
        self.module = _SummedLosses(modules)
        named = dict(self.module.named_parameters())
        self.names, self.params = list(named), list(named.values())
        name_of = {id(p): n for n, p in named.items()}
        free_of = {id(t): i for i, t in enumerate(free)}
        self.free = list(free)
        # modules' parameter names (functional_call's keys), found by identity
        self.part_names = {
            part: [name_of[id(p)] for p in module.parameters()] for part, module in modules.items()
        }
        self.order = list(optimizers)
        self.optimizers = [optimizers[name] for name in self.order]
        self.constants = [adam_constants(opt) for opt in self.optimizers]
        self.slots: dict[str, list[tuple[str, str | int]]] = {
            name: [
                ("param", name_of[id(p)]) if id(p) in name_of else ("free", free_of[id(p)])
                for p in opt.param_groups[0]["params"]
            ]
            for name, opt in optimizers.items()
        }
        self._compiled = compile_graph(self._run)

    def __call__(self, *args: Any) -> Any:
        """``body(GraphSteps, *free, *args)`` through the compiled graph (one graph per
        distinct non-tensor argument, e.g. a flag)."""
        states, lrs = graph_inputs(
            self.optimizers, [list(opt.param_groups[0]["params"]) for opt in self.optimizers]
        )
        with torch.no_grad():  # the graph computes its own gradients (torch.func)
            return self._compiled(self.params, self.free, states, lrs, *args)

    def _run(
        self,
        params: list[torch.Tensor],
        free: list[torch.Tensor],
        states: list[tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]],
        lrs: torch.Tensor,
        *args: Any,
    ) -> Any:
        values = {name: p.detach() for name, p in zip(self.names, params)}
        return self.body(GraphSteps(self, values, free, states, lrs), *free, *args)
