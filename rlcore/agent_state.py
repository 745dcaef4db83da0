"""An agent's state, declared once: ``Parts`` names what an agent is made of (modules,
optimisers, tensors such as a learned temperature, stateful helpers, whole sub-agents)
and gives their ``state_dict`` / ``load_state_dict``, so an agent writes

    self.parts = Parts(actor=self.actor, critic=self.critic, actor_optimizer=...)

    def state_dict(self) -> dict:
        return self.parts.state_dict(updates=self.updates)

    def load_state_dict(self, state: dict) -> None:
        self.parts.load_state_dict(state)
        self.updates = int(state["updates"])

A checkpoint holds one entry per part, under the part's name, in declaration order, then
the plain values (counters) given to ``state_dict``.
"""

from __future__ import annotations

import copy
from typing import Any

import torch


def state_of(**objects: Any) -> dict[str, Any]:
    """``state_dict()`` of every module/optimizer; tensors detached, plain values as they are."""
    return {
        name: obj.state_dict()
        if hasattr(obj, "state_dict")
        else obj.detach()
        if isinstance(obj, torch.Tensor)
        else obj
        for name, obj in objects.items()
    }


def load_state_into(state: dict[str, Any], **objects: Any) -> None:
    """Inverse of ``state_of`` for modules, optimizers and tensors (copied in place).

    Optimizer states are deep-copied: ``Optimizer.load_state_dict`` would otherwise keep
    the very tensors of the source, and two agents would share moment estimates."""
    for name, obj in objects.items():
        if name not in state:
            raise KeyError(f"state dict has no entry '{name}' (has {sorted(state)})")
        if isinstance(obj, torch.Tensor):
            with torch.no_grad():
                obj.copy_(state[name])
        elif isinstance(obj, torch.optim.Optimizer):
            obj.load_state_dict(copy.deepcopy(state[name]))
        else:
            obj.load_state_dict(state[name])


class Parts:
    """Named parts of an agent: anything with ``state_dict`` / ``load_state_dict``
    (modules, optimisers, sub-agents, other ``Parts``) or a tensor (loaded in place, so
    the optimiser that steps it keeps the same object)."""

    def __init__(self, **parts: Any) -> None:
        self.parts = dict(parts)

    def add(self, **parts: Any) -> None:
        """More parts, after the ones declared (an agent extending another's)."""
        self.parts.update(parts)

    def state_dict(self, **values: Any) -> dict[str, Any]:
        """Every part's state under its name, then ``values`` (counters) as they are."""
        return {**state_of(**self.parts), **values}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load every part from its entry of ``state`` (a ``KeyError`` names a missing one);
        the agent restores its counters itself."""
        load_state_into(state, **self.parts)
