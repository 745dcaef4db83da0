"""Running CORL's single-file PyTorch scripts on our numbers (used by the *_reference.py
harnesses beside this file, in the side environment that has CORL's dependencies).

Nothing of CORL is copied: a script is imported by path from a CORL checkout
(``offline_common.load_script``, which stubs the modules it imports only for its training
loop: d4rl, gym, wandb, tqdm).
Hard-coded layer widths (256 in CORL's TD3+BC and CQL networks) are narrowed by handing
the script a ``torch.nn`` namespace whose ``Linear`` maps 256 to a smaller width: the
script's own constructors run unchanged. Random draws inside an update are replaced by
the numpy draws of ``offline_common`` (``scripted_noise``).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import numpy as np
import torch
from offline_common import Script, load_script
from torch import nn


def narrow(module: types.ModuleType, width: int, hard_coded: int = 256) -> None:
    """Make ``module``'s constructors build ``width`` where they hard-code ``hard_coded``."""

    class Linear(nn.Linear):
        def __init__(self, fan_in: int, fan_out: int, *args, **kwargs) -> None:
            fan_in = width if fan_in == hard_coded else fan_in
            fan_out = width if fan_out == hard_coded else fan_out
            super().__init__(fan_in, fan_out, *args, **kwargs)

    shim = types.ModuleType("torch.nn (narrowed)")
    shim.__dict__.update(vars(nn))
    shim.Linear = Linear
    module.nn = shim


def linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


@torch.no_grad()
def set_layers(module: nn.Module, layers: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Copy (w (in, out), b) pairs into the nn.Linear layers of ``module``, in order."""
    found = linears(module)
    assert len(found) == len(layers), (len(found), len(layers))
    for linear, (w, b) in zip(found, layers):
        linear.weight.copy_(torch.from_numpy(w.T.copy()))
        linear.bias.copy_(torch.from_numpy(b))


def get_layers(module: nn.Module, net: str) -> dict[str, np.ndarray]:
    """The nn.Linear layers of ``module`` in the shared layout (``offline_common``)."""
    params = {}
    for i, linear in enumerate(linears(module)):
        params[f"{net}.{i}.w"] = linear.weight.detach().numpy().T.copy()
        params[f"{net}.{i}.b"] = linear.bias.detach().numpy().copy()
    return params


def corl_batch(batch: dict[str, np.ndarray], mc_return: bool = False) -> list[torch.Tensor]:
    """CORL's TensorBatch: [states, actions, rewards (B, 1), next_states, dones (B, 1)]
    (+ mc_returns (B, 1) for Cal-QL)."""
    names = ["obs", "action", "reward", "next_obs", "terminated"] + (
        ["mc_return"] if mc_return else []
    )
    column = {"reward", "terminated", "mc_return"}
    return [torch.from_numpy(batch[n][:, None] if n in column else batch[n]).float() for n in names]


@contextlib.contextmanager
def scripted_noise(normal: Script, uniform: Script | None = None) -> Iterator[None]:
    """Inside the block, torch's standard-normal draws of ``randn_like`` and of
    ``Normal.rsample`` / ``.sample`` come from ``normal``; ``Tensor.uniform_(lo, hi)`` fills
    from ``uniform`` (U[0, 1) values mapped to [lo, hi))."""
    from torch.distributions import normal as normal_module

    saved = (torch.randn_like, normal_module._standard_normal, torch.Tensor.uniform_)

    def randn_like(x: torch.Tensor, **_: object) -> torch.Tensor:
        return torch.from_numpy(normal.pop(tuple(x.shape))).to(x.dtype)

    def standard_normal(shape, dtype, device) -> torch.Tensor:
        return torch.from_numpy(normal.pop(tuple(shape))).to(dtype=dtype, device=device)

    def uniform_(x: torch.Tensor, low: float = 0.0, high: float = 1.0, **_: object):
        assert uniform is not None, "an unexpected uniform draw"
        u = torch.from_numpy(uniform.pop(tuple(x.shape))).to(x.dtype)
        with torch.no_grad():
            return x.copy_(low + (high - low) * u)

    torch.randn_like = randn_like
    normal_module._standard_normal = standard_normal
    torch.Tensor.uniform_ = uniform_
    try:
        yield
    finally:
        torch.randn_like, normal_module._standard_normal, torch.Tensor.uniform_ = saved


load_corl = load_script  # the PyTorch harnesses' name for it
