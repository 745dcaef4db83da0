"""The maths of the updates, on cases small enough to compute by hand: the shared loss
pieces (expectile, clipped surrogate, advantage standardisation, TD3's target smoothing,
Polyak, GAE), the critic targets and losses of SAC, TD3, TD3+BC, IQL, SAC-Lagrangian and
FISOR recomputed from the agent's networks before its update (terminal rows forced),
the temperature's direction (SAC, RLPD, CQL), DPPO's and ReinFlow's likelihoods and
DPPO's denoising-discounted gradient, CPO's line-search bound, and on-policy direction
tests: one update raises the log-probability of positive-advantage actions and lowers
negative ones (PPO, DPPO, ReinFlow; ResiP's is in tests/test_resip.py). Each test is aimed
at mutations of ``benchmarks/mutations.py`` that no other fast test saw (a flipped sign, a
reversed expectile, a dropped clip or terminal mask); the harness's table names them."""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn
from torch.distributions import Normal

from rlcore.algos.cql import CQL, CQLConfig
from rlcore.algos.dppo import DPPO, DPPOConfig, step_log_prob
from rlcore.algos.iql import IQL, IQLConfig
from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.algos.reinflow import ReinFlow, ReinFlowConfig
from rlcore.algos.rlpd import RLPD, RLPDConfig
from rlcore.algos.sac import SAC, SACConfig
from rlcore.algos.safe.cpo import CPO, CPOConfig
from rlcore.algos.safe.fisor import FISOR, FISORConfig
from rlcore.algos.safe.sac_lag import SACLag, SACLagConfig
from rlcore.algos.td3 import TD3, TD3Config
from rlcore.algos.td3_bc import TD3BC, TD3BCConfig
from rlcore.buffers import RolloutBuffer, compute_gae
from rlcore.generative import FlowHead
from rlcore.losses import (
    categorical_cross_entropy,
    categorical_projection,
    clipped_surrogate,
    ensemble_mse,
    expectile_loss,
    smoothed_target_action,
    standardize,
)
from rlcore.nets import polyak_update
from rlcore.types import Batch, RolloutBatch

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
H = 2  # action chunk of the diffusion / flow fine-tuners
CHUNK_ACT = gym.spaces.Box(np.full((H, 2), -1.0, np.float32), np.full((H, 2), 1.0, np.float32))


def transitions(n: int = 8, seed: int = 0, terminated: list[float] | None = None) -> Batch:
    """Random transitions; ``terminated`` given per row (default: alternating 0, 1)."""
    g = torch.Generator().manual_seed(seed)
    done = terminated if terminated is not None else [float(i % 2) for i in range(n)]
    return Batch(
        obs=torch.randn(n, 3, generator=g),
        action=torch.rand(n, 2, generator=g) * 2 - 1,
        reward=torch.randn(n, generator=g),
        next_obs=torch.randn(n, 3, generator=g),
        terminated=torch.tensor(done),
        truncated=torch.zeros(n),
        cost=(torch.rand(n, generator=g) > 0.5).float(),
    )


# -- shared loss pieces -----------------------------------------------------------------
def test_expectile_loss_hand_computed():
    diff = torch.tensor([1.0, -2.0])
    # tau on positive differences, 1 - tau on negative ones
    assert expectile_loss(diff, 0.8).item() == pytest.approx((0.8 * 1 + 0.2 * 4) / 2)
    assert expectile_loss(diff, 0.3).item() == pytest.approx((0.3 * 1 + 0.7 * 4) / 2)


def test_clipped_surrogate_hand_computed():
    ratio = torch.tensor([0.5, 0.5, 1.5, 1.5, 1.0, 1.1])
    advantage = torch.tensor([1.0, -1.0, 1.0, -1.0, 2.0, -1.0])
    loss, approx_kl, clip_frac = clipped_surrogate(ratio.log(), advantage, 0.2)
    # per row max(-A r, -A clip(r, 0.8, 1.2)):
    # r 0.5 A 1: max(-0.5, -0.8) = -0.5 | r 0.5 A -1: max(0.5, 0.8) = 0.8
    # r 1.5 A 1: max(-1.5, -1.2) = -1.2 | r 1.5 A -1: max(1.5, 1.2) = 1.5
    # r 1.0 A 2: -2                     | r 1.1 A -1: 1.1
    assert loss.item() == pytest.approx((-0.5 + 0.8 - 1.2 + 1.5 - 2.0 + 1.1) / 6)
    kl = sum((r - 1) - math.log(r) for r in (0.5, 0.5, 1.5, 1.5, 1.0, 1.1)) / 6
    assert approx_kl.item() == pytest.approx(kl)
    assert approx_kl.item() > 0  # (r - 1) - log r >= 0: an estimate of KL, never negative
    assert clip_frac.item() == pytest.approx(4 / 6)


