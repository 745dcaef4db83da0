"""Online and dataset rewards get one transform (issue: online rewards normalised twice).

An offline-to-online run scales dataset rewards by 1000 / (max - min episode return)
(``normalize_reward_by_returns``) and must give online rewards exactly the same factor,
nothing else: no running-std env wrapper on top (the online algorithms' separate
``normalize_reward``).
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from tests.conftest import FAST, make_config

# Two episodes of InvertedPendulum-shaped rows with reward 1 per step: returns 10 and 30,
# so the dataset factor is 1000 / (30 - 10) = 50.
EPISODES = (10, 30)
FACTOR = 1000.0 / (max(EPISODES) - min(EPISODES))


def _write_pendulum_d4rl(path) -> str:
    rng = np.random.default_rng(0)
    n = sum(EPISODES)
    timeouts = np.zeros(n, bool)
    timeouts[np.cumsum(EPISODES) - 1] = True
    obs = rng.normal(scale=0.05, size=(n, 4)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f["observations"] = obs
        f["next_observations"] = obs + 0.01
        f["actions"] = rng.uniform(-1, 1, size=(n, 1)).astype(np.float32)
        f["rewards"] = np.ones(n, np.float32)
        f["terminals"] = np.zeros(n, bool)
        f["timeouts"] = timeouts
    return str(path)


@pytest.mark.parametrize("algo", ["iql", "famo2o"])
def test_online_and_dataset_rows_share_one_reward_transform(algo, tmp_path):
    from rlcore.checkpoint import load_checkpoint
    from rlcore.train import train

    dataset = _write_pendulum_d4rl(tmp_path / "pendulum.hdf5")
    online = 40
    train(
        make_config(
            f"algo={algo}", "env=InvertedPendulum", f"dataset={dataset}",
            "algo.normalize_reward_by_returns=true", "total_steps=4", f"algo.online_steps={online}",
            "algo.batch_size=8", "algo.hidden=[16,16]", "eval_every=1000", *FAST,
            *(["algo.compile=false"] if algo == "iql" else ["algo.balance_hidden=[16,16]"]),
        ),
        tmp_path / "run",
    )  # fmt: skip
    buffer = load_checkpoint(tmp_path / "run")["loop"]["stateful"]["buffer"]
    size = int(buffer["size"])
    rewards = buffer["data"]["reward"][:size]
    rows = sum(EPISODES)  # the dataset's rows come first (offline_data: keep), then online
    assert size == rows + online
    torch.testing.assert_close(rewards[:rows], torch.full((rows,), FACTOR))
    # InvertedPendulum pays 1 per step, 0 on the falling step: stored as 50 or 0, once
    # scaled (a running-std wrapper underneath would store 10.0, 2.0, 1.2, ...)
    online_rewards = rewards[rows:]
    assert set(online_rewards.tolist()) <= {0.0, FACTOR}
    assert (online_rewards == FACTOR).sum() >= online // 2


def test_the_renamed_dataset_reward_option_names_its_new_name():
    from rlcore import catalog
    from rlcore.config import ConfigError

    with pytest.raises(ConfigError, match="normalize_reward_by_returns"):
        catalog.get("iql").config_from_dict({"normalize_reward": True})
    # the online algorithms keep normalize_reward: the env's running-std reward scaling
    assert catalog.get("ppo").config_from_dict({"normalize_reward": True}).normalize_reward


def test_antmaze_reward_shift_reaches_dataset_and_online_rows(tmp_path):
    """CORL IQL's and RLPD's AntMaze recipe, r - 1 (``algo.reward_bias=-1``), on the dataset
    rows and on every online reward alike: IQL keeps the dataset in its buffer, so both are
    read back (dataset rows 1 - 1 = 0; online InvertedPendulum rewards 1 or 0 -> 0 or -1)."""
    from rlcore.algos.rlpd import RLPDConfig
    from rlcore.checkpoint import load_checkpoint
    from rlcore.train import train

    assert RLPDConfig(reward_bias=-1.0).plan().data.reward_bias == -1.0
    dataset = _write_pendulum_d4rl(tmp_path / "pendulum.hdf5")
    online = 40
    train(make_config(
        "algo=iql", "env=InvertedPendulum", f"dataset={dataset}", "algo.reward_bias=-1",
        "total_steps=4", f"algo.online_steps={online}", "algo.batch_size=8",
        "algo.hidden=[16,16]", "eval_every=1000", "algo.compile=false", *FAST,
    ), tmp_path / "run")  # fmt: skip
    buffer = load_checkpoint(tmp_path / "run")["loop"]["stateful"]["buffer"]
    rewards = buffer["data"]["reward"][: int(buffer["size"])]
    rows = sum(EPISODES)
    torch.testing.assert_close(rewards[:rows], torch.zeros(rows))
    assert set(rewards[rows:].tolist()) <= {0.0, -1.0} and (rewards[rows:] == 0.0).sum() >= 20
