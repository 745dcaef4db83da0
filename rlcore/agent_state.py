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
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn


@runtime_checkable
class Stateful(Protocol):
    """A part with its own state: a module, an optimiser, a sub-agent, ``Parts``, a helper
    such as ``rlcore.envs.chunks.ChunkQueue``."""

    def state_dict(self) -> Any: ...
    def load_state_dict(self, state: Any) -> Any: ...


class Parts:
    """Named parts of an agent: anything ``Stateful`` or a tensor (saved detached, loaded
    in place, so the optimiser that steps it keeps the same object)."""

    def __init__(self, **parts: Stateful | torch.Tensor) -> None:
        self.parts: dict[str, Stateful | torch.Tensor] = {}
        self.add(**parts)

    def add(self, **parts: Stateful | torch.Tensor) -> None:
        """More parts, after the ones declared (an agent extending another's)."""
        for name, part in parts.items():
            if not isinstance(part, torch.Tensor | Stateful):
                raise TypeError(
                    f"part {name!r} is a {type(part).__name__}: a part is a tensor or has "
                    "state_dict / load_state_dict (pass counters to Parts.state_dict)"
                )
            self.parts[name] = part

    def to(self, device: torch.device | str) -> Parts:
        """Move every module and tensor part (and nested ``Parts``) to ``device`` in place,
        once, where an agent declares its parts; returns ``self``. Meant for a freshly built
        agent: its optimisers keep stepping the same parameter objects (``Module.to`` moves
        them in place), which is checked; other parts (sub-agents, helpers) are built on
        their device."""
        for part in self.parts.values():
            if isinstance(part, nn.Module | Parts):
                part.to(device)
            elif isinstance(part, torch.Tensor):
                part.data = part.data.to(device)
        device = torch.device(device)
        for name, part in self.parts.items():
            if isinstance(part, torch.optim.Optimizer):
                params = [p for group in part.param_groups for p in group["params"]]
                if part.state or any(p.device.type != device.type for p in params):
                    raise ValueError(
                        f"optimiser {name!r} holds state or parameters off {device}: move the "
                        "parts before the first step"
                    )
        return self

    def state_dict(self, **values: Any) -> dict[str, Any]:
        """Every part's state under its name, then ``values`` (counters) as they are."""
        state = {
            name: part.detach() if isinstance(part, torch.Tensor) else part.state_dict()
            for name, part in self.parts.items()
        }
        return {**state, **values}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load every part from its entry of ``state`` (a ``KeyError`` names a missing one);
        the agent restores its counters itself. Tensors are copied in place; optimiser
        states are deep-copied (``Optimizer.load_state_dict`` would otherwise keep the very
        tensors of the source, and two agents would share moment estimates)."""
        for name, part in self.parts.items():
            if name not in state:
                raise KeyError(f"state dict has no entry '{name}' (has {sorted(state)})")
            if isinstance(part, torch.Tensor):
                with torch.no_grad():
                    part.copy_(state[name])
            elif isinstance(part, torch.optim.Optimizer):
                part.load_state_dict(copy.deepcopy(state[name]))
            else:
                part.load_state_dict(state[name])


def agent_modules(agent: Any) -> list[nn.Module]:
    """The networks of an agent: the modules of its ``parts`` in declaration order (nested
    ``Parts`` included), what exporting and publishing weights to actors walk."""
    return part_modules(agent.parts)


def part_modules(parts: Parts) -> list[nn.Module]:
    """The modules declared in ``parts`` (nested ``Parts`` included), in order."""
    found: list[nn.Module] = []
    for part in parts.parts.values():
        if isinstance(part, nn.Module):
            found.append(part)
        elif isinstance(part, Parts):
            found.extend(part_modules(part))
    return found
