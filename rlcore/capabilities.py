"""What an agent can do, as Protocols the loops check once when a run is built.

An algorithm names the capabilities it implements in a class attribute at the top of its
class, ``CAPABILITIES = (OnPolicy, Phased)``, so a reader sees them there; the loops test
them with ``isinstance`` once, before the first step, instead of looking methods up by
name. Agents do not subclass these Protocols: one that forgot a method would inherit the
Protocol's ``...`` stub, pass ``isinstance`` and return None. tests/test_capabilities.py
checks every agent and config class for inherited Protocols and stub methods, that each
declared capability holds, and that each implemented one is declared. ``require`` turns a
missing capability into one clear error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from rlcore.plan import RunPlan


@runtime_checkable
class Planned(Protocol):
    """An algorithm config: declares the run the core executes for it."""

    def plan(self) -> RunPlan: ...


@runtime_checkable
class DeviceSized(Protocol):
    """An algorithm config whose sizes depend on the device the run trains on:
    ``device_sizes(device)`` maps those fields (the same ones on every device) to their
    values there. The command line leaves them null (rlcore.configs) and the composition
    root sets the ones still null for the run's device, recording them in the run's config
    (rlcore.catalog.Algorithm.sized_for); a value set explicitly wins."""

    def device_sizes(self, device: torch.device) -> dict[str, Any]: ...


@runtime_checkable
class Agent(Protocol):
    """What every loop needs from an algorithm. ``config`` is the agent's own copy of its
    config, with the speed modes it resolved (``compile=auto``, ``precision``)."""

    config: Planned

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray: ...
    def update(self, batch: Any) -> dict[str, float]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class OnPolicy(Protocol):
    """Acts with a stochastic policy and values states (the rollout loop): ``explore``
    returns (action, log_prob, value[, rollout channels]) for a batch of observations."""

    def explore(self, obs: torch.Tensor) -> tuple[Any, ...]: ...
    def value(self, obs: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class CostCritic(Protocol):
    """An on-policy constrained agent's cost value V_c (its rollout gets the cost's GAE)."""

    def cost_value(self, obs: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class CostRecorder(Protocol):
    """A constrained agent that adapts to the episodes' costs (a Lagrange multiplier)."""

    def record_episode_costs(self, costs: list[float]) -> None: ...


@runtime_checkable
class Phased(Protocol):
    """Told which phase starts: "offline", "warmup", "online" or "rollout" (rlcore.loops.Phase)."""

    def set_phase(self, phase: str) -> None: ...


@runtime_checkable
class PerEnvState(Protocol):
    """Keeps state per sub-env across steps (an open-loop base chunk): told, with a boolean
    mask, which envs start a new episode (all at the start, then those that ended)."""

    def episodes_started(self, mask: np.ndarray) -> None: ...


@runtime_checkable
class EvalPolicy(Protocol):
    """Evaluates with its own policy object (stateful, or acting unlike ``act``)."""

    def eval_policy(self) -> Callable[[np.ndarray], np.ndarray]: ...


@runtime_checkable
class DatasetUser(Protocol):
    """Derives what it samples from the offline dataset (action chunks, cost labels)."""

    def prepare_dataset(self, dataset: Any) -> None: ...


@runtime_checkable
class StateStatistics(Protocol):
    """Normalises observations with statistics fitted on the dataset (``normalize_states``)."""

    obs_normalizer: Any


@runtime_checkable
class ActionValue(Protocol):
    """A critic an adversary can attack (``rlcore.offline.corruption``): Q(s, a) of raw
    observations, averaged over the agent's critics, and its greedy action; both
    differentiable with respect to their inputs."""

    def action_value(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor: ...
    def policy_action(self, obs: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class ModelBased(Protocol):
    """Trains on rollouts of a learned model (``RunPlan.model``): ``dynamics`` is the
    ``rlcore.dynamics.ProbabilisticEnsemble`` it owns (saved with it, fitted on the dataset
    before the first update); ``imagine_action`` the stochastic action of its policy for a
    batch of raw observations (no autograd), which the rollouts take; ``dynamics_reward``
    the ``rlcore.dynamics_reward.DynamicsReward`` of MOREC's transition filter (learned
    before the first rollout, saved with it), or None without a filter."""

    dynamics: Any
    dynamics_reward: Any

    def imagine_action(self, obs: torch.Tensor) -> torch.Tensor: ...


class MissingCapabilityError(TypeError):
    """An agent lacks a capability its run needs."""


def require(agent: object, capability: type, why: str) -> None:
    """Raise ``MissingCapabilityError`` naming ``capability`` and ``why`` the run needs it
    unless ``agent`` implements it."""
    if not isinstance(agent, capability):
        raise MissingCapabilityError(
            f"{type(agent).__name__} does not implement {capability.__name__} "
            f"(rlcore.capabilities), which {why}"
        )
