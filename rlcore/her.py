"""Hindsight experience replay: a sampler that relabels goals (Andrychowicz et al., 2017).

Anchor: Stable-Baselines3's ``HerReplayBuffer`` (``stable_baselines3/her/
her_replay_buffer.py``, 2.x). As there:

* transitions are drawn uniformly from *complete* episodes still whole in the buffer (an
  episode still running, or one whose first rows were overwritten, is not drawn);
* of a batch of B, ``int(B * k / (k + 1))`` transitions are relabelled (k = 4: 80%), the
  rest keep their goal;
* the new goal is the ``achieved_goal`` of the *next* observation of another transition of
  the same episode: ``future`` a transition from the current one (included) to the last,
  ``final`` the last, ``episode`` any;
* the relabelled transition's ``desired_goal`` (in ``obs`` and ``next_obs``) becomes the
  new goal and its reward ``compute_reward(next achieved_goal, new goal, info)`` (the env's
  own vectorised function); ``terminated`` is kept.

Departures: the relabelled rows are the batch's first ``int(B k / (k + 1))`` (SB3 draws them
as a separate batch of the same distribution); ``compute_reward`` gets ``info=None`` (SB3
passes the stored infos: the rlcore tasks' and gymnasium-robotics' rewards do not read
them); draws come from this sampler's own seeded torch generator by rejection (SB3 lists the
valid rows each call), so a run is reproducible and a draw costs O(B), not O(buffer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch

from rlcore.buffers import EPISODE_CHANNELS, ReplayBuffer
from rlcore.config import ConfigError
from rlcore.types import Batch

STRATEGIES = ("future", "final", "episode")
GOAL_KEYS = ("achieved_goal", "desired_goal")

RewardFn = Callable[[np.ndarray, np.ndarray, Any], np.ndarray]


@runtime_checkable
class GoalConditioned(Protocol):
    """A goal-conditioned task (gymnasium-robotics' ``GoalEnv``, rlcore's robot tasks):
    its reward is a vectorised function of achieved and desired goals."""

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> Any: ...


def task_reward_function(env_id: str, env_kwargs: dict[str, Any]) -> RewardFn:
    """The ``compute_reward`` of task ``env_id`` (one env made to hold it; the vector env's
    sub-envs may live in other processes), or a ValueError naming why not."""
    env = gym.make(env_id, **env_kwargs).unwrapped
    if not isinstance(env, GoalConditioned):
        env.close()
        raise ValueError(
            f"{env_id} has no compute_reward(achieved_goal, desired_goal, info): hindsight "
            "relabelling needs a goal-conditioned task (e.g. env=PandaPush)"
        )
    return env.compute_reward


@dataclass(frozen=True)
class HerOptions:
    """``her.*``: the relabelling strategy and goals per real one."""

    strategy: str = "future"
    k: int = 4

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"her.strategy='{self.strategy}': choose {', '.join(STRATEGIES)}")
        if self.k < 1:
            raise ValueError(f"her.k={self.k}: relabel at least 1 goal per real one")

    @property
    def relabel_fraction(self) -> float:
        return self.k / (self.k + 1)


class HindsightSampler:
    """Draws batches from a ``ReplayBuffer(track_episodes=True)`` of dict observations with
    ``achieved_goal`` / ``desired_goal`` parts, relabelling as SB3's HER does (module doc)."""

    def __init__(
        self, buffer: ReplayBuffer, compute_reward: RewardFn, options: HerOptions, seed: int = 0
    ) -> None:
        if not buffer.track_episodes:
            raise ValueError("hindsight relabelling needs ReplayBuffer(track_episodes=True)")
        parts = {part.name for part in buffer.obs_spec.parts}
        if not buffer.obs_spec.keyed or not set(GOAL_KEYS) <= parts:
            raise ValueError(
                "hindsight relabelling needs dict observations with achieved_goal and "
                f"desired_goal parts (a goal-conditioned task); this buffer has {sorted(parts)}"
            )
        self.buffer, self.compute_reward, self.options = buffer, compute_reward, options
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(seed)

    # --- which rows can be drawn ------------------------------------------------------
    def _episode_rows(self, rows: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        """The row ``offset`` steps after (negative: before) each of ``rows`` in its env's
        episode: an env's consecutive transitions are ``num_envs`` rows apart."""
        b = self.buffer
        return (rows + offset * b.num_envs) % b.capacity

    def _complete(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows of ended episodes whose first row is still in the buffer."""
        data = self.buffer.data
        step, start = data["episode_step"][rows], data["episode_start"][rows]
        first = self._episode_rows(rows, start - step)
        whole = (data["episode_step"][first] == start) & (
            data["episode_env"][first] == data["episode_env"][rows]
        )
        return (data["episode_length"][rows] > 0) & whole & (rows < self.buffer.size)

    def _draw_rows(self, batch_size: int) -> torch.Tensor:
        """``batch_size`` rows uniform over the complete episodes' rows (rejection)."""
        size = len(self.buffer)
        if size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        chosen: list[torch.Tensor] = []
        have = tries = 0
        while have < batch_size:
            rows = torch.randint(0, size, (2 * batch_size,), generator=self.generator)
            rows = rows[self._complete(rows.to(self.buffer.device)).cpu()]
            chosen.append(rows)
            have += len(rows)
            tries += 1
            if tries == 50 and have == 0:  # a setting to change: the CLI says so in one line
                raise ConfigError(
                    "hindsight relabelling draws from complete episodes, and the replay "
                    "buffer holds none yet: let the first episodes end before updates start "
                    "(raise algo.learning_starts, fast_td3: algo.warmup_vector_steps x num_envs, "
                    "above the episode length)"
                )
        return torch.cat(chosen)[:batch_size].to(self.buffer.device)

    # --- relabelling ----------------------------------------------------------------
    def goal_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """For each of ``rows``, the row whose next ``achieved_goal`` becomes its goal."""
        data = self.buffer.data
        index = data["episode_step"][rows] - data["episode_start"][rows]  # 0 = first step
        length = data["episode_length"][rows]
        strategy = self.options.strategy
        if strategy == "final":
            target = length - 1
        else:
            low = index if strategy == "future" else torch.zeros_like(index)
            u = torch.rand(len(rows), generator=self.generator).to(rows.device)
            target = low + (u * (length - low).double()).long()  # uniform in [low, length)
            target = torch.minimum(target, length - 1)
        return self._episode_rows(rows, target - index)

    def sample(self, batch_size: int) -> Batch:
        rows = self._draw_rows(batch_size)
        batch = self.buffer.batch(rows)
        for name in EPISODE_CHANNELS:
            batch.extras.pop(name, None)
        relabelled = int(batch_size * self.options.relabel_fraction)
        if relabelled == 0:
            return batch
        goals = self.buffer.data["next_obs.achieved_goal"][self.goal_rows(rows[:relabelled])]
        batch.obs["desired_goal"][:relabelled] = goals
        batch.next_obs["desired_goal"][:relabelled] = goals
        achieved = batch.next_obs["achieved_goal"][:relabelled]
        reward = self.compute_reward(achieved.cpu().numpy(), goals.cpu().numpy(), None)
        batch.reward[:relabelled] = torch.as_tensor(
            np.asarray(reward), dtype=batch.reward.dtype, device=batch.reward.device
        )
        return batch

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
