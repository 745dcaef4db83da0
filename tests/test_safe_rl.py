"""Constrained RL: Lagrange multipliers, costs from info to the buffers, cost GAE, CPO's
step, the constrained agents' contract, and the errors a user can cause."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.algos.safe.cpo import CPO, CPOConfig, conjugate_gradient, cpo_direction
from rlcore.algos.safe.ppo_lag import PPOLag, PPOLagConfig
from rlcore.algos.safe.sac_lag import SACLag, SACLagConfig
from rlcore.buffers import RolloutBuffer
from rlcore.envs.make import EpisodeStats, make_vec_env, step_costs
from rlcore.evaluation import evaluate
from rlcore.logging import read_csv
from rlcore.safe import (
    ConstrainedActorCritic,
    EpisodeCostWindow,
    LagrangeMultiplier,
    PIDLagrangeMultiplier,
)
from rlcore.train import train
from rlcore.types import Batch
from rlcore.utils import NonFiniteLossError
from tests.conftest import FAST, make_config

COUNTER_ID = "rlcore-test/CostCounter-v0"


class CostCounter(gym.Env):
    """obs = [t, 1, ...] after t steps; the step into t costs t (and rewards 1); 5 steps
    per episode: every cost is recoverable from the stored next observation."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        return np.array([self.t, 1.0, 0.0], np.float32)

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, False, self.t >= 5, {"cost": float(self.t)}


if COUNTER_ID not in gym.registry:
    gym.register(id=COUNTER_ID, entry_point=CostCounter)


# --- multipliers ---------------------------------------------------------------------
def test_lagrange_multiplier_rises_above_the_limit_and_falls_to_zero_below():
    multiplier = LagrangeMultiplier(cost_limit=25.0, init=0.001, lr=0.035)
    # Adam's first step moves by exactly lr against the gradient -(J_c - limit) < 0
    assert multiplier.update(30.0) == pytest.approx(0.001 + 0.035, abs=1e-7)
    values = [multiplier.update(40.0) for _ in range(20)]
    assert all(b > a for a, b in zip(values, values[1:]))  # keeps rising while violated
    values = [multiplier.update(0.0) for _ in range(200)]
    assert values[-1] == 0.0 and min(values) >= 0.0  # projected: never below 0
    assert multiplier.update(25.0) == 0.0  # at the limit: no pull either way


def test_lagrange_multiplier_state_round_trip():
    a = LagrangeMultiplier(10.0, 0.5, 0.01)
    for cost in (20.0, 3.0, 15.0):
        a.update(cost)
    b = LagrangeMultiplier(10.0, 0.0, 0.01)
    b.load_state_dict(a.state_dict())
    assert [a.update(12.0) for _ in range(3)] == [b.update(12.0) for _ in range(3)]


def test_pid_multiplier_hand_computed():
    pid = PIDLagrangeMultiplier(cost_limit=10.0, init=0.0, kp=0.1, ki=0.01, kd=0.01, d_delay=10)
    # delta = 10: I = 0.1, EMA(delta) = 0.05 * 10 = 0.5, EMA(J_c) = 0.05 * 20 = 1, D = 1 - 0
    assert pid.update(20.0) == pytest.approx(0.1 * 0.5 + 0.1 + 0.01 * 1.0)
    for _ in range(300):
        pid.update(0.0)
    assert pid.value == 0.0  # below the limit long enough: no penalty


def test_episode_cost_window_keeps_the_last_episodes():
    window = EpisodeCostWindow(3)
    assert math.isnan(window.mean())
    window.add([1.0, 2.0])
    window.add([3.0, 10.0])
    assert window.mean() == pytest.approx(5.0)  # 2, 3, 10
    with pytest.raises(ValueError, match="size >= 1"):
        EpisodeCostWindow(0)


# --- costs from info to the buffers ---------------------------------------------------
def test_step_costs_reads_final_info_at_episode_ends():
    env = make_vec_env(COUNTER_ID, 2)
    env.reset(seed=0)
    costs, episode_costs = [], []
    for _ in range(6):
        _, _, _, _, info = env.step(np.zeros((2, 2), np.float32))
        costs.append(info["cost"].copy())
        episode_costs.append(info["episode_cost"].copy())
    np.testing.assert_array_equal(np.array(costs)[:, 0], [1, 2, 3, 4, 5, 1])
    assert episode_costs[4][0] == 15.0 and np.isnan(episode_costs[3]).all()
    assert step_costs({}, 2) is None  # a task without costs


