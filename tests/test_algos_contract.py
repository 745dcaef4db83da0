"""Contract every algorithm meets: shapes and bounds of act, finite metrics from update,
parameters that move, state_dict round trips, clear failure on NaN losses."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.algos.awac import AWAC, AWACConfig
from rlcore.algos.cal_ql import CalQL, CalQLConfig
from rlcore.algos.cql import CQL, CQLConfig
from rlcore.algos.famo2o import FamO2O, FamO2OConfig
from rlcore.algos.iql import IQL, IQLConfig
from rlcore.algos.mopo import MOPO, MOPOConfig
from rlcore.algos.morec import MOREC, MORECConfig
from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.algos.rebrac import ReBRAC, ReBRACConfig
from rlcore.algos.riql import RIQL, RIQLConfig
from rlcore.algos.rlpd import RLPD, RLPDConfig
from rlcore.algos.sac import SAC, SACConfig
from rlcore.algos.td3 import TD3, TD3Config
from rlcore.algos.td3_bc import TD3BC, TD3BCConfig
from rlcore.algos.wsrl import WSRL, WSRLConfig
from rlcore.buffers import RolloutBuffer
from rlcore.types import Batch
from rlcore.utils import NonFiniteLossError

OBS = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, -0.5, 0.0], np.float32), np.array([2.0, 0.5, 1.0], np.float32))


def random_batch(n: int = 64, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    low, high = torch.as_tensor(ACT.low), torch.as_tensor(ACT.high)
    return Batch(
        obs=torch.randn(n, 5, generator=g),
        action=low + (high - low) * torch.rand(n, 3, generator=g),
        reward=torch.randn(n, generator=g),
        next_obs=torch.randn(n, 5, generator=g),
        terminated=(torch.rand(n, generator=g) < 0.1).float(),
        truncated=torch.zeros(n),
        mc_return=torch.randn(n, generator=g) * 10,
        extras={
            "next_action": low + (high - low) * torch.rand(n, 3, generator=g),
            "has_next_action": torch.ones(n),
        },
    )


def random_rollout(agent: PPO, steps: int = 16, envs: int = 2):
    buffer = RolloutBuffer(steps, envs, (5,), (3,))
    for _ in range(steps):
        obs = torch.randn(envs, 5)
        action, log_prob, value = agent.explore(obs)
        buffer.add(
            obs,
            action,
            log_prob,
            torch.randn(envs),
            value,
            torch.zeros(envs),
            torch.zeros(envs),
            torch.zeros(envs),
        )
    return buffer.compute(torch.zeros(envs), 0.99, 0.95)


AGENTS = {
    "sac": lambda: SAC(OBS, ACT, SACConfig(hidden=(32, 32), policy_frequency=1)),
    "td3": lambda: TD3(OBS, ACT, TD3Config(hidden=(32, 32), policy_frequency=1)),
    "ppo": lambda: PPO(OBS, ACT, PPOConfig(hidden=(16, 16), num_minibatches=4, update_epochs=2)),
    "iql": lambda: IQL(OBS, ACT, IQLConfig(hidden=(32, 32))),
    "iql_deterministic": lambda: IQL(
        OBS, ACT, IQLConfig(hidden=(32, 32), deterministic_actor=True)
    ),
    "td3_bc": lambda: TD3BC(OBS, ACT, TD3BCConfig(hidden=(32, 32), policy_frequency=1)),
}
AGENTS["rebrac"] = lambda: ReBRAC(OBS, ACT, ReBRACConfig(hidden=(32, 32)))
AGENTS["riql"] = lambda: RIQL(OBS, ACT, RIQLConfig(hidden=(32, 32), num_critics=3))
AGENTS["mopo"] = lambda: MOPO(
    OBS, ACT, MOPOConfig(hidden=(32, 32), dynamics_hidden=(16,), dynamics_decays=(0.0, 0.0))
)
AGENTS["morec"] = lambda: MOREC(
    OBS,
    ACT,
    MORECConfig(
        hidden=(32, 32), dynamics_hidden=(16,), dynamics_decays=(0.0, 0.0), discriminators=3
    ),  # fmt: skip
)
AGENTS["awac"] = lambda: AWAC(OBS, ACT, AWACConfig(hidden=(32, 32)))
AGENTS["cql"] = lambda: CQL(OBS, ACT, CQLConfig(hidden=(32, 32)))
AGENTS["cal_ql"] = lambda: CalQL(OBS, ACT, CalQLConfig(hidden=(32, 32), critic_hidden=(32, 32)))
AGENTS["famo2o"] = lambda: FamO2O(OBS, ACT, FamO2OConfig(hidden=(32, 32), balance_hidden=(16, 16)))
# offline-to-online agents, one update per batch row set (utd_ratio 1; UTD in test_o2o_agents)
AGENTS["rlpd"] = lambda: RLPD(OBS, ACT, RLPDConfig(hidden=(32, 32), num_critics=4, utd_ratio=1))
AGENTS["wsrl"] = lambda: WSRL(OBS, ACT, WSRLConfig(hidden=(32, 32), num_critics=4))  # CQL phase
# action-chunk policies act (H, A) per observation: their contract is tests/test_generative.py
CHUNKED = {"diffusion_bc", "flow_bc", "dppo", "reinflow", "resip"}  # + test_finetune.py
# constrained agents learn from costs: their contract is tests/test_safe_rl.py
CONSTRAINED = {"ppo_lag", "sac_lag", "cpo", "fisor"}  # + test_fisor.py
# exploration noise per training env (act needs the loop's envs): tests/test_fast_td3.py
PER_ENV_NOISE = {"fast_td3"}
# image-only agents (no vector task to act in here): tests/test_drqv2.py
IMAGES_ONLY = {"drqv2"}
OFFLINE = ["iql", "iql_deterministic", "riql", "td3_bc", "rebrac", "awac", "cql", "cal_ql", "famo2o",
           "mopo", "morec"]  # fmt: skip
RAW_OBSERVATIONS = {"mopo", "morec"}  # learns from unnormalised states, as OfflineRL-Kit's MOPO


def do_update(name, agent, seed=0):
    if name == "ppo":
        return agent.update(random_rollout(agent), progress=0.1)
    return agent.update(random_batch(seed=seed))


@pytest.mark.parametrize("name", list(AGENTS))
def test_act_shapes_and_bounds(name):
    torch.manual_seed(0)
    agent = AGENTS[name]()
    single = agent.act(np.zeros(5, np.float32))
    batch = agent.act(np.random.default_rng(0).normal(size=(7, 5)).astype(np.float32) * 100)
    assert single.shape == (3,) and batch.shape == (7, 3)
    assert isinstance(batch, np.ndarray) and batch.dtype == np.float32
    if name != "ppo":  # PPO's Gaussian is unbounded; the loop clips for the env
        assert (batch >= ACT.low).all() and (batch <= ACT.high).all()
    det1 = agent.act(np.ones(5, np.float32), deterministic=True)
    det2 = agent.act(np.ones(5, np.float32), deterministic=True)
    np.testing.assert_array_equal(det1, det2)


@pytest.mark.parametrize("name", list(AGENTS))
def test_update_finite_metrics_and_parameters_move(name):
    torch.manual_seed(0)
    agent = AGENTS[name]()
    before = {k: v.clone() for k, v in agent.actor.state_dict().items()}
    critic_before = {k: v.clone() for k, v in agent.critic.state_dict().items()}
    metrics = do_update(name, agent)
    assert metrics and all(np.isfinite(v) for v in metrics.values()), metrics
    assert any(not torch.equal(before[k], v) for k, v in agent.actor.state_dict().items())
    assert any(not torch.equal(critic_before[k], v) for k, v in agent.critic.state_dict().items())


@pytest.mark.parametrize("name", list(AGENTS))
def test_state_dict_round_trip_gives_identical_future(name):
    torch.manual_seed(0)
    agent = AGENTS[name]()
    do_update(name, agent)
    clone = AGENTS[name]()
    clone.load_state_dict(agent.state_dict())
    torch.manual_seed(5)
    m1 = do_update(name, agent, seed=3)
    torch.manual_seed(5)
    m2 = do_update(name, clone, seed=3)
    assert m1 == m2
    for (k, a), b in zip(agent.actor.state_dict().items(), clone.actor.state_dict().values()):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("name", ["sac", "td3", *OFFLINE])
def test_nan_loss_raises_before_touching_parameters(name):
    agent = AGENTS[name]()
    bad = random_batch()
    bad = Batch(**{**bad.__dict__, "reward": bad.reward.clone().fill_(float("nan"))})
    before = {k: v.clone() for k, v in agent.critic.state_dict().items()}
    with pytest.raises(NonFiniteLossError, match="critic_loss|q_loss"):
        agent.update(bad)
    for k, v in agent.critic.state_dict().items():
        assert torch.equal(before[k], v)


def test_sac_twin_critic_update_matches_reference_formula():
    """One SAC critic step equals a hand-written version with two separate critics."""
    torch.manual_seed(0)
    agent = SAC(
        OBS,
        ACT,
        SACConfig(hidden=(8,), policy_frequency=10**9, critic_lr=0.1, fused_optimizer=False),
    )
    batch = random_batch(16)
    critic_state = {k: v.clone() for k, v in agent.critic.state_dict().items()}
    torch.manual_seed(1)
    next_action, next_log_prob = agent.actor(batch.next_obs)

    def q(state, member, obs, act):
        x = torch.cat([obs, act], -1)
        h = torch.relu(
            x @ state["net.hidden_layers.0.weight"][member]
            + state["net.hidden_layers.0.bias"][member]
        )
        return (
            h @ state["net.output_layer.weight"][member] + state["net.output_layer.bias"][member]
        ).squeeze(-1)

    target_state = agent.target_critic.state_dict()
    with torch.no_grad():
        next_q = torch.min(
            q(target_state, 0, batch.next_obs, next_action),
            q(target_state, 1, batch.next_obs, next_action),
        )
        target = batch.reward + 0.99 * (1 - batch.terminated) * (next_q - 1.0 * next_log_prob)
    expected = sum(
        ((q(critic_state, m, batch.obs, batch.action) - target) ** 2).mean() for m in range(2)
    )
    torch.manual_seed(1)
    metrics = agent.update(batch)
    assert metrics["critic_loss"] == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("name", [n for n in OFFLINE if n not in RAW_OBSERVATIONS])
def test_offline_agents_normalise_raw_observations(name):
    """act() takes raw observations: fitting the normaliser changes the input the actor sees."""
    torch.manual_seed(0)
    agent = AGENTS[name]()
    obs = np.full(5, 50.0, np.float32)
    before = agent.act(obs, deterministic=True)
    agent.obs_normalizer.fit(torch.full((10, 5), 50.0) + torch.randn(10, 5))
    assert torch.allclose(
        agent.obs_normalizer(torch.full((1, 5), 50.0)).abs().mean(), torch.tensor(0.0), atol=1.0
    )
    assert not np.allclose(before, agent.act(obs, deterministic=True))
    clone = AGENTS[name]()
    clone.load_state_dict(agent.state_dict())
    np.testing.assert_array_equal(
        clone.act(obs, deterministic=True), agent.act(obs, deterministic=True)
    )


def test_td3_bc_actor_loss_hand_computed():
    """The actor loss is -alpha/mean|Q1| * mean Q1(s, pi(s)) + mean (pi(s) - a)^2, taken
    with the critic after its step and the actor before its step."""
    import copy

    torch.manual_seed(0)
    agent = TD3BC(OBS, ACT, TD3BCConfig(hidden=(8,), policy_frequency=1, fused_optimizer=False))
    batch = random_batch(16)
    actor_before = copy.deepcopy(agent.actor)
    metrics = agent.update(batch)
    with torch.no_grad():
        action = actor_before(batch.obs)
        q1 = agent.critic(batch.obs, action)[0]  # the actor step does not change the critic
        expected_bc = (action - batch.action).pow(2).mean()
        expected = -2.5 / q1.abs().mean() * q1.mean() + expected_bc
    assert metrics["bc_loss"] == pytest.approx(expected_bc.item(), rel=1e-5)
    assert metrics["actor_loss"] == pytest.approx(expected.item(), rel=1e-5)


def test_weight_diagnostics_hand_computed():
    from rlcore.losses import weight_diagnostics

    stats = weight_diagnostics(torch.tensor([1.0, 1.0, 2.0, 100.0]), max_weight=100.0)
    assert stats["weight"] == pytest.approx(26.0)
    assert stats["weight_clamped"] == pytest.approx(0.25)
    assert stats["weight_ess"] == pytest.approx(104.0**2 / (4 * 10006.0))
    uniform = weight_diagnostics(torch.full((8,), 3.0), max_weight=100.0)
    assert uniform["weight_ess"] == pytest.approx(1.0) and uniform["weight_clamped"] == 0.0


def test_expectile_loss_hand_computed():
    from rlcore.losses import expectile_loss

    diff = torch.tensor([1.0, -2.0])
    # 0.7 * 1 + 0.3 * 4, averaged
    assert expectile_loss(diff, 0.7).item() == pytest.approx((0.7 * 1 + 0.3 * 4) / 2)


# ------------------------------------------------- act(obs, deterministic=False) semantics

# Agents whose policy has no noise: ``deterministic`` is ignored. Every other agent samples
# by default (SAC, CQL, Cal-QL: tanh-Gaussian; IQL, AWAC, PPO: Gaussian; TD3 and IQL's
# deterministic actor: exploration noise) and returns the mode with ``deterministic=True``.
DETERMINISTIC_ACTORS = {"td3_bc", "rebrac", "riql"}


def test_every_registered_algorithm_is_in_the_contract():
    """Every algorithm acting in Box spaces is checked here; discrete-only ones (DQN) meet
    the same contract in tests/test_discrete.py."""
    from rlcore import catalog

    continuous = {name for name, spec in catalog.ALGORITHMS.items() if "box" in spec.action_spaces}
    assert continuous <= set(AGENTS) | CHUNKED | CONSTRAINED | PER_ENV_NOISE | IMAGES_ONLY
    assert set(catalog.ALGORITHMS) - continuous == {"dqn"}


def policy_mode(name: str, agent, obs: np.ndarray) -> np.ndarray:
    """The policy's most likely action, computed from its networks (not through act)."""
    from rlcore.nets import DeterministicActor, GaussianActor, TanhGaussianActor

    with torch.no_grad():
        x = torch.as_tensor(obs)[None]
        if hasattr(agent, "obs_normalizer"):
            x = agent.obs_normalizer(x)
        if isinstance(agent.actor, TanhGaussianActor):  # tanh of the pre-tanh mean
            mean, _ = agent.actor.net(x).chunk(2, dim=-1)
            action = agent.actor.to_env(torch.tanh(mean))
        elif isinstance(agent.actor, GaussianActor):
            action = agent.actor.distribution(x).mean
        else:
            assert isinstance(agent.actor, DeterministicActor)
            action = agent.actor(x)
        if name != "ppo":  # PPO's act is unclipped (the loop clips for the env)
            action = action.clamp(torch.as_tensor(ACT.low), torch.as_tensor(ACT.high))
    return action[0].numpy()


