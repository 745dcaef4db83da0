"""A simulated robot for the remote-actor example: a gymnasium env whose ``step`` takes
as long as a real robot's control period, so the actor's rate is the robot's, not the
learner's.

Replace the three marked places with your robot's I/O: the observation from the
sensors, the action to the motors, and the reset (by script, or by hand: a prompt that
waits for someone to put the robot back). Everything else (the actor, the link to the
learner, buffering when it drops) is rlcore's: see README.md next to this file.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

ID = "SimulatedRobot-v0"


class SimulatedRobot(gym.Wrapper):
    """InvertedPendulum-v5 standing for a robot controlled at ``control_hz``: each step
    sends the action, then waits for the next control tick before reading the sensors
    (a step that overran its period starts the next one at once)."""

    def __init__(self, control_hz: float = 50.0, reset_by_hand: bool = False) -> None:
        super().__init__(gym.make("InvertedPendulum-v5"))
        self.period = 1.0 / control_hz
        self.reset_by_hand = reset_by_hand
        self.next_tick = time.perf_counter()

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        if self.reset_by_hand:  # a real robot: someone puts it back, then presses Enter
            input("put the robot in its start pose, then press Enter")
        obs, info = self.env.reset(**kwargs)  # robot: read the sensors in the start pose
        self.next_tick = time.perf_counter() + self.period
        return obs, info

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        result = self.env.step(action)  # robot: send the action to the motors
        wait = self.next_tick - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        self.next_tick = max(self.next_tick + self.period, time.perf_counter())
        return result  # robot: read the sensors at the tick (observation, reward, flags)


if ID not in gym.registry:
    gym.register(ID, entry_point=SimulatedRobot, max_episode_steps=1000)