def test_episode_stats_state_keeps_the_running_cost():
    env = EpisodeStats(gym.vector.SyncVectorEnv([lambda: CostCounter()]))
    env.reset(seed=0)
    env.step(np.zeros((1, 2), np.float32))
    state = env.state_dict()
    np.testing.assert_array_equal(state["costs"], [1.0])


def test_evaluate_reports_episode_cost():
    env = make_vec_env(COUNTER_ID, 2)
    result = evaluate(lambda obs: np.zeros((len(obs), 2), np.float32), env, 4, seed=0)
    assert result["cost"] == 15.0 and result["cost_std"] == 0.0


def test_cost_flows_from_info_to_the_replay_buffer_unchanged(tmp_path):
    cfg = make_config(
        "algo=sac_lag", f"env={COUNTER_ID}", *FAST, "total_steps=60", "env.num_envs=2",
        "algo.learning_starts=20", "algo.batch_size=8", "algo.hidden=[16,16]",
        "eval_every=60", "checkpoint_every=60",
    )  # fmt: skip
    train(cfg, tmp_path)
    buffer_state = torch.load(tmp_path / "checkpoints" / "latest.pt", weights_only=False)["loop"][
        "stateful"
    ]["buffer"]["data"]
    # the step into t costs t: the stored cost equals the stored (final) next observation's t
    torch.testing.assert_close(buffer_state["cost"], buffer_state["next_obs"][:, 0])
    assert set(buffer_state["cost"].unique().tolist()) == {1.0, 2.0, 3.0, 4.0, 5.0}
    rows = [r for r in read_csv(tmp_path / "train.csv") if "train/episode_cost" in r]
    assert rows and all(r["train/episode_cost"] == 15.0 for r in rows)
    evals = read_csv(tmp_path / "eval.csv")
    assert evals[-1]["eval/cost"] == 15.0


def test_cost_flows_from_info_to_the_rollout_and_its_gae(tmp_path, monkeypatch):
    captured = {}
    original = RolloutBuffer.compute

    def spy(self, *args, **kwargs):
        captured["cost"] = self.cost.clone()
        captured["obs"] = self.obs.clone()
        captured["batch"] = original(self, *args, **kwargs)
        return captured["batch"]

    monkeypatch.setattr(RolloutBuffer, "compute", spy)
    cfg = make_config(
        "algo=ppo_lag", f"env={COUNTER_ID}", *FAST, "total_steps=40", "env.num_envs=2",
        "algo.rollout_steps=20", "algo.minibatch_size=10", "algo.update_epochs=1",
        "algo.hidden=[16,16]", "eval_every=40", "checkpoint_every=40",
        "algo.normalize_obs=false",
    )  # fmt: skip
    train(cfg, tmp_path)
    # the cost of the step taken from t is t + 1
    torch.testing.assert_close(captured["cost"], captured["obs"][..., 0] + 1)
    assert captured["batch"].cost_returns is not None


def test_rollout_cost_gae_hand_computed():
    buffer = RolloutBuffer(3, 1, (1,), (1,))
    for _ in range(3):
        buffer.add(
            torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.zeros(1), torch.zeros(1),
            torch.zeros(1), torch.zeros(1), torch.zeros(1),
            costs=(torch.ones(1), torch.full((1,), 0.5), torch.zeros(1)),
        )  # fmt: skip
    batch = buffer.compute(torch.zeros(1), 0.9, 0.5, last_cost_value=torch.ones(1))
    # deltas: 1 + 0.9 * 0.5 - 0.5 = 0.95 (t = 0, 1); 1 + 0.9 * 1 - 0.5 = 1.4 (t = 2)
    a2 = 1.4
    a1 = 0.95 + 0.45 * a2
    a0 = 0.95 + 0.45 * a1
    torch.testing.assert_close(batch.cost_advantage, torch.tensor([a0, a1, a2]))
    torch.testing.assert_close(batch.cost_returns, batch.cost_advantage + 0.5)
    with pytest.raises(ValueError, match="last_cost_value"):
        buffer.compute(torch.zeros(1), 0.9, 0.5)


