"""Snapshot reset's teacher: a trained rlcore agent as the policy and value labels that
``rlcore.envs.snapshot.collect_snapshots`` rolls out (S3RL, step 1 of ``envs/snapshot.py``).

A tool above the core: it loads an agent through ``rlcore.checkpoint`` and hands
``rlcore.envs.snapshot`` plain callables (observations -> actions, observations -> labels), so
the env layer never loads agents. ``rlcore.train``'s ``snapshot_reset`` wires it. As the
reference (sdpkjc/snapshotrl) rolls its teachers out: SAC and PPO teachers (any
stochastic policy) SAMPLE their actions, TD3-like teachers (td3, td3_bc, rebrac, IQL's
``deterministic_actor``) act with pi(s) and no exploration noise (``teacher_samples``).
A snapshot's label is V(s) for agents with a state value (PPO, IQL), else the min over
the teacher's critics of Q(s, a) at an action chosen the same way (a fresh sample for a
sampling teacher), on the observation exactly as the agent sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from rlcore.agent_state import Plumbing
from rlcore.checkpoint import load_checkpoint
from rlcore.envs.make import resolve_env_id
from rlcore.envs.snapshot import SnapshotMismatchError, Snapshots, collect_snapshots
from rlcore.nets import CategoricalQEnsemble
from rlcore.policies import load_agent, obs_transform


@runtime_checkable
class _StateValued(Protocol):
    """A teacher with a state value V(s) (PPO, IQL): its label."""

    value: Callable[[torch.Tensor], torch.Tensor]


@runtime_checkable
class _ActionValued(Protocol):
    """A teacher with a critic ensemble Q(s, a) -> (E, B) (SAC, TD3, ...): min_e as label."""

    critic: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@runtime_checkable
class _NormalisesObs(Protocol):
    """An agent that standardises observations inside ``act`` and ``update`` (offline
    algorithms' dataset statistics, ``rlcore.nets.ObsNormalizer``)."""

    obs_normalizer: Callable[[torch.Tensor], torch.Tensor]


# algorithms whose policy is deterministic: the reference's TD3 teacher acts with pi(s),
# no exploration noise (their act(deterministic=False) would add noise, or ignores the flag)
DETERMINISTIC_POLICIES = frozenset({"td3", "td3_bc", "rebrac", "fast_td3"})


def teacher_samples(algo: str, algo_config: dict[str, Any]) -> bool:
    """Whether a teacher of algorithm ``algo`` (its config dict) rolls out by sampling its
    policy (SAC, PPO and every stochastic policy, as the reference's SAC and PPO teachers)
    or with its deterministic action (TD3-like policies, as the reference's TD3 teacher)."""
    deterministic_actor = bool(algo_config.get("deterministic_actor", False))  # IQL's option
    return algo.lower() not in DETERMINISTIC_POLICIES and not deterministic_actor


def teacher_from_checkpoint(
    path: str | Path, sample: bool | None = None
) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray], dict]:
    """(policy, value labels, the teacher's env config) of an rlcore run directory or
    checkpoint (agent-only snapshots too). The policy samples when ``sample`` (None:
    ``teacher_samples`` decides by algorithm), else it is deterministic; samples come from
    torch's global generator. Labels: V(s) for agents with a state value (PPO, IQL), else
    the min over the critics of Q(s, a) with a chosen as the policy chooses (a fresh
    sample when sampling); computed on observations as the agent sees them (the env-side
    normalisation it trained with, then its own ``obs_normalizer``)."""
    state = load_checkpoint(path)
    agent = load_agent(path)
    transform = obs_transform(state)
    if sample is None:
        sample = teacher_samples(str(state["algo"]), dict(state["config"].get("algo", {})))
    deterministic = not sample

    def policy(obs: np.ndarray) -> np.ndarray:
        return agent.act(transform(obs), deterministic=deterministic)

    def value_fn(obs: np.ndarray | dict[str, np.ndarray]) -> np.ndarray:
        with torch.inference_mode():
            seen = network_input(agent, transform(obs))
            if isinstance(agent, _NormalisesObs):
                seen = agent.obs_normalizer(seen)
            if isinstance(agent, _StateValued):
                return agent.value(seen).reshape(-1).cpu().numpy().astype(np.float64)
            if isinstance(agent, _ActionValued):
                action = agent.act(transform(obs), deterministic=deterministic)
                q = agent.critic(seen, torch.as_tensor(action, device=agent.device).float())
                if isinstance(agent.critic, CategoricalQEnsemble):  # C51: expected returns
                    q = agent.critic.value(torch.softmax(q, dim=-1))
                return q.min(0).values.cpu().numpy().astype(np.float64)
        raise ValueError(f"{type(agent).__name__} has no critic to label snapshots with")

    return policy, value_fn, dict(state["config"].get("env", {}))


@runtime_checkable
class _Plumbed(Protocol):
    """An agent with ``rlcore.agent_state.Plumbing``: it flattens dict observations and
    standardises its networks' input itself (``algo.normalize_obs`` of SAC / TD3)."""

    plumbing: Plumbing


def network_input(agent: Any, seen: np.ndarray | dict[str, np.ndarray]) -> torch.Tensor:
    """What the agent's networks read for observations ``seen`` (after the env-side
    normalisation): dict parts flattened in the spec's order, and the agent's own in-agent
    standardisation, as its ``act`` and ``update`` apply them."""
    if not isinstance(agent, _Plumbed):
        return torch.as_tensor(seen, device=agent.device)
    if isinstance(seen, dict):
        flat = agent.plumbing.obs.flat_batch(seen, agent.device)[0]
    else:
        flat = torch.as_tensor(seen, device=agent.device)
    return agent.plumbing.standardize(flat)


def load_or_collect(
    teacher: str | Path, env_name: str, env_kwargs: dict[str, Any],
    max_episode_steps: int | None, episodes: int, every: int, seed: int,
) -> Snapshots:  # fmt: skip
    """Snapshots from a saved ``.npz`` file, or rolled out from an rlcore run/checkpoint
    (the teacher must have trained on this env id)."""
    path = Path(teacher)
    if path.suffix == ".npz":
        snapshots = Snapshots.load(path)
    else:
        # the teacher's build and samples draw from a generator seeded here; the run's is kept
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            policy, value_fn, teacher_env = teacher_from_checkpoint(path)
            teacher_id = resolve_env_id(str(teacher_env.get("name", env_name)))
            if teacher_env.get("obs", "state") != "state":
                raise SnapshotMismatchError(
                    f"the teacher {teacher} observed env.obs={teacher_env['obs']}: snapshots "
                    "are rolled out by a teacher of state observations (a student may observe "
                    "pixels: it renders its own images of each restored state)"
                )
            if teacher_id != resolve_env_id(env_name):
                raise SnapshotMismatchError(
                    f"the teacher {teacher} trained on {teacher_id}, this run is on "
                    f"{resolve_env_id(env_name)}"
                )
            snapshots = collect_snapshots(
                env_name, policy, episodes=episodes, every=every, seed=seed, value_fn=value_fn,
                env_kwargs=env_kwargs, max_episode_steps=max_episode_steps, teacher=str(teacher),
            )  # fmt: skip
    snapshots.check_env(env_name, env_kwargs, max_episode_steps)
    return snapshots