def test_standardize_hand_computed():
    x = torch.tensor([1.0, 2.0, 3.0, 6.0])
    std = math.sqrt((4 + 1 + 0 + 9) / 3)  # unbiased, as torch.std
    expected = torch.tensor([-2.0, -1.0, 0.0, 3.0]) / std
    torch.testing.assert_close(standardize(x), expected)


def test_smoothed_target_action_clips_the_noise():
    torch.manual_seed(0)
    target = torch.zeros(2000, 2)
    scale = torch.tensor([1.0, 2.0])
    low, high = torch.tensor([-10.0, -0.3]), torch.tensor([10.0, 10.0])
    out = smoothed_target_action(target, scale, low, high, noise_std=5.0, noise_clip=0.5)
    # noise clipped to +-0.5 before scaling: +-0.5 on dim 0, +-1.0 on dim 1, then the box
    assert out[:, 0].abs().max().item() == pytest.approx(0.5)
    assert out[:, 1].max().item() == pytest.approx(1.0)
    assert out[:, 1].min().item() == pytest.approx(-0.3)


def test_polyak_update_hand_computed():
    target, source = nn.Linear(1, 1), nn.Linear(1, 1)
    with torch.no_grad():
        target.weight.fill_(0.0), target.bias.fill_(2.0)
        source.weight.fill_(1.0), source.bias.fill_(-2.0)
    polyak_update(target, source, 0.1)  # target <- 0.9 target + 0.1 source
    assert target.weight.item() == pytest.approx(0.1)
    assert target.bias.item() == pytest.approx(1.6)


def test_gae_hand_computed():
    # one env, 4 steps: termination at t = 1, truncation at t = 2 (final obs value 10)
    col = lambda *v: torch.tensor(v).view(-1, 1)  # noqa: E731
    advantages, returns = compute_gae(
        rewards=col(1.0, 2.0, 3.0, 4.0), values=col(0.5, 0.5, 0.5, 0.5),
        terminated=col(0.0, 1.0, 0.0, 0.0), truncated=col(0.0, 0.0, 1.0, 0.0),
        bootstrap_values=col(0.0, 0.0, 10.0, 0.0), last_values=torch.tensor([2.0]),
        gamma=0.9, gae_lambda=0.8,
    )  # fmt: skip
    # t3: 4 + 0.9 * 2 - 0.5 = 5.3            (bootstraps last_values)
    # t2: 3 + 0.9 * 10 - 0.5 = 11.5          (truncation: final obs value, recursion stops)
    # t1: 2 - 0.5 = 1.5                      (termination: nothing bootstrapped)
    # t0: 1 + 0.9 * 0.5 - 0.5 + 0.9 * 0.8 * 1.5 = 2.03
    torch.testing.assert_close(advantages, col(2.03, 1.5, 11.5, 5.3))
    torch.testing.assert_close(returns, advantages + 0.5)


# -- SAC (also RLPD, WSRL, SAC-Lagrangian: one SAC class) ------------------------------
@pytest.mark.parametrize("target_entropy", [100.0, -100.0])
@pytest.mark.parametrize("algo", ["sac", "rlpd"])
def test_sac_temperature_moves_toward_the_target_entropy(algo, target_entropy):
    """Entropy below the target -> alpha rises; above -> alpha falls, by Adam's first step
    of exactly the temperature's learning rate in log alpha (RLPD and WSRL's online phase
    run SAC's update)."""
    torch.manual_seed(0)
    config, agent_class = {"sac": (SACConfig, SAC), "rlpd": (RLPDConfig, RLPD)}[algo]
    cfg = config(hidden=(16, 16), policy_frequency=1, target_entropy=target_entropy,
                 alpha_lr=0.01, init_alpha=1.0, utd_ratio=1)  # fmt: skip
    agent = agent_class(OBS, ACT, cfg)
    agent.update(transitions())
    expected = 0.01 if target_entropy > 0 else -0.01
    assert agent.log_alpha.item() == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("target_entropy", [100.0, -100.0])
