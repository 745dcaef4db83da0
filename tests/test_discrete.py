"""Discrete action spaces: the categorical actor, DQN's pieces, discrete buffers, the
refusal of continuous-only algorithms, CartPole runs, resume, and learning (slow)."""

import math
import random

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.algos.awac import AWAC
from rlcore.algos.cal_ql import CalQL
from rlcore.algos.cql import CQL
from rlcore.algos.dqn import DQN, DQNConfig, linear_epsilon, td_target
from rlcore.algos.iql import IQL
from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.algos.rebrac import ReBRAC
from rlcore.algos.sac import SAC
from rlcore.algos.td3 import TD3
from rlcore.algos.td3_bc import TD3BC
from rlcore.buffers import ReplayBuffer, RolloutBuffer
from rlcore.checkpoint import load_checkpoint
from rlcore.logging import read_csv
from rlcore.nets import Categorical, CategoricalActor, DiscreteQNetwork
from rlcore.policies import load_agent, load_policy
from rlcore.spaces import action_space_from, describe_action_space, to_env_action
from rlcore.train import train
from rlcore.types import Batch
from tests.conftest import FAST, make_config
from tests.test_cli import run_cli
from tests.test_resume import _kill_after_checkpoint, _metric_rows

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
LOG2 = math.log(2.0)


# ----------------------------------------------------------------- categorical actor


def test_categorical_log_prob_and_entropy_by_hand():
    # probabilities (1/4, 1/2, 1/4) and (1/2, 1/2, 0+); a constant shift must not matter
    logits = torch.tensor([[0.0, LOG2, 0.0], [5.0, 5.0, -1e9]]) + 3.0
    dist = Categorical(logits)
    log_prob = dist.log_prob(torch.tensor([1, 0]))
    torch.testing.assert_close(log_prob, torch.tensor([-LOG2, -LOG2]))
    torch.testing.assert_close(
        dist.log_prob(torch.tensor([0, 1])), torch.tensor([-2 * LOG2, -LOG2])
    )
    # H = -sum p log p: 1.5 log 2 and log 2
    torch.testing.assert_close(dist.entropy(), torch.tensor([1.5 * LOG2, LOG2]))
    torch.testing.assert_close(dist.mode(), torch.tensor([1, 0]))


def test_categorical_samples_follow_the_probabilities():
    torch.manual_seed(0)
    dist = Categorical(torch.log(torch.tensor([[0.2, 0.5, 0.3]])).expand(20_000, 3))
    counts = torch.bincount(dist.sample(), minlength=3).float() / 20_000
    torch.testing.assert_close(counts, torch.tensor([0.2, 0.5, 0.3]), atol=0.015, rtol=0)


def test_categorical_actor_uses_its_logits_head():
    actor = CategoricalActor(4, 3, hidden=(8,))
    with torch.no_grad():  # logits = bias for every observation
        actor.logits[-1].weight.zero_()
        actor.logits[-1].bias.copy_(torch.tensor([0.0, LOG2, 0.0]))
    obs = torch.randn(5, 4)
    log_prob, entropy = actor.log_prob_entropy(obs, torch.tensor([1, 1, 0, 2, 1]))
    torch.testing.assert_close(log_prob, torch.tensor([-LOG2, -LOG2, -2 * LOG2, -2 * LOG2, -LOG2]))
    torch.testing.assert_close(entropy, torch.full((5,), 1.5 * LOG2))
    action, action_log_prob = actor(obs, deterministic=True)
    assert action.dtype == torch.int64 and action.tolist() == [1] * 5
    torch.testing.assert_close(action_log_prob, torch.full((5,), -LOG2))


def test_ppo_on_discrete_space_acts_with_indices_and_updates():
    torch.manual_seed(0)
    agent = PPO(OBS, ACT, PPOConfig(hidden=(16, 16), num_minibatches=4, update_epochs=2))
    assert isinstance(agent.actor, CategoricalActor)
    single = agent.act(np.zeros(4, np.float32))
    batch = agent.act(np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32))
    assert single.shape == () and batch.shape == (50,) and batch.dtype == np.int64
    assert set(batch.tolist()) <= {0, 1, 2} and len(set(batch.tolist())) > 1  # near uniform
    rollout = RolloutBuffer(16, 2, (4,), (), action_dtype=torch.int64)
    for _ in range(16):
        obs = torch.randn(2, 4)
        action, log_prob, value = agent.explore(obs)
        assert action.dtype == torch.int64
        rollout.add(obs, action, log_prob, torch.randn(2), value, *torch.zeros(3, 2))
    samples = rollout.compute(torch.zeros(2), 0.99, 0.95)
    assert samples.action.dtype == torch.int64 and samples.action.shape == (32,)
    before = [p.clone() for p in agent.actor.parameters()]
    metrics = agent.update(samples, progress=0.0)
    assert all(math.isfinite(v) for v in metrics.values()) and "std" not in metrics
    assert metrics["entropy"] == pytest.approx(math.log(3), abs=0.01)  # near-uniform start
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.actor.parameters()))


