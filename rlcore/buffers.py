"""Replay and rollout buffers: preallocated torch tensors, no per-transition Python objects."""

from __future__ import annotations

import numpy as np
import torch

from rlcore.types import Batch, RolloutBatch

ArrayLike = np.ndarray | torch.Tensor


def _as_tensor(x: ArrayLike, device: torch.device, dtype=torch.float32) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=dtype)
    return torch.as_tensor(np.asarray(x), dtype=dtype, device=device)


class ReplayBuffer:
    """Ring buffer of transitions written ``num_envs`` at a time.

    Layout: the transition of env ``i`` at vector step ``t`` lives at row
    ``(t * num_envs + i) % capacity``. ``next_obs`` is stored explicitly, so the loop
    hands in the *final* observation of an episode that ended (not the reset one).
    """

    FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        seed: int = 0,
        action_dtype: torch.dtype = torch.float32,
    ) -> None:
        """``action_dtype``: float32 for Box actions; int64 with ``action_shape=()`` for
        discrete action indices (``rlcore.spaces.action_storage`` gives both)."""
        if capacity < num_envs:
            raise ValueError(f"capacity ({capacity}) must be >= num_envs ({num_envs})")
        self.capacity = int(capacity)
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        f32 = dict(dtype=torch.float32, device=self.device)
        self.obs = torch.zeros((self.capacity, *obs_shape), **f32)
        self.next_obs = torch.zeros((self.capacity, *obs_shape), **f32)
        self.action = torch.zeros(
            (self.capacity, *action_shape), dtype=action_dtype, device=self.device
        )
        self.reward = torch.zeros(self.capacity, **f32)
        self.terminated = torch.zeros(self.capacity, **f32)
        self.truncated = torch.zeros(self.capacity, **f32)
        self.pos = 0
        self.size = 0
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(seed)

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: ArrayLike,
        action: ArrayLike,
        reward: ArrayLike,
        next_obs: ArrayLike,
        terminated: ArrayLike,
        truncated: ArrayLike,
    ) -> None:
        """Write one vector step: every argument has leading dimension ``num_envs``."""
        n = self.num_envs
        values = (obs, action, reward, next_obs, terminated, truncated)
        if self.pos + n <= self.capacity:
            rows: slice | torch.Tensor = slice(self.pos, self.pos + n)
        else:
            rows = torch.arange(self.pos, self.pos + n, device=self.device) % self.capacity
        for name, value in zip(self.FIELDS, values):
            target = getattr(self, name)
            tensor = _as_tensor(value, self.device, target.dtype)
            if tensor.shape[0] != n:
                raise ValueError(f"{name} has leading dim {tensor.shape[0]}, expected num_envs={n}")
            target[rows] = tensor.reshape(target[rows].shape)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int) -> Batch:
        """Uniform sample with replacement (seeded, reproducible)."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty ReplayBuffer")
        idx = torch.randint(0, self.size, (batch_size,), generator=self.generator)
        idx = idx.to(self.device)
        return Batch(
            obs=self.obs[idx],
            action=self.action[idx],
            reward=self.reward[idx],
            next_obs=self.next_obs[idx],
            terminated=self.terminated[idx],
            truncated=self.truncated[idx],
        )

    def state_dict(self) -> dict:
        """Filled rows, write position and sampler RNG: enough to continue exactly."""
        data = {}
        for name in self.FIELDS:
            tensor = getattr(self, name)
            data[name] = tensor if self.size == self.capacity else tensor[: self.size].clone()
        return {
            "data": data,
            "pos": self.pos,
            "size": self.size,
            "capacity": self.capacity,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a saved buffer. Loading into a larger buffer (a resumed run whose
        ``total_steps`` grew) keeps every transition, in chronological order."""
        size, saved_capacity = state["size"], state["capacity"]
        data = state["data"]
        if saved_capacity != self.capacity:
            if size > self.capacity:
                raise ValueError(
                    f"the checkpoint's replay buffer holds {size} transitions but this buffer "
                    f"has capacity {self.capacity}; raise algo.buffer_size / total_steps"
                )
            if size == saved_capacity:  # wrapped: oldest row is at pos
                order = torch.cat([torch.arange(state["pos"], size), torch.arange(0, state["pos"])])
                data = {name: tensor[order] for name, tensor in data.items()}
            pos = size % self.capacity
        else:
            pos = state["pos"]
        for name in self.FIELDS:
            getattr(self, name)[:size] = data[name].to(self.device)
        self.pos, self.size = pos, size
        self.generator.set_state(state["generator"])


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    bootstrap_values: torch.Tensor,
    last_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a (T, N) rollout.

    At a truncation the value of the episode's final observation (``bootstrap_values``)
    is used; at a termination nothing is bootstrapped. Either way the recursion stops
    at an episode end, because the next row belongs to a new episode (same-step
    autoreset). ``last_values`` are V(obs after the last step). Returns (advantages,
    returns), both (T, N).
    """
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    done = torch.maximum(terminated, truncated)
    next_advantage = torch.zeros_like(last_values)
    next_value = last_values
    for t in reversed(range(steps)):
        # value of the state reached by step t, as seen from step t
        successor = torch.where(truncated[t] > 0, bootstrap_values[t], next_value)
        successor = successor * (1.0 - terminated[t])
        delta = rewards[t] + gamma * successor - values[t]
        next_advantage = delta + gamma * gae_lambda * (1.0 - done[t]) * next_advantage
        advantages[t] = next_advantage
        next_value = values[t]
    return advantages, advantages + values


class RolloutBuffer:
    """Fixed-length on-policy storage of shape (num_steps, num_envs)."""

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        device: torch.device | str = "cpu",
        action_dtype: torch.dtype = torch.float32,
    ) -> None:
        """``action_dtype``: as ``ReplayBuffer``'s (int64, shape () for discrete actions)."""
        self.num_steps, self.num_envs = num_steps, num_envs
        self.device = torch.device(device)
        shape = (num_steps, num_envs)
        f32 = dict(dtype=torch.float32, device=self.device)
        self.obs = torch.zeros((*shape, *obs_shape), **f32)
        self.action = torch.zeros((*shape, *action_shape), dtype=action_dtype, device=self.device)
        self.log_prob = torch.zeros(shape, **f32)
        self.reward = torch.zeros(shape, **f32)
        self.value = torch.zeros(shape, **f32)
        self.terminated = torch.zeros(shape, **f32)
        self.truncated = torch.zeros(shape, **f32)
        self.bootstrap_value = torch.zeros(shape, **f32)
        self._stores = (  # in add()'s argument order
            self.obs,
            self.action,
            self.log_prob,
            self.reward,
            self.value,
            self.terminated,
            self.truncated,
            self.bootstrap_value,
        )
        self.step = 0

    def add(
        self,
        obs: ArrayLike,
        action: ArrayLike,
        log_prob: ArrayLike,
        reward: ArrayLike,
        value: ArrayLike,
        terminated: ArrayLike,
        truncated: ArrayLike,
        bootstrap_value: ArrayLike,
    ) -> None:
        """Store one vector step; ``bootstrap_value`` is V(final obs) where truncated, else 0."""
        if self.step >= self.num_steps:
            raise RuntimeError("RolloutBuffer is full: call compute() and reset()")
        t = self.step
        fields = (obs, action, log_prob, reward, value, terminated, truncated, bootstrap_value)
        for store, value_ in zip(self._stores, fields):
            row = store[t]  # a view: copy_ converts dtype and device in place
            source = value_ if isinstance(value_, torch.Tensor) else torch.as_tensor(value_)
            row.copy_(source.reshape(row.shape))
        self.step += 1

    def compute(self, last_value: ArrayLike, gamma: float, gae_lambda: float) -> RolloutBatch:
        """GAE over the full rollout, flattened to (num_steps * num_envs, ...)."""
        if self.step != self.num_steps:
            raise RuntimeError(f"rollout incomplete: {self.step}/{self.num_steps} steps")
        advantages, returns = compute_gae(
            self.reward,
            self.value,
            self.terminated,
            self.truncated,
            self.bootstrap_value,
            _as_tensor(last_value, self.device).reshape(self.num_envs),
            gamma,
            gae_lambda,
        )
        n = self.num_steps * self.num_envs
        return RolloutBatch(
            obs=self.obs.reshape(n, *self.obs.shape[2:]),
            action=self.action.reshape(n, *self.action.shape[2:]),
            log_prob=self.log_prob.reshape(n),
            value=self.value.reshape(n),
            advantage=advantages.reshape(n),
            returns=returns.reshape(n),
        )

    def reset(self) -> None:
        self.step = 0