def test_cql_temperature_moves_toward_the_target_entropy(target_entropy):
    """CQL's temperature loss -log alpha (log pi + H_target): same direction as SAC's."""
    torch.manual_seed(0)
    cfg = CQLConfig(hidden=(16, 16), cql_n_actions=2, target_entropy=target_entropy,
                    alpha_lr=0.01)  # fmt: skip
    agent = CQL(OBS, ACT, cfg)
    agent.update(transitions())
    expected = 0.01 if target_entropy > 0 else -0.01
    assert agent.log_alpha.item() == pytest.approx(expected, abs=1e-5)


def test_rlpd_default_target_entropy_is_minus_half_the_action_dim():
    assert RLPD(OBS, ACT, RLPDConfig(hidden=(16, 16))).target_entropy == -1.0
    assert SAC(OBS, ACT, SACConfig(hidden=(16, 16))).target_entropy == -2.0


def test_sac_terminal_rows_target_the_reward():
    torch.manual_seed(0)
    agent = SAC(OBS, ACT, SACConfig(hidden=(16, 16)))
    every_row_terminal = transitions(terminated=[1.0] * 8)
    metrics = agent.update(every_row_terminal)
    assert metrics["target_q"] == pytest.approx(every_row_terminal.reward.mean().item(), abs=1e-6)
    no_row_terminal = transitions(terminated=[0.0] * 8)  # the bootstrap is visible
    assert agent.update(no_row_terminal)["target_q"] != pytest.approx(
        no_row_terminal.reward.mean().item(), abs=1e-3
    )


def test_sac_soft_target_hand_computed():
    """target = r + gamma (1 - d) (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(s')
    drawn with the same seed (the critic step's first random draw)."""
    torch.manual_seed(0)
    agent = SAC(OBS, ACT, SACConfig(hidden=(16, 16), init_alpha=5.0, gamma=0.9))
    batch = transitions()
    before = copy.deepcopy(agent)
    torch.manual_seed(1)
    metrics = agent.update(batch)
    torch.manual_seed(1)
    with torch.no_grad():
        next_action, next_log_prob = before.actor(batch.next_obs)
        next_q = before.target_critic(batch.next_obs, next_action).min(0).values
        soft = next_q - 5.0 * next_log_prob
        target = batch.reward + 0.9 * (1 - batch.terminated) * soft
        q = before.critic(batch.obs, batch.action)
    assert metrics["target_q"] == pytest.approx(target.mean().item(), abs=1e-5)
    assert metrics["critic_loss"] == pytest.approx(ensemble_mse(q, target).item(), rel=1e-5)


def test_sac_actor_loss_hand_computed():
    """actor loss = mean(alpha log pi(a|s) - min_i Q_i(s, a)), a ~ pi(s) (the second random
    draw of the update), with the critics after their step."""
    torch.manual_seed(0)
    agent = SAC(OBS, ACT, SACConfig(hidden=(16, 16), policy_frequency=1, init_alpha=0.5))
    batch = transitions()
    before = copy.deepcopy(agent)
    torch.manual_seed(1)
    metrics = agent.update(batch)
    torch.manual_seed(1)
    with torch.no_grad():
        before.actor(batch.next_obs)  # the critic target's draw
        action, log_prob = before.actor(batch.obs)
        q = agent.critic(batch.obs, action).min(0).values  # critics after their step
    expected = (0.5 * log_prob - q).mean().item()
    assert metrics["actor_loss"] == pytest.approx(expected, rel=1e-5, abs=1e-6)


# -- TD3 and TD3+BC -----------------------------------------------------------------------
def test_td3_critic_target_hand_computed():
    """With noise_clip 0 the smoothing noise is clipped away whatever its std: the target
    is r + gamma (1 - d) min_i Q'_i(s', pi'(s')) exactly."""
    torch.manual_seed(0)
    agent = TD3(OBS, ACT, TD3Config(hidden=(16, 16), policy_noise=10.0, noise_clip=0.0,
                                    gamma=0.9))  # fmt: skip
    batch = transitions()
    with torch.no_grad():
        next_q = agent.target_critic(batch.next_obs, agent.target_actor(batch.next_obs))
        target = batch.reward + 0.9 * (1 - batch.terminated) * next_q.min(0).values
        expected = ensemble_mse(agent.critic(batch.obs, batch.action), target).item()
    assert agent.update(batch)["critic_loss"] == pytest.approx(expected, rel=1e-5)


