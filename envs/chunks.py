"""Open-loop execution of action chunks, once for every user: the env-side wrapper that
takes a chunk per step (``rlcore.envs.make.ActionChunks``), evaluation of a policy that
returns chunks (``rlcore.evaluate``) and a policy that runs its own chunks per env step
(ResiP's frozen base, ``rlcore.algos.resip``).

Each env holds a planned chunk of H actions and the position of its next one; ``pop``
hands every env its next action, ``needs`` says which envs have used their chunk up,
``fill`` gives those envs new chunks and ``restart`` makes envs take a fresh chunk at
their next step (their episode ended). Arrays are numpy or torch alike (a device back
end's tensors stay on their device).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch

Array = TypeVar("Array", np.ndarray, torch.Tensor)


class ChunkQueue:
    """Per-env queue of planned actions (a chunk (N, H, *action_shape)), executed open
    loop: one action per env per step, a new chunk where one is used up or restarted."""

    def __init__(self) -> None:
        self.plan: Any = None  # (N, H, *action_shape), numpy or torch
        self.position: Any = None  # (N,) index of each env's next action

    def holds(self, num_envs: int) -> bool:
        """Whether the queue holds a plan for ``num_envs`` envs."""
        return self.plan is not None and len(self.plan) == num_envs

    def needs(self, obs: Array) -> Array:
        """(N,) bool of ``obs``'s kind (numpy, or torch on its device): the envs that need
        a new chunk (used up or restarted; every env while there is no plan for N envs)."""
        if not self.holds(len(obs)):
            if isinstance(obs, torch.Tensor):
                return torch.ones(len(obs), dtype=torch.bool, device=obs.device)
            return np.ones(len(obs), dtype=bool)
        return self.position >= self.plan.shape[1]

    def fill(self, chunks: Array, mask: Array) -> None:
        """The envs in ``mask`` (N,) take ``chunks`` (one per masked env, in order) and
        start at their first action. Without a plan for N envs, ``mask`` must be all
        True: the chunks (copied) become the plan."""
        if not self.holds(len(mask)):
            if isinstance(chunks, torch.Tensor):
                self.plan = chunks.clone()
                self.position = torch.zeros(len(mask), dtype=torch.long, device=chunks.device)
            else:
                self.plan = np.array(chunks)
                self.position = np.zeros(len(mask), dtype=np.int64)
            return
        self.plan[mask] = chunks
        self.position[mask] = 0

    def peek(self) -> Array:
        """(N, *action_shape): each env's next action, not consumed."""
        if isinstance(self.plan, torch.Tensor):
            rows = torch.arange(len(self.plan), device=self.plan.device)
        else:
            rows = np.arange(len(self.plan))
        return self.plan[rows, self.position]

    def pop(self) -> Array:
        """(N, *action_shape): each env's next action, consumed."""
        action = self.peek()
        self.position += 1
        return action

    def restart(self, mask: np.ndarray | torch.Tensor) -> None:
        """Envs in ``mask`` take a fresh chunk at their next step (a new episode)."""
        if self.position is None:
            return
        if isinstance(self.position, torch.Tensor):
            device = self.position.device
            if isinstance(mask, torch.Tensor):
                mask = mask.to(device=device, dtype=torch.bool)
            else:
                mask = torch.as_tensor(np.asarray(mask, bool), device=device)
        self.position[mask] = self.plan.shape[1]

    def refill(self, obs: Array, make_chunk: Callable[[Array], Array]) -> None:
        """New chunks ``make_chunk(obs[needs])`` for only the envs that need one."""
        need = self.needs(obs)
        if need.any():
            self.fill(make_chunk(obs[need]), need)

    def next(self, obs: Array, make_chunk: Callable[[Array], Array]) -> Array:
        """(N, *action_shape): the action each env executes now (``refill``, ``pop``)."""
        self.refill(obs, make_chunk)
        return self.pop()

    def state_dict(self) -> dict[str, Any]:
        return {"plan": self.plan, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.plan, self.position = state["plan"], state["position"]
