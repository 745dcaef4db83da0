"""Run directories written by hand for the tools that read them (rlcore.export,
python -m rlcore.evaluate): a checkpoint as rlcore.train writes one, around an agent
built directly, and observations recorded from the env."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlcore.checkpoint import FORMAT_VERSION, save_checkpoint
from rlcore.spaces import describe_action_space


def recorded_obs(env_id: str, n: int = 24, history: int = 1) -> np.ndarray:
    """Observations of a random-action rollout (flattened windows of ``history``)."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    seen = [obs] * history
    rows = []
    for _ in range(n):
        rows.append(np.concatenate(seen[-history:]))
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
            seen = [obs] * history
        else:
            seen = [*seen, obs]
    return np.stack(rows).astype(np.float32)


def save_run(
    run: Path, algo: str, agent: Any, config: Any, env_id: str, normalise: bool = False
) -> tuple[gym.Space, int]:
    """A run directory whose checkpoint holds ``agent`` (and, with ``normalise``, env-side
    observation statistics), as rlcore.train writes one."""
    probe = gym.make(env_id)
    space = probe.action_space
    history = int(config.plan().env.obs_history)
    obs_dim = probe.observation_space.shape[0] * history
    rng = np.random.default_rng(1)
    norm = {"mean": rng.normal(size=obs_dim), "var": rng.uniform(0.5, 4.0, obs_dim), "count": 9.0}
    state = {
        "format": FORMAT_VERSION,
        "algo": algo,
        "config": {"algo": dataclasses.asdict(config), "env": {"id": env_id, "clip_obs": 5.0}},
        "spaces": {"obs_shape": [obs_dim], **describe_action_space(space)},
        "agent": agent.state_dict(),
        "obs_normalizer": norm if normalise else None,
    }
    save_checkpoint(state, run / "checkpoints" / "latest.pt")
    return space, history