def test_td3_bc_terminal_rows_target_the_reward():
    torch.manual_seed(0)
    agent = TD3BC(OBS, ACT, TD3BCConfig(hidden=(16, 16)))
    batch = transitions(terminated=[1.0] * 8)
    with torch.no_grad():
        q = agent.critic(agent.obs_normalizer(batch.obs), batch.action)
        expected = ensemble_mse(q, batch.reward).item()
    assert agent.update(batch)["critic_loss"] == pytest.approx(expected, rel=1e-5)


# -- IQL ----------------------------------------------------------------------------------
def test_iql_losses_hand_computed():
    """V: expectile tau of min target Q(s, a) - V(s) (tau on positive differences); Q:
    MSE to r + gamma (1 - d) V(s'); weights min(exp(beta (Q - V)), 100)."""
    torch.manual_seed(0)
    cfg = IQLConfig(hidden=(16, 16), expectile=0.9, beta=3.0, gamma=0.9)
    agent = IQL(OBS, ACT, cfg)
    batch = transitions()
    with torch.no_grad():
        obs, next_obs = agent.obs_normalizer(batch.obs), agent.obs_normalizer(batch.next_obs)
        advantage = agent.target_critic(obs, batch.action).min(0).values
        advantage = advantage - agent.value(obs).squeeze(-1)
        side = torch.where(advantage < 0, 0.1, 0.9)
        value_loss = (side * advantage.pow(2)).mean()
        target = batch.reward + 0.9 * (1 - batch.terminated) * agent.value(next_obs).squeeze(-1)
        q = agent.critic(obs, batch.action)
        q_loss = (q - target).pow(2).mean()
        weight = torch.exp(3.0 * advantage).clamp(max=100.0).mean()
    metrics = agent.update(batch)
    assert metrics["value_loss"] == pytest.approx(value_loss.item(), rel=1e-5)
    assert metrics["q_loss"] == pytest.approx(q_loss.item(), rel=1e-5)
    assert metrics["weight"] == pytest.approx(weight.item(), rel=1e-5)


# -- safe RL ------------------------------------------------------------------------------
def test_sac_lag_actor_objective_hand_computed():
    """SAC-Lagrangian's per-row actor loss: (alpha log pi - min Q_r + lambda Q_c) / (1 + lambda)."""
    torch.manual_seed(0)
    agent = SACLag(OBS, ACT, SACLagConfig(hidden=(16, 16), lagrangian_init=2.0))
    batch = transitions()
    sac_loss = torch.randn(8)
    with torch.no_grad():
        q_c = agent.cost_critic(batch.obs, batch.action)[0]
        objective = agent.sac.actor_objective(batch.obs, batch.action, sac_loss)
    torch.testing.assert_close(objective, (sac_loss + 2.0 * q_c) / 3.0)
    assert not torch.allclose(q_c, torch.zeros_like(q_c))


def test_sac_lag_cost_critic_terminal_rows():
    torch.manual_seed(0)
    agent = SACLag(OBS, ACT, SACLagConfig(hidden=(16, 16)))
    batch = transitions(terminated=[1.0] * 8)
    with torch.no_grad():
        expected = (agent.cost_critic(batch.obs, batch.action)[0] - batch.cost).pow(2).mean()
    assert agent.update(batch)["cost_critic_loss"] == pytest.approx(expected.item(), rel=1e-5)