# ---------------------------------------------------------------------------- DQN


def test_dueling_head_shape_and_identity():
    torch.manual_seed(0)
    net = DiscreteQNetwork(4, 3, hidden=(16, 8), dueling=True)
    obs = torch.randn(6, 4)
    q = net(obs)
    value, advantage = net.streams(obs)
    assert q.shape == (6, 3) and value.shape == (6, 1) and advantage.shape == (6, 3)
    torch.testing.assert_close(q.mean(-1), value.squeeze(-1))  # mean_a Q = V
    torch.testing.assert_close(
        q - q.mean(-1, keepdim=True), advantage - advantage.mean(-1, keepdim=True)
    )
    assert DiscreteQNetwork(4, 3, hidden=(16, 8))(obs).shape == (6, 3)


def test_double_dqn_target_by_hand():
    reward, terminated = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.0, 0.0, 1.0])
    next_q_target = torch.tensor([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]])
    next_q_online = torch.tensor([[1.0, 3.0], [5.0, 2.0], [0.0, 9.0]])
    # double: online picks (1, 0, 1), target values them (20, 30, -); terminal row: r only
    double = td_target(reward, terminated, 0.5, next_q_target, next_q_online)
    torch.testing.assert_close(double, torch.tensor([11.0, 17.0, 3.0]))
    # Mnih et al.: max of the target network
    vanilla = td_target(reward, terminated, 0.5, next_q_target)
    torch.testing.assert_close(vanilla, torch.tensor([11.0, 22.0, 3.0]))


def test_dqn_n_step_targets_use_the_batch_discount(tmp_path):
    """``algo.n_step=3`` plans 3-step returns and the update discounts by the batch's
    gamma^k per row (by hand: rows of k = 3 and k = 1), and a CartPole run trains on them."""
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    assert DQNConfig(n_step=3).plan().schedule.n_step == 3
    reward, terminated = torch.tensor([1.0, 1.0]), torch.tensor([0.0, 0.0])
    next_q = torch.tensor([[2.0, 4.0], [2.0, 4.0]])
    discount = torch.tensor([0.5**3, 0.5])
    torch.testing.assert_close(
        td_target(reward, terminated, discount, next_q), torch.tensor([1.5, 3.0])
    )
    train(make_config("algo=dqn", "env=CartPole-v1", *FAST, "algo.n_step=3", "total_steps=400",
                      "algo.learning_starts=100", "algo.batch_size=16", "eval_every=400",
                      "eval_episodes=1", "eval_envs=1"), tmp_path / "run")  # fmt: skip
    assert (tmp_path / "run" / "checkpoints" / "latest.pt").exists()


def _discrete_batch(n: int = 32, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return Batch(
        obs=torch.randn(n, 4, generator=g),
        action=torch.randint(3, (n,), generator=g),
        reward=torch.randn(n, generator=g),
        next_obs=torch.randn(n, 4, generator=g),
        terminated=(torch.rand(n, generator=g) < 0.2).float(),
        truncated=torch.zeros(n),
    )


@pytest.mark.parametrize("double_q", [True, False])
@pytest.mark.parametrize("loss", ["mse", "huber"])
def test_dqn_loss_is_the_td_loss_of_the_pre_update_networks(double_q, loss):
    torch.manual_seed(0)
    agent = DQN(OBS, ACT, DQNConfig(hidden=(16,), double_q=double_q, loss=loss, lr=0.1))
    with torch.no_grad():  # make online and target networks differ
        for p in agent.target_network.parameters():
            p.add_(torch.randn_like(p))
    batch = _discrete_batch()
    with torch.no_grad():
        q = agent.q_network(batch.obs)[torch.arange(32), batch.action]
        next_target = agent.target_network(batch.next_obs)
        chooser = agent.q_network(batch.next_obs) if double_q else next_target
        best = chooser.argmax(-1)
        y = batch.reward + 0.99 * (1 - batch.terminated) * next_target[torch.arange(32), best]
        error = q - y
        expected = (
            error.pow(2).mean()
            if loss == "mse"
            else torch.where(error.abs() < 1, 0.5 * error**2, error.abs() - 0.5).mean()
        )
    metrics = agent.update(batch)
    assert metrics["q_loss"] == pytest.approx(expected.item(), rel=1e-5)


def test_dqn_target_network_updates_every_interval():
    torch.manual_seed(0)
    agent = DQN(OBS, ACT, DQNConfig(hidden=(16,), target_update_interval=3, lr=0.01))
    initial = [p.clone() for p in agent.target_network.parameters()]
    for i in range(1, 4):
        agent.update(_discrete_batch(seed=i))
        same = all(torch.equal(a, b) for a, b in zip(initial, agent.target_network.parameters()))
        assert same == (i < 3)
    for a, b in zip(agent.q_network.parameters(), agent.target_network.parameters()):
        assert torch.equal(a, b)  # tau = 1: a copy
    polyak = DQN(OBS, ACT, DQNConfig(hidden=(16,), target_update_interval=1, tau=0.25))
    old_target = [p.clone() for p in polyak.target_network.parameters()]
    polyak.update(_discrete_batch())
    for old, new, online in zip(
        old_target, polyak.target_network.parameters(), polyak.q_network.parameters()
    ):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * online)


