"""``BitFlipping-v0``: the bit-flipping task of the HER paper, a goal task with discrete
actions (what DQN + HER needs).

Paper: M. Andrychowicz et al., "Hindsight Experience Replay", NeurIPS 2017, Sec. 3.1: the
state and the goal are n bits, an action flips one of them, the reward is -1 until the bits
equal the goal and 0 there. A random walk almost never meets a goal of n >= 10 bits, so DQN
learns nothing from the reward alone and DQN + HER solves it (the paper's Figure 1).

A dict observation of ``observation`` (the bits), ``achieved_goal`` (the bits) and
``desired_goal`` (float32 vectors of 0 and 1); state and goal drawn uniformly at every reset,
as the paper draws them (they may be equal there: every step flips a bit, so only a step
can succeed). The episode ends as in Stable-Baselines3's ``BitFlippingEnv`` (its HER tests'
task): terminated when a step reaches the goal (reward 0, ``is_success``), truncated after n
steps. Departures from that env: its goal is fixed (all ones), here drawn per episode (the
paper's task); a success on the n-th step is terminated only (SB3 flags it truncated too).
``compute_reward`` is vectorised over leading axes, as HER calls it. ``render_mode=
"rgb_array"`` draws the bits above the goal (``rlcore.evaluate run video=true``).

    python -m rlcore.train algo=dqn env=BitFlipping her=future env.kwargs.n_bits=10
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "BitFlipping-v0"


class BitFlippingEnv(gym.Env):
    """n bits to flip to a goal (see the module docstring)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}
    CELL = 16  # pixels per bit in a rendered frame

    def __init__(self, n_bits: int = 10, render_mode: str | None = None) -> None:
        if n_bits < 1:
            raise ValueError(f"n_bits={n_bits}: at least one bit")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode={render_mode!r}: None or 'rgb_array'")
        self.n_bits = int(n_bits)
        self.render_mode = render_mode
        bits = gym.spaces.Box(0.0, 1.0, (self.n_bits,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {"observation": bits, "achieved_goal": bits, "desired_goal": bits}
        )
        self.action_space = gym.spaces.Discrete(self.n_bits)
        # everything a step reads, in one dict: rlcore checkpoints copy an env's ``state``
        self.state: dict[str, Any] = {
            "bits": np.zeros(self.n_bits, np.float32),
            "goal": np.zeros(self.n_bits, np.float32),
            "steps": 0,
        }

    def _obs(self) -> dict[str, np.ndarray]:
        bits = self.state["bits"]
        return {"observation": bits.copy(), "achieved_goal": bits.copy(),
                "desired_goal": self.state["goal"].copy()}  # fmt: skip

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self.state = {
            "bits": self.np_random.integers(0, 2, self.n_bits).astype(np.float32),
            "goal": self.np_random.integers(0, 2, self.n_bits).astype(np.float32),
            "steps": 0,
        }
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        if not self.action_space.contains(int(action)):
            raise ValueError(f"action {action}: a bit index in [0, {self.n_bits})")
        bits = self.state["bits"]
        bits[int(action)] = 1.0 - bits[int(action)]
        self.state["steps"] += 1
        reward = float(self.compute_reward(bits, self.state["goal"], None))
        success = reward == 0.0
        truncated = not success and self.state["steps"] >= self.n_bits
        return self._obs(), reward, success, truncated, {"is_success": success}

    def render(self) -> np.ndarray | None:
        """``rgb_array``: the bits (top row) above the goal (bottom row), white for 1 and
        black for 0, a grey band between them; ``CELL`` pixels a bit."""
        if self.render_mode is None:
            return None
        rows = np.stack([self.state["bits"], np.full(self.n_bits, 0.5), self.state["goal"]])
        grey = (rows * 255).astype(np.uint8).repeat(self.CELL, 0).repeat(self.CELL, 1)
        return np.repeat(grey[:, :, None], 3, axis=2)

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """0 where the bits equal the goal, else -1 (over the last axis)."""
        differ = np.any(np.asarray(achieved_goal) != np.asarray(desired_goal), axis=-1)
        return -differ.astype(np.float32)


def register() -> None:
    """Register ``BitFlipping-v0`` (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="rlcore.envs.bitflip:BitFlippingEnv")


register()
