"""Action spaces in one place: which kinds an algorithm accepts (one clear refusal
message), how buffers store actions, how the env receives them, and how checkpoints
describe the space so ``rlcore.checkpoint.load_agent`` can rebuild it.

Two kinds exist: ``"box"`` (continuous, float32 vectors) and ``"discrete"`` (one integer
index 0..n-1 per step, stored as int64 with shape ``()``; ``to_env_action`` adds the
space's ``start`` when the env gets it).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

BOX, DISCRETE = "box", "discrete"
# the algorithms a user with the other kind of action space can turn to
SUGGESTIONS = {BOX: "algo=sac, algo=td3 or algo=ppo", DISCRETE: "algo=ppo or algo=dqn"}


def action_kind(space: gym.Space) -> str:
    """``"box"``, ``"discrete"``, or the space's class name for anything else."""
    if isinstance(space, gym.spaces.Box):
        return BOX
    if isinstance(space, gym.spaces.Discrete):
        return DISCRETE
    return type(space).__name__


def check_action_space(
    space: gym.Space, algo_name: str, accepted: tuple[str, ...], env_id: str | None = None
) -> None:
    """Raise one clear ValueError when ``algo_name`` cannot act in ``space``."""
    kind = action_kind(space)
    if kind in accepted:
        return
    needs = " or ".join(
        {BOX: "a continuous (Box)", DISCRETE: "a discrete (Discrete)"}[k] for k in accepted
    )
    where = f"{env_id} has" if env_id else "got"
    hint = f" For {kind} actions use {SUGGESTIONS[kind]}." if kind in SUGGESTIONS else ""
    raise ValueError(f"{algo_name} needs {needs} action space; {where} {space}.{hint}")


def require_box_actions(space: gym.Space, algo_name: str) -> None:
    """For algorithms that need continuous actions (SAC, TD3, the offline family)."""
    check_action_space(space, algo_name, (BOX,))


def action_storage(space: gym.Space) -> tuple[tuple[int, ...], torch.dtype]:
    """(shape, dtype) of one stored action: Box -> (shape, float32); Discrete -> ((), int64)."""
    if isinstance(space, gym.spaces.Discrete):
        return (), torch.int64
    return tuple(space.shape), torch.float32


def to_env_action(action: np.ndarray | torch.Tensor, space: gym.Space) -> np.ndarray | torch.Tensor:
    """What the env receives: Box actions clipped to the box; discrete actions, which
    agents and buffers keep as indices 0..n-1, shifted by the space's ``start``. A torch
    tensor (for a device back end) stays a tensor on its device."""
    if isinstance(space, gym.spaces.Box):
        if isinstance(action, torch.Tensor):
            low, high = _box_bounds(space, action.device)
            return torch.clamp(action, low, high)
        return np.clip(action, space.low, space.high)
    if isinstance(space, gym.spaces.Discrete) and space.start != 0:
        return action + space.start
    return action


_BOUNDS: dict[tuple[bytes, bytes, str], tuple[torch.Tensor, torch.Tensor]] = {}


def _box_bounds(space: gym.spaces.Box, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The box's bounds as float32 tensors on ``device`` (cached: one copy per space)."""
    key = (space.low.tobytes(), space.high.tobytes(), str(device))
    if key not in _BOUNDS:
        _BOUNDS[key] = tuple(
            torch.as_tensor(bound, dtype=torch.float32, device=device)
            for bound in (space.low, space.high)
        )
    return _BOUNDS[key]


def random_actions(space: gym.Space, rng: np.random.Generator, num_envs: int) -> np.ndarray:
    """``num_envs`` uniform random actions drawn from ``rng`` (the off-policy warm-up);
    discrete ones as indices 0..n-1, like an agent's."""
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(0, space.n, size=num_envs)
    low, high = space.low, space.high
    return rng.uniform(low, high, size=(num_envs, *low.shape)).astype(np.float32)


def describe_action_space(space: gym.Space) -> dict[str, Any]:
    """Plain description saved in checkpoints (Box keeps the original two keys)."""
    if isinstance(space, gym.spaces.Discrete):
        return {"action_n": int(space.n), "action_start": int(space.start)}
    return {"action_low": space.low, "action_high": space.high}


def action_space_from(description: dict[str, Any]) -> gym.Space:
    """Inverse of ``describe_action_space``."""
    if "action_n" in description:
        return gym.spaces.Discrete(description["action_n"], start=description["action_start"])
    return gym.spaces.Box(description["action_low"], description["action_high"], dtype=np.float32)
