"""Seeding, RNG state capture and finiteness checks."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import numpy as np
import torch

from rlcore.config import PRECISIONS


class NonFiniteLossError(RuntimeError):
    """An algorithm produced a NaN/inf loss; raised *before* it touched the parameters."""

    def __init__(self, name: str, value: float) -> None:
        super().__init__(f"non-finite loss '{name}' = {value}")
        self.name, self.value = name, value


def ensure_finite(**losses: torch.Tensor) -> None:
    """Raise NonFiniteLossError for the first NaN/inf loss (call before ``backward``)."""
    for name, loss in losses.items():
        value = float(loss.detach())
        if not math.isfinite(value):
            raise NonFiniteLossError(name, value)


def step_summed(losses: dict[str, torch.Tensor], optimizers: list[torch.optim.Optimizer]) -> None:
    """One backward pass of the sum of ``losses`` (checked finite first), then a step of
    every optimiser. Right when each loss reaches only its own parameters (targets and
    weights detached), as in CQL's and IQL's updates: the same gradients as one backward
    per loss, at the cost of one."""
    ensure_finite(**losses)
    for optimizer in optimizers:
        optimizer.zero_grad()
    sum(losses.values()).backward()
    for optimizer in optimizers:
        optimizer.step()


def scalars(values: dict[str, torch.Tensor]) -> dict[str, float]:
    """Python floats of scalar tensors, in one device-to-host transfer."""
    stacked = torch.stack([value.detach().float() for value in values.values()])
    return dict(zip(values, stacked.tolist()))


def tensors_finite(state: Any) -> bool:
    """True when every floating tensor in a (nested) state dict is finite."""
    if isinstance(state, torch.Tensor):
        return not state.is_floating_point() or bool(torch.isfinite(state).all())
    if isinstance(state, dict):
        return all(tensors_finite(v) for v in state.values())
    if isinstance(state, list | tuple):
        return all(tensors_finite(v) for v in state)
    return True


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def get_rng_state() -> dict[str, Any]:
    """Global RNG states of python, numpy and torch (CPU and, if used, CUDA)."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def as_obs_tensor(obs: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """float32 tensor on ``device`` (no copy when already there)."""
    if isinstance(obs, torch.Tensor):
        return obs.to(device=device, dtype=torch.float32)
    return torch.as_tensor(obs, dtype=torch.float32, device=device)


def batched_obs(obs: np.ndarray | torch.Tensor, device: torch.device) -> tuple[torch.Tensor, bool]:
    """Observation(s) as a float32 (B, ...) tensor, and whether a single obs was given."""
    tensor = as_obs_tensor(obs, device)
    single = tensor.dim() == 1
    return (tensor.unsqueeze(0) if single else tensor), single


def adam(
    params: Any, lr: float, fused: bool = True, eps: float = 1e-8, weight_decay: float = 0.0
) -> torch.optim.Adam:
    """Adam, with the fused single-kernel step when requested (same maths as foreach)."""
    kwargs = {"fused": True} if fused else {"foreach": True}
    return torch.optim.Adam(params, lr=lr, eps=eps, weight_decay=weight_decay, **kwargs)


def check_precision(precision: str) -> str:
    """``precision`` itself, or a ValueError naming the choices."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision '{precision}', choose from {list(PRECISIONS)}")
    return precision


def mixed_precision(precision: str, device: torch.device) -> AbstractContextManager[Any]:
    """Context for an update's forward passes. ``"float32"``: nothing changes. ``"bf16"``:
    bfloat16 autocast, so matmuls (most of an update's time on CPUs with AVX512-BF16 or
    AMX, and on GPUs) run in bfloat16 while parameters, optimiser state, network outputs
    (rlcore.nets casts them back) and losses stay float32."""
    if check_precision(precision) == "float32":
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


@contextmanager
def frozen(params: list[torch.nn.Parameter]) -> Iterator[None]:
    """Parameters get no gradients inside the block (gradients still flow *through* them),
    e.g. the critic while the actor loss backpropagates through Q(s, pi(s))."""
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def clipped_step(
    loss: torch.Tensor,
    groups: list[tuple[torch.optim.Optimizer, list[torch.nn.Parameter]]],
    max_grad_norm: float | None,
) -> None:
    """One gradient step of ``loss`` for several networks, each with its own optimiser and
    its own global gradient-norm clip (PPO-style fine-tuners: actor and critic).
    ``ensure_finite`` first: a NaN loss raises before any parameter moves."""
    ensure_finite(loss=loss)
    for optimizer, _ in groups:
        optimizer.zero_grad()
    loss.backward()
    for optimizer, params in groups:
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()