def test_fisor_value_losses_hand_computed():
    """FISOR's V: expectile_loss(min target Q - V, reward_expectile) (IQL's side); V_h:
    expectile_loss(V_h - max target Q_h, cost_expectile), the reversed one (weight
    cost_expectile where V_h > Q_h: V_h tends to a lower expectile of Q_h, the safest
    action's cost value)."""
    torch.manual_seed(0)
    cfg = FISORConfig(hidden=(16, 16), critic_hidden=(16, 16), time_dim=8, batch_size=16,
                      critic_batch_size=16, num_samples=2, reward_expectile=0.8,
                      cost_expectile=0.7)  # fmt: skip
    agent = FISOR(OBS, ACT, cfg)
    batch = transitions(16)
    with torch.no_grad():
        obs = agent.obs_normalizer(batch.obs)
        # shift V and V_h (their output biases) to the median of their targets, so both
        # sides of each expectile occur
        q = agent.target_critic(obs, batch.action).min(0).values
        q_h = agent.target_cost_critic(obs, batch.action).max(0).values
        for net, target in ((agent.value, q), (agent.cost_value, q_h)):
            bias = list(net.parameters())[-1]
            bias += (target - net(obs).squeeze(-1)).median()
        q = agent.target_critic(obs, batch.action).min(0).values
        diff = q - agent.value(obs).squeeze(-1)
        value_loss = (torch.where(diff < 0, 0.2, 0.8) * diff.pow(2)).mean()
        q_h = agent.target_cost_critic(obs, batch.action).max(0).values
        diff_h = agent.cost_value(obs).squeeze(-1) - q_h
        cost_value_loss = (torch.where(diff_h < 0, 0.3, 0.7) * diff_h.pow(2)).mean()
    assert (diff > 0).any() and (diff < 0).any() and (diff_h > 0).any() and (diff_h < 0).any()
    metrics = agent.update(batch)
    assert metrics["value_loss"] == pytest.approx(value_loss.item(), rel=1e-5)
    assert metrics["cost_value_loss"] == pytest.approx(cost_value_loss.item(), rel=1e-5)


# -- on-policy: PPO -----------------------------------------------------------------------
def rollout(agent, n: int = 16, seed: int = 0) -> tuple[RolloutBatch, torch.Tensor]:
    """n rows of random observations with the agent's own samples; advantage +1 on the
    first half, -1 on the second; returns (batch, sign of each row's advantage)."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 3, generator=g)
    torch.manual_seed(seed)
    action, log_prob, value, *channels = agent.explore(obs)
    sign = torch.cat([torch.ones(n // 2), -torch.ones(n - n // 2)])
    batch = RolloutBatch(obs=obs, action=action, log_prob=log_prob, value=value,
                         advantage=sign.clone(), returns=value.clone(),
                         extras=channels[0] if channels else {})  # fmt: skip
    return batch, sign


def assert_direction(before: torch.Tensor, after: torch.Tensor, sign: torch.Tensor) -> None:
    """Positive-advantage rows gained log-probability on average, negative ones lost it
    (a descent step guarantees sum A_i d log pi_i > 0 to first order; each half's sign is
    what a flipped surrogate reverses)."""
    change = after - before
    assert change[sign > 0].mean() > 0 > change[sign < 0].mean(), change


def test_ppo_update_direction():
    torch.manual_seed(0)
    cfg = PPOConfig(hidden=(16, 16), update_epochs=1, num_minibatches=1, lr=1e-2,
                    anneal_lr=False, ent_coef=0.0, max_grad_norm=1e9)  # fmt: skip
    agent = PPO(OBS, ACT, cfg)
    batch, sign = rollout(agent)
    with torch.no_grad():
        before, _ = agent.actor.log_prob_entropy(batch.obs, batch.action)
    agent.update(batch)
    with torch.no_grad():
        after, _ = agent.actor.log_prob_entropy(batch.obs, batch.action)
    torch.testing.assert_close(before, batch.log_prob)  # the rollout's own log-probs
    assert_direction(before, after, sign)


def test_ppo_entropy_bonus_raises_the_std():
    """Zero advantages: only the entropy bonus moves the policy, toward a wider Gaussian."""
    torch.manual_seed(0)
    cfg = PPOConfig(hidden=(16, 16), update_epochs=1, num_minibatches=1, ent_coef=1.0,
                    anneal_lr=False)  # fmt: skip
    agent = PPO(OBS, ACT, cfg)
    batch, _ = rollout(agent)
    batch.advantage.zero_()
    std_before = agent.actor.log_std.exp().mean().item()
    assert agent.update(batch)["std"] > std_before


# -- on-policy: DPPO ----------------------------------------------------------------------
def small_dppo(**kw) -> DPPO:
    settings = {"horizon": H, "hidden": (16, 16, 16), "time_dim": 8, "denoising_steps": 3,
                "finetune_steps": 2, "critic_hidden": (16, 16), "update_epochs": 1,
                "minibatch_size": 10_000, "target_kl": None, "max_grad_norm": 1e9}  # fmt: skip
    return DPPO(OBS, CHUNK_ACT, DPPOConfig(**{**settings, **kw}))


def dppo_chain_log_prob(agent: DPPO, batch: RolloutBatch) -> torch.Tensor:
    """Sum over the fine-tuned steps of the rollout chain's step scores under the actor."""
    obs, chain = agent.obs_normalizer(batch.obs), batch.extras["chain"]
    tuned, first = (
        agent.config.finetune_steps,
        agent.config.denoising_steps - agent.config.finetune_steps,
    )
    total = torch.zeros(len(obs))
    for k in range(tuned):
        mean, std = agent.actor.transition(obs, chain[:, k], first + k, agent.config.std_floor)
        total = total + step_log_prob(chain[:, k + 1], mean, std)
    return total


