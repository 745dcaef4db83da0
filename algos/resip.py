"""Residual policy learning on a frozen diffusion policy (ResiP), trained with PPO.

Paper: L. Ankile, A. Simeonov, I. Shenfeld, M. Torne, P. Agrawal, "From Imitation to
Refinement -- Residual RL for Precise Assembly", arXiv:2407.16677 (2024).

The base is a DDPM action-chunk policy pre-trained by ``algo=diffusion_bc``
(``algo.pretrained=<run dir or .pt>``), frozen: it is asked for a chunk of H actions
when an env's previous chunk is used up or its episode restarts, and the chunk runs
open loop (``rlcore.generative.ChunkQueue``). Every env step a closed-loop residual MLP
(2x256) sees [standardised state, current base action] and outputs a Gaussian with a
fixed log-std of -1; the executed action is base + 0.1 x residual in normalised action
units [-1, 1], clipped there and mapped to the env's box. The residual's last layer
has no bias and starts at zero, so before the first update the executed action is the
base action plus 0.1 x the Gaussian's noise around a zero mean (and exactly the base
action when acting deterministically). PPO on the residual's samples: gamma 0.999,
lambda 0.95, clip 0.2, stop an update's epochs at approx-KL > 0.1, actor lr 3e-4,
critic (2x256) lr 5e-3 cosine-annealed to 0, AdamW, standardised advantages, reward
normalisation clipped at 5, gradient-norm clip 1.0.

Departures from the paper:
* The base acts on its zero-noise sampling path (the same as ``algo=diffusion_bc``'s
  deterministic evaluation) in training and evaluation alike; exploration comes from
  the residual only.
* States are standardised with the behaviour-cloning dataset's statistics (frozen).
* Epochs / minibatches are CleanRL's PPO values (10 x 32); the actor's learning rate is
  constant.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlcore.buffers import minibatch_indices
from rlcore.generative import SCHEDULES, ChunkQueue, DDPMHead, policy_parts
from rlcore.losses import clipped_surrogate, cosine_lr, set_lr, standardize
from rlcore.nets import MLP, DiagNormal, orthogonal_init
from rlcore.spaces import require_box_actions
from rlcore.types import RolloutBatch
from rlcore.utils import batched_obs, clipped_step, load_state_into, state_of


@dataclass
class ResiPConfig:
    """ResiP's PPO settings (the paper's defaults)."""

    pretrained: str | None = None  # run dir / .pt of an algo=diffusion_bc run
    # base head settings: must equal the pre-trained run's (checked when loading it)
    horizon: int = 4
    obs_history: int = 1  # observations the policy sees (the BC run's)
    denoising_steps: int = 20
    schedule: str = "cosine"
    clip_x0: float | None = 1.0
    hidden: tuple[int, ...] = (512, 512, 512)
    time_dim: int = 16
    # residual policy
    residual_hidden: tuple[int, ...] = (256, 256)
    critic_hidden: tuple[int, ...] = (256, 256)
    residual_scale: float = 0.1  # executed = base + scale * residual (normalised units)
    log_std: float = -1.0  # fixed log-std of the residual's Gaussian
    # PPO
    actor_lr: float = 3e-4
    critic_lr: float = 5e-3  # cosine-annealed to 0 over the run
    gamma: float = 0.999
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    vf_coef: float = 0.5
    update_epochs: int = 10
    num_minibatches: int = 32
    target_kl: float | None = 0.1
    max_grad_norm: float = 1.0
    # env-side settings (rlcore.train)
    normalize_obs: bool = False  # the pre-trained standardisation is used instead
    normalize_reward: bool = True  # clipped at env.clip_reward (5 in the paper)
    rollout_steps: int = 1000  # env steps per sub-env between updates
    total_steps: int = 1_000_000

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r}: choose from {SCHEDULES}")


class _ResidualPolicy:
    """A stateful evaluation policy: its own open-loop base queue, the residual's mean."""

    def __init__(self, agent: ResiP) -> None:
        self.agent, self.queue = agent, ChunkQueue()

    def episodes_started(self, mask: np.ndarray) -> None:
        self.queue.restart(mask)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():  # not inference mode: the queue is updated in place later
            norm = self.agent.obs_normalizer(torch.as_tensor(obs, dtype=torch.float32,
                                                             device=self.agent.device))  # fmt: skip
            base = self.queue.next(norm, self.agent.base_chunk)
            mean = self.agent.residual_mean(norm, base)
            return self.agent.executed(base, mean).cpu().numpy()


