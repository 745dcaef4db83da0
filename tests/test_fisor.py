"""FISOR and the cost-labelled offline data it trains on: the feasibility target and the
actor weights on hand-computed cases, the action selection, cost datasets (Minari infos,
DSRL-format HDF5), the BC-Safe filter, the recipe, and a short run from the command line."""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch

from rlcore.algos.safe.fisor import FISOR, FISORConfig
from rlcore.logging import read_csv
from rlcore.offline.datasets import DatasetError, load_d4rl_hdf5, load_dataset
from rlcore.offline.safe_recipe import normalized_cost, normalized_reward, parse_sources, record
from rlcore.train import train
from rlcore.types import Batch
from tests.conftest import FAST, REPO, make_config

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
EXPERT = REPO / "benchmarks" / "assets" / "hopper_sac_expert.pt"


def small_agent(**overrides) -> FISOR:
    settings = {"hidden": (16, 16), "critic_hidden": (16, 16), "time_dim": 8, "batch_size": 64,
                "critic_batch_size": 32, "num_samples": 4}  # fmt: skip
    config = FISORConfig(**{**settings, **overrides})
    return FISOR(OBS, ACT, config)


@pytest.fixture(scope="module")
def safe_dataset(tmp_path_factory):
    """A small cost-labelled SafetyHopperVelocity dataset (random and expert steps)."""
    root = tmp_path_factory.mktemp("minari")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(root))
        summary = record(
            "SafetyHopperVelocity", "local/safehopper/mixed-v0",
            [("random", 1500, 0.0), (str(EXPERT), 1000, 0.1)], cost_limit=25.0, seed=0,
        )  # fmt: skip
        yield summary, root


def test_feasibility_target_hand_computed():
    agent = small_agent()
    h = torch.tensor([25.0, -1.0, -1.0, 25.0])
    next_v_h = torch.tensor([-5.0, 3.0, -2.0, 30.0])
    terminated = torch.tensor([0.0, 0.0, 1.0, 1.0])
    target = agent.feasibility_target(h, next_v_h, terminated)
    # 0.01 * 25 + 0.99 * max(25, -5); 0.01 * -1 + 0.99 * max(-1, 3); terminals: h
    torch.testing.assert_close(target, torch.tensor([25.0, 2.96, -1.0, 25.0]))


def test_actor_weights_hand_computed():
    agent = small_agent()
    q = torch.tensor([0.0, 2.0, 0.0, 0.0, 6.0])
    v = torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0])
    q_h = torch.tensor([0.1, -0.5, 0.3, -1.0, -1.0])
    v_h = torch.tensor([0.2, -1.0, -1.0, 2.0, -0.5])
    weights = agent.actor_weights(q, v, q_h, v_h)
    expected = torch.tensor([
        math.exp(5 * (0.2 - 0.1)),  # infeasible state: exp(5 (V_h - Q_h))
        math.exp(3 * (2.0 - 1.0)),  # feasible state and action: exp(3 (Q - V))
        0.0,  # feasible state, infeasible action (Q_h > 0)
        150.0,  # exp(15) clipped at cost_max_weight
        100.0,  # exp(15) clipped at reward_max_weight
    ])  # fmt: skip
    torch.testing.assert_close(weights, expected)
    bc = small_agent(actor_objective="bc").actor_weights(q, v, q_h, v_h)
    torch.testing.assert_close(bc, torch.ones(5))