def test_rollout_refuses_costs_on_some_steps_only():
    buffer = RolloutBuffer(2, 1, (1,), (1,))
    row = (torch.zeros(1, 1), torch.zeros(1, 1)) + (torch.zeros(1),) * 6
    buffer.add(*row, costs=(torch.ones(1), torch.zeros(1), torch.zeros(1)))
    with pytest.raises(ValueError, match="every step"):
        buffer.add(*row)


# --- errors a user can cause ----------------------------------------------------------
@pytest.mark.parametrize("algo", ["ppo_lag", "sac_lag"])
def test_constrained_algorithm_on_a_task_without_cost_says_so(algo, tmp_path):
    cfg = make_config(
        f"algo={algo}", "env=InvertedPendulum", *FAST, "total_steps=120",
        "env.max_episode_steps=20", "algo.rollout_steps=60" if algo == "ppo_lag" else
        "algo.learning_starts=30", "algo.hidden=[16,16]",
    )  # fmt: skip
    with pytest.raises(ValueError, match="reports no info\\['cost'\\].*SafetyHopperVelocity"):
        train(cfg, tmp_path)


def test_bad_multiplier_and_cost_limit_are_refused():
    with pytest.raises(ValueError, match="multiplier='pd'"):
        PPOLagConfig(multiplier="pd")
    with pytest.raises(ValueError, match="cost_limit=-1"):
        SACLagConfig(cost_limit=-1)


# --- CPO's step -----------------------------------------------------------------------
def test_conjugate_gradient_solves_a_positive_definite_system():
    g = torch.Generator().manual_seed(0)
    m = torch.randn(6, 6, generator=g)
    h = m @ m.T + 0.5 * torch.eye(6)
    b = torch.randn(6, generator=g)
    x = conjugate_gradient(lambda v: h @ v, b, iters=30)
    torch.testing.assert_close(h @ x, b, atol=1e-4, rtol=1e-4)


def _best_step_by_search(g, b, c, delta, n=200_001):
    """max g'd s.t. |d|^2 / 2 <= delta, c + b'd <= 0 in 2-D (H = I), by a dense search of
    the trust region's boundary and of the constraint's chord inside it."""
    radius = math.sqrt(2 * delta)
    angles = np.linspace(0, 2 * np.pi, n)
    points = radius * np.stack([np.cos(angles), np.sin(angles)], 1)
    bn = b / np.linalg.norm(b)
    foot = -c / np.linalg.norm(b) * bn  # nearest point of the boundary c + b'd = 0
    half = math.sqrt(max(radius**2 - foot @ foot, 0.0))
    chord = foot + np.linspace(-half, half, n)[:, None] * np.array([-bn[1], bn[0]])
    candidates = np.concatenate([points, chord])
    feasible = candidates[c + candidates @ b <= 1e-9]
    return feasible[np.argmax(feasible @ g)]


@pytest.mark.parametrize(
    "g,b,c,case",
    [
        ([1.0, 0.0], [0.0, 1.0], -0.5, 3),  # constraint far away: TRPO's step
        ([1.0, 0.0], [1.0, 1.0], -0.05, 2),  # feasible start, boundary crosses the region
        ([1.0, 0.0], [1.0, 1.0], 0.05, 1),  # infeasible start, a feasible part exists
    ],
)
def test_cpo_direction_is_the_constrained_optimum(g, b, c, case):
    delta = 0.01
    g_t, b_t = torch.tensor(g), torch.tensor(b)
    # H = I: x = g, p = b, q = g'g, r = g'b, s = b'b
    direction, found, _, _ = cpo_direction(
        g_t, b_t, float(g_t @ g_t), float(g_t @ b_t), float(b_t @ b_t), c, float(b_t @ b_t), delta
    )
    assert found == case
    expected = _best_step_by_search(np.array(g), np.array(b), c, delta)
    np.testing.assert_allclose(direction.numpy(), expected, atol=2e-3)


def test_cpo_direction_recovers_when_no_feasible_step_exists():
    g, b = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    direction, case, _, nu = cpo_direction(g, b, 1.0, 0.0, 1.0, 5.0, 1.0, 0.01)
    assert case == 0  # c = 5 > sqrt(2 delta s): only the cost can be reduced
    torch.testing.assert_close(direction, -math.sqrt(0.02) * b)


