"""RIQL's data corruption (``rlcore.offline.corruption``): which rows, and what each kind
and mode writes there, by hand; the adversarial attack moves against a critic whose
gradient is known; refusals name the fix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlcore.capabilities import MissingCapabilityError
from rlcore.offline.corruption import Corruption, corrupt
from rlcore.offline.datasets import OfflineDataset


def _dataset(n: int = 10) -> OfflineDataset:
    """Columns of population std 1 (alternating -1 / +1 around a per-column offset)."""
    signs = torch.tensor([-1.0, 1.0]).repeat(n // 2)
    obs = torch.stack([signs + 3.0, -signs], 1)
    return OfflineDataset(
        obs=obs, action=torch.stack([signs * 0.5, signs * 0.25], 1), reward=torch.arange(n) * 1.0,
        next_obs=obs + 1.0, terminated=torch.zeros(n), truncated=torch.zeros(n),
        episode_id=torch.zeros(n, dtype=torch.int64), mc_return=torch.zeros(n),
        episode_return=torch.tensor([45.0], dtype=torch.float64), source="hand",
    )  # fmt: skip


def _rows(seed: int, n: int, rate: float) -> tuple[np.ndarray, np.random.RandomState]:
    rng = np.random.RandomState(seed)
    return np.flatnonzero(rng.random_sample(n) < rate), rng


def test_random_observations_move_by_a_uniform_fraction_of_each_columns_std() -> None:
    dataset = _dataset()
    before = dataset.obs.clone()
    changed = corrupt(dataset, Corruption("obs", "random", rate=0.5, scale=2.0, seed=3))
    rows, rng = _rows(3, 10, 0.5)
    assert changed.tolist() == rows.tolist() and 0 < len(rows) < 10
    noise = rng.uniform(-2.0, 2.0, size=(len(rows), 2)) * np.array([[1.0, 1.0]])  # std 1
    expected = before.clone()
    expected[rows] = torch.as_tensor(before[rows].double().numpy() + noise, dtype=torch.float32)
    assert torch.equal(dataset.obs, expected)
    assert torch.equal(dataset.next_obs, before + 1.0)  # dynamics untouched
    assert dataset.corruption == [{"kind": "obs", "mode": "random", "rate": 0.5, "scale": 2.0,
                                   "seed": 3, "rows": len(rows)}]  # fmt: skip


def test_actions_and_dynamics_scale_by_their_own_columns_std() -> None:
    dataset = _dataset()
    before = dataset.action.clone()
    corrupt(dataset, Corruption("action", rate=1.0, seed=0))
    _, rng = _rows(0, 10, 1.0)
    std = np.array([[0.5, 0.25]])
    expected = before.double().numpy() + rng.uniform(-1, 1, size=(10, 2)) * std
    torch.testing.assert_close(dataset.action, torch.as_tensor(expected, dtype=torch.float32))
    nxt = dataset.next_obs.clone()
    corrupt(dataset, Corruption("dynamics", rate=1.0, seed=1))
    _, rng = _rows(1, 10, 1.0)
    expected = nxt.double().numpy() + rng.uniform(-1, 1, size=(10, 2))
    torch.testing.assert_close(dataset.next_obs, torch.as_tensor(expected, dtype=torch.float32))


def test_rewards_random_are_replaced_and_adversarial_are_flipped_and_scaled() -> None:
    dataset = _dataset()
    corrupt(dataset, Corruption("reward", "random", rate=0.4, scale=0.5, seed=5))
    rows, rng = _rows(5, 10, 0.4)
    expected = torch.arange(10) * 1.0
    expected[rows] = torch.as_tensor(rng.uniform(-0.5, 0.5, len(rows)) * 30, dtype=torch.float32)
    assert torch.equal(dataset.reward, expected)
    dataset = _dataset()
    corrupt(dataset, Corruption("reward", "adversarial", rate=0.4, scale=0.5, seed=5))
    expected = torch.arange(10) * 1.0
    expected[rows] = expected[rows] * -0.5
    assert torch.equal(dataset.reward, expected)


class LinearCritic:
    """Q(s, a) = s . w + a . v: the attack's gradient sign is known."""

    def __init__(self) -> None:
        self.w, self.v = torch.tensor([1.0, -2.0]), torch.tensor([-1.0, 3.0])

    def action_value(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return obs @ self.w + action @ self.v

    def policy_action(self, obs: torch.Tensor) -> torch.Tensor:
        return obs * 0.0


@pytest.mark.parametrize("kind", ["obs", "action", "dynamics"])
def test_the_adversarial_attack_walks_each_value_down_the_critics_gradient(kind: str) -> None:
    """100 fresh Adam steps of lr 0.01 scale each move p by 0.01 scale against the
    gradient's sign, from the reference's draw, clamped to +-scale (stds are 1 and 0.5 /
    0.25 here, so the draw and the result are checked in the column's units)."""
    scale = 0.6
    dataset = _dataset()
    field = {"obs": "obs", "action": "action", "dynamics": "next_obs"}[kind]
    before = getattr(dataset, field).clone()
    corrupt(dataset, Corruption(kind, "adversarial", rate=1.0, scale=scale, seed=7),
            critic=LinearCritic())  # fmt: skip
    std = torch.tensor([[0.5, 0.25]]) if kind == "action" else torch.ones(1, 2)
    generator = torch.Generator().manual_seed(7)
    start = torch.cat([2 * scale * std * (torch.rand((1, 2), generator=generator) - 0.5)
                       for _ in range(10)])  # fmt: skip
    direction = torch.tensor([-1.0, 1.0]) if kind != "action" else torch.tensor([1.0, -1.0])
    para = (start + direction * scale).clamp(-scale, scale)  # 100 x 0.01 scale, clamped
    torch.testing.assert_close(getattr(dataset, field), before + para * std, atol=1e-5, rtol=0)


def test_refusals_name_the_fix() -> None:
    with pytest.raises(ValueError, match="critic="):
        corrupt(_dataset(), Corruption("obs", "adversarial"))
    with pytest.raises(MissingCapabilityError, match="ActionValue"):
        corrupt(_dataset(), Corruption("obs", "adversarial"), critic=object())
    wide = LinearCritic()
    wide.w = torch.ones(3)  # a critic of another task: 3 observations, the data has 2
    dataset = _dataset()
    before = dataset.obs.clone()
    with pytest.raises(ValueError, match="cannot read hand's rows .observations of 2, actions"):
        corrupt(dataset, Corruption("obs", "adversarial"), critic=wide)
    assert torch.equal(dataset.obs, before) and dataset.corruption == []
    with pytest.raises(ValueError, match="choose from"):
        Corruption("states")
    with pytest.raises(ValueError, match="rate"):
        Corruption("obs", rate=1.5)


def test_corrupted_runs_from_the_command_line_say_what_they_trained_on(tmp_path) -> None:
    """``corruption.*`` on an IQL run: random rewards, then an adversarial attack on the
    observations against that run's critic; meta.json and train.log record each."""
    import json

    from rlcore.offline.recording import collect
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
        collect("Hopper", "random", "local/hopper/random-v0", steps=300, seed=0)
        common = ["algo=iql", "env=Hopper", "dataset=local/hopper/random-v0", *FAST,
                  "total_steps=20", "algo.batch_size=16", "eval_every=20", "eval_episodes=1",
                  "eval_envs=1", "env.max_episode_steps=20"]  # fmt: skip
        train(make_config(*common, "corruption.kind=reward", "corruption.rate=0.5"),
              tmp_path / "random")  # fmt: skip
        meta = json.loads((tmp_path / "random" / "meta.json").read_text())
        [record] = meta["effective"]["dataset_corruption"]
        assert (
            record["kind"] == "reward" and record["mode"] == "random" and 0 < record["rows"] < 300
        )
        assert (
            "dataset corrupted (random reward)" in (tmp_path / "random" / "train.log").read_text()
        )
        train(make_config(*common, "corruption.kind=obs", "corruption.mode=adversarial",
                          f"corruption.critic={tmp_path / 'random'}"), tmp_path / "adv")  # fmt: skip
        meta = json.loads((tmp_path / "adv" / "meta.json").read_text())
        assert meta["effective"]["dataset_corruption"][0]["mode"] == "adversarial"
        from rlcore.config import ConfigError

        with pytest.raises(ConfigError, match="corruption.critic"):
            train(make_config(*common, "corruption.kind=action", "corruption.mode=adversarial"),
                  tmp_path / "none")  # fmt: skip
        refused = [  # options that would change nothing: before anything is written
            (["corruption.rate=0.5"], "corruption.rate=0.5 without corruption.kind"),
            (["corruption.kind=reward", f"corruption.critic={tmp_path / 'random'}"],
             "only adversarial obs / action / dynamics corruptions attack a critic"),
            (["corruption.kind=reward", "corruption.mode=adversarial",
              f"corruption.critic={tmp_path / 'random'}"], "this one is adversarial reward"),
        ]  # fmt: skip
        for extra, words in refused:
            with pytest.raises(ConfigError, match=words):
                train(make_config(*common, *extra), tmp_path / "refused")
            assert not (tmp_path / "refused").exists()


@pytest.mark.parametrize("name", ["iql", "riql", "cql", "cal_ql", "td3_bc", "rebrac", "awac"])
def test_every_offline_critic_can_be_attacked_with(name: str) -> None:
    """The offline algorithms with a Q critic implement ActionValue: the greedy action is
    the one ``act(deterministic=True)`` takes, differentiable in the observation, and an
    adversarial action attack against the agent lowers its own mean Q on the rows."""
    from rlcore.capabilities import ActionValue
    from tests.test_algos_contract import ACT, AGENTS, OBS

    torch.manual_seed(0)
    agent = AGENTS[name]()
    assert isinstance(agent, ActionValue)
    obs = torch.randn(16, OBS.shape[0], requires_grad=True)
    greedy = agent.policy_action(obs)
    want = agent.act(obs.detach().numpy(), deterministic=True)
    np.testing.assert_allclose(greedy.detach().numpy(), want, atol=1e-6)
    greedy.sum().backward()
    assert obs.grad is not None and obs.grad.abs().sum() > 0

    low, high = torch.as_tensor(ACT.low), torch.as_tensor(ACT.high)
    data = OfflineDataset(
        obs=obs.detach(), action=low + (high - low) * torch.rand(16, 3),
        reward=torch.zeros(16), next_obs=obs.detach(), terminated=torch.zeros(16),
        truncated=torch.zeros(16), episode_id=torch.zeros(16, dtype=torch.int64),
        mc_return=torch.zeros(16), episode_return=torch.tensor([0.0], dtype=torch.float64),
        source="hand",
    )  # fmt: skip
    with torch.no_grad():
        before = agent.action_value(data.obs, data.action).mean()
    corrupt(data, Corruption("action", "adversarial", rate=1.0, scale=1.0, seed=0), critic=agent)
    with torch.no_grad():
        assert agent.action_value(data.obs, data.action).mean() < before
