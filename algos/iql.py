"""Implicit Q-Learning (IQL), offline.

Paper: I. Kostrikov, A. Nair, S. Levine, "Offline Reinforcement Learning with Implicit
Q-Learning", ICLR 2022 (arXiv:2110.06169). Defaults follow CORL's ``iql.py`` (D4RL
locomotion): 256x256 networks, lr 3e-4 with the actor's cosine-annealed to 0, batch 256,
beta 3, expectile 0.7, tau 0.005, advantage weights clamped at 100, Gaussian actor with
a state-independent log-std in [-20, 2] and tanh on the mean, states standardised.
Per-dataset overrides live in configs (e.g. hopper-medium: deterministic actor, tau
0.001, reward normalisation).

One update, in order: (1) V(s') for the Q target, before anything changes; (2) V by
expectile regression toward min target Q(s, a); (3) twin Q toward r + gamma V(s');
(4) Polyak target Q; (5) actor by advantage-weighted regression,
min(exp(beta (Q - V)), 100) times -log pi(a|s) (or ||pi(s) - a||^2 when deterministic).

Departures from the paper: the Q loss is the mean (not the sum) of the two critics'
MSEs, as in CORL; the twin critics are one batched ensemble. Opt-in ``precision="bf16"``
runs the hidden layers' matmuls in bfloat16 autocast (output layers, parameters,
optimiser state and losses stay float32): a speed mode, not in the paper.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rlcore.losses import cosine_lr, ensemble_mse, expectile_loss, set_lr, weight_diagnostics
from rlcore.nets import (
    MLP,
    DeterministicActor,
    GaussianActor,
    ObsNormalizer,
    QEnsemble,
    polyak_update,
)
from rlcore.spaces import require_box_actions
from rlcore.speed import resolve_speed_modes
from rlcore.types import Batch
from rlcore.utils import (
    adam,
    batched_obs,
    ensure_finite,
    load_state_into,
    mixed_precision,
    state_of,
)


@dataclass
class IQLConfig:
    """IQL hyper-parameters (CORL defaults)."""

    gamma: float = 0.99  # discount
    tau: float = 0.005  # Polyak rate of the target critics
    actor_lr: float = 3e-4  # policy learning rate (cosine-annealed to 0 over total_steps)
    critic_lr: float = 3e-4  # Q learning rate
    value_lr: float = 3e-4  # V learning rate
    hidden: tuple[int, ...] = (256, 256)  # hidden widths of all networks
    beta: float = 3.0  # inverse temperature of the advantage weights
    expectile: float = 0.7  # expectile of the value regression
    max_weight: float = 100.0  # clamp of exp(beta * advantage)
    deterministic_actor: bool = False  # ||pi(s) - a||^2 regression instead of a Gaussian
    normalize_states: bool = True  # standardise observations with dataset statistics
    normalize_reward: bool = False  # r * 1000 / (max - min episode return)
    fused_optimizer: bool = True  # fused Adam kernel (same maths, faster)
    precision: str = "float32"  # "bf16": updates' matmuls in bfloat16 autocast (speed mode)
    # loop settings (read by rlcore.loops.offline through rlcore.train)
    batch_size: int = 256  # transitions per gradient step
    total_steps: int = 1_000_000  # gradient steps (also the cosine schedule length)


class IQL:
    """IQL agent: ``act``, ``update(batch)``, ``state_dict`` / ``load_state_dict``."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: IQLConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        # effective precision: float32, with one warning, where bf16 would be emulated
        self.config = config = resolve_speed_modes(config or IQLConfig(), device)
        require_box_actions(action_space, "IQL")
        self.device = torch.device(device)
        obs_dim = int(np.prod(observation_space.shape))
        action_dim = int(np.prod(action_space.shape))
        low, high = action_space.low, action_space.high
        self.obs_normalizer = ObsNormalizer(obs_dim).to(self.device)
        if config.deterministic_actor:
            self.actor = DeterministicActor(obs_dim, action_dim, low, high, config.hidden)
        else:
            self.actor = GaussianActor(
                obs_dim, action_dim, config.hidden, "relu", 0.0, tanh_mean=True,
                action_low=low, action_high=high, log_std_bounds=(-20.0, 2.0), orthogonal=False,
            )  # fmt: skip
        self.actor.to(self.device)
        self.critic = QEnsemble(obs_dim, action_dim, 2, config.hidden).to(self.device)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.value = MLP(obs_dim, 1, config.hidden).to(self.device)
        fused = config.fused_optimizer
        self.actor_optimizer = adam(self.actor.parameters(), config.actor_lr, fused)
        self.critic_optimizer = adam(self.critic.parameters(), config.critic_lr, fused)
        self.value_optimizer = adam(self.value.parameters(), config.value_lr, fused)
        self.low = torch.as_tensor(low, dtype=torch.float32, device=self.device)
        self.high = torch.as_tensor(high, dtype=torch.float32, device=self.device)
        self.updates = 0

    def act(self, obs: np.ndarray | torch.Tensor, deterministic: bool = False) -> np.ndarray:
        """Action for raw observation(s), clipped to the box: a sample from the Gaussian
        policy, or its mean when ``deterministic``. With ``deterministic_actor`` the policy
        has no noise and the flag is ignored."""
        with torch.inference_mode():
            obs_t, single = batched_obs(obs, self.device)
            obs_t = self.obs_normalizer(obs_t)
            if self.config.deterministic_actor:
                action = self.actor(obs_t)
            else:
                action, _ = self.actor(obs_t, deterministic=deterministic)
            action = torch.clamp(action, self.low, self.high).cpu().numpy()
        return action[0] if single else action

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.config
        obs, next_obs = self.obs_normalizer(batch.obs), self.obs_normalizer(batch.next_obs)
        with mixed_precision(cfg.precision, self.device):
            with torch.no_grad():
                next_v = self.value(next_obs).squeeze(-1)
                target_q = self.target_critic(obs, batch.action).min(0).values
            value = self.value(obs).squeeze(-1)
            advantage = target_q - value
            value_loss = expectile_loss(advantage, cfg.expectile)
        ensure_finite(value_loss=value_loss)
        self.value_optimizer.zero_grad()
        value_loss.backward()
        self.value_optimizer.step()

        q_target = batch.reward + cfg.gamma * (1.0 - batch.terminated) * next_v
        with mixed_precision(cfg.precision, self.device):
            q = self.critic(obs, batch.action)
            q_loss = ensemble_mse(q, q_target) / q.shape[0]
        ensure_finite(q_loss=q_loss)
        self.critic_optimizer.zero_grad()
        q_loss.backward()
        self.critic_optimizer.step()
        polyak_update(self.target_critic, self.critic, cfg.tau)

        weight = torch.exp(cfg.beta * advantage.detach()).clamp(max=cfg.max_weight)
        with mixed_precision(cfg.precision, self.device):
            if cfg.deterministic_actor:
                regression = (self.actor(obs) - batch.action).pow(2).sum(-1)
            else:
                regression = -self.actor.distribution(obs).log_prob(batch.action).sum(-1)
            actor_loss = (weight * regression).mean()
        ensure_finite(actor_loss=actor_loss)
        set_lr(self.actor_optimizer, cosine_lr(cfg.actor_lr, self.updates, cfg.total_steps))
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()
        self.updates += 1
        return {
            "value_loss": value_loss.item(),
            "q_loss": q_loss.item(),
            "actor_loss": actor_loss.item(),
            "advantage": advantage.detach().mean().item(),
            "q": q.detach().mean().item(),
            **weight_diagnostics(weight, cfg.max_weight),
        }

    def _parts(self) -> dict:
        return {
            "obs_normalizer": self.obs_normalizer,
            "actor": self.actor,
            "critic": self.critic,
            "target_critic": self.target_critic,
            "value": self.value,
            "actor_optimizer": self.actor_optimizer,
            "critic_optimizer": self.critic_optimizer,
            "value_optimizer": self.value_optimizer,
        }

    def state_dict(self) -> dict:
        return {**state_of(**self._parts()), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        load_state_into(state, **self._parts())
        self.updates = int(state["updates"])
