"""Deterministic evaluation on a vector env and score helpers."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gymnasium.vector import VectorEnv

from rlcore.spaces import to_env_action


def evaluate(
    policy: Callable[[np.ndarray], np.ndarray],
    env: VectorEnv,
    num_episodes: int,
    seed: int,
) -> dict[str, float]:
    """Run ``num_episodes`` full episodes and return mean/std/min/max return and length.

    Episodes are split evenly across the sub-envs up front (env i runs its quota, then
    idles), so short episodes are not over-represented. The env is reset with ``seed``
    each call, so every evaluation starts from the same initial states.
    """
    n = env.num_envs
    quota = np.full(n, num_episodes // n)
    quota[: num_episodes % n] += 1
    returns: list[float] = []
    lengths: list[float] = []
    done_count = np.zeros(n, dtype=np.int64)
    obs, _ = env.reset(seed=seed)
    while (done_count < quota).any():
        action = to_env_action(policy(obs), env.single_action_space)
        obs, _, _, _, info = env.step(action)
        finished = ~np.isnan(info["episode_return"])
        for i in np.flatnonzero(finished):
            if done_count[i] < quota[i]:
                returns.append(float(info["episode_return"][i]))
                lengths.append(float(info["episode_length"][i]))
                done_count[i] += 1
    r = np.asarray(returns)
    return {
        "return": float(r.mean()),
        "return_std": float(r.std()),
        "return_min": float(r.min()),
        "return_max": float(r.max()),
        "length": float(np.mean(lengths)),
    }


def normalized_score(value: float, random_score: float, expert_score: float) -> float:
    """D4RL normalised score on the 0-100 scale."""
    return 100.0 * (value - random_score) / (expert_score - random_score)


# Aggregates over seeds and tasks (IQM, stratified bootstrap confidence intervals,
# performance profiles, rliable's definitions) live in rlcore.report.