def test_effective_sample_fraction_hand_computed():
    from rlcore.algos.safe.fisor import effective_sample_fraction

    assert effective_sample_fraction(torch.ones(8)) == pytest.approx(1.0)
    assert effective_sample_fraction(torch.tensor([4.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    # (1 + 3)^2 / (2 (1 + 9)) = 0.8
    assert effective_sample_fraction(torch.tensor([1.0, 3.0])) == pytest.approx(0.8)


def test_select_executes_the_candidate_with_the_lowest_feasibility_value(monkeypatch):
    torch.manual_seed(0)
    agent = small_agent()
    # Q_h = first action coordinate (both ensemble members): the chosen action has the
    # smallest first coordinate among its state's candidates
    monkeypatch.setattr(agent, "target_cost_critic", lambda obs, a: a[:, 0].expand(2, -1))
    seen = []
    original = agent.ema.shadow.sample

    def spy(obs, **kwargs):
        out = original(obs, **kwargs)
        seen.append(agent.box.to_env(out[:, 0]))
        return out

    monkeypatch.setattr(agent.ema.shadow, "sample", spy)
    chosen = agent.act(np.zeros((3, 4), np.float32))
    candidates = seen[0].view(3, 4, 2)
    np.testing.assert_allclose(chosen, candidates[torch.arange(3), candidates[..., 0].argmin(1)])


def _batch(n: int = 64) -> Batch:
    g = torch.Generator().manual_seed(0)
    return Batch(
        obs=torch.randn(n, 4, generator=g), action=torch.rand(n, 2, generator=g) * 4 - 2,
        reward=torch.randn(n, generator=g), next_obs=torch.randn(n, 4, generator=g),
        terminated=(torch.rand(n, generator=g) < 0.1).float(), truncated=torch.zeros(n),
        cost=(torch.rand(n, generator=g) < 0.3).float(),
    )  # fmt: skip


def test_update_moves_every_network_and_round_trips():
    torch.manual_seed(0)
    agent = small_agent()
    names = ("actor", "critic", "value", "cost_critic", "cost_value")
    before = {k: [p.clone() for p in getattr(agent, k).parameters()] for k in names}
    metrics = agent.update(_batch())
    assert all(np.isfinite(v) for v in metrics.values()), metrics
    for name in names:
        after = list(getattr(agent, name).parameters())
        assert any(not torch.equal(a, b) for a, b in zip(before[name], after)), name
    clone = small_agent()
    clone.load_state_dict(agent.state_dict())
    torch.manual_seed(3)
    first = agent.update(_batch())
    torch.manual_seed(3)
    assert clone.update(_batch()) == pytest.approx(first)
    with pytest.raises(ValueError, match="costs"):
        agent.update(Batch(**{**_batch().__dict__, "cost": None}))


@pytest.mark.parametrize("num_samples", [1, 4])
def test_behaviour_cloning_trains_the_critics_only_when_acting_uses_them(num_samples):
    torch.manual_seed(0)
    agent = small_agent(actor_objective="bc", num_samples=num_samples)
    names = ("actor", "critic", "value", "cost_critic", "cost_value")
    before = {k: [p.clone() for p in getattr(agent, k).parameters()] for k in names}
    metrics = agent.update(_batch())
    moved = {
        name: any(
            not torch.equal(a, b) for a, b in zip(before[name], getattr(agent, name).parameters())
        )
        for name in names
    }
    # one sample, no selection by Q_h: the critics serve nothing and stay as built
    assert moved == {name: name == "actor" or num_samples > 1 for name in names}
    assert ("critic_loss" in metrics) == (num_samples > 1) and agent.updates == 1


@pytest.mark.parametrize("bootstrap_timeouts", [False, True])
def test_critic_targets_stop_at_timeouts_as_fisors_masks(bootstrap_timeouts):
    """FISOR's masks are 1 - (terminal or timeout): on a batch of timeout rows the targets
    are r and h alone, so the next states cannot matter; ``bootstrap_timeouts`` uses them."""
    states = []
    for seed in (5, 6):  # two batches that differ only in next_obs
        torch.manual_seed(0)
        agent = small_agent(bootstrap_timeouts=bootstrap_timeouts)
        batch = _batch()
        n = len(batch.obs)
        next_obs = torch.randn(batch.obs.shape, generator=torch.Generator().manual_seed(seed))
        agent.update(dataclasses.replace(
            batch, next_obs=next_obs, terminated=torch.zeros(n), truncated=torch.ones(n)
        ))  # fmt: skip
        states.append(agent.critic.state_dict() | agent.cost_critic.state_dict())
    same = all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert same != bootstrap_timeouts
    agent = small_agent(bootstrap_timeouts=bootstrap_timeouts)
    end = agent.episode_end(torch.tensor([0.0, 1.0, 0.0]), torch.tensor([0.0, 0.0, 1.0]))
    assert end.tolist() == [0.0, 1.0, 0.0 if bootstrap_timeouts else 1.0]


def test_actor_lr_follows_fisors_cosine_over_actor_steps():
    """optax's cosine counts optimiser steps and FISOR's update takes two actor steps, so
    update u uses steps 2u and 2u + 1: 3e-4 * 0.5 * (1 + cos(pi * 2u / 3e6)), 7.5e-5 at
    u = 1e6 (counting updates would give 2.25e-4)."""
    torch.manual_seed(0)
    agent = small_agent()
    lrs = []
    for _ in range(2):
        lrs.append(agent.update(_batch())["actor_lr"])
    decay = 3e6
    expected = [3e-4 * 0.5 * (1 + math.cos(math.pi * step / decay)) for step in (1, 3)]
    assert lrs == pytest.approx(expected, rel=1e-12)
    agent.updates = 1_000_000
    agent.update(_batch())
    assert agent.actor_optimizer.param_groups[0]["lr"] == pytest.approx(
        3e-4 * 0.5 * (1 + math.cos(math.pi * 2_000_001 / decay)), rel=1e-9
    )
    assert agent.actor_optimizer.param_groups[0]["lr"] == pytest.approx(7.5e-5, rel=1e-5)


def test_rows_at_the_weight_clip_hand_computed():
    """benchmarks/fisor_weights.py: a row is at the cost clip when its state is infeasible
    and its weight is cost_max_weight (150), at the reward clip when state and action are
    feasible and its weight is reward_max_weight (100); the actor's own weights."""
    from rlcore.benchmarks.fisor_weights import at_weight_clip

    agent = small_agent()
    v_h = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0])
    q_h = torch.tensor([-30.0, 0.5, -1.0, -1.0, 2.0])
    q = torch.tensor([0.0, 0.0, 5.0, 0.1, 9.0])
    v = torch.zeros(5)
    weights = agent.actor_weights(q, v, q_h, v_h)
    # exp(5 * 31) -> 150 (clip); exp(5 * 0.5) = 12.2; exp(15) -> 100 (clip); exp(0.3) = 1.35;
    # infeasible action in a feasible state: 0
    clipped = at_weight_clip(weights.numpy(), (v_h <= 0).numpy(), (q_h <= 0).numpy(),
                             agent.config)  # fmt: skip
    assert clipped["cost"].tolist() == [True, False, False, False, False]
    assert clipped["reward"].tolist() == [False, False, True, False, False]


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="actor_objective='awr'"):
        FISORConfig(actor_objective="awr")
    with pytest.raises(ValueError, match="critic_batch_size"):
        FISORConfig(batch_size=128, critic_batch_size=256)
    with pytest.raises(ValueError, match="num_samples=0"):
        FISORConfig(num_samples=0)


