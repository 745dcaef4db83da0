"""FamO2O (algos/famo2o.py): the beta encoding and mapping by hand, where the policy's beta
comes from in each phase, the balance model's direction of learning, the agent contract;
and IQL's actor learning rate across the offline -> online switch (CORL's schedule)."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlcore.algos.famo2o import FamO2O, FamO2OConfig, balance_to_beta
from rlcore.algos.iql import IQL, IQLConfig
from rlcore.nets import sinusoidal_encoding
from rlcore.types import Batch

torch.set_num_threads(1)

OBS = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, -0.5, 0.0], np.float32), np.array([2.0, 0.5, 1.0], np.float32))
SMALL = {"hidden": (32, 32), "balance_hidden": (32, 32)}


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
    )


def make_agent(**overrides) -> FamO2O:
    torch.manual_seed(0)
    return FamO2O(OBS, ACT, FamO2OConfig(**{**SMALL, **overrides}))


def decode_beta(actor_input: torch.Tensor, dim: int = 6, base: float = 1e4) -> torch.Tensor:
    """beta back from the policy input's last pair of encoding slots: angle = beta /
    base^((dim - 2) / dim), small enough (beta < 100) for atan2 to be unambiguous."""
    sin, cos = actor_input[:, -2], actor_input[:, -1]
    return torch.atan2(sin, cos) * base ** ((dim - 2) / dim)


def record_actor_steps(agent: FamO2O) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Wraps agent._actor_step to record (policy input, AWR weight) of every call."""
    calls, original = [], agent._actor_step

    def recording(actor_input, action, weight):
        calls.append((actor_input.detach().clone(), weight.detach().clone()))
        return original(actor_input, action, weight)

    agent._actor_step = recording
    return calls


def force_balance(agent: FamO2O, u: float) -> None:
    """The balance model's output becomes u (mode and, with std e^-10, every sample)."""
    last = agent.balance.mean[agent.balance.mean.output_index]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.fill_(math.atanh(u))
        agent.balance.log_std.fill_(-10.0)


# --- encoding and mapping, by hand -----------------------------------------------------


def test_sinusoidal_encoding_matches_hand_computed_values():
    out = sinusoidal_encoding(torch.tensor([10.0, 0.0, 3.5]), 6, 1e4)
    assert out.shape == (3, 6)
    a1, a2 = 10.0 / 1e4 ** (2 / 6), 10.0 / 1e4 ** (4 / 6)  # i = 1, 2 (i = 0: 10 itself)
    expected = [
        math.sin(10.0),
        math.cos(10.0),
        math.sin(a1),
        math.cos(a1),
        math.sin(a2),
        math.cos(a2),
    ]
    np.testing.assert_allclose(out[0].numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[1].numpy(), [0, 1, 0, 1, 0, 1], atol=0)
    b = 3.5 / 1e4 ** (2 / 6)
    assert out[2, 2].item() == pytest.approx(math.sin(b), rel=1e-5)
    assert out[2, 5].item() == pytest.approx(math.cos(3.5 / 1e4 ** (4 / 6)), rel=1e-6)
    # any leading shape; base and dim are honoured
    assert sinusoidal_encoding(torch.zeros(2, 3), 4).shape == (2, 3, 4)
    assert sinusoidal_encoding(torch.tensor([2.0]), 2, 10.0)[0, 0].item() == pytest.approx(
        math.sin(2.0)
    )
    assert sinusoidal_encoding(torch.tensor([2.0]), 4, 100.0)[0, 2].item() == pytest.approx(
        math.sin(2.0 / 10.0)
    )
    with pytest.raises(ValueError, match="even dim"):
        sinusoidal_encoding(torch.zeros(3), 5)


def test_balance_mapping_ends_and_midpoint():
    beta = balance_to_beta(torch.tensor([-1.0, 0.0, 1.0, 0.5]), 8.0, 14.0)
    assert beta.tolist() == [8.0, 11.0, 14.0, 12.5]


def test_bad_config_raises_clear_errors():
    with pytest.raises(ValueError, match="beta_low < beta_high"):
        make_agent(beta_low=5.0, beta_high=5.0)
    with pytest.raises(ValueError, match="encoding_dim"):
        make_agent(encoding_dim=5)
    with pytest.raises(ValueError, match="unknown phase"):
        make_agent().set_phase("pretrain")


