"""Twin Delayed DDPG (TD3).

Paper: S. Fujimoto, H. van Hoof, D. Meger, "Addressing Function Approximation Error in
Actor-Critic Methods", ICML 2018 (arXiv:1802.09477).
Defaults follow CleanRL's ``td3_continuous_action.py`` for MuJoCo (lr 3e-4, batch 256,
target noise 0.2 clipped at 0.5, exploration noise 0.1, 25k random warm-up steps,
policy delay 2, tau 0.005).

Departures from the paper:
* Learning rate 3e-4 and 256x256 networks (CleanRL) instead of 1e-3 and 400x300.
* The twin critics are one batched ensemble (identical maths); the actor loss uses
  the first critic only, evaluated alone.
* ``target_clip`` (off by default; not in the paper): the TD target clamped to
  [low, high], OpenAI baselines' HER ``clip_return`` (algos/sac.py has the same option).
* Speed, not maths: critic parameters get no gradients in the actor step, acting runs
  without autograd, Adam uses the fused step.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import torch

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.losses import check_target_clip, clip_target
from rlcore.nets import DeterministicActor, QEnsemble, polyak_update
from rlcore.plan import RunPlan, Schedule
from rlcore.td3_step import critic_step, smoothed_target_q, td_target
from rlcore.types import Batch
from rlcore.utils import adam, frozen, step_summed


@dataclass
class TD3Config:
    """TD3 hyper-parameters (CleanRL MuJoCo defaults)."""

    gamma: float = 0.99  # discount
    tau: float = 0.005  # Polyak rate of target actor and critics
    actor_lr: float = 3e-4  # policy learning rate
    critic_lr: float = 3e-4  # Q learning rate
    hidden: tuple[int, ...] = (256, 256)  # hidden widths of actor and critics
    num_critics: int = 2  # critics in the ensemble; the target uses their minimum
    layer_norm: bool = False  # LayerNorm in the critics
    policy_noise: float = 0.2  # std of target-policy smoothing noise (x action scale)
    noise_clip: float = 0.5  # clip of the smoothing noise (x action scale)
    exploration_noise: float = 0.1  # std of Gaussian exploration noise (x action scale)
    policy_frequency: int = 2  # critic updates per actor + target update
    fused_optimizer: bool = True  # fused Adam kernel (same maths, faster)
    target_clip: tuple[float, float] | None = None  # [low, high] clamp of the TD target
    # in-agent observation standardisation (rlcore.agent_state.Plumbing): dict parts one by
    # one, goals with the achieved goals' statistics; transitions are stored raw (HER)
    normalize_obs: bool = False  # running statistics of the update batches' observations
    clip_obs: float = 5.0  # clip of the standardised observation (OpenAI baselines' HER: 5)
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 256  # transitions per update
    buffer_size: int = 1_000_000  # replay capacity
    learning_starts: int = 25_000  # uniform random actions and no updates before this step
    updates_per_step: float = 1.0  # update-to-data ratio
    total_steps: int = 1_000_000  # default training length in env steps

    def __post_init__(self) -> None:
        check_target_clip(self.target_clip)

    def plan(self) -> RunPlan:
        """Online from scratch: random actions until ``learning_starts``, then updates."""
        schedule = Schedule(
            online_steps=self.total_steps, batch_size=self.batch_size,
            buffer_size=self.buffer_size, learning_starts=self.learning_starts,
            updates_per_step=self.updates_per_step,
        )  # fmt: skip
        return RunPlan(schedule, gamma=self.gamma)


class TD3:
    """TD3 agent: ``act``, ``update(batch)``, ``state_dict`` / ``load_state_dict``."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: TD3Config | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = config = config or TD3Config()
        self.plumbing = io = Plumbing(
            observation_space, action_space, device, "TD3",
            normalize_obs=config.normalize_obs, clip_obs=config.clip_obs,
        )  # fmt: skip
        self.device = io.device
        self.actor = DeterministicActor(io.obs_dim, io.action_dim, io.low, io.high, config.hidden)
        self.critic = QEnsemble(
            io.obs_dim, io.action_dim, config.num_critics, config.hidden,
            layer_norm=config.layer_norm,
        )  # fmt: skip
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = adam(
            self.actor.parameters(), config.actor_lr, config.fused_optimizer
        )
        self.critic_optimizer = adam(
            self.critic.parameters(), config.critic_lr, config.fused_optimizer
        )
        self._critic_params = list(self.critic.parameters())
        self.low, self.high = io.bounds()
        self.parts = io.declare(
            counters={"updates": int}, actor=self.actor, critic=self.critic,
            target_actor=self.target_actor, target_critic=self.target_critic,
            actor_optimizer=self.actor_optimizer, critic_optimizer=self.critic_optimizer,
        )  # fmt: skip
        self.updates = 0

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Policy action plus Gaussian exploration noise (none if deterministic), clipped."""
        action = self.actor(self.plumbing.standardize(obs))
        if not deterministic:
            scale = self.actor.to_env.scale
            action = action + torch.randn_like(action) * scale * self.config.exploration_noise
            action = torch.clamp(action, self.low, self.high)
        return action

    def update(self, batch: Batch) -> dict[str, float]:
        """One critic update; actor and targets every ``policy_frequency`` updates."""
        cfg = self.config
        batch = self.plumbing.standardized_batch(batch)  # normalize_obs: statistics, then inputs
        _, next_q = smoothed_target_q(
            self.target_actor, self.target_critic, batch.next_obs, self.low, self.high,
            cfg.policy_noise, cfg.noise_clip,
        )  # fmt: skip
        target_q = td_target(batch.reward, batch.terminated, cfg.gamma, next_q)
        target_q = clip_target(target_q, cfg.target_clip)  # None: no clip
        critic_loss, q = critic_step(
            self.critic, self.critic_optimizer, batch.obs, batch.action, target_q
        )
        self.updates += 1
        metrics = {"critic_loss": critic_loss.item(), "q": q.detach().mean().item()}

        if self.updates % cfg.policy_frequency == 0:
            with frozen(self._critic_params):  # gradients flow through Q1 to actions only
                q1 = self.critic(batch.obs, self.actor(batch.obs), members=slice(0, 1))
                actor_loss = -q1.mean()
                step_summed({"actor_loss": actor_loss}, [self.actor_optimizer])
            polyak_update(self.target_actor, self.actor, cfg.tau)
            polyak_update(self.target_critic, self.critic, cfg.tau)
            metrics["actor_loss"] = actor_loss.item()
        return metrics

    def state_dict(self) -> dict:
        """Networks, targets, optimisers and update counter (everything to continue)."""
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
