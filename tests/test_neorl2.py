"""NeoRL-2's DMSD and Pipeline (envs/neorl2.py): the reference envs' trajectories on the
same seeds and actions (tests/golden/neorl2.json, benchmarks/parity/neorl2_reference.py),
dynamics by hand, the command line, normalised scores."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlcore.benchmarks.parity.neorl2_reference import CASES, actions
from rlcore.envs.neorl2 import DMSD_ID, PIPELINE_ID, DMSDEnv, PipelineEnv

GOLDEN = json.loads((Path(__file__).parent / "golden" / "neorl2.json").read_text())["cases"]


@pytest.mark.parametrize("name", ["dmsd", "pipeline"])
def test_trajectories_match_the_reference_envs(name: str) -> None:
    seeds, steps, dim = CASES[name]
    env = DMSDEnv() if name == "dmsd" else PipelineEnv()
    for episode in GOLDEN[name]:
        width = len(episode["obs"][0])
        if name == "pipeline":
            env.target = None  # a first target from the seed on both sides (golden file)
        obs, _ = env.reset(seed=episode["seed"])
        observations, rewards = [obs[:width]], []
        for action in actions(steps, dim, episode["seed"] + 1):
            obs, reward, terminated, truncated, _ = env.step(action)
            assert not terminated and not truncated
            observations.append(obs[:width])
            rewards.append(reward)
        np.testing.assert_allclose(np.array(observations), episode["obs"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(rewards, episode["reward"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(obs, episode["last_obs"], rtol=1e-6, atol=1e-6)


def test_dmsd_one_step_by_hand() -> None:
    """From rest at the origin, full force +30 on mass 1 and -30 on mass 2: the Euler step
    moves no position and gives velocities +-0.2 * 30 / 20 = +-0.3; reward from the
    targets."""
    env = DMSDEnv()
    env.reset(seed=0)
    env.state = np.zeros(4)
    env.targets[:] = [0.5, -0.25]
    obs, reward, *_ = env.step(np.array([1.0, -1.0], np.float32))
    np.testing.assert_allclose(obs, [0, 0, 0.3, -0.3, 0.5, -0.25], atol=1e-7)
    assert reward == pytest.approx(-np.log(0.51) - np.log(0.26), rel=1e-6)
    obs, *_ = env.step(np.zeros(2, np.float32))  # positions move by dt * v
    np.testing.assert_allclose(obs[:2], [0.06, -0.06], atol=1e-7)


def test_pipeline_delays_the_gate_by_twenty_steps() -> None:
    env = PipelineEnv()
    obs, _ = env.reset(seed=0)
    start = obs[0]
    outflows = []
    for _ in range(25):
        obs, *_ = env.step(np.array([1.0], np.float32))
        outflows.append(obs[0])
    assert outflows[:19] == [start] * 19  # the channel still holds the start flow
    np.testing.assert_allclose(outflows[19:], start + np.arange(1, 7), rtol=1e-6)
    assert obs[-25:].tolist() == [1.0] * 25  # the latest actions, newest first
    assert obs[2] == outflows[-2]  # the previous outflow heads the history


def test_registered_with_short_names_episode_lengths_and_scores() -> None:
    from rlcore.envs.make import resolve_env_id
    from rlcore.evaluation import pinned_reference_scores

    assert resolve_env_id("DMSD") == DMSD_ID and resolve_env_id("pipeline") == PIPELINE_ID
    assert gym.spec(DMSD_ID).max_episode_steps == 100
    assert gym.spec(PIPELINE_ID).max_episode_steps == 1000
    assert pinned_reference_scores("local/dmsd/medium-v0") == (30.60, 849.51)
    assert pinned_reference_scores(PIPELINE_ID) == (-296.0, 751.0)


def test_an_offline_run_on_a_recorded_dmsd_dataset(tmp_path) -> None:
    """Record random DMSD data, train IQL on it from the command line: normalised scores."""
    from rlcore.offline.recording import collect
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
        collect("DMSD", "random", "local/dmsd/random-v0", steps=300, seed=0)
        result = train(make_config("algo=iql", "env=DMSD", "dataset=local/dmsd/random-v0", *FAST,
                                   "total_steps=40", "algo.batch_size=16", "eval_every=40",
                                   "eval_episodes=1", "eval_envs=1"), tmp_path / "run")  # fmt: skip
    assert np.isfinite(result["eval/return"])
    assert "normalised" in (tmp_path / "run" / "train.log").read_text()


def test_the_pid_data_policy_by_hand() -> None:
    """P e + I dt (0 + e) + D (e - 0) / dt on the first step, clipped; the history
    restarts with ``reset``."""
    from rlcore.offline.neorl2_recipe import PIDController

    pid = PIDController(p=(1.0, 2.0), i=(0.5, 0.0), d=(0.1, 0.0))
    obs = np.array([0.0, 0.0, 0, 0, 0.1, -0.2])  # errors 0.1, -0.2
    np.testing.assert_allclose(pid(obs), [0.1 + 0.5 * 0.2 * 0.1 + 0.1 * 0.1 / 0.2, -0.4])
    np.testing.assert_allclose(pid(obs), [0.1 + 0.5 * 0.2 * 0.2, -0.4])  # e unchanged: D 0
    pid.reset()
    np.testing.assert_allclose(pid(obs * 20), [1.0, -1.0])  # clipped


def test_the_dmsd_recipe_records_seeded_pid_trajectories(tmp_path) -> None:
    from rlcore.offline.datasets import load_dataset
    from rlcore.offline.neorl2_recipe import GAINS, main, record_dmsd

    episodes = record_dmsd("val", transitions=250)
    assert [len(e) for e in episodes] == [100, 100, 100]  # whole trajectories past 250
    for seed, episode in enumerate(episodes):
        np.testing.assert_array_equal(episode.observations[0], DMSDEnv().reset(seed=seed)[0])
    assert not np.allclose(GAINS["train"][0], GAINS["val"][0])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
        stats = main(["env=DMSD", "dataset_id=local/dmsd/high-v0", "transitions=200"])
        dataset = load_dataset("local/dmsd/high-v0")
    assert stats["episodes"] == 2 and len(dataset) == 200
    assert (dataset.ref_min_score, dataset.ref_max_score) == (30.60, 849.51)
