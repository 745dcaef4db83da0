"""A tiny goal-conditioned task with a Dict observation (as gymnasium-robotics tasks
have), registered as ``RlcoreGoalPoint-v0`` for tests of Dict-observation handling."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "RlcoreGoalPoint-v0"


class GoalPointEnv(gym.Env):
    """A point on a line moves by its action toward a goal; reward -|goal - position|."""

    def __init__(self) -> None:
        box = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {"observation": box, "achieved_goal": box, "desired_goal": box}
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.state = np.zeros(2, np.float32)

    def _obs(self) -> dict[str, np.ndarray]:
        position, goal = self.state[:1].copy(), self.state[1:].copy()
        return {"observation": position, "achieved_goal": position.copy(), "desired_goal": goal}

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        self.state = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self._obs(), {}

    def step(self, action):
        self.state[0] = np.clip(self.state[0] + float(np.asarray(action)[0]), -10, 10)
        reward = -abs(float(self.state[1] - self.state[0]))
        return self._obs(), reward, False, False, {}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=GoalPointEnv, max_episode_steps=20)