# --- the constrained agents' contract -------------------------------------------------
OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def _rollout(agent, steps: int = 32, envs: int = 2):
    buffer = RolloutBuffer(steps, envs, (4,), (2,))
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        obs = torch.randn(envs, 4, generator=g)
        action, log_prob, value = agent.explore(obs)
        cost = (torch.rand(envs, generator=g) < 0.5).float()
        buffer.add(
            obs, action, log_prob, torch.randn(envs, generator=g), value, torch.zeros(envs),
            torch.zeros(envs), torch.zeros(envs), costs=(cost, agent.cost_value(obs),
                                                         torch.zeros(envs)),
        )  # fmt: skip
    return buffer.compute(torch.zeros(envs), 0.99, 0.95, torch.zeros(envs))


def _batch(n: int = 64) -> Batch:
    g = torch.Generator().manual_seed(2)
    return Batch(
        obs=torch.randn(n, 4, generator=g), action=torch.rand(n, 2, generator=g) * 2 - 1,
        reward=torch.randn(n, generator=g), next_obs=torch.randn(n, 4, generator=g),
        terminated=torch.zeros(n), truncated=torch.zeros(n),
        cost=(torch.rand(n, generator=g) < 0.5).float(),
    )  # fmt: skip


SAFE_AGENTS = {
    "ppo_lag": lambda: PPOLag(
        OBS, ACT, PPOLagConfig(hidden=(16, 16), update_epochs=2, minibatch_size=16)
    ),  # fmt: skip
    "cpo": lambda: CPO(OBS, ACT, CPOConfig(hidden=(16, 16), update_epochs=2, minibatch_size=16)),
    "sac_lag": lambda: SACLag(
        OBS, ACT, SACLagConfig(hidden=(16, 16), policy_frequency=1, multiplier_delay=0)
    ),  # fmt: skip
}


def _update(name, agent):
    agent.record_episode_costs([40.0, 60.0])  # above the limit of 25
    return agent.update(_batch()) if name == "sac_lag" else agent.update(_rollout(agent), 0.1)


def _parameters(agent) -> dict[str, torch.Tensor]:
    state = agent.state_dict()
    flat = {}

    def walk(value, path):
        if isinstance(value, torch.Tensor):
            flat[path] = value.clone()
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}")

    walk(state, "agent")
    return flat


@pytest.mark.parametrize("name", list(SAFE_AGENTS))
def test_constrained_agent_update_moves_actor_and_both_critics(name):
    torch.manual_seed(0)
    agent = SAFE_AGENTS[name]()
    before = _parameters(agent)
    metrics = _update(name, agent)
    finite = {k: v for k, v in metrics.items() if k != "episode_cost_window"}
    assert all(np.isfinite(v) for v in finite.values()), metrics
    assert metrics["episode_cost_window"] == 50.0
    after = _parameters(agent)
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    if name == "sac_lag":
        parts = ("sac.actor.", "sac.critic.", "cost_critic.")
    else:
        parts = ("reward_critic", "cost_critic") + (("actor",) if name == "ppo_lag" else ())
    for part in parts:
        assert any(part in k for k in moved), (part, sorted(moved))
    if name in ("ppo_lag", "sac_lag"):  # cost above the limit: lambda grew from 0.001
        assert metrics["lagrange_multiplier"] > 0.001


@pytest.mark.parametrize("name", list(SAFE_AGENTS))
def test_constrained_agent_state_round_trip_gives_identical_future(name):
    torch.manual_seed(0)
    a = SAFE_AGENTS[name]()
    _update(name, a)
    b = SAFE_AGENTS[name]()
    b.load_state_dict(a.state_dict())
    torch.manual_seed(5)
    metrics_a = _update(name, a)
    torch.manual_seed(5)
    metrics_b = _update(name, b)
    assert metrics_a == pytest.approx(metrics_b, nan_ok=True)
    obs = np.ones(4, np.float32)
    np.testing.assert_array_equal(a.act(obs, deterministic=True), b.act(obs, deterministic=True))


