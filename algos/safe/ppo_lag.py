"""PPO-Lagrangian: PPO on the Lagrangian of a constrained MDP, max J_r s.t. J_c <= limit.

Papers: A. Ray, J. Achiam, D. Amodei, "Benchmarking Safe Exploration in Deep Reinforcement
Learning" (OpenAI, 2019), the PPO-Lagrangian baseline; J. Schulman et al., "Proximal Policy
Optimization Algorithms", arXiv:1707.06347. Defaults are OmniSafe's ``PPOLag.yaml``
(J. Ji et al., "OmniSafe: An Infrastructure for Accelerating Safe Reinforcement Learning
Research", JMLR 2024), the implementation whose published numbers we compare with.

One update (one rollout, OmniSafe's "epoch"):
1. lambda takes one step with J_c, the mean cost of the last ``cost_window`` episodes
   (``rlcore.safe``: projected Adam on -lambda (J_c - cost_limit), or PID with
   ``multiplier=pid``).
2. Advantages: GAE of reward and of cost (gamma = gamma_c = 0.99, lambda 0.95); the reward
   advantage is standardised over the rollout, the cost advantage centred.
3. ``update_epochs`` passes of minibatches of ``minibatch_size``: V_r and V_c regress on
   their GAE targets (MSE + 0.001 L2 on the weights, gradient norm clipped at 40), then the
   actor takes a clipped-surrogate step on A = (A_r - lambda A_c) / (1 + lambda). After each
   pass the KL from the rollout's policy to the new one over the whole rollout is measured;
   above ``target_kl`` the update stops.

Departures from OmniSafe: orthogonal initialisation (OmniSafe: kaiming-uniform); the
rollout is ``rollout_steps`` x ``env.num_envs`` (OmniSafe: 20,000 steps of 1 env, the
default here); a truncated episode bootstraps V(final observation) for reward and cost
alike (``rlcore.buffers.compute_gae``), where OmniSafe bootstraps the value of the last
observation of a time-limited episode too. OmniSafe's ``std_range`` [0.5, 0.1] is used
only with ``exploration_noise_anneal``, off in ``PPOLag.yaml``: the log-std is learned
from 0, as there. Advantages are standardised with the sample std (torch's ``std``,
ddof 1); OmniSafe divides by the population std (ddof 0): losses 2.9e-4, actor 1.1e-6 apart
after 2 rollouts (tests/golden/ppo_lag.json; aligned, within 1.1e-7, docs/PARITY.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlcore.agent_state import Parts, Plumbing
from rlcore.buffers import minibatch_indices
from rlcore.capabilities import CostCritic, CostRecorder, OnPolicy
from rlcore.losses import clipped_surrogate, standardize
from rlcore.plan import EnvRecipe, Returns, RunPlan, Schedule
from rlcore.safe import (
    MULTIPLIERS,
    ConstrainedActorCritic,
    EpisodeCostWindow,
    make_multiplier,
)
from rlcore.types import RolloutBatch
from rlcore.utils import ensure_finite


@dataclass
class PPOLagConfig:
    """PPO-Lagrangian hyper-parameters (OmniSafe ``PPOLag.yaml``)."""

    cost_limit: float = 25.0  # constraint on the mean episode cost
    multiplier: str = "lagrange"  # "lagrange" (projected gradient) | "pid"
    lagrangian_init: float = 1e-3  # initial lambda
    lambda_lr: float = 0.035  # Adam learning rate of lambda ("lagrange")
    cost_window: int = 100  # J_c = mean cost of this many last episodes
    actor_lr: float = 3e-4  # actor learning rate, decayed linearly to 0 over the run
    critic_lr: float = 3e-4  # V_r and V_c learning rate (constant)
    gamma: float = 0.99  # reward discount
    gae_lambda: float = 0.95  # reward GAE lambda
    cost_gamma: float = 0.99  # cost discount
    cost_gae_lambda: float = 0.95  # cost GAE lambda
    update_epochs: int = 40  # passes over each rollout (OmniSafe update_iters)
    minibatch_size: int = 64  # rows per gradient step
    clip_coef: float = 0.2  # policy ratio clip
    target_kl: float = 0.02  # stop the passes once the rollout's KL exceeds this
    max_grad_norm: float = 40.0  # gradient norm clip of each network
    critic_l2_coef: float = 0.001  # L2 penalty on the critics' weights
    hidden: tuple[int, ...] = (64, 64)  # hidden widths of actor and critics
    activation: str = "tanh"  # hidden activation
    init_log_std: float = 0.0  # initial policy log-std (learned)
    # env-side recipe settings (applied by rlcore.train when building the envs)
    normalize_obs: bool = True  # running observation standardisation
    normalize_reward: bool = False  # OmniSafe: off
    # loop settings
    rollout_steps: int = 20_000  # env steps per sub-env between updates
    total_steps: int = 10_000_000  # OmniSafe's budget

    def __post_init__(self) -> None:
        if self.multiplier not in MULTIPLIERS:
            raise ValueError(f"multiplier={self.multiplier!r}: choose from {MULTIPLIERS}")
        if self.cost_limit < 0:
            raise ValueError(f"cost_limit={self.cost_limit} must be >= 0")

    def plan(self) -> RunPlan:
        """Rollouts on a task with costs (V_c and the cost's GAE in the rollout)."""
        schedule = Schedule(online_steps=self.total_steps, rollout_steps=self.rollout_steps)
        env = EnvRecipe(normalize_obs=self.normalize_obs, normalize_reward=self.normalize_reward,
                        reward_gamma=self.gamma, cost=True)  # fmt: skip
        returns = Returns(self.gamma, self.gae_lambda, self.cost_gamma, self.cost_gae_lambda)
        return RunPlan(schedule, env, returns=returns, gamma=self.gamma)


class PPOLag:
    """PPO-Lagrangian agent: ``act``, ``explore``, ``value``, ``cost_value``,
    ``record_episode_costs``, ``update(rollout)``, ``state_dict``."""

    CAPABILITIES = (OnPolicy, CostCritic, CostRecorder)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: PPOLagConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.plumbing = io = Plumbing(observation_space, action_space, device, "PPO-Lagrangian")
        self.device = io.device
        self.config = cfg = config or PPOLagConfig()
        self.nets = ConstrainedActorCritic(
            io.obs_dim, io.action_dim, cfg.hidden, cfg.activation, cfg.init_log_std
        ).to(self.device)
        self.actor_optimizer = torch.optim.Adam(self.nets.actor.parameters(), lr=cfg.actor_lr)
        self.critic_optimizers = self.nets.critic_optimizers(cfg.critic_lr)
        self.multiplier = make_multiplier(
            cfg.multiplier, cfg.cost_limit, cfg.lagrangian_init, cfg.lambda_lr
        )
        self.episode_costs = EpisodeCostWindow(cfg.cost_window)
        self.act, self.explore = self.nets.act, self.nets.explore
        self.value, self.cost_value = self.nets.value, self.nets.cost_value
        self.parts = io.declare(
            counters={"updates": int}, nets=self.nets, actor_optimizer=self.actor_optimizer,
            multiplier=self.multiplier, episode_costs=self.episode_costs,
            critic_optimizers=Parts(**self.critic_optimizers),
        )  # fmt: skip
        self.updates = 0

    def record_episode_costs(self, costs: list[float]) -> None:
        """Finished episodes' summed costs (the loops call this): J_c's window."""
        self.episode_costs.add(costs)

    def update(self, batch: RolloutBatch, progress: float = 0.0) -> dict[str, float]:
        """lambda step, then ``update_epochs`` passes of critic and actor minibatch steps.
        ``progress`` in [0, 1) is the fraction of training done (actor lr decay)."""
        cfg, actor = self.config, self.nets.actor
        if batch.cost_advantage is None:
            raise ValueError("PPO-Lagrangian needs the rollout's cost advantages (a cost task)")
        episode_cost = self.episode_costs.mean()
        if np.isfinite(episode_cost):  # no episode has finished yet: keep lambda
            self.multiplier.update(episode_cost)
        lam = self.multiplier.value
        for group in self.actor_optimizer.param_groups:
            group["lr"] = cfg.actor_lr * (1.0 - progress)
        reward_advantage = standardize(batch.advantage)
        cost_advantage = batch.cost_advantage - batch.cost_advantage.mean()
        advantage = (reward_advantage - lam * cost_advantage) / (1.0 + lam)
        with torch.no_grad():
            old = actor.distribution(batch.obs)
        n, epochs, kl = len(batch), 0, 0.0
        losses: dict[str, float] = {}
        for _ in range(cfg.update_epochs):
            for rows in minibatch_indices(n, cfg.minibatch_size, self.device):
                obs = batch.obs[rows]
                losses["value_loss"], losses["cost_value_loss"] = self.nets.fit_critics(
                    self.critic_optimizers,
                    obs,
                    batch.returns[rows],
                    batch.cost_returns[rows],
                    cfg.critic_l2_coef,
                    cfg.max_grad_norm,
                )
                log_prob, _ = actor.log_prob_entropy(obs, batch.action[rows])
                policy_loss, _, _ = clipped_surrogate(
                    log_prob - batch.log_prob[rows], advantage[rows], cfg.clip_coef
                )
                ensure_finite(policy_loss=policy_loss)
                self.actor_optimizer.zero_grad()
                policy_loss.backward()
                nn.utils.clip_grad_norm_(actor.parameters(), cfg.max_grad_norm)
                self.actor_optimizer.step()
                losses["policy_loss"] = policy_loss.item()
            epochs += 1
            with torch.no_grad():
                new = actor.distribution(batch.obs)
                kl = old.kl(new).mean().item()
            if kl > cfg.target_kl:
                break
        self.updates += 1
        return {
            **losses,
            "lagrange_multiplier": lam,
            "episode_cost_window": episode_cost,
            "approx_kl": kl,
            "update_epochs": float(epochs),
            "std": actor.log_std.exp().mean().item(),
            "cost_value": batch.cost_value.mean().item(),
        }

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
