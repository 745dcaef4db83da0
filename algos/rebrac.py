"""ReBRAC: TD3+BC with behaviour-cloning penalties in both the actor and the critic.

Paper: D. Tarasov, V. Kurenkov, A. Nikulin, S. Kolesnikov, "Revisiting the Minimalist
Approach to Offline Reinforcement Learning", NeurIPS 2023 (arXiv:2305.09836). Defaults
follow CORL's ``rebrac.py`` (D4RL locomotion): actor and critic 3x256 with hidden blocks
Linear -> ReLU -> LayerNorm (LayerNorm in the critics only), EDAC initialisation (hidden
biases 0.1, output layers U(+-1e-3) actor / U(+-3e-3) critic), lr 1e-3, batch 1024,
target noise 0.2 clipped at 0.5, policy delay 2, actor and critic BC coefficients 1
(per-dataset values in configs), Q-normalised actor loss, raw states, 1M steps.

Critic (every update), a' = clip(pi_target(s') + clip(N(0, 0.2^2), +-0.5), box):
  y = r + gamma (1 - terminated) (min_i Q_target_i(s', a') - critic_bc_coef ||a' - a'_data||^2)
  loss = sum over critics of the batch-mean squared error to y.
Actor (updates 0, policy_frequency, 2 policy_frequency, ...: counted from 0 as CORL does,
so the first update includes an actor step), with the just-updated critics:
  loss = mean(actor_bc_coef ||pi(s) - a||^2 - lambda min_i Q_i(s, pi(s))),
  lambda = 1 / mean|min_i Q_i(s, pi(s))| (detached) with ``normalize_q``, else 1.
Polyak updates of the target actor and critics follow each actor step.

Departures from the paper / CORL:
- a'_data is the next row's data action of the same episode; on an episode's last row
  (``extras["has_next_action"] == 0``) there is none and the critic penalty is zeroed
  there. CORL skips timeout rows and pairs terminal rows with the next episode's first
  action, where (1 - terminated) cancels the penalty anyway.
- Actions and both BC penalties are in environment units (CORL's D4RL boxes are
  [-1, 1], where the two agree); target noise is scaled by the action half-range.
- The target actor is Polyak-averaged toward the actor *after* its step (as TD3 does);
  CORL's JAX code averages toward the actor parameters from before that step.
- LayerNorm epsilon is PyTorch's 1e-5 (Flax: 1e-6). The twin critics are one batched
  ensemble; critic parameters get no gradients in the actor step (speed only).
- ``reward_scale`` / ``reward_bias`` apply r <- scale r + bias to the dataset (CORL's
  antmaze ``normalize_reward`` is r * 100); ``normalize_reward_by_returns`` is the library's
  locomotion normalisation (CORL's ReBRAC has none for locomotion).
- Opt-in ``precision="bf16"``: hidden-layer matmuls in bfloat16 autocast (output layers,
  parameters, optimiser state and losses float32); a speed mode, ~2x per step on CPUs
  with AMX.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import torch

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.capabilities import ActionValue, StateStatistics
from rlcore.nets import DeterministicActor, ObsNormalizer, QEnsemble, edac_init, polyak_update
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
class ReBRACConfig:
    """ReBRAC hyper-parameters (CORL defaults)."""

    gamma: float = 0.99  # discount
    tau: float = 0.005  # Polyak rate of target actor and critics
    actor_lr: float = 1e-3  # policy learning rate
    critic_lr: float = 1e-3  # Q learning rate
    hidden: tuple[int, ...] = (256, 256, 256)  # hidden widths of actor and critics
    num_critics: int = 2  # critics; targets and the actor use their minimum
    actor_layer_norm: bool = False  # LayerNorm after each hidden activation of the actor
    critic_layer_norm: bool = True  # LayerNorm after each hidden activation of the critics
    policy_noise: float = 0.2  # target smoothing noise std (x action half-range)
    noise_clip: float = 0.5  # clip of the smoothing noise (x action half-range)
    policy_frequency: int = 2  # actor + target update on updates 0, f, 2f, ...
    actor_bc_coef: float = 1.0  # weight of ||pi(s) - a||^2 in the actor loss
    critic_bc_coef: float = 1.0  # weight of ||a' - a'_data||^2 subtracted from the target Q
    normalize_q: bool = True  # scale the actor's Q term by 1 / mean|Q| (detached)
    normalize_states: bool = False  # standardise observations with dataset statistics
    normalize_reward_by_returns: bool = False  # r * 1000 / (max - min dataset episode return)
    reward_scale: float = 1.0  # dataset and online rewards r <- reward_scale * r + reward_bias
    reward_bias: float = 0.0  # (antmaze recipe: reward_scale 100)
    fused_optimizer: bool = True  # fused Adam kernel (same maths, faster)
    precision: str = "float32"  # "bf16": updates' matmuls in bfloat16 autocast (speed mode)
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 1024  # transitions per gradient step
    total_steps: int = 1_000_000  # gradient steps

    def plan(self) -> RunPlan:
        """Offline gradient steps only."""
        data = DataRecipe(normalize_reward_by_returns=self.normalize_reward_by_returns,
                          reward_scale=self.reward_scale, reward_bias=self.reward_bias,
                          normalize_states=self.normalize_states, required=True)  # fmt: skip
        schedule = Schedule(offline_steps=self.total_steps, batch_size=self.batch_size)
        return RunPlan(schedule, data=data, gamma=self.gamma, precision=self.precision)


class ReBRAC:
    """ReBRAC agent: ``act``, ``update(batch)``, ``state_dict`` / ``load_state_dict``.

    Batches must carry ``extras["next_action"]`` and ``extras["has_next_action"]``
    (offline datasets' ``sample`` provides them)."""

    CAPABILITIES = (StateStatistics, ActionValue)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: ReBRACConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        # effective precision: float32, with one warning, where bf16 would be emulated
        self.config = config = resolve_speed_modes(config or ReBRACConfig(), device)
        self.plumbing = io = Plumbing(observation_space, action_space, device, "ReBRAC")
        self.device = io.device
        self.obs_normalizer = ObsNormalizer(io.obs_dim)
        self.actor = DeterministicActor(
            io.obs_dim, io.action_dim, io.low, io.high, config.hidden,
            layer_norm=config.actor_layer_norm, norm_after_activation=True,
        )  # fmt: skip
        self.critic = QEnsemble(
            io.obs_dim, io.action_dim, config.num_critics, config.hidden,
            layer_norm=config.critic_layer_norm, norm_after_activation=True,
        )  # fmt: skip
        edac_init(self.actor.net, output_bound=1e-3)
        edac_init(self.critic.net, output_bound=3e-3)
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
        """One critic step; actor and targets on updates 0, f, 2f, ... (f = policy_frequency)."""
        cfg = self.config
        obs, next_obs = self.obs_normalizer(batch.obs), self.obs_normalizer(batch.next_obs)
        next_action, next_q = smoothed_target_q(
            self.target_actor, self.target_critic, next_obs, self.low, self.high,
            cfg.policy_noise, cfg.noise_clip, cfg.precision,
        )  # fmt: skip
        # the critic's BC penalty, zero on rows without a next data action
        next_bc = (next_action - batch.extras["next_action"]).pow(2).sum(-1)
        next_bc = next_bc * batch.extras["has_next_action"]
        next_q = next_q - cfg.critic_bc_coef * next_bc
        target_q = td_target(batch.reward, batch.terminated, cfg.gamma, next_q)
        critic_loss, q = critic_step(
            self.critic, self.critic_optimizer, obs, batch.action, target_q, cfg.precision
        )
        actor_step = self.updates % cfg.policy_frequency == 0
        self.updates += 1
        metrics = {
            "critic_loss": critic_loss.item(),
            "q": q.detach().mean().item(),
            "critic_bc": next_bc.mean().item(),
        }

        if actor_step:
            with frozen(self._critic_params):
                with mixed_precision(cfg.precision, self.device):
                    action = self.actor(obs)
                    q_pi = self.critic(obs, action).min(0).values
                    lam = 1.0 / q_pi.abs().mean().detach() if cfg.normalize_q else 1.0
                    bc = (action - batch.action).pow(2).sum(-1)
                    actor_loss = (cfg.actor_bc_coef * bc - lam * q_pi).mean()
                step_summed({"actor_loss": actor_loss}, [self.actor_optimizer])
            polyak_update(self.target_actor, self.actor, cfg.tau)
            polyak_update(self.target_critic, self.critic, cfg.tau)
            metrics.update(actor_loss=actor_loss.item(), bc_loss=bc.mean().item())
        return metrics

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