def test_epsilon_schedule_values():
    # CleanRL defaults: 1 -> 0.05 over 0.5 * 500k steps
    assert linear_epsilon(0, 1.0, 0.05, 250_000) == 1.0
    assert linear_epsilon(125_000, 1.0, 0.05, 250_000) == pytest.approx(0.525)
    assert linear_epsilon(250_000, 1.0, 0.05, 250_000) == pytest.approx(0.05)
    assert linear_epsilon(400_000, 1.0, 0.05, 250_000) == pytest.approx(0.05)
    # the agent reads it at learning_starts + the env steps it explored
    config = DQNConfig(hidden=(8,), learning_starts=100, total_steps=1000, exploration_fraction=0.5)
    agent = DQN(OBS, ACT, config)
    assert agent.epsilon() == pytest.approx(1.0 - 0.95 * 100 / 500)
    obs = np.zeros((4, 4), np.float32)
    for _ in range(50):
        agent.act(obs)
    agent.act(obs, deterministic=True)  # evaluation does not advance the schedule
    assert agent.acted_steps == 200
    assert agent.epsilon() == pytest.approx(1.0 - 0.95 * 300 / 500)
    for _ in range(100):
        agent.act(obs)
    assert agent.epsilon() == pytest.approx(0.05)


def test_dqn_act_is_greedy_or_uniform_by_epsilon():
    torch.manual_seed(0)
    obs = np.random.default_rng(0).normal(size=(2000, 4)).astype(np.float32)
    greedy = DQN(OBS, ACT, DQNConfig(hidden=(8,), start_e=0.0, end_e=0.0))
    expected = greedy.q_network(torch.as_tensor(obs)).argmax(-1).numpy()
    np.testing.assert_array_equal(greedy.act(obs), expected)
    np.testing.assert_array_equal(greedy.act(obs, deterministic=True), expected)
    uniform = DQN(OBS, ACT, DQNConfig(hidden=(8,), start_e=1.0, end_e=1.0))
    actions = uniform.act(obs)
    assert actions.dtype == np.int64 and uniform.act(obs[0]).shape == ()
    np.testing.assert_allclose(np.bincount(actions, minlength=3) / 2000, 1 / 3, atol=0.04)


def test_dqn_state_dict_round_trip_gives_identical_future():
    torch.manual_seed(0)
    config = DQNConfig(hidden=(16,), target_update_interval=2, learning_starts=0, total_steps=100)
    agent = DQN(OBS, ACT, config)
    for seed in range(3):
        agent.update(_discrete_batch(seed=seed))
        agent.act(np.zeros((5, 4), np.float32))
    clone = DQN(OBS, ACT, config)
    clone.load_state_dict(agent.state_dict())
    assert (clone.updates, clone.acted_steps, clone.epsilon()) == (3, 15, agent.epsilon())
    obs = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)
    results = []
    for copy in (agent, clone):
        torch.manual_seed(7)
        metrics = [copy.update(_discrete_batch(seed=10 + i)) for i in range(3)]
        results.append((metrics, copy.act(obs), copy.act(obs, deterministic=True)))
    assert results[0][0] == results[1][0]
    np.testing.assert_array_equal(results[0][1], results[1][1])
    np.testing.assert_array_equal(results[0][2], results[1][2])


# ----------------------------------------------------------------------- buffers