# --- where the policy's beta comes from -------------------------------------------------


def test_offline_beta_is_uniform_in_range_and_sets_the_awr_weight():
    agent = make_agent(beta_low=8.0, beta_high=14.0)
    force_balance(agent, 0.5)  # would give 12.5 everywhere: offline must ignore it
    calls = record_actor_steps(agent)
    advantages = []
    original_value_step = agent._value_step

    def value_step(*args):
        out = original_value_step(*args)
        advantages.append(out[1].clone())
        return out

    agent._value_step = value_step
    for seed in range(2):
        agent.update(random_batch(n=256, seed=seed))
    (input0, weight0), (input1, _) = calls
    beta0, beta1 = decode_beta(input0), decode_beta(input1)
    assert beta0.min() >= 8.0 - 1e-3 and beta0.max() <= 14.0 + 1e-3
    assert beta0.std() > 1.2 and abs(beta0.mean().item() - 11.0) < 0.5  # U[8,14]: std 1.73
    assert beta0.max() - beta0.min() > 5.0 and not torch.allclose(beta0, beta1)
    # the input's encoding is exactly sinusoidal_encoding of that beta
    torch.testing.assert_close(input0[:, 5:], sinusoidal_encoding(beta0, 6), atol=2e-5, rtol=0)
    expected_weight = torch.exp(beta0 * advantages[0]).clamp(max=100.0)
    # one weight per transition with its own beta (the paper); the reference code's
    # (B, 1) x (B,) product would give a (B, B) matrix of batch-averaged weights
    assert weight0.shape == (256,)
    torch.testing.assert_close(weight0, expected_weight, rtol=1e-3, atol=1e-6)


def test_states_are_raw_by_default_as_in_the_reference():
    """The reference (Kostrikov's IQL code) feeds raw states; CORL's IQL standardises."""
    assert not FamO2OConfig().normalize_states and IQLConfig().normalize_states


@pytest.mark.parametrize("phase", ["warmup", "online"])
def test_online_beta_comes_from_the_balance_model(phase):
    agent = make_agent(beta_low=8.0, beta_high=14.0)
    agent.set_phase(phase)
    force_balance(agent, 0.5)  # beta 12.5
    calls = record_actor_steps(agent)
    agent.update(random_batch(n=128))
    beta = decode_beta(calls[0][0])
    torch.testing.assert_close(beta, torch.full_like(beta, 12.5), atol=2e-3, rtol=0)
    # back offline (the loop never does, but the call decides): uniform again
    agent.set_phase("offline")
    agent.update(random_batch(n=128, seed=1))
    assert decode_beta(calls[1][0]).std() > 1.0


@pytest.mark.parametrize("deterministic", [True, False])
def test_act_conditions_the_policy_on_the_balance_models_beta(deterministic):
    agent = make_agent(beta_low=1.0, beta_high=5.0)
    force_balance(agent, -0.5)  # beta 2.0
    obs = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    torch.manual_seed(3)
    action = agent.act(obs, deterministic=deterministic)
    with torch.no_grad():
        obs_t = torch.as_tensor(obs)
        inputs = torch.cat([obs_t, sinusoidal_encoding(torch.full((4,), 2.0), 6)], -1)
        dist = agent.actor.distribution(inputs)
        if deterministic:
            expected = dist.mean
        else:  # same draws: balance model's noise first, then the policy's
            torch.manual_seed(3)
            torch.randn(4, 1)
            expected = dist.sample()
        expected = torch.clamp(expected, agent.low, agent.high).numpy()
    np.testing.assert_allclose(action, expected, atol=1e-4)
    other = agent.act(obs, deterministic=True)
    force_balance(agent, 0.9)
    assert not np.allclose(other, agent.act(obs, deterministic=True))  # beta matters


# --- the balance model learns toward the beta whose actions the critic prefers ----------


