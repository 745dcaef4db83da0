"""An agent's plumbing, declared once: everything every algorithm needs and none differs
in, so that an algorithm's file holds only what it does differently.

``Plumbing`` is a plain object an agent builds first and keeps (composition: no base
class, no mixin). It checks the action space, names the device and the sizes the
networks are built from (the prologue every agent wrote: ``obs_dim``, ``action_dim``,
the box's bounds), then holds the agent's parts and the names of its counters, from
which it makes the checkpoint. ``numpy_act`` is the decorator every ``act`` wears
(numpy or tensor observation(s) in, numpy action(s) in env units out)::

    def __init__(self, observation_space, action_space, config=None, device="cpu"):
        self.config = config = config or FooConfig()
        self.plumbing = io = Plumbing(observation_space, action_space, device, "Foo")
        self.device = io.device
        self.actor = Actor(io.obs_dim, io.action_dim, io.low, io.high, config.hidden)
        ...
        self.parts = io.declare(
            counters={"updates": int}, actor=self.actor, actor_optimizer=self.optimizer
        )
        self.updates = 0

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        return self.actor(obs, deterministic)

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)

``Parts`` names what an agent is made of (modules, optimisers, tensors such as a learned
temperature, stateful helpers, whole sub-agents) and gives their ``state_dict`` /
``load_state_dict``. A checkpoint holds one entry per part, under the part's name, in
declaration order, then the counters, in declaration order.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlcore.buffers import FlatObs, Sampler
from rlcore.observations import ObsSpec, PartNormalizer
from rlcore.spaces import BOX, check_action_space
from rlcore.types import Batch
from rlcore.utils import batched_obs

STATISTICS = "obs_statistics"  # the part holding an in-agent observation normaliser


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
        the counters are the agent's (``Plumbing`` loads them). Tensors are copied in place;
        optimiser states are deep-copied (``Optimizer.load_state_dict`` would otherwise keep
        the very tensors of the source, and two agents would share moment estimates)."""
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


