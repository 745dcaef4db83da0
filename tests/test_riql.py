"""RIQL (algos/riql.py): the value's quantile target over the critic ensemble, the Huber
Q loss on clipped targets and the clamped advantage weights, by hand; statistics of
observations and next observations together; a corrupted run from the command line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.algos.riql import RIQL, RIQLConfig
from rlcore.offline.datasets import OfflineDataset
from rlcore.types import Batch

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def test_one_update_by_hand() -> None:
    """V = 0 and Q = 0 (zeroed output layers); the target critics say 1..5, so the value
    target is their 0.25 quantile, 2: value loss 0.7 * 2^2 = 2.8. Q targets r + gamma 0:
    1001 clipped to 1000 -> Huber (delta 1) 999.5; -0.5 -> 0.5 * 0.25 = 0.125; mean over
    rows and critics 499.8125. Advantage 2: weight min(exp(3 * 2), 100) = 100."""
    torch.manual_seed(0)
    agent = RIQL(OBS, ACT, RIQLConfig(hidden=(8, 8), num_critics=5))
    with torch.no_grad():
        for layer in (agent.value[-1], agent.critic.net.output_layer):
            layer.weight.zero_()
            layer.bias.zero_()
        target = agent.target_critic.net.output_layer  # member k answers k + 1
        target.weight.zero_()
        target.bias.copy_(torch.arange(1.0, 6.0).view(5, 1, 1))
    obs, action = torch.randn(2, 3), torch.tensor([[0.5, -0.5], [0.0, 0.25]])
    with torch.no_grad():
        bc = (agent.actor(obs) - action).pow(2).sum(-1)
    batch = Batch(obs=obs, action=action, reward=torch.tensor([1001.0, -0.5]), next_obs=obs,
                  terminated=torch.tensor([0.0, 1.0]), truncated=torch.zeros(2))  # fmt: skip
    metrics = agent.update(batch)
    assert metrics["value_loss"] == pytest.approx(2.8)
    assert metrics["critic_loss"] == pytest.approx(499.8125)
    assert metrics["actor_loss"] == pytest.approx(100 * bc.mean().item(), rel=1e-6)
    assert metrics["advantage"] == pytest.approx(2.0)


def test_the_statistics_are_of_observations_and_next_observations_together() -> None:
    n = 4
    obs = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)
    dataset = OfflineDataset(
        obs=obs, action=torch.zeros(n, 2), reward=torch.zeros(n), next_obs=obs + 100.0,
        terminated=torch.zeros(n), truncated=torch.zeros(n),
        episode_id=torch.zeros(n, dtype=torch.int64), mc_return=torch.zeros(n),
        episode_return=torch.zeros(1, dtype=torch.float64),
    )  # fmt: skip
    agent = RIQL(OBS, ACT, RIQLConfig(hidden=(8, 8)))
    agent.prepare_dataset(dataset)
    both = torch.cat([obs, obs + 100.0])
    torch.testing.assert_close(agent.obs_normalizer.mean, both.mean(0))
    torch.testing.assert_close(agent.obs_normalizer.std, both.std(0) + 1e-3)


def test_riql_on_a_corrupted_dataset_from_the_command_line(tmp_path) -> None:
    from rlcore.offline.recording import collect
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
        collect("Hopper", "random", "local/hopper/random-v0", steps=300, seed=0)
        result = train(make_config(
            "algo=riql", "env=Hopper", "dataset=local/hopper/random-v0", *FAST,
            "corruption.kind=dynamics", "total_steps=30", "algo.batch_size=16",
            "eval_every=30", "eval_episodes=1", "eval_envs=1", "env.max_episode_steps=20",
            "log_every=10",
        ), tmp_path / "run")  # fmt: skip
    assert result["run/step"] == 30 and np.isfinite(result["eval/return"])
    rows = (tmp_path / "run" / "train.csv").read_text()
    assert "train/critic_loss" in rows.splitlines()[0]
