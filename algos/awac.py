"""AWAC: advantage-weighted actor-critic, offline.

Paper: A. Nair, A. Gupta, M. Dalal, S. Levine, "AWAC: Accelerating Online Reinforcement
Learning with Offline Datasets", arXiv:2006.09359 (2020). Defaults follow CORL's offline
``awac.py`` (D4RL locomotion): actor and two critics with 3 hidden layers of 256 (ReLU,
PyTorch default initialisation), lr 3e-4 for all networks, batch 256, gamma 0.99, tau
0.005, lambda 1 (per-dataset values in configs, e.g. hopper-medium 0.3333), weights
clamped at 100, states standardised with the dataset's mean and std (+1e-3), 1M steps.
The actor is a Gaussian with an unbounded mean and a state-independent log-std (init 0,
clamped to [-20, 2]); its samples are clamped to the action box; evaluation uses the mean
clipped to the box.

One update, in order:
(1) critics: a' ~ pi(s') (clamped), y = r + gamma (1 - terminated) min_i Q_target_i(s', a'),
    loss = sum over the two critics of the batch-mean squared error;
(2) actor, with the just-updated critics: V(s) = min_i Q_i(s, a~pi(s)) (one clamped sample),
    A = min_i Q_i(s, a) - V(s), w = min(exp(A / lambda), 100) (no gradient),
    loss = -mean(w log pi(a | s)) over the dataset actions a;
(3) Polyak update of the target critics (no target actor).

Departures from the paper / CORL: offline only (the paper's online fine-tuning phase is
not part of this agent's loop); the normaliser Z(s) of the weights is dropped, as in the
paper's practical algorithm and CORL. The twin critics are one batched ensemble with one
Adam (the same maths as CORL's two optimisers). ``reward_scale`` / ``reward_bias``
apply r <- scale r + bias to the dataset (CORL's antmaze ``normalize_reward`` is r - 1).
Opt-in ``precision="bf16"``: hidden-layer matmuls in bfloat16 autocast, everything else
float32 (a speed mode, not in the paper).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import torch

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.capabilities import ActionValue, StateStatistics
from rlcore.losses import ensemble_mse, weight_diagnostics
from rlcore.nets import GaussianActor, ObsNormalizer, QEnsemble, polyak_update
from rlcore.plan import DataRecipe, RunPlan, Schedule
from rlcore.speed import resolve_speed_modes
from rlcore.types import Batch
from rlcore.utils import (
    adam,
    ensure_finite,
    mixed_precision,
)


@dataclass
class AWACConfig:
    """AWAC hyper-parameters (CORL defaults)."""

    gamma: float = 0.99  # discount
    tau: float = 0.005  # Polyak rate of the target critics (every update)
    actor_lr: float = 3e-4  # policy learning rate
    critic_lr: float = 3e-4  # Q learning rate
    hidden: tuple[int, ...] = (256, 256, 256)  # hidden widths of actor and critics
    awac_lambda: float = 1.0  # temperature of the advantage weights exp(A / lambda)
    exp_adv_max: float = 100.0  # clamp of the advantage weights
    normalize_states: bool = True  # standardise observations with dataset statistics
    normalize_reward_by_returns: bool = False  # r * 1000 / (max - min dataset episode return)
    reward_scale: float = 1.0  # dataset and online rewards r <- reward_scale * r + reward_bias
    reward_bias: float = 0.0  # (antmaze recipe: reward_bias -1)
    fused_optimizer: bool = True  # fused Adam kernel (same maths, faster)
    precision: str = "float32"  # "bf16": updates' matmuls in bfloat16 autocast (speed mode)
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 256  # transitions per gradient step
    total_steps: int = 1_000_000  # gradient steps

    def plan(self) -> RunPlan:
        """Offline gradient steps only."""
        data = DataRecipe(normalize_reward_by_returns=self.normalize_reward_by_returns,
                          reward_scale=self.reward_scale, reward_bias=self.reward_bias,
                          normalize_states=self.normalize_states, required=True)  # fmt: skip
        schedule = Schedule(offline_steps=self.total_steps, batch_size=self.batch_size)
        return RunPlan(schedule, data=data, gamma=self.gamma, precision=self.precision)


class AWAC:
    """AWAC agent: ``act``, ``update(batch)``, ``state_dict`` / ``load_state_dict``."""

    CAPABILITIES = (StateStatistics, ActionValue)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: AWACConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        # effective precision: float32, with one warning, where bf16 would be emulated
        self.config = config = resolve_speed_modes(config or AWACConfig(), device)
        self.plumbing = io = Plumbing(observation_space, action_space, device, "AWAC")
        self.device = io.device
        self.obs_normalizer = ObsNormalizer(io.obs_dim)
        self.actor = GaussianActor(
            io.obs_dim, io.action_dim, config.hidden, "relu", 0.0, tanh_mean=False,
            log_std_bounds=(-20.0, 2.0), orthogonal=False,
        )  # fmt: skip
        self.critic = QEnsemble(io.obs_dim, io.action_dim, 2, config.hidden)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        fused = config.fused_optimizer
        self.actor_optimizer = adam(self.actor.parameters(), config.actor_lr, fused)
        self.critic_optimizer = adam(self.critic.parameters(), config.critic_lr, fused)
        self.low, self.high = io.bounds()
        self.parts = io.declare(
            counters={"updates": int}, obs_normalizer=self.obs_normalizer, actor=self.actor,
            critic=self.critic, target_critic=self.target_critic,
            actor_optimizer=self.actor_optimizer, critic_optimizer=self.critic_optimizer,
        )  # fmt: skip
        self.updates = 0

    def _sample(self, obs: torch.Tensor) -> torch.Tensor:
        """One policy sample per (normalised) observation, clamped to the action box."""
        return torch.clamp(self.actor.distribution(obs).sample(), self.low, self.high)

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Action for raw observation(s), clipped to the box: a sample from the Gaussian
        policy, or its mean when ``deterministic``."""
        obs = self.obs_normalizer(obs)
        if deterministic:
            return torch.clamp(self.actor.distribution(obs).mean, self.low, self.high)
        return self._sample(obs)

    def action_value(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Mean of the critics' Q(s, a) for raw observations (B,), differentiable in both
        (an adversarial dataset corruption attacks it: rlcore.offline.corruption)."""
        return self.critic(self.obs_normalizer(obs), action).mean(0)

    def policy_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The greedy action for raw observations, differentiable in them."""
        mean = self.actor.distribution(self.obs_normalizer(obs)).mean
        return torch.clamp(mean, self.low, self.high)

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.config
        obs, next_obs = self.obs_normalizer(batch.obs), self.obs_normalizer(batch.next_obs)
        with mixed_precision(cfg.precision, self.device):
            with torch.no_grad():
                next_q = self.target_critic(next_obs, self._sample(next_obs)).min(0).values
                target_q = batch.reward + cfg.gamma * (1.0 - batch.terminated) * next_q
            q = self.critic(obs, batch.action)
            critic_loss = ensemble_mse(q, target_q)
        ensure_finite(critic_loss=critic_loss)
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()

        with mixed_precision(cfg.precision, self.device):
            with torch.no_grad():
                value = self.critic(obs, self._sample(obs)).min(0).values
                advantage = self.critic(obs, batch.action).min(0).values - value
                weight = torch.exp(advantage / cfg.awac_lambda).clamp(max=cfg.exp_adv_max)
            log_prob = self.actor.distribution(obs).log_prob(batch.action).sum(-1)
            actor_loss = -(weight * log_prob).mean()
        ensure_finite(actor_loss=actor_loss)
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()
        polyak_update(self.target_critic, self.critic, cfg.tau)
        self.updates += 1
        return {
            "critic_loss": critic_loss.item(),
            "actor_loss": actor_loss.item(),
            "q": q.detach().mean().item(),
            "advantage": advantage.mean().item(),
            **weight_diagnostics(weight, cfg.exp_adv_max),
        }

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
