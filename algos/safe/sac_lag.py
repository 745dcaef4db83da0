"""SAC-Lagrangian: SAC on the Lagrangian of a constrained MDP, max J_r s.t. J_c <= limit.

Papers: T. Haarnoja et al., "Soft Actor-Critic Algorithms and Applications",
arXiv:1812.05905; Q. Yang et al., "WCSAC: Worst-Case Soft Actor Critic for Safety-Constrained
Reinforcement Learning" (AAAI 2021) and Ha et al., "Learning to Walk in the Real World with
Minimal Human Effort" (CoRL 2020) for the Lagrangian SAC. Defaults are OmniSafe's
``SACLag.yaml`` (J. Ji et al., "OmniSafe", JMLR 2024), whose numbers we compare with.

On top of SAC (``rlcore.algos.sac.SAC``, composed, fixed temperature alpha = 0.2):
* a cost critic Q_c(s, a) (one network, its own Polyak target), regressed on
  c + gamma (1 - terminated) Q_c'(s', mu(s')) with mu the policy's deterministic action;
* the actor minimises (alpha log pi(a|s) - min Q_r(s, a) + lambda Q_c(s, a)) / (1 + lambda);
* lambda (``rlcore.safe.LagrangeMultiplier``, Adam lr 1e-5) takes one projected step per
  update with J_c = mean cost of the last ``cost_window`` episodes, once
  ``multiplier_delay`` updates have passed (OmniSafe: 100 epochs of 2,000 steps).

Departures from OmniSafe: costs are not normalised (OmniSafe ``cost_normalize: True``
scales them by a running std); the critics' gradients are not clipped (OmniSafe: norm 40);
the policy delay is SAC's here (every 2 critic steps, 2 actor steps; OmniSafe: 1 actor step
every 2); orthogonal / PyTorch-default initialisation (OmniSafe: kaiming-uniform); the
temperature and critic learning rates follow OmniSafe (3e-4), not CleanRL's SAC.
The policy's log-std is squashed by tanh into [-5, 2] (algos/sac.py; OmniSafe clips it):
actor 5.8e-3, critics 5.1e-3 apart after 10 updates from equal weights and draws
(tests/golden/sac_lag.json). OmniSafe Polyak-averages all targets only on actor steps;
here every critic step is followed by its Polyak average (compared line by line; with
policy delay 1 on both sides the update matches within 1.5e-7, docs/PARITY.md).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlcore.agent_state import Plumbing
from rlcore.algos.sac import SAC, SACConfig
from rlcore.capabilities import CostRecorder
from rlcore.nets import QEnsemble, polyak_update
from rlcore.plan import EnvRecipe, RunPlan, Schedule
from rlcore.safe import MULTIPLIERS, EpisodeCostWindow, make_multiplier
from rlcore.types import Batch
from rlcore.utils import adam, ensure_finite, frozen


@dataclass
class SACLagConfig:
    """SAC-Lagrangian hyper-parameters (OmniSafe ``SACLag.yaml``)."""

    cost_limit: float = 25.0  # constraint on the mean episode cost
    multiplier: str = "lagrange"  # "lagrange" (projected gradient) | "pid"
    lagrangian_init: float = 1e-3  # initial lambda
    lambda_lr: float = 1e-5  # Adam learning rate of lambda ("lagrange"), one step per update
    multiplier_delay: int = 190_000  # updates before lambda moves (OmniSafe: 100 epochs)
    cost_window: int = 10  # J_c = mean cost of this many last episodes
    gamma: float = 0.99  # discount of reward and cost
    tau: float = 0.005  # Polyak rate of the target critics
    actor_lr: float = 3e-4  # policy learning rate
    critic_lr: float = 3e-4  # reward and cost critics' learning rate
    alpha: float = 0.2  # fixed temperature
    hidden: tuple[int, ...] = (256, 256)  # hidden widths of actor and critics
    policy_frequency: int = 2  # critic updates per burst of actor updates
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 256  # transitions per update
    buffer_size: int = 1_000_000  # replay capacity
    learning_starts: int = 10_000  # uniform random actions and no updates before this step
    updates_per_step: float = 1.0  # gradient updates per env step
    total_steps: int = 1_000_000  # OmniSafe's budget

    def __post_init__(self) -> None:
        if self.multiplier not in MULTIPLIERS:
            raise ValueError(f"multiplier={self.multiplier!r}: choose from {MULTIPLIERS}")
        if self.cost_limit < 0:
            raise ValueError(f"cost_limit={self.cost_limit} must be >= 0")

    def plan(self) -> RunPlan:
        """Online from scratch on a task with costs (the buffer keeps them)."""
        schedule = Schedule(
            online_steps=self.total_steps, batch_size=self.batch_size,
            buffer_size=self.buffer_size, learning_starts=self.learning_starts,
            updates_per_step=self.updates_per_step,
        )  # fmt: skip
        return RunPlan(schedule, EnvRecipe(cost=True), gamma=self.gamma)


class SACLag:
    """SAC-Lagrangian agent: ``act``, ``record_episode_costs``, ``update(batch)`` (a batch
    with ``cost``), ``state_dict``."""

    CAPABILITIES = (CostRecorder,)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: SACLagConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = cfg = config or SACLagConfig()
        self.plumbing = io = Plumbing(observation_space, action_space, device)  # SAC checks
        self.device = io.device
        sac_config = SACConfig(
            gamma=cfg.gamma, tau=cfg.tau, actor_lr=cfg.actor_lr, critic_lr=cfg.critic_lr,
            hidden=cfg.hidden, init_alpha=cfg.alpha, autotune_alpha=False,
            policy_frequency=cfg.policy_frequency, batch_size=cfg.batch_size,
        )  # fmt: skip
        self.sac = SAC(
            observation_space, action_space, sac_config, device, actor_objective=self._lagrangian
        )
        self.cost_critic = QEnsemble(io.obs_dim, io.action_dim, 1, cfg.hidden).to(self.device)
        self.target_cost_critic = copy.deepcopy(self.cost_critic).requires_grad_(False)
        self.cost_optimizer = adam(self.cost_critic.parameters(), cfg.critic_lr)
        self.multiplier = make_multiplier(
            cfg.multiplier, cfg.cost_limit, cfg.lagrangian_init, cfg.lambda_lr
        )
        self.episode_costs = EpisodeCostWindow(cfg.cost_window)
        self.act = self.sac.act
        self.parts = io.declare(
            counters={"updates": int}, sac=self.sac, cost_critic=self.cost_critic,
            target_cost_critic=self.target_cost_critic, cost_optimizer=self.cost_optimizer,
            multiplier=self.multiplier, episode_costs=self.episode_costs,
        )  # fmt: skip
        self.updates = 0

    def record_episode_costs(self, costs: list[float]) -> None:
        """Finished episodes' summed costs (the loops call this): J_c's window."""
        self.episode_costs.add(costs)

    def _lagrangian(
        self, obs: torch.Tensor, action: torch.Tensor, sac_loss: torch.Tensor
    ) -> torch.Tensor:
        """(alpha log pi - min Q_r + lambda Q_c) / (1 + lambda), per row."""
        lam = self.multiplier.value
        return (sac_loss + lam * self.cost_critic(obs, action)[0]) / (1.0 + lam)

    def update(self, batch: Batch) -> dict[str, float]:
        """Cost-critic step, SAC's update (reward critics, then the actor every
        ``policy_frequency`` calls) and, after ``multiplier_delay`` updates, a lambda step."""
        cfg = self.config
        if batch.cost is None:
            raise ValueError(
                "SAC-Lagrangian needs batches with costs (a buffer with a cost channel)"
            )
        with torch.no_grad():
            next_action, _ = self.sac.actor(batch.next_obs, deterministic=True)
            next_q = self.target_cost_critic(batch.next_obs, next_action)[0]
            target = batch.cost + cfg.gamma * (1.0 - batch.terminated) * next_q
        q_cost = self.cost_critic(batch.obs, batch.action)[0]
        cost_loss = nn.functional.mse_loss(q_cost, target)
        ensure_finite(cost_critic_loss=cost_loss)
        self.cost_optimizer.zero_grad()
        cost_loss.backward()
        self.cost_optimizer.step()
        polyak_update(self.target_cost_critic, self.cost_critic, cfg.tau)
        with frozen(list(self.cost_critic.parameters())):  # the actor's lambda Q_c term
            metrics = self.sac.update(batch)
        self.updates += 1
        episode_cost = self.episode_costs.mean()
        if self.updates > cfg.multiplier_delay and np.isfinite(episode_cost):
            self.multiplier.update(episode_cost)
        return {
            **metrics,
            "cost_critic_loss": cost_loss.item(),
            "q_cost": q_cost.detach().mean().item(),
            "lagrange_multiplier": self.multiplier.value,
            "episode_cost_window": episode_cost,
        }

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