def test_dppo_step_log_prob_clamps_each_dim():
    x = torch.tensor([[[0.0, 10.0, 0.0]]])
    mean = torch.zeros(1, 1, 3)
    std = torch.tensor([[[0.01, 1.0, 1.0]]])
    # per dim: -log 0.01 - 0.919 = 3.69 -> 2;  -50 - 0.919 -> -5;  -0.919 (inside)
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    expected = (2.0 - 5.0 - half_log_2pi) / 3
    assert step_log_prob(x, mean, std).item() == pytest.approx(expected)


def test_dppo_update_direction():
    torch.manual_seed(0)
    agent = small_dppo(actor_lr=1e-3)
    batch, sign = rollout(agent)
    with torch.no_grad():
        before = dppo_chain_log_prob(agent, batch)
    agent.update(batch)
    with torch.no_grad():
        after = dppo_chain_log_prob(agent, batch)
    torch.testing.assert_close(before, batch.extras["step_log_prob"].sum(-1))
    assert_direction(before, after, sign)


def test_dppo_update_hand_computed():
    """One SGD step of lr 1 (swapped in for Adam) moves the actor by minus the gradient of
    mean over (row, step k) of -A_std(row) * discount^(K' - 1 - k) * ratio: the last
    denoising step has weight 1, earlier ones less (DPPO's denoising discount)."""
    torch.manual_seed(0)
    agent = small_dppo(denoise_discount=0.3, clip_coef=0.2)
    agent.obs_normalizer.fit(torch.randn(64, 3) * 3.0 + 2.0)  # a BC run's statistics
    batch, _ = rollout(agent)
    reference = copy.deepcopy(agent.actor)
    agent.actor_optimizer = torch.optim.SGD(agent.actor.parameters(), lr=1.0)
    cfg, tuned = agent.config, agent.config.finetune_steps
    first = cfg.denoising_steps - tuned
    obs, chain = agent.obs_normalizer(batch.obs), batch.extras["chain"]
    advantage = standardize(batch.advantage.repeat(tuned))  # every (row, k) pair once
    losses = []
    for k in range(tuned):
        mean, std = reference.transition(obs, chain[:, k], first + k, cfg.std_floor)
        log_prob = step_log_prob(chain[:, k + 1], mean, std)
        old = batch.extras["step_log_prob"][:, k]
        weight = 0.3 ** (tuned - 1 - k)
        rows = slice(k * len(obs), (k + 1) * len(obs))
        losses.append(-(advantage[rows] * weight * (log_prob - old).exp()))
    torch.cat(losses).mean().backward()
    agent.update(batch)
    for p_new, p_ref in zip(agent.actor.parameters(), reference.parameters()):
        torch.testing.assert_close(p_new.detach(), (p_ref - p_ref.grad).detach(),
                                   atol=1e-6, rtol=1e-4)  # fmt: skip


# -- on-policy: ReinFlow ------------------------------------------------------------------
def small_reinflow(**kw) -> ReinFlow:
    settings = {"horizon": H, "hidden": (16, 16, 16), "time_dim": 8, "denoising_steps": 3,
                "noise_hidden": (8, 8), "critic_hidden": (16, 16), "update_epochs": 1,
                "num_minibatches": 1, "target_kl": None, "max_grad_norm": 1e9,
                "ent_coef": 0.0}  # fmt: skip
    return ReinFlow(OBS, CHUNK_ACT, ReinFlowConfig(**{**settings, **kw}))