@pytest.mark.parametrize("bad", ["returns", "cost_returns"])
def test_fit_critics_refuses_a_nan_target_before_either_critic_changes(bad):
    """The stop-on-NaN contract: a NaN value target raises before any critic steps (V_r is
    fitted first, so a NaN cost target must not let V_r move either)."""
    torch.manual_seed(0)
    nets = ConstrainedActorCritic(4, 2, (8, 8), "tanh", 0.0)
    optimizers = nets.critic_optimizers(1e-3)
    targets = {"returns": torch.zeros(16), "cost_returns": torch.zeros(16)}
    targets[bad][3] = math.nan
    before = {k: v.clone() for k, v in nets.state_dict().items()}
    name = "value_loss" if bad == "returns" else "cost_value_loss"
    with pytest.raises(NonFiniteLossError, match=name):
        nets.fit_critics(optimizers, torch.randn(16, 4), targets["returns"],
                         targets["cost_returns"], 0.001, 40.0)  # fmt: skip
    for key, value in nets.state_dict().items():
        assert torch.equal(value, before[key]), key


@pytest.mark.parametrize("name", ["ppo_lag", "cpo"])
@pytest.mark.parametrize("bad", ["returns", "cost_returns"])
def test_on_policy_constrained_update_stops_on_a_nan_value_target(name, bad):
    """A NaN critic target (advantages finite) stops PPO-Lag's and CPO's update with
    NonFiniteLossError before the actor or a critic changes."""
    torch.manual_seed(0)
    agent = SAFE_AGENTS[name]()
    agent.config.minibatch_size = 64  # one minibatch: the NaN row is in the first step
    batch = _rollout(agent)
    getattr(batch, bad)[5] = math.nan
    before = {k: v.clone() for k, v in agent.nets.state_dict().items()}
    with pytest.raises(NonFiniteLossError):
        agent.update(batch, 0.1)
    for key, value in agent.nets.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_cpo_constraint_value_per_step_divides_by_the_rollout_episode_length():
    """c = J_c - limit (OmniSafe); with ``constraint_per_step`` c / T, T = rollout rows per
    episode ended since the last update (Achiam's code scales the cost gradient by T)."""
    for per_step, expected in ((False, (25.0, 1.0)), (True, (25.0 / 500.0, 500.0))):
        agent = CPO(OBS, ACT, CPOConfig(hidden=(8, 8), constraint_per_step=per_step))
        agent.record_episode_costs([40.0, 60.0])
        agent.record_episode_costs([30.0, 70.0])  # J_c = 50, 4 episodes
        assert agent.constraint_value(2000) == pytest.approx(expected)
    # no episode ended (J_c unknown): c = 0; T = all rows (one unfinished episode)
    assert CPO(OBS, ACT, CPOConfig(constraint_per_step=True)).constraint_value(64) == (0.0, 64.0)
    # the update uses it and starts counting episodes afresh
    agent = CPO(OBS, ACT, CPOConfig(hidden=(16, 16), update_epochs=1, constraint_per_step=True))
    agent.record_episode_costs([45.0, 55.0])
    metrics = agent.update(_rollout(agent), 0.0)  # 64 rows, 2 episodes: T = 32
    assert metrics["constraint_length"] == 32.0 and metrics["constraint_c"] == 25.0 / 32.0
    assert agent.episodes_since_update == 0


def test_ppo_lag_penalised_advantage_shrinks_the_costly_actions():
    """With a large lambda the actor moves probability away from the costly actions."""
    torch.manual_seed(0)
    agent = PPOLag(OBS, ACT, PPOLagConfig(hidden=(16, 16), update_epochs=5, minibatch_size=32,
                                          lagrangian_init=20.0, lambda_lr=1e-9))  # fmt: skip
    obs = torch.zeros(256, 4)
    action, log_prob, value = agent.explore(obs)
    cost = (action[:, 0] > 0).float()  # costly: positive first action
    buffer = RolloutBuffer(1, 256, (4,), (2,))
    buffer.add(obs, action, log_prob, torch.zeros(256), value, torch.ones(256), torch.zeros(256),
               torch.zeros(256), costs=(cost, torch.zeros(256), torch.zeros(256)))  # fmt: skip
    agent.record_episode_costs([100.0])
    mean_before = agent.nets.actor.distribution(obs[:1]).mean[0, 0].item()
    agent.update(buffer.compute(torch.zeros(256), 0.99, 0.95, torch.zeros(256)))
    assert agent.nets.actor.distribution(obs[:1]).mean[0, 0].item() < mean_before