class FirstActionCritic(nn.Module):
    """Both target critics say Q(s, a) = sign * a[0]."""

    def __init__(self, sign: float) -> None:
        super().__init__()
        self.sign = sign

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return (self.sign * action[:, 0]).expand(2, -1)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_balance_model_moves_beta_toward_higher_q(sign):
    """A hand-set policy whose first action grows with beta (through the encoding's
    slowest slot, sin(beta / 1e4^(2/3)), increasing on [1, 5]): Q = a[0] must drive the
    balance model to beta_high, Q = -a[0] to beta_low."""
    agent = make_agent(balance_lr=3e-3, init_alpha=0.01)
    with torch.no_grad():
        first, second, out = (m for m in agent.actor.mean if isinstance(m, nn.Linear))
        for layer in (first, second, out):
            layer.weight.zero_()
            layer.bias.zero_()
        first.weight[0, 5 + 4] = 300.0  # sin(beta / 464): 0.65 .. 3.2 after x300
        second.weight[0, 0] = 1.0
        out.weight[0, 0] = 1.0
        agent.actor.log_std.fill_(-20.0)
    agent.target_critic = FirstActionCritic(sign)
    obs = torch.randn(64, 5, generator=torch.Generator().manual_seed(0))
    start = agent.balance_beta(obs, deterministic=True).mean().item()
    for _ in range(150):
        metrics = agent._balance_step(obs)
    end = agent.balance_beta(obs, deterministic=True).mean().item()
    assert 2.0 < start < 4.0
    assert (end > 4.5) if sign > 0 else (end < 1.5), (start, end)
    assert metrics["balance_alpha"] != 0.01  # the temperature is tuned


def test_temperature_falls_when_entropy_is_above_target():
    agent = make_agent(target_entropy=-5.0)  # u's entropy starts far above -5
    metrics = agent.update(random_batch())
    assert metrics["balance_entropy"] > -5.0 and agent.log_alpha.item() < 0.0


# --- contract ----------------------------------------------------------------------------


def test_act_shapes_bounds_and_determinism():
    agent = make_agent()
    single = agent.act(np.zeros(5, np.float32))
    batch = agent.act(np.random.default_rng(0).normal(size=(7, 5)).astype(np.float32) * 100)
    assert single.shape == (3,) and batch.shape == (7, 3) and batch.dtype == np.float32
    assert (batch >= ACT.low).all() and (batch <= ACT.high).all()
    det = [agent.act(np.ones(5, np.float32), deterministic=True) for _ in range(2)]
    np.testing.assert_array_equal(*det)
    samples = [agent.act(np.ones(5, np.float32)) for _ in range(2)]
    assert not np.array_equal(*samples)


def test_update_finite_metrics_and_every_part_moves():
    agent = make_agent()
    parts = {"actor": agent.actor, "critic": agent.critic, "value": agent.value}
    parts["balance"] = agent.balance
    before = {name: [p.clone() for p in m.parameters()] for name, m in parts.items()}
    metrics = agent.update(random_batch())
    assert set(metrics) >= {"balance_loss", "balance_alpha", "balance_entropy", "beta", "q_loss"}
    assert all(np.isfinite(v) for v in metrics.values()), metrics
    for name, module in parts.items():
        moved = [not torch.equal(a, b) for a, b in zip(before[name], module.parameters())]
        assert any(moved), name
    assert agent.log_alpha.item() != 0.0


@pytest.mark.parametrize("phase", ["offline", "online"])
def test_state_dict_round_trip_gives_identical_next_update(phase):
    agent = make_agent()
    agent.set_phase(phase)
    agent.update(random_batch(seed=1))
    clone = make_agent(init_alpha=3.0)  # everything differs until loaded
    clone.load_state_dict(agent.state_dict())
    clone.set_phase(phase)  # as the loop does after a resume
    torch.manual_seed(5)
    m1 = agent.update(random_batch(seed=2))
    torch.manual_seed(5)
    m2 = clone.update(random_batch(seed=2))
    assert m1 == m2
    for (k, a), b in zip(
        agent.state_dict()["balance"].items(), clone.state_dict()["balance"].values()
    ):
        assert torch.equal(a, b), k
    torch.manual_seed(6)
    a1 = agent.act(np.ones(5, np.float32))
    torch.manual_seed(6)
    np.testing.assert_array_equal(a1, clone.act(np.ones(5, np.float32)))