def test_reinflow_chain_log_prob_hand_computed():
    """log N(x_0; 0, I) + sum_k log N(x_{k+1}; clip(x_k + v(x_k, t_k) / K), sigma(x_k, t_k)^2),
    divided by (K + 1) H A: the chain's Euler-step Gaussians, scored one step at a time."""
    torch.manual_seed(0)
    agent = small_reinflow()
    cfg, steps = agent.config, agent.config.denoising_steps
    obs, chain = torch.randn(4, 3), torch.randn(4, steps + 1, H, 2)
    log_prob, _ = agent.chain_log_prob(obs, chain)
    with torch.no_grad():
        total = Normal(0.0, 1.0).log_prob(chain[:, 0]).sum((1, 2))
        for k in range(steps):
            x, t = chain[:, k], torch.full((4,), k / steps)
            mean = x + agent.actor.velocity(obs, x, t) / steps
            if cfg.clip_intermediate:  # the reference clips each step's mean to [-1, 1]
                mean = mean.clamp(-1.0, 1.0)
            std = agent.noise(obs, x, t, cfg.sigma_min, agent.sigma_max)
            total += Normal(mean, std).log_prob(chain[:, k + 1]).sum((1, 2))
    torch.testing.assert_close(log_prob.detach(), total / ((steps + 1) * H * 2))


def test_reinflow_update_direction():
    torch.manual_seed(0)
    agent = small_reinflow(actor_lr=1e-3)
    batch, sign = rollout(agent)
    obs, chain = agent.obs_normalizer(batch.obs), batch.extras["chain"]
    with torch.no_grad():
        before, _ = agent.chain_log_prob(obs, chain)
    agent.update(batch)
    with torch.no_grad():
        after, _ = agent.chain_log_prob(obs, chain)
    torch.testing.assert_close(before, batch.log_prob)
    assert_direction(before, after, sign)


def test_reinflow_entropy_bonus_raises_the_noise():
    """Zero advantages: only the entropy bonus moves the chain, toward wider noise."""
    torch.manual_seed(0)
    agent = small_reinflow(ent_coef=1.0, actor_lr=1e-3)
    batch, _ = rollout(agent)
    batch.advantage.zero_()
    obs, chain = agent.obs_normalizer(batch.obs), batch.extras["chain"]
    with torch.no_grad():
        _, before = agent.chain_log_prob(obs, chain)
    agent.update(batch)
    with torch.no_grad():
        _, after = agent.chain_log_prob(obs, chain)
    assert after > before


# -- generative heads ---------------------------------------------------------------------
def test_flow_loss_hand_computed():
    """Rectified flow: MSE of v(x_t, t) to a - x0 at x_t = (1 - t) x0 + t a."""
    torch.manual_seed(0)
    head = FlowHead(3, 2, horizon=H, steps=2, hidden=(16, 16), time_dim=8)
    obs, actions = torch.randn(5, 3), torch.rand(5, H, 2) * 2 - 1
    torch.manual_seed(1)
    loss = head.loss(obs, actions)
    torch.manual_seed(1)
    x0 = torch.randn_like(actions)
    t = torch.rand(5)
    xt = (1 - t.view(-1, 1, 1)) * x0 + t.view(-1, 1, 1) * actions
    with torch.no_grad():
        expected = (head.velocity(obs, xt, t) - (actions - x0)).pow(2).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


# -- CPO's line search --------------------------------------------------------------------
def test_cpo_line_search_accepts_a_cost_rise_within_the_slack():
    """Feasible (J_c = 0, limit 25: slack 25) with the reward equal to the cost: the
    reward step raises the cost surrogate, by far less than the slack, so the line search
    accepts a step (a bound of 0 instead of the slack would refuse every one)."""
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    agent = CPO(obs_space, ACT, CPOConfig(hidden=(16, 16), update_epochs=1, minibatch_size=64))
    obs = torch.zeros(256, 4)
    action, log_prob, value = agent.explore(obs)
    cost = (action[:, 0] > 0).float()
    buffer = RolloutBuffer(1, 256, (4,), (2,))
    buffer.add(obs, action, log_prob, cost.clone(), value, torch.ones(256), torch.zeros(256),
               torch.zeros(256), costs=(cost, torch.zeros(256), torch.zeros(256)))  # fmt: skip
    agent.record_episode_costs([0.0])
    mean_before = agent.nets.actor.distribution(obs[:1]).mean[0, 0].item()
    metrics = agent.update(buffer.compute(torch.zeros(256), 0.99, 0.95, torch.zeros(256)))
    assert metrics["accepted_step"] > 0
    assert agent.nets.actor.distribution(obs[:1]).mean[0, 0].item() > mean_before  # costlier