class ResiP:
    """ResiP agent: ``act``, ``explore``, ``value``, ``update``, ``episodes_started``,
    ``eval_policy``, ``state_dict``."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: ResiPConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        require_box_actions(action_space, "ResiP")
        self.config = config = config or ResiPConfig()
        self.device = torch.device(device)
        obs_dim = int(np.prod(observation_space.shape))
        action_dim = int(action_space.shape[-1])
        head, self.obs_normalizer, self.box = policy_parts(
            "ddpm", observation_space, action_space, config, self.device
        )
        self.base: DDPMHead = head
        self.base.requires_grad_(False)
        self.residual = MLP(obs_dim + action_dim, action_dim, config.residual_hidden, "tanh")
        orthogonal_init(self.residual)
        last = nn.Linear(config.residual_hidden[-1], action_dim, bias=False)
        nn.init.zeros_(last.weight)  # training starts exactly at the base policy
        self.residual[-1] = last
        self.residual.to(self.device)
        self.critic = MLP(obs_dim, 1, config.critic_hidden, "tanh").to(self.device)
        orthogonal_init(self.critic)
        orthogonal_init(self.critic[-1], gain=1.0)
        self.std = torch.tensor(float(np.exp(config.log_std)), device=self.device)
        self.actor_optimizer = torch.optim.AdamW(self.residual.parameters(), config.actor_lr)
        self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), config.critic_lr)
        self.queue = ChunkQueue()  # the training envs' open-loop base chunks
        self.updates = 0

    # -- the policy -----------------------------------------------------------------
    def base_chunk(self, norm_obs: torch.Tensor) -> torch.Tensor:
        """The frozen base's chunk (B, H, A) in normalised units (zero-noise path)."""
        return self.base.sample(norm_obs, noise_scale=0.0)

    def residual_mean(self, norm_obs: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        return self.residual(torch.cat([norm_obs, base], -1))

    def executed(self, base: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """Env action of base + scale * residual (normalised units, clipped to [-1, 1])."""
        unit = (base + self.config.residual_scale * residual).clamp(-1.0, 1.0)
        return self.box.to_env(unit)

    def episodes_started(self, mask: np.ndarray) -> None:
        """Training envs in ``mask`` start a new episode: a fresh base chunk next step."""
        self.queue.restart(mask)

    def eval_policy(self) -> _ResidualPolicy:
        """A deterministic policy with its own base queue (evaluation's envs)."""
        return _ResidualPolicy(self)

    def act(self, obs: np.ndarray | torch.Tensor, deterministic: bool = False) -> np.ndarray:
        """One action per observation from a FRESH base chunk (its first action): for a
        single decision. Rollouts go through ``explore`` / ``eval_policy``, which run
        each base chunk open loop."""
        with torch.inference_mode():
            obs_t, single = batched_obs(obs, self.device)
            norm = self.obs_normalizer(obs_t)
            base = self.base_chunk(norm)[:, 0]
            mean = self.residual_mean(norm, base)
            residual = mean if deterministic else mean + self.std * torch.randn_like(mean)
            action = self.executed(base, residual).cpu().numpy()
        return action[0] if single else action

    @torch.no_grad()
    def explore(
        self, obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Executed action, the residual sample's log-probability, V(s), and the rollout
        channels ``base_action`` and ``residual`` (normalised units)."""
        norm = self.obs_normalizer(obs.float())
        base = self.queue.next(norm, self.base_chunk)
        dist = DiagNormal(self.residual_mean(norm, base), self.std.expand(base.shape))
        residual = dist.sample()
        log_prob = dist.log_prob(residual).sum(-1)
        value = self.critic(norm).squeeze(-1)
        channels = {"base_action": base, "residual": residual}
        return self.executed(base, residual), log_prob, value, channels

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.obs_normalizer(obs.float())).squeeze(-1)

    # -- learning -------------------------------------------------------------------
    def update(self, batch: RolloutBatch, progress: float = 0.0) -> dict[str, float]:
        """PPO epochs on the residual and the critic."""
        cfg = self.config
        set_lr(self.critic_optimizer, cosine_lr(cfg.critic_lr, int(progress * 1e6), 1_000_000))
        rows = len(batch)
        minibatch = max(1, rows // cfg.num_minibatches)
        norm_obs = self.obs_normalizer(batch.obs)
        base, residual = batch.extras["base_action"], batch.extras["residual"]
        stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "approx_kl": [],
                                         "clip_fraction": []}  # fmt: skip
        for _ in range(cfg.update_epochs):
            for idx in minibatch_indices(rows, minibatch, self.device):
                obs = norm_obs[idx]
                dist = DiagNormal(
                    self.residual_mean(obs, base[idx]), self.std.expand(base[idx].shape)
                )
                log_prob = dist.log_prob(residual[idx]).sum(-1)
                policy_loss, approx_kl, clip_frac = clipped_surrogate(
                    log_prob - batch.log_prob[idx], standardize(batch.advantage[idx]), cfg.clip_coef
                )
                value_loss = 0.5 * (self.critic(obs).squeeze(-1) - batch.returns[idx]).pow(2).mean()
                loss = policy_loss + cfg.vf_coef * value_loss
                clipped_step(loss, [(self.actor_optimizer, list(self.residual.parameters())),
                                    (self.critic_optimizer, list(self.critic.parameters()))],
                             cfg.max_grad_norm)  # fmt: skip
                for key, value in (("policy_loss", policy_loss), ("value_loss", value_loss),
                                   ("approx_kl", approx_kl), ("clip_fraction", clip_frac)):  # fmt: skip
                    stats[key].append(value.item())
            if cfg.target_kl is not None and approx_kl.item() > cfg.target_kl:
                break
        self.updates += 1
        return {k: float(np.mean(v)) for k, v in stats.items()}

    def _parts(self) -> dict:
        return {"base": self.base, "residual": self.residual, "critic": self.critic,
                "obs_normalizer": self.obs_normalizer, "actor_optimizer": self.actor_optimizer,
                "critic_optimizer": self.critic_optimizer}  # fmt: skip

    def state_dict(self) -> dict:
        return {**state_of(**self._parts(), queue=self.queue), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        load_state_into(state, **self._parts())
        self.queue.load_state_dict(state["queue"])
        self.updates = int(state["updates"])