# --- cost-labelled datasets ------------------------------------------------------------
def test_recipe_records_costs_that_load_back(safe_dataset):
    summary, root = safe_dataset
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(root))
        dataset = load_dataset("local/safehopper/mixed-v0")
    assert dataset.cost is not None and len(dataset.cost) == len(dataset) == 2500
    costs = dataset.episode_costs()
    assert costs.sum() == dataset.cost.sum().item() > 0
    assert summary["overall"]["mean_cost"] == pytest.approx(costs.mean())
    returns = dataset.episode_returns()
    assert dataset.ref_min_score == pytest.approx(returns.min())
    assert dataset.ref_max_score == pytest.approx(returns.max())
    assert 0 < summary["overall"]["safe_fraction"] < 1  # safe (random) and unsafe (expert)
    batch = dataset.sample(32)
    assert batch.cost is not None and set(batch.cost.unique().tolist()) <= {0.0, 1.0}


def test_keep_episodes_keeps_the_safe_ones_and_renumbers(safe_dataset):
    _, root = safe_dataset
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(root))
        dataset = load_dataset("local/safehopper/mixed-v0")
    safe = dataset.episode_costs() <= 25
    expected_rows = int(sum((dataset.episode_id == i).sum() for i in np.flatnonzero(safe)))
    agent = small_agent(safe_episodes_only=True)
    agent.prepare_dataset(dataset)
    assert len(dataset) == expected_rows and (dataset.episode_costs() <= 25).all()
    assert dataset.episode_id.max().item() == dataset.num_episodes - 1 == safe.sum() - 1
    assert len(dataset.cost) == len(dataset.obs) == len(dataset.mc_return)