def test_same_seed_same_numbers():
    runs = []
    for _ in range(2):
        agent = make_agent()
        metrics = [agent.update(random_batch(seed=i)) for i in range(3)]
        agent.set_phase("online")
        metrics.append(agent.update(random_batch(seed=3)))
        runs.append((metrics, agent.act(np.ones(5, np.float32))))
    assert runs[0][0] == runs[1][0]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


def test_actor_lr_constant_by_default_and_iql_cosine_on_request():
    agent = make_agent(total_steps=4)
    for phase in ("offline", "online"):
        agent.set_phase(phase)
        for _ in range(3):
            agent.update(random_batch())
            assert agent.actor_optimizer.param_groups[0]["lr"] == 3e-4
    cosine = make_agent(total_steps=4, cosine_actor_lr=True)
    cosine.update(random_batch())
    cosine.update(random_batch())
    assert cosine.actor_optimizer.param_groups[0]["lr"] == pytest.approx(
        3e-4 * 0.5 * (1 + math.cos(math.pi / 4))
    )


# --- IQL fine-tuning: the actor's learning rate across the switch -------------------------


def test_iql_actor_lr_follows_corls_cosine_annealing_lr_across_the_switch():
    """Offline: cosine to 0 over total_steps; online: torch's CosineAnnealingLR(T_max =
    total_steps), stepped on, climbs back to actor_lr (CORL's finetune/iql.py)."""
    total = 4
    torch.manual_seed(0)
    agent = IQL(OBS, ACT, IQLConfig(hidden=(16, 16), total_steps=total))
    assert (agent.config.online_steps, agent.config.offline_data) == (0, "keep")
    reference = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=3e-4)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(reference, total)
    seen, expected = [], []
    agent.set_phase("offline")
    for step in range(3 * total):
        if step == total:
            agent.set_phase("online")
        expected.append(reference.param_groups[0]["lr"])
        agent.update(random_batch(seed=step))
        seen.append(agent.actor_optimizer.param_groups[0]["lr"])
        reference.step()
        schedule.step()
    np.testing.assert_allclose(seen, expected, rtol=1e-9, atol=1e-12)
    assert seen[total] == pytest.approx(0.0, abs=1e-12) and seen[2 * total] == pytest.approx(3e-4)
    # without the switch (pure offline) the rate stays at 0 past total_steps
    torch.manual_seed(0)
    offline = IQL(OBS, ACT, IQLConfig(hidden=(16, 16), total_steps=total))
    for step in range(total + 2):
        offline.update(random_batch(seed=step))
    assert offline.actor_optimizer.param_groups[0]["lr"] == 0.0


# --- learning sanity check ----------------------------------------------------------------


@pytest.mark.slow
def test_learns_the_best_action_of_a_one_step_task_offline_then_online():
    """One-step episodes, reward -(a - a*(s))^2 with a*(s) = 0.6 tanh(2 s0), dataset
    actions uniform on [-1, 1] (behaviour cloning would act 0: mean squared error 0.24).
    600 offline updates, then 200 with the balance model's beta: the deterministic policy
    must be within 0.05 mean squared error of a*. (~10 s on one core.)"""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    n = 4096
    obs = torch.randn(n, 2, generator=g)
    action = torch.rand(n, 1, generator=g) * 2 - 1
    reward = -((action[:, 0] - 0.6 * torch.tanh(2 * obs[:, 0])) ** 2)
    space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    config = FamO2OConfig(hidden=(64, 64), balance_hidden=(32, 32), total_steps=600)
    agent = FamO2O(space, gym.spaces.Box(-1, 1, (1,), np.float32), config)
    for step in range(800):
        if step == 600:
            agent.set_phase("online")
        idx = torch.randint(0, n, (256,), generator=g)
        ones = torch.ones(256)
        agent.update(Batch(obs[idx], action[idx], reward[idx], obs[idx], ones, 0 * ones))
    test = torch.randn(500, 2, generator=g)
    best = 0.6 * torch.tanh(2 * test[:, 0])
    chosen = torch.as_tensor(agent.act(test.numpy(), deterministic=True))[:, 0]
    assert ((best**2).mean() > 0.2) and ((chosen - best) ** 2).mean() < 0.05
