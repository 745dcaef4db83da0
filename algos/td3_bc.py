"""TD3+BC: TD3 with a behaviour-cloning term in the actor loss, for offline RL.

Paper: S. Fujimoto, S. S. Gu, "A Minimalist Approach to Offline Reinforcement Learning",
NeurIPS 2021 (arXiv:2106.06860). Defaults follow CORL's ``td3_bc.py`` (D4RL locomotion):
256x256 networks, lr 3e-4, batch 256, target noise 0.2 clipped at 0.5, policy delay 2,
alpha 2.5, states standardised with the dataset's mean and std (+1e-3), 1M steps.

Actor loss: -lambda * mean Q1(s, pi(s)) + mean (pi(s) - a)^2, lambda = alpha / mean|Q1|
(detached). Critic: TD3's clipped double-Q target with target policy smoothing.

Departures from the paper: none in the maths. The twin critics are one batched
ensemble; the actor step evaluates only the first critic; critic parameters get no
gradients in the actor step (speed only). Opt-in ``precision="bf16"``: hidden-layer
matmuls in bfloat16 autocast, everything else float32 (a speed mode, not in the paper).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import torch

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.capabilities import ActionValue, StateStatistics
from rlcore.nets import DeterministicActor, ObsNormalizer, QEnsemble, polyak_update
from rlcore.plan import DataRecipe, RunPlan, Schedule
from rlcore.speed import resolve_speed_modes
from rlcore.td3_step import critic_step, smoothed_target_q, td_target
from rlcore.types import Batch
from rlcore.utils import (
    adam,
    frozen,
    mixed_precision,
    step_summed,
)


@dataclass
class TD3BCConfig:
    """TD3+BC hyper-parameters (CORL defaults)."""

    gamma: float = 0.99  # discount
    tau: float = 0.005  # Polyak rate of target actor and critics
    actor_lr: float = 3e-4  # policy learning rate
    critic_lr: float = 3e-4  # Q learning rate
    hidden: tuple[int, ...] = (256, 256)  # hidden widths of actor and critics
    num_critics: int = 2  # critics; the target uses their minimum
    layer_norm: bool = False  # LayerNorm in the critics
    policy_noise: float = 0.2  # target smoothing noise std (x action half-range)
    noise_clip: float = 0.5  # clip of the smoothing noise (x action half-range)
    policy_frequency: int = 2  # critic updates per actor + target update
    alpha: float = 2.5  # weight of the RL term against behaviour cloning
    normalize_states: bool = True  # standardise observations with dataset statistics
    normalize_reward_by_returns: bool = False  # r * 1000 / (max - min dataset episode return)
    fused_optimizer: bool = True  # fused Adam kernel (same maths, faster)
    precision: str = "float32"  # "bf16": updates' matmuls in bfloat16 autocast (speed mode)
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 256  # transitions per gradient step
    total_steps: int = 1_000_000  # gradient steps

    def plan(self) -> RunPlan:
        """Offline gradient steps only."""
        data = DataRecipe(normalize_reward_by_returns=self.normalize_reward_by_returns,
                          normalize_states=self.normalize_states, required=True)  # fmt: skip
        schedule = Schedule(offline_steps=self.total_steps, batch_size=self.batch_size)
        return RunPlan(schedule, data=data, gamma=self.gamma, precision=self.precision)


class TD3BC:
    """TD3+BC agent: ``act``, ``update(batch)``, ``state_dict`` / ``load_state_dict``."""

    CAPABILITIES = (StateStatistics, ActionValue)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: TD3BCConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        # effective precision: float32, with one warning, where bf16 would be emulated
        self.config = config = resolve_speed_modes(config or TD3BCConfig(), device)
        self.plumbing = io = Plumbing(observation_space, action_space, device, "TD3+BC")
        self.device = io.device
        self.obs_normalizer = ObsNormalizer(io.obs_dim)
        self.actor = DeterministicActor(io.obs_dim, io.action_dim, io.low, io.high, config.hidden)
        self.critic = QEnsemble(
            io.obs_dim, io.action_dim, config.num_critics, config.hidden,
            layer_norm=config.layer_norm,
        )  # fmt: skip
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        fused = config.fused_optimizer
        self.actor_optimizer = adam(self.actor.parameters(), config.actor_lr, fused)
        self.critic_optimizer = adam(self.critic.parameters(), config.critic_lr, fused)
        self._critic_params = list(self.critic.parameters())
        self.low, self.high = io.bounds()
        self.parts = io.declare(
            counters={"updates": int}, obs_normalizer=self.obs_normalizer, actor=self.actor,
            critic=self.critic, target_actor=self.target_actor, target_critic=self.target_critic,
            actor_optimizer=self.actor_optimizer, critic_optimizer=self.critic_optimizer,
        )  # fmt: skip
        self.updates = 0

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Policy action for raw observation(s). The policy is deterministic (no
        exploration noise offline), so ``deterministic`` is ignored."""
        return self.actor(self.obs_normalizer(obs))

    def action_value(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Mean of the critics' Q(s, a) for raw observations (B,), differentiable in both
        (an adversarial dataset corruption attacks it: rlcore.offline.corruption)."""
        return self.critic(self.obs_normalizer(obs), action).mean(0)

    def policy_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The greedy action for raw observations, differentiable in them."""
        return self.actor(self.obs_normalizer(obs))

    def update(self, batch: Batch) -> dict[str, float]:
        """One critic step; actor (TD3 + BC) and targets every ``policy_frequency`` steps."""
        cfg = self.config
        obs, next_obs = self.obs_normalizer(batch.obs), self.obs_normalizer(batch.next_obs)
        _, next_q = smoothed_target_q(
            self.target_actor, self.target_critic, next_obs, self.low, self.high,
            cfg.policy_noise, cfg.noise_clip, cfg.precision,
        )  # fmt: skip
        target_q = td_target(batch.reward, batch.terminated, cfg.gamma, next_q)
        critic_loss, q = critic_step(
            self.critic, self.critic_optimizer, obs, batch.action, target_q, cfg.precision
        )
        self.updates += 1
        metrics = {"critic_loss": critic_loss.item(), "q": q.detach().mean().item()}

        if self.updates % cfg.policy_frequency == 0:
            with frozen(self._critic_params):
                with mixed_precision(cfg.precision, self.device):
                    action = self.actor(obs)
                    q1 = self.critic(obs, action, members=slice(0, 1))[0]
                    lam = cfg.alpha / q1.abs().mean().detach()
                    bc_loss = (action - batch.action).pow(2).mean()
                    actor_loss = -lam * q1.mean() + bc_loss
                step_summed({"actor_loss": actor_loss}, [self.actor_optimizer])
            polyak_update(self.target_actor, self.actor, cfg.tau)
            polyak_update(self.target_critic, self.critic, cfg.tau)
            metrics.update(actor_loss=actor_loss.item(), bc_loss=bc_loss.item())
        return metrics

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