def test_d4rl_hdf5_costs_load(tmp_path):
    path = tmp_path / "safe.hdf5"
    with h5py.File(path, "w") as f:
        f["observations"] = np.zeros((6, 3), np.float32)
        f["next_observations"] = np.ones((6, 3), np.float32)
        f["actions"] = np.zeros((6, 2), np.float32)
        f["rewards"] = np.arange(6, dtype=np.float32)
        f["costs"] = np.array([0, 1, 1, 0, 0, 1], np.float32)
        f["terminals"] = np.array([0, 0, 1, 0, 0, 0], bool)
        f["timeouts"] = np.zeros(6, bool)
    dataset = load_d4rl_hdf5(path)
    np.testing.assert_array_equal(dataset.episode_costs(), [2.0, 1.0])
    np.testing.assert_array_equal(dataset.cost.numpy(), [0, 1, 1, 0, 0, 1])


def test_fisor_refuses_a_dataset_without_costs(tmp_path):
    path = tmp_path / "plain.hdf5"
    with h5py.File(path, "w") as f:
        for key, value in (("observations", np.zeros((4, 4))), ("actions", np.zeros((4, 2))),
                           ("rewards", np.zeros(4)), ("terminals", np.zeros(4, bool)),
                           ("timeouts", np.zeros(4, bool))):  # fmt: skip
            f[key] = value
    with pytest.raises(DatasetError, match="has no costs.*safe_recipe"):
        small_agent().prepare_dataset(load_d4rl_hdf5(path))
    from rlcore.config import ConfigError  # the command line: before the run writes

    cfg = make_config("algo=fisor", "env=SafetyHopperVelocity", f"dataset={path}", *FAST)
    with pytest.raises(ConfigError, match="algo=fisor learns costs from the data, and this "):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_dsrl_normalisation_and_source_parsing():
    assert normalized_cost(30.0, 25.0) == pytest.approx(1.2)
    assert normalized_reward(750.0, 500.0, 1500.0) == pytest.approx(0.25)
    assert parse_sources("random:100,runs/a:200:0.1") == [
        ("random", 100, 0.0), ("runs/a", 200, 0.1)
    ]  # fmt: skip
    from rlcore.offline.cli import UsageError

    with pytest.raises(UsageError, match="policy:steps"):
        parse_sources("random")
    with pytest.raises(ValueError, match="cost_limit"):
        normalized_cost(1.0, 0.0)


def test_recipe_refuses_a_task_without_costs(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    with pytest.raises(DatasetError, match="reports no info\\['cost'\\]"):
        record("InvertedPendulum", "local/pendulum/x-v0", [("random", 50, 0.0)])


@pytest.mark.parametrize("variant", ["fisor", "bc_safe"])
def test_fisor_cli_runs_on_the_recipe_dataset(variant, safe_dataset, tmp_path, monkeypatch):
    _, root = safe_dataset
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    extra = (
        ["algo.actor_objective=bc", "algo.safe_episodes_only=true"] if variant == "bc_safe" else []
    )
    cfg = make_config(
        "algo=fisor", "env=SafetyHopperVelocity", "dataset=local/safehopper/mixed-v0", *FAST,
        "total_steps=60", "algo.batch_size=64", "algo.critic_batch_size=32",
        "algo.hidden=[16,16]", "algo.critic_hidden=[16,16]", "algo.time_dim=8",
        "algo.num_samples=4", "eval_every=30", "log_every=30", *extra,
    )  # fmt: skip
    result = train(cfg, tmp_path)
    assert np.isfinite(result["eval/return"]) and result["eval/cost"] >= 0
    evals = read_csv(tmp_path / "eval.csv")
    assert "eval/normalized_score" in evals[-1]  # the recipe's DSRL reference returns
    assert any("train/feasible_fraction" in r for r in read_csv(tmp_path / "train.csv"))
    if variant == "fisor":  # the weight diagnosis reads the run back
        from rlcore.benchmarks.fisor_weights import main as fisor_weights

        payload = fisor_weights([str(tmp_path), "--dataset", "local/safehopper/mixed-v0",
                                 "--rows", "512", "--out", str(tmp_path / "w.json")])  # fmt: skip
        report = payload["runs"][str(tmp_path)]
        assert 0 < report["effective_sample_fraction"] <= 1
        shares = [row["weight_share"] for row in report["sources"].values()]
        assert set(report["sources"]) == {"random", "unsafe"}  # the fixture's two sources
        assert sum(shares) == pytest.approx(1.0)
        for row in report["sources"].values():
            assert 0 <= row["at_cost_clip"] + row["at_reward_clip"] <= 1