def test_cpo_reduces_the_cost_surrogate_when_infeasible():
    torch.manual_seed(0)
    agent = CPO(OBS, ACT, CPOConfig(hidden=(16, 16), update_epochs=1, minibatch_size=64))
    obs = torch.zeros(256, 4)
    action, log_prob, value = agent.explore(obs)
    cost = (action[:, 0] > 0).float()
    buffer = RolloutBuffer(1, 256, (4,), (2,))
    buffer.add(obs, action, log_prob, torch.randn(256), value, torch.ones(256), torch.zeros(256),
               torch.zeros(256), costs=(cost, torch.zeros(256), torch.zeros(256)))  # fmt: skip
    agent.record_episode_costs([200.0])  # far above the limit
    mean_before = agent.nets.actor.distribution(obs[:1]).mean[0, 0].item()
    metrics = agent.update(buffer.compute(torch.zeros(256), 0.99, 0.95, torch.zeros(256)))
    assert metrics["accepted_step"] > 0 and metrics["optim_case"] in (0.0, 1.0)
    assert agent.nets.actor.distribution(obs[:1]).mean[0, 0].item() < mean_before


@pytest.mark.parametrize("algo", ["ppo_lag", "ppo_lag_pid", "sac_lag", "cpo"])
def test_constrained_algorithm_cli_config_runs_on_the_velocity_task(algo, tmp_path):
    on_policy = algo != "sac_lag"
    pid = ["algo.multiplier=pid"] if algo.endswith("_pid") else []
    algo = algo.removesuffix("_pid")
    cfg = make_config(
        f"algo={algo}", *pid, "env=SafetyHopperVelocity", "algo.cost_limit=5", *FAST,
        "total_steps=400", "env.max_episode_steps=50", "env.num_envs=2", "algo.hidden=[16,16]",
        *(["algo.rollout_steps=100", "algo.update_epochs=2"] if on_policy else
          ["algo.learning_starts=100", "algo.batch_size=32", "algo.multiplier_delay=0"]),
        "eval_every=200", "checkpoint_every=200", "log_every=100",
    )  # fmt: skip
    assert cfg.algo.cost_limit == 5.0 and cfg.env.backend == "auto"
    result = train(cfg, tmp_path)
    assert np.isfinite(result["eval/return"]) and result["eval/cost"] >= 0.0
    train_rows = read_csv(tmp_path / "train.csv")
    assert any("train/episode_cost" in r for r in train_rows)
    if algo != "cpo":
        assert any("train/lagrange_multiplier" in r for r in train_rows)


BANDIT_ID = "rlcore-test/CostlyBandit-v0"


class CostlyBandit(gym.Env):
    """20 steps; reward = the action (in [-1, 1]), cost 1 when it exceeds 0.5. Unconstrained,
    the best action is 1 (return 20, cost 20); under a cost limit of 2 it is ~0.5."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        a = float(np.clip(action[0], -1, 1))
        return np.array([self.t / 20], np.float32), a, False, self.t >= 20, {"cost": float(a > 0.5)}


if BANDIT_ID not in gym.registry:
    gym.register(id=BANDIT_ID, entry_point=CostlyBandit)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo_lag", "cpo"])
def test_constrained_on_policy_learning_keeps_the_cost_under_the_limit(algo, tmp_path):
    """Both learn to move the action up toward 0.5 (return well above 0) while the
    evaluation's episode cost ends at or under the limit of 2 (unconstrained: 20)."""
    cfg = make_config(
        f"algo={algo}", f"env={BANDIT_ID}", *FAST, "algo.cost_limit=2", "total_steps=40000",
        "env.num_envs=4", "algo.rollout_steps=250", "algo.hidden=[16,16]", "eval_every=40000",
        "eval_episodes=4", "algo.cost_window=20", "algo.init_log_std=-1.0",
        *(["algo.update_epochs=10", "algo.lambda_lr=0.5"] if algo == "ppo_lag" else []),
    )  # fmt: skip
    result = train(cfg, tmp_path)
    assert result["eval/cost"] <= 2.0, result
    assert result["eval/return"] >= 2.0, result
