"""NeoRL-2's RocketRecovery (envs/rocketrecovery.py): the reference env's trajectories on
the same seeds, wind offsets and actions, the authors' released validation data replayed
(tests/golden/rocketrecovery.json, benchmarks/parity/rocketrecovery_reference.py), the
reward and the landing by hand, seeding, the command line."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.envs.neorl2 import ROCKET_ID
from rlcore.envs.rocketrecovery import RocketRecoveryEnv, landed, rocket_recovery_reward
from rlcore.model_based import termination_rule

GOLDEN = json.loads((Path(__file__).parent / "golden" / "rocketrecovery.json").read_text())


def replay(env: RocketRecoveryEnv, episode: dict) -> tuple[list, list, list]:
    obs, info = env.reset(seed=episode["seed"], options={"wind": episode["wind"]})
    assert info["wind_offset"] == episode["wind"]
    observations, rewards, ends = [obs], [], []
    for action in np.array(episode["actions"], np.float32):
        obs, reward, terminated, truncated, _ = env.step(action)
        assert not truncated
        observations.append(obs)
        rewards.append(reward)
        ends.append(terminated)
    return observations, rewards, ends


@pytest.mark.parametrize("mode", ["train", "val"])
def test_trajectories_equal_the_reference_env(mode: str) -> None:
    """Bit for bit: observations, rewards and the landing flag; two episodes of one env
    (the reference reuses its world) and the validation mode's stronger wind."""
    env = RocketRecoveryEnv(mode=mode)
    cases = [case for case in GOLDEN["cases"] if case["mode"] == mode]
    assert cases
    for episode in cases:
        observations, rewards, ends = replay(env, episode)
        np.testing.assert_array_equal(np.array(observations), np.float32(episode["obs"]))
        assert rewards == episode["reward"] and ends == episode["terminated"]
        assert ends[-1] and abs(rewards[-1]) == 100  # every golden episode lands or crashes


def test_the_authors_released_validation_data_replay_exactly() -> None:
    """polixir/neorl2_dataset's validation trajectories 0 and 1 (a safe landing each, +100)
    from reset(seed=i) and their wind offsets, fed their actions."""
    env = RocketRecoveryEnv()
    for episode in GOLDEN["released"]:
        observations, rewards, ends = replay(env, episode)
        np.testing.assert_array_equal(np.array(observations), np.float32(episode["obs"]))
        assert rewards == episode["reward"] and ends == episode["terminated"]
        assert rewards[-1] == 100.0 and sum(ends) == 1


def test_reward_and_landing_by_hand() -> None:
    """Shaping change, engine costs (main (a0 + 1) / 2 * 0.3 when a0 > 0, side |a1| * 0.03
    when |a1| > 0.5), and +-100 once |y'| <= 0.05."""
    obs = np.array([[0.3, 0.4, 0.0, 0.0, 0.1, 0, 0]] * 4, np.float32)
    nxt = np.array([[0.0, 0.6, 0.6, 0.8, 0.0, 0, 0], [0.0, 0.6, 0.6, 0.8, 0.0, 0, 0],
                    [0.0, 0.05, 0.1, -1.0, 0.2, 0, 0], [0.0, -0.04, 0.6, 0, 0, 0, 0]],
                   np.float32)  # fmt: skip
    action = np.array([[0.5, 0.6], [-0.5, 0.4], [1, 1], [0, 0]], np.float32)
    reward = rocket_recovery_reward(obs, action, nxt)
    # shaping: before -100 * 0.5 - 0 - 100 * 0.1 = -60; after -60 - 100 = -160
    np.testing.assert_allclose(reward[:2], [-100 - 0.75 * 0.3 - 0.6 * 0.03, -100], rtol=1e-6)
    assert reward[2:].tolist() == [100.0, -100.0]  # down: safe; down with |vx'| 0.6: crash
    assert landed(nxt).tolist() == [False, False, True, True]
    rule = termination_rule(ROCKET_ID)  # model rollouts end where the env does
    assert rule(*map(torch.tensor, (obs, action, nxt))).tolist() == [False, False, True, True]


def test_seeded_resets_draw_the_wind_and_repeat() -> None:
    """A seed fixes the wind offset and the push; unseeded resets continue the stream;
    out-of-range actions are clipped to [-1, 1]."""
    first, second = RocketRecoveryEnv(), RocketRecoveryEnv()
    a, info_a = first.reset(seed=3)
    b, info_b = second.reset(seed=3)
    np.testing.assert_array_equal(a, b)
    assert info_a == info_b and -9999 <= info_a["wind_offset"] < 9999
    assert first.reset(seed=4)[1] != info_a
    next_a, next_b = first.reset()[0], second.reset(seed=4)[0]
    assert not np.array_equal(next_a, next_b)  # the stream went on from seed 4
    env = RocketRecoveryEnv()
    env.reset(seed=0, options={"wind": 10})
    clipped = env.step(np.array([5.0, -5.0]))
    env.reset(seed=0, options={"wind": 10})
    np.testing.assert_array_equal(clipped[0], env.step(np.array([1.0, -1.0]))[0])
    with pytest.raises(ValueError, match="mode"):
        RocketRecoveryEnv(mode="test")
    with pytest.raises(ValueError, match="does not render"), pytest.warns(UserWarning):
        gym.make(ROCKET_ID, render_mode="rgb_array")  # gymnasium warns first


def test_registered_with_its_episode_length_and_scores() -> None:
    from rlcore.envs.make import resolve_env_id
    from rlcore.evaluation import pinned_reference_scores

    assert resolve_env_id("RocketRecovery") == ROCKET_ID
    assert gym.spec(ROCKET_ID).max_episode_steps == 500
    assert pinned_reference_scores("local/rocketrecovery/high-v0") == (-176.0, 208.0)
    env = gym.make(ROCKET_ID)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (7,) and obs.dtype == np.float32 and env.action_space.shape == (2,)


def test_sac_trains_on_it_from_the_command_line(tmp_path) -> None:
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    result = train(make_config("algo=sac", "env=RocketRecovery", *FAST, "total_steps=64",
                               "algo.learning_starts=32", "algo.batch_size=16",
                               "eval_every=64", "eval_episodes=1", "eval_envs=1"),
                   tmp_path / "run")  # fmt: skip
    assert np.isfinite(result["eval/return"])