# ------------------------------------------------- C51 (FastTD3's distributional critic)
SUPPORT = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0])  # 5 atoms, spacing 1


def project(probs: list[list[float]], reward: list[float], discount: list[float]) -> torch.Tensor:
    return categorical_projection(
        torch.tensor(probs), torch.tensor(reward), torch.tensor(discount), SUPPORT
    )


def test_categorical_projection_splits_mass_between_neighbouring_atoms():
    """z' = r + d z between two atoms: its mass goes to both, in proportion to closeness."""
    one_hot_2 = [0.0, 0.0, 1.0, 0.0, 0.0]
    # 0.5 + 2 = 2.5: half to atom 2, half to atom 3; 0.25 + 2 = 2.25: 3/4 and 1/4
    torch.testing.assert_close(
        project([one_hot_2, one_hot_2], [0.5, 0.25], [1.0, 1.0]),
        torch.tensor([[0.0, 0.0, 0.5, 0.5, 0.0], [0.0, 0.0, 0.75, 0.25, 0.0]]),
        rtol=0, atol=1e-7,
    )  # fmt: skip
    # uniform 0.2 each, r = 0.25, d = 0.5: z' = 0.25, 0.75, 1.25, 1.75, 2.25
    torch.testing.assert_close(
        project([[0.2] * 5], [0.25], [0.5]),
        torch.tensor([[0.2, 0.4, 0.35, 0.05, 0.0]]),
        rtol=0, atol=1e-7,
    )  # fmt: skip


def test_categorical_projection_clips_at_the_support_edges():
    """Targets beyond [v_min, v_max] land on the edge atoms (a landing exactly on an atom,
    the top one included, keeps all of its mass there)."""
    torch.testing.assert_close(
        project(
            [[0.0, 0.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.0, 0.5]],
            [3.5, -2.0, 1.0],
            [1.0, 1.0, 1.0],
        ),
        torch.tensor(
            [[0.0, 0.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.5, 0.0, 0.5]]
        ),
        rtol=0, atol=1e-7,
    )  # fmt: skip


def test_categorical_projection_of_terminal_rows_collapses_to_the_reward():
    """discount 0 (terminated): every atom moves to r, whatever the next distribution."""
    torch.testing.assert_close(
        project([[0.2] * 5, [0.1, 0.2, 0.3, 0.4, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]],
                [1.25, 2.0, 9.0], [0.0, 0.0, 0.0]),
        torch.tensor([[0.0, 0.75, 0.25, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0],
                      [0.0, 0.0, 0.0, 0.0, 1.0]]),
        rtol=0, atol=1e-7,
    )  # fmt: skip


def test_categorical_projection_keeps_each_ensemble_member_apart():
    """(E, B, A) input: each member projected with the same rewards, mass conserved."""
    probs = torch.softmax(torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0)), -1)
    reward, discount = torch.tensor([0.3, -1.0, 2.7, 0.0]), torch.tensor([0.9, 0.9, 0.0, 0.5])
    joint = categorical_projection(probs, reward, discount, SUPPORT)
    for member in range(3):
        alone = categorical_projection(probs[member], reward, discount, SUPPORT)
        torch.testing.assert_close(joint[member], alone)
    torch.testing.assert_close(joint.sum(-1), torch.ones(3, 4))


def test_categorical_cross_entropy_hand_computed():
    """Uniform logits over 5 atoms: -log(1/5) per row whatever the target, summed over
    members; a confident correct member costs ~0."""
    target = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0, 0.0]])
    uniform = torch.zeros(2, 2, 5)
    assert categorical_cross_entropy(uniform, target).item() == pytest.approx(2 * math.log(5))
    sure = torch.tensor([[0.0, 50.0, 0.0, 0.0, 0.0]]).expand(2, 5)  # all mass on atom 1
    logits = torch.stack([sure, torch.zeros(2, 5)])  # member 0 sure, member 1 uniform
    one_row = target[:1].expand(2, 5)
    assert categorical_cross_entropy(logits, one_row).item() == pytest.approx(math.log(5), abs=1e-5)
    # a per-member target (E, B, A)
    per_member = torch.stack([target, target])
    assert categorical_cross_entropy(uniform, per_member).item() == pytest.approx(2 * math.log(5))
