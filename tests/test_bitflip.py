"""The HER paper's bit-flipping task (envs/bitflip.py): steps, rewards and episode ends by
hand, the vectorised reward HER recomputes, and DQN + HER on it from the command line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlcore.envs.bitflip import BitFlippingEnv
from rlcore.envs.make import make_vec_env


def test_a_flip_moves_one_bit_and_the_goal_ends_the_episode() -> None:
    env = BitFlippingEnv(4)
    env.reset(seed=0)
    env.state["bits"][:] = [0, 1, 1, 0]
    env.state["goal"][:] = [1, 1, 0, 0]
    obs, reward, terminated, truncated, info = env.step(0)
    np.testing.assert_array_equal(obs["observation"], [1, 1, 1, 0])
    np.testing.assert_array_equal(obs["achieved_goal"], [1, 1, 1, 0])
    np.testing.assert_array_equal(obs["desired_goal"], [1, 1, 0, 0])
    assert (reward, terminated, truncated, info["is_success"]) == (-1.0, False, False, False)
    obs, reward, terminated, truncated, info = env.step(2)
    assert (reward, terminated, truncated, info["is_success"]) == (0.0, True, False, True)


def test_an_episode_is_cut_after_n_steps_and_seeds_repeat() -> None:
    env = BitFlippingEnv(3)
    first, _ = env.reset(seed=7)
    env.state["goal"][:] = 1 - env.state["bits"]  # three flips away
    ends = [env.step(0)[2:4] for _ in range(3)]  # bit 0 back and forth: never the goal
    assert ends == [(False, False), (False, False), (False, True)]
    again, _ = BitFlippingEnv(3).reset(seed=7)
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    with pytest.raises(ValueError, match="a bit index"):
        env.step(3)


def test_the_reward_is_vectorised_over_leading_axes() -> None:
    env = BitFlippingEnv(2)
    achieved = np.array([[[0, 1], [1, 1]], [[0, 0], [1, 0]]], np.float32)
    desired = np.array([[[0, 1], [0, 1]], [[0, 0], [0, 0]]], np.float32)
    np.testing.assert_array_equal(env.compute_reward(achieved, desired, None),
                                  [[0.0, -1.0], [0.0, -1.0]])  # fmt: skip


def test_registered_with_a_short_name_and_restored_exactly() -> None:
    from rlcore.envs.make import get_vec_env_state, set_vec_env_state

    env = make_vec_env("bitflipping", 2, seed=3, env_kwargs={"n_bits": 6})
    assert isinstance(env.single_action_space, gym.spaces.Discrete)
    env.reset(seed=3)
    env.step(np.array([1, 2]))
    state = get_vec_env_state(env)
    expected = [env.step(np.array([a, a]))[0] for a in (0, 4, 5)]
    other = make_vec_env("bitflipping", 2, seed=11, env_kwargs={"n_bits": 6})
    other.reset(seed=11)
    set_vec_env_state(other, state)
    for action, want in zip((0, 4, 5), expected):
        got = other.step(np.array([action, action]))[0]
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def test_dqn_with_hindsight_relabelling_runs_from_the_command_line(tmp_path) -> None:
    """DQN reads the dict observation and HER relabels its goals (a short run)."""
    from rlcore.train import train
    from tests.conftest import make_config

    result = train(make_config(
        "algo=dqn", "env=BitFlipping", "her=future", "env.kwargs.n_bits=5",
        "algo.learning_starts=50", "algo.batch_size=16", "algo.hidden=[16]", "total_steps=120",
        "eval_every=120", "eval_episodes=2", "logger=quiet", "threads=1",
    ), tmp_path / "run")  # fmt: skip
    assert result["run/step"] == 120 and 0.0 <= result["eval/success_rate"] <= 1.0