class Plumbing:
    """The plumbing of one agent (see the module docstring): built first in its
    ``__init__`` from the spaces and the device, then told the agent's parts and counters
    (``declare``), then asked for the agent's ``state_dict`` / ``load_state_dict``.

    ``algo`` names the agent in the refusal of an action space of another kind than
    ``kinds`` (``rlcore.spaces``: ``"box"``, ``"discrete"``); None checks nothing (an
    agent whose sub-agents check). The observation is read through its spec
    (``rlcore.observations.ObsSpec``, ``obs``): a Box is one vector, as always; a Dict of
    vectors is flattened for the agent's networks, in the spec's part order, when it acts
    (``numpy_act``) and in its update batches (``batches``), unless ``obs_parts`` says
    its networks read the parts themselves (an ``rlcore.nets.ObsEncoder``: images).
    Sizes, read off the spaces:

    * ``obs_dim``: the flattened observation's size (``ObsSpec.flat_dim``; an image part
      raises: it needs an image encoder);
    * ``action_dim``: a Box action's flattened size, a Discrete space's number of
      actions (one logit / Q-value each);
    * ``step_action_dim``: the last axis of a Box, one env step's action inside an
      action-chunk env's (H, A) box (``rlcore.envs.make.ActionChunks``);
    * ``low`` / ``high``: a Box's bounds (numpy; ``bounds()`` as tensors on the device),
      None for a Discrete space.

    ``normalize_obs`` standardises the observation inside the agent, part by part
    (``rlcore.observations.PartNormalizer``: goals with the statistics of achieved goals,
    clipped to +-``clip_obs``), for agents whose stored transitions must stay raw (HER
    recomputes rewards from the stored goals). The agent calls ``standardize`` on its
    flat input where it acts and ``standardized_batch`` on each update batch (which first
    adds the batch's observations to the statistics); the statistics are a part of the
    agent (``obs_statistics``), so checkpoints, ``load_policy`` and exports carry them."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        device: str | torch.device,
        algo: str | None = None,
        kinds: tuple[str, ...] = (BOX,),
        obs_parts: bool = False,
        normalize_obs: bool = False,
        clip_obs: float = 5.0,
    ) -> None:
        if algo is not None:
            check_action_space(action_space, algo, kinds)
        self.device = torch.device(device)
        self.obs = ObsSpec.from_space(observation_space)
        self.obs_parts = obs_parts
        self.low: np.ndarray | None = None
        self.high: np.ndarray | None = None
        if isinstance(action_space, gym.spaces.Discrete):
            self.action_dim = self.step_action_dim = int(action_space.n)
        else:
            self.action_dim = int(np.prod(action_space.shape))
            self.step_action_dim = int(action_space.shape[-1])
            self.low, self.high = action_space.low, action_space.high
        self.parts = Parts()
        self.counters: dict[str, type] = {}
        self.normalizer = PartNormalizer(self.obs, clip_obs) if normalize_obs else None
        if self.normalizer is not None and obs_parts:
            raise ValueError("normalize_obs standardises the flat input of vector networks")

    @property
    def obs_dim(self) -> int:
        """The flat observation's size (the input of an MLP)."""
        return self.obs.flat_dim

    def obs_input(self, obs: Any) -> tuple[torch.Tensor | dict[str, torch.Tensor], bool]:
        """A dict or image observation (or batch of them) as the agent's networks read it:
        one flat float32 (B, obs_dim) tensor, or, with ``obs_parts`` or image parts, each
        part in its dtype (images uint8; ``{part: tensor}`` for a dict); and whether a
        single observation was given (``numpy_act``)."""
        if self.obs_parts or self.obs.images:
            return self.obs.tensors(obs, self.device)
        return self.obs.flat_batch(obs, self.device)

    def batches(self, sampler: Sampler) -> Sampler:
        """What the agent's updates draw from: ``sampler`` itself, or a view that flattens
        dict observations (``rlcore.buffers.FlatObs``) for networks that read one vector."""
        if not self.obs.keyed or self.obs_parts:
            return sampler
        return FlatObs(sampler, self.obs)

    def standardize(self, obs: torch.Tensor) -> torch.Tensor:
        """The networks' flat input (B, obs_dim) standardised part by part with the
        current statistics (unchanged without ``normalize_obs``)."""
        if self.normalizer is None:
            return obs
        return self.normalizer.standardize_flat(obs)

    def standardized_batch(self, batch: Batch) -> Batch:
        """An update batch (flat observations) with ``obs`` and ``next_obs`` standardised,
        after its ``obs`` joined the statistics (unchanged without ``normalize_obs``)."""
        if self.normalizer is None:
            return batch
        self.normalizer.update_flat(batch.obs)
        return dataclasses.replace(
            batch, obs=self.standardize(batch.obs), next_obs=self.standardize(batch.next_obs)
        )

    def bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The Box's (low, high) as float32 tensors on the device (an ``act``'s clamp)."""
        if self.low is None or self.high is None:
            raise TypeError("bounds: the action space is not a Box")
        as_tensor = functools.partial(torch.as_tensor, dtype=torch.float32, device=self.device)
        return as_tensor(self.low), as_tensor(self.high)

    def declare(self, counters: dict[str, type], **parts: Stateful | torch.Tensor) -> Parts:
        """The agent's parts, moved to the device (``Parts.to``: once, before the first
        step), and its counters: plain attributes of the agent, by name, with the type a
        checkpoint's value is converted to when loaded (``int``, ``float``, ``bool``,
        ``str``; ``torch.Tensor``: saved as a copy, loaded as a copy on the device).
        Returns the ``Parts`` (the agent keeps it as ``self.parts``; ``Parts.add`` appends
        the parts of an agent extending another)."""
        clash = set(counters) & {*self.parts.parts, *parts}
        if clash:
            raise ValueError(f"{sorted(clash)} named both a part and a counter")
        if self.normalizer is not None and STATISTICS not in self.parts.parts:
            parts = {**parts, STATISTICS: self.normalizer}  # saved with the agent
        self.parts.add(**parts)
        self.parts.to(self.device)
        self.counters = {**self.counters, **counters}
        return self.parts

    def state_dict(self, agent: object) -> dict[str, Any]:
        """Every part's state, then ``agent``'s counters (tensors copied)."""
        values = {name: getattr(agent, name) for name in self.counters}
        return self.parts.state_dict(
            **{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in values.items()}
        )

    def load_state_dict(self, agent: object, state: dict[str, Any]) -> None:
        """Load every part, then set ``agent``'s counters from ``state`` (a ``KeyError``
        names a missing entry)."""
        self.parts.load_state_dict(state)
        for name, kind in self.counters.items():
            if name not in state:
                raise KeyError(f"state dict has no counter '{name}' (has {sorted(state)})")
            value = state[name]
            tensor = kind is torch.Tensor  # a copy on this device
            setattr(agent, name, value.to(self.device).clone() if tensor else kind(value))


class _OnDevice(Protocol):
    device: torch.device


AgentT = TypeVar("AgentT", bound=_OnDevice)
Policy = Callable[[AgentT, torch.Tensor, bool], torch.Tensor]


def numpy_act(
    policy: Policy[AgentT],
) -> Callable[[AgentT, np.ndarray | torch.Tensor, bool], np.ndarray]:
    """Decorator that turns ``policy(agent, obs, deterministic) -> action tensor`` (obs a
    float32 (B, ...) tensor on ``agent.device``) into the agent's ``act``: numpy or tensor
    observation(s) in, one or a batch; the policy run in inference mode (no autograd);
    numpy out, a single observation's action (or chunk) without the batch dimension.
    A dict observation (one array per part, or a batch per part) or an image (uint8: one
    (C, H, W) image or a batch) goes through the agent's ``plumbing`` (``Plumbing.obs_input``:
    flattened in the spec's order, or each part in its dtype)."""

    @functools.wraps(policy)
    def act(
        agent: AgentT, obs: np.ndarray | torch.Tensor | dict[str, Any], deterministic: bool = False
    ) -> np.ndarray:
        with torch.inference_mode():
            image = isinstance(obs, np.ndarray | torch.Tensor) and obs.dtype in (
                np.uint8, torch.uint8
            )  # fmt: skip
            if isinstance(obs, dict) or image:
                obs_t, single = agent.plumbing.obs_input(obs)  # type: ignore[attr-defined]
            else:
                obs_t, single = batched_obs(obs, agent.device)
            action = policy(agent, obs_t, deterministic).cpu().numpy()
        return action[0] if single else action

    return act


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