def test_discrete_replay_buffer_round_trip():
    buffer = ReplayBuffer(8, (4,), (), num_envs=2, seed=0, action_dtype=torch.int64)
    for t in range(3):
        buffer.add(
            np.full((2, 4), t, np.float32),
            np.array([t, t + 1]),
            np.ones(2),
            np.zeros((2, 4)),
            np.zeros(2),
            np.zeros(2),
        )
    assert buffer.action.dtype == torch.int64 and buffer.action.shape == (8,)
    assert buffer.action[:6].tolist() == [0, 1, 1, 2, 2, 3]
    batch = buffer.sample(16)
    assert batch.action.dtype == torch.int64 and batch.action.shape == (16,)
    # each sampled row keeps its own action: row obs t, env i -> action t + i
    rows = {(0.0, 0), (0.0, 1), (1.0, 1), (1.0, 2), (2.0, 2), (2.0, 3)}
    assert {(o, a) for o, a in zip(batch.obs[:, 0].tolist(), batch.action.tolist())} <= rows
    clone = ReplayBuffer(8, (4,), (), num_envs=2, seed=5, action_dtype=torch.int64)
    clone.load_state_dict(buffer.state_dict())
    assert torch.equal(clone.action, buffer.action) and clone.action.dtype == torch.int64
    assert torch.equal(clone.sample(4).action, buffer.sample(4).action)


def test_discrete_spaces_describe_and_shift():
    space = gym.spaces.Discrete(3, start=-1)
    rebuilt = action_space_from(describe_action_space(space))
    assert rebuilt == space
    assert action_space_from(describe_action_space(BOX)) == BOX
    np.testing.assert_array_equal(to_env_action(np.array([0, 2]), space), [-1, 1])
    np.testing.assert_array_equal(to_env_action(np.array([[3.0, -0.5]]), BOX), [[1.0, -0.5]])


# ---------------------------------------------------------------------- refusals

CONTINUOUS = {
    "SAC": SAC,
    "TD3": TD3,
    "IQL": IQL,
    "TD3+BC": TD3BC,
    "CQL": CQL,
    "Cal-QL": CalQL,
    "AWAC": AWAC,
    "ReBRAC": ReBRAC,
}


@pytest.mark.parametrize("name", list(CONTINUOUS))
def test_continuous_algorithms_refuse_discrete_actions(name):
    message = (
        f"{name} needs a continuous (Box) action space; got Discrete(3). "
        "For discrete actions use algo=ppo or algo=dqn."
    )
    with pytest.raises(ValueError) as error:
        CONTINUOUS[name](OBS, ACT)
    assert str(error.value) == message


def test_dqn_refuses_box_actions():
    with pytest.raises(
        ValueError, match=r"DQN needs a discrete \(Discrete\) action space; got Box"
    ):
        DQN(OBS, BOX)
    with pytest.raises(ValueError, match="use algo=sac, algo=td3 or algo=ppo"):
        DQN(OBS, BOX)


def test_cli_refuses_sac_on_cartpole_in_one_line(tmp_path):
    out = run_cli(["algo=sac", "env=CartPole-v1", "threads=1"], tmp_path)
    assert out.returncode != 0
    assert out.stderr.strip() == (
        "error: SAC needs a continuous (Box) action space; CartPole-v1 has Discrete(2). "
        "For discrete actions use algo=ppo or algo=dqn."
    )
    assert "Traceback" not in out.stdout + out.stderr
    out = run_cli(["algo=dqn", "env=Hopper", "threads=1"], tmp_path)
    assert out.returncode != 0 and "Traceback" not in out.stdout + out.stderr
    assert out.stderr.startswith("error: DQN needs a discrete (Discrete) action space; Hopper-v5")


# --------------------------------------------------------------- CartPole runs


def test_cartpole_short_names_and_tuned_configs_compose():
    for name in ("CartPole", "cartpole", "CartPole-v1"):
        cfg = make_config("algo=ppo", f"env={name}")
        assert cfg.env.id == "CartPole-v1" and cfg.env.name == "cartpole"
    ppo = make_config("algo=ppo", "env=CartPole-v1")
    assert (ppo.algo.rollout_steps, ppo.env.num_envs, ppo.algo.num_minibatches) == (128, 4, 4)
    assert (ppo.algo.lr, ppo.algo.ent_coef, ppo.algo.normalize_obs) == (2.5e-4, 0.01, False)
    assert ppo.eval_every == 5120  # an algo_env file's top-level keys win over config.yaml
    assert make_config("algo=ppo", "env=CartPole", "eval_every=7").eval_every == 7
    dqn = make_config("algo=dqn", "env=CartPole")
    assert dqn.algo.learning_starts == 1000 and dqn.total_steps == 50_000


SMOKE = [*FAST, "eval_episodes=1", "eval_every=400", "checkpoint_every=400", "log_every=100"]