# FamO2O's policy also takes beta's encoding: tests/test_famo2o.py checks its mode
@pytest.mark.parametrize("name", [name for name in AGENTS if name != "famo2o"])
def test_act_deterministic_is_the_mode_and_default_samples(name):
    torch.manual_seed(0)
    agent = AGENTS[name]()
    if hasattr(agent, "obs_normalizer"):
        agent.obs_normalizer.fit(torch.randn(50, 5) * 3 + 1)
    obs = np.random.default_rng(1).normal(size=5).astype(np.float32)
    mode = policy_mode(name, agent, obs)
    det = agent.act(obs, deterministic=True)
    np.testing.assert_allclose(det, mode, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(det, agent.act(obs, deterministic=True))
    if name in DETERMINISTIC_ACTORS:
        np.testing.assert_array_equal(agent.act(obs), det)
        np.testing.assert_array_equal(agent.act(obs, deterministic=False), det)
        return
    first, second = agent.act(obs), agent.act(obs)  # the default samples
    assert not np.allclose(first, second)
    samples = agent.act(np.repeat(obs[None], 4000, axis=0))
    assert samples.std(axis=0).min() > 1e-3
    if name != "ppo":
        assert (samples >= ACT.low).all() and (samples <= ACT.high).all()
    # tanh and the clip to the box are monotonic per dimension, so the median of the
    # sampled actions is the mode (tanh of the pre-tanh mean, or the clipped mean)
    np.testing.assert_allclose(np.median(samples, axis=0), mode, atol=0.06)
