"""Velocity-constrained safe tasks (envs/safety.py): cost values against hand-computed
velocities and against the v5 task's own reported velocity."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from envs.make import make_vec_env, resolve_env_id
from envs.safety import SAFETY_VELOCITY_IDS, VELOCITY_THRESHOLDS, VelocityCost


class _Reporting(gym.Env):
    """Reports a given velocity in info, nothing else."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,))
    action_space = gym.spaces.Box(-1.0, 1.0, (1,))

    def __init__(self, info: dict) -> None:
        self.info = info

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, dict(self.info)


@pytest.mark.parametrize(
    ("info", "planar", "cost"),
    [
        ({"x_velocity": 0.7403}, False, 1.0),  # Hopper's threshold 0.7402: just above
        ({"x_velocity": 0.7402}, False, 0.0),  # at the threshold: no cost (strict >)
        ({"x_velocity": -5.0}, False, 0.0),  # fast backwards: x-velocity, not speed
        ({"x_velocity": 2.0, "y_velocity": 2.0}, True, 1.0),  # speed 2.83 > 2.6222 (Ant)
        ({"x_velocity": 2.0, "y_velocity": 1.0}, True, 0.0),  # speed 2.24
        ({"x_velocity": 0.0, "y_velocity": -2.7}, True, 1.0),  # sideways counts (planar)
    ],
)
def test_cost_is_one_above_the_threshold(info, planar, cost):
    threshold = VELOCITY_THRESHOLDS["Ant" if planar else "Hopper"]
    env = VelocityCost(_Reporting(info), threshold, planar=planar)
    env.reset()
    assert env.step(np.zeros(1))[4]["cost"] == cost


def test_missing_velocity_is_a_clear_error():
    env = VelocityCost(_Reporting({}), 1.0)
    env.reset()
    with pytest.raises(KeyError, match="x_velocity"):
        env.step(np.zeros(1))


@pytest.mark.parametrize("task", sorted(VELOCITY_THRESHOLDS))
def test_registered_task_costs_follow_its_velocity(task):
    env = gym.make(SAFETY_VELOCITY_IDS[task])
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    costs = []
    for _ in range(20):
        _, _, terminated, truncated, info = env.step(rng.uniform(-1, 1, env.action_space.shape))
        speed = info["x_velocity"]
        if task in ("Ant", "Humanoid"):
            speed = float(np.hypot(info["x_velocity"], info["y_velocity"]))
        assert info["cost"] == float(speed > VELOCITY_THRESHOLDS[task])
        costs.append(info["cost"])
        if terminated or truncated:
            break
    env.close()
    assert set(costs) <= {0.0, 1.0}


def test_vector_env_and_short_names_carry_the_cost():
    assert resolve_env_id("SafetyHopperVelocity") == "SafetyHopperVelocity-v1"
    assert resolve_env_id("safetyantvelocity") == "SafetyAntVelocity-v1"
    env = make_vec_env("SafetyHopperVelocity", 2, seed=0)
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.ones((2, 3), np.float32))
    assert info["cost"].shape == (2,) and set(info["cost"].tolist()) <= {0.0, 1.0}
    env.close()