@pytest.mark.parametrize(
    "algo,extra",
    [
        ("ppo", ["algo.rollout_steps=32", "total_steps=512", "algo.hidden=[16,16]"]),
        (
            "dqn",
            [
                "total_steps=600",
                "algo.learning_starts=200",
                "algo.batch_size=32",
                "algo.hidden=[16,16]",
                "algo.dueling=true",
            ],
        ),
    ],
)
def test_cartpole_runs_and_checkpoint_rebuilds_the_discrete_policy(algo, extra, tmp_path):
    result = train(make_config(f"algo={algo}", "env=CartPole-v1", *SMOKE, *extra), tmp_path)
    assert math.isfinite(result["eval/return"])
    rows = read_csv(tmp_path / "train.csv")
    assert any(f"train/{'value_loss' if algo == 'ppo' else 'q_loss'}" in r for r in rows)
    state = load_checkpoint(tmp_path)
    assert state["spaces"]["action_n"] == 2
    if algo == "dqn":
        stored = state["loop"]["stateful"]["buffer"]["data"]["action"]
        assert stored.dtype == torch.int64 and set(stored.tolist()) == {0, 1}
        assert state["agent"]["acted_steps"] == 600 - 200  # the loop's steps after warm-up
    agent = load_agent(tmp_path)
    obs = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    actions = agent.act(obs, deterministic=True)
    assert actions.dtype == np.int64 and set(actions.tolist()) <= {0, 1}
    np.testing.assert_array_equal(load_policy(tmp_path)(obs), actions)


@pytest.mark.slow
def test_dqn_cartpole_recipe_keeps_q_estimates_under_the_return_bound(tmp_path):
    """CartPole-v1 pays 1 per step, so no discounted return exceeds 1 / (1 - gamma) = 100.
    The shipped recipe (configs/algo_env/dqn_cartpole.yaml) once copied the target network
    every 5 updates with an unclipped MSE loss (rl-zoo's SB3 run holds its target through
    each 128-update burst, with a Huber loss clipped at norm 10): seed 0's mean Q estimate
    passed 100 by 2k env steps, and over seeds 0-9 the largest reached 1.6k to 7.8 million
    (benchmarks/results/cartpole.json); the fixed recipe stays under 100 on every seed."""
    cfg = make_config(
        "algo=dqn", "env=CartPole-v1", "total_steps=4000", "log_every=250",
        "eval_every=4000", "checkpoint_every=100000", "logger=quiet", "threads=1",
    )  # fmt: skip
    train(cfg, tmp_path)
    q = [row["train/q_value"] for row in read_csv(tmp_path / "train.csv") if "train/q_value" in row]
    assert len(q) >= 10
    assert max(q) <= 1.0 / (1.0 - cfg.algo.gamma), f"Q estimates diverged: {q}"


DQN_RESUME = [
    "algo=dqn",
    "env=CartPole",
    "total_steps=3000",
    "algo.learning_starts=100",  # every checkpoint (300, 600, ...) is past the warm-up
    "algo.batch_size=32",
    "algo.hidden=[32,32]",
    "algo.exploration_fraction=0.5",
    "algo.updates_per_step=0.5",
    "checkpoint_every=300",
    "eval_every=1000",
    "log_every=100",
    "env.num_envs=2",
]


def test_dqn_killed_and_resumed_run_equals_uninterrupted(tmp_path):
    """The epsilon schedule's step counter, the warm-up RNG and the target network all
    continue exactly after a SIGKILL."""
    args = [*DQN_RESUME, *FAST]
    train(make_config(*args), tmp_path / "full")
    killed = tmp_path / "killed"
    killed_at = _kill_after_checkpoint(args, killed, random.Random("dqn"))
    assert 0 < killed_at < 3000, "kill landed after the run finished; make the run longer"
    train(make_config(*args, f"resume={killed}"), killed)
    full, resumed = load_checkpoint(tmp_path / "full"), load_checkpoint(killed)
    assert full["loop"]["counters"] == resumed["loop"]["counters"]
    for name in ("q_network", "target_network"):
        for key, value in full["agent"][name].items():
            assert torch.equal(value, resumed["agent"][name][key]), f"{name}.{key}"
    assert full["agent"]["acted_steps"] == resumed["agent"]["acted_steps"]
    for file, key in [
        ("eval.csv", "eval/return"),
        ("train.csv", "train/q_loss"),
        ("train.csv", "train/episode_return"),
    ]:
        rows = _metric_rows(tmp_path / "full", file, key)
        assert rows and rows == _metric_rows(killed, file, key)
