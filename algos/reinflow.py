"""ReinFlow: PPO fine-tuning of a pre-trained flow-matching action-chunk policy with a
learned noise network.

Paper: T. Zhang, C. Yu, S. Su, Y. Wang, "ReinFlow: Fine-tuning Flow Matching Policy with
Online Reinforcement Learning", arXiv:2505.22094 (2025).

The policy is a 1-rectified-flow velocity field v(x, t, s) pre-trained by
``algo=flow_bc`` (``algo.pretrained=<run dir or .pt>``). Fine-tuning adds a noise network
sigma(s, x, t) (MLP 64x64 tanh) that turns the K Euler steps into a Gaussian Markov chain

    x_0 ~ N(0, I),   x_{k+1} ~ N(x_k + v(x_k, t_k, s) / K, sigma(s, x_k, t_k)^2),

on the grid t_k = k / K, the same grid for acting and for log-probabilities. The chain's
exact log-likelihood (the initial Gaussian plus the K transitions), divided by (K + 1)
and by the chunk's H x A dims, gives ONE PPO ratio per env step (a chunk); the
executed chunk is x_K clipped to [-1, 1]. The noise network's log-variance is squashed
into [log sigma_min^2, log sigma_max^2]; sigma_max is held for ``noise_hold`` of the
iterations, then cosine-annealed to sigma_min + ``noise_decay`` x (sigma_max -
sigma_min), as the reference schedule does. Entropy bonus: the mean entropy of the
chain's Gaussians (coefficient 0.03). Defaults follow the paper's Hopper settings:
K = 4, H = 4, sigma in [0.10, 0.24], clip 0.01, value coefficient 0.5.

Departures from the paper:
* The noise network's input is [standardised obs, x_k, t_k] directly (the reference
  feeds it the velocity network's time and observation embeddings).
* The critic is a 3x256 Mish MLP; gradients are clipped at norm 1.0 per network;
  advantages are standardised per minibatch. Learning rates, epochs and minibatches
  are DPPO's Gym values (actor 1e-4, critic 1e-3), not tuned for ReinFlow.
* Observations keep the behaviour-cloning run's standardisation (dataset mean / std).
* Intermediate samples x_1 .. x_{K-1} are not clipped (the reference can clip them to
  the action range); only the executed chunk x_K is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlcore.buffers import minibatch_indices
from rlcore.generative import FlowHead, gaussian_log_prob, policy_parts
from rlcore.losses import clipped_surrogate, standardize
from rlcore.nets import MLP
from rlcore.spaces import require_box_actions
from rlcore.types import RolloutBatch
from rlcore.utils import adam, batched_obs, clipped_step, load_state_into, state_of


@dataclass
class ReinFlowConfig:
    """ReinFlow fine-tuning (the paper's Hopper settings)."""

    pretrained: str | None = None  # run dir / .pt of an algo=flow_bc run
    # head settings: must equal the pre-trained run's (checked when loading it)
    horizon: int = 4  # actions per chunk, executed open loop
    obs_history: int = 1  # observations the policy sees (the BC run's)
    denoising_steps: int = 4  # K Euler steps
    hidden: tuple[int, ...] = (512, 512, 512)
    time_dim: int = 16
    # noise network and its range
    noise_hidden: tuple[int, ...] = (64, 64)  # tanh MLP
    sigma_min: float = 0.10
    sigma_max: float = 0.24  # 0.08 / 0.16 on Ant and Humanoid in the paper
    noise_hold: float = 0.35  # fraction of iterations at sigma_max ...
    noise_decay: float = 0.7  # ... then cosine to sigma_min + noise_decay (max - min)
    # PPO
    actor_lr: float = 1e-4  # velocity field and noise network (DPPO's value)
    critic_lr: float = 1e-3  # (DPPO's value)
    critic_hidden: tuple[int, ...] = (256, 256, 256)  # Mish MLP
    gamma: float = 0.99  # discount per chunk
    gae_lambda: float = 0.95
    clip_coef: float = 0.01
    ent_coef: float = 0.03
    vf_coef: float = 0.5
    update_epochs: int = 10
    num_minibatches: int = 25
    target_kl: float | None = 1.0
    max_grad_norm: float = 1.0
    fused_optimizer: bool = True
    # env-side settings (rlcore.train)
    normalize_obs: bool = False  # the pre-trained standardisation is used instead
    normalize_reward: bool = True
    rollout_steps: int = 500  # chunks per sub-env between updates
    total_steps: int = 1_000_000  # chunks, all sub-envs

    def __post_init__(self) -> None:
        if not 0 < self.sigma_min <= self.sigma_max:
            raise ValueError(
                f"need 0 < sigma_min ({self.sigma_min}) <= sigma_max ({self.sigma_max})"
            )

    @property
    def env_chunk(self) -> int:
        """Actions per env step of the training env (rlcore.train builds it chunked)."""
        return self.horizon


class NoiseNetwork(nn.Module):
    """sigma(s, x_k, t_k) per action dim of the chunk, squashed into [lo, hi]."""

    def __init__(self, obs_dim: int, horizon: int, action_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.shape = (horizon, action_dim)
        self.net = MLP(obs_dim + horizon * action_dim + 1, horizon * action_dim, hidden, "tanh")

    def forward(
        self,
        obs: torch.Tensor,
        x: torch.Tensor,
        t: torch.Tensor,
        sigma_min: float,
        sigma_max: float,
    ) -> torch.Tensor:
        raw = torch.tanh(self.net(torch.cat([obs, x.flatten(1), t.view(-1, 1)], -1)))
        low, high = 2 * math.log(sigma_min), 2 * math.log(sigma_max)
        log_var = low + 0.5 * (raw + 1.0) * (high - low)
        return (0.5 * log_var).exp().view(-1, *self.shape)


class ReinFlow:
    """ReinFlow agent: ``act``, ``explore``, ``value``, ``update(rollout)``, ``state_dict``."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: ReinFlowConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        require_box_actions(action_space, "ReinFlow")
        self.config = config = config or ReinFlowConfig()
        self.device = torch.device(device)
        obs_dim = int(np.prod(observation_space.shape))
        action_dim = int(action_space.shape[-1])
        head, self.obs_normalizer, self.box = policy_parts(
            "flow", observation_space, action_space, config, self.device
        )
        self.actor: FlowHead = head
        self.noise = NoiseNetwork(obs_dim, config.horizon, action_dim, config.noise_hidden)
        self.noise.to(self.device)
        self.critic = MLP(obs_dim, 1, config.critic_hidden, "mish").to(self.device)
        self.actor_optimizer = adam(
            [*self.actor.parameters(), *self.noise.parameters()],
            config.actor_lr,
            config.fused_optimizer,
        )
        self.critic_optimizer = adam(
            self.critic.parameters(), config.critic_lr, config.fused_optimizer
        )
        self.sigma_max = config.sigma_max  # the schedule's current upper bound
        self.updates = 0

    def sigma_max_at(self, progress: float) -> float:
        """sigma_max for the first ``noise_hold`` of training, then a cosine down to
        sigma_min + noise_decay (sigma_max - sigma_min) at the end."""
        cfg = self.config
        end = cfg.sigma_min + cfg.noise_decay * (cfg.sigma_max - cfg.sigma_min)
        if progress <= cfg.noise_hold:
            return cfg.sigma_max
        frac = min((progress - cfg.noise_hold) / max(1.0 - cfg.noise_hold, 1e-8), 1.0)
        return end + 0.5 * (cfg.sigma_max - end) * (1.0 + math.cos(math.pi * frac))

    # -- the chain ------------------------------------------------------------------
    def _step(
        self, obs: torch.Tensor, x: torch.Tensor, t: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) of x_{k+1} given x_k at time(s) t."""
        t = t.expand(len(x))
        mean = x + self.actor.velocity(obs, x, t) / self.config.denoising_steps
        return mean, self.noise(obs, x, t, self.config.sigma_min, self.sigma_max)

    def chain_log_prob(
        self, obs: torch.Tensor, chain: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-likelihood of chains (B, K + 1, H, A) divided by (K + 1) H A, mean entropy
        of the transitions' Gaussians per dim): the K transitions scored in one batched
        network call."""
        steps = self.config.denoising_steps
        batch = len(obs)
        times = self.actor.times(obs.device).repeat_interleave(batch)  # step-major rows
        x = chain[:, :-1].transpose(0, 1).reshape(steps * batch, *chain.shape[2:])
        x_next = chain[:, 1:].transpose(0, 1).reshape_as(x)
        mean, std = self._step(obs.repeat(steps, 1), x, times)
        transitions = gaussian_log_prob(x_next, mean, std).view(steps, batch).sum(0)
        initial = gaussian_log_prob(
            chain[:, 0], torch.zeros_like(chain[:, 0]), torch.ones_like(chain[:, 0])
        )
        dims = (steps + 1) * chain[0, 0].numel()
        entropy = (0.5 * math.log(2 * math.pi * math.e) + std.log()).mean()
        return (initial + transitions) / dims, entropy

    def _sample(
        self, obs: torch.Tensor, deterministic: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(unit chunk (B, H, A), chain (B, K + 1, H, A), the chain's normalised
        log-likelihood, accumulated while sampling: ``chain_log_prob``'s value without a
        second pass through the networks); deterministic: x_0 = 0 and the Euler steps
        without noise (the pre-trained flow's own sampler)."""
        scale = 0.0 if deterministic else 1.0
        x = scale * torch.randn(
            len(obs), self.config.horizon, self.actor.action_dim, device=obs.device
        )
        chain = [x]
        log_prob = gaussian_log_prob(x, torch.zeros_like(x), torch.ones_like(x))
        for t in self.actor.times(obs.device):
            mean, std = self._step(obs, x, t)
            x = mean + scale * std * torch.randn_like(mean)
            log_prob = log_prob + gaussian_log_prob(x, mean, std)
            chain.append(x)
        dims = (self.config.denoising_steps + 1) * x[0].numel()
        return x.clamp(-1.0, 1.0), torch.stack(chain, 1), log_prob / dims

    # -- acting ---------------------------------------------------------------------
    def act(self, obs: np.ndarray | torch.Tensor, deterministic: bool = False) -> np.ndarray:
        """Action chunk(s) (H, A) / (B, H, A) in env units."""
        with torch.inference_mode():
            obs_t, single = batched_obs(obs, self.device)
            unit, _, _ = self._sample(self.obs_normalizer(obs_t), deterministic)
            chunk = self.box.to_env(unit).cpu().numpy()
        return chunk[0] if single else chunk

    @torch.no_grad()
    def explore(
        self, obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Chunk in env units, the chain's normalised log-likelihood, V(s), and the
        rollout channel ``chain``."""
        norm = self.obs_normalizer(obs.float())
        unit, chain, log_prob = self._sample(norm, deterministic=False)
        return self.box.to_env(unit), log_prob, self.critic(norm).squeeze(-1), {"chain": chain}

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.obs_normalizer(obs.float())).squeeze(-1)

    # -- learning -------------------------------------------------------------------
    def update(self, batch: RolloutBatch, progress: float = 0.0) -> dict[str, float]:
        """PPO epochs over the env steps (one ratio each), then the noise schedule."""
        cfg = self.config
        rows = len(batch)
        minibatch = max(1, rows // cfg.num_minibatches)
        norm_obs = self.obs_normalizer(batch.obs)
        stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "entropy": [],
                                         "approx_kl": [], "clip_fraction": []}  # fmt: skip
        for _ in range(cfg.update_epochs):
            for idx in minibatch_indices(rows, minibatch, self.device):
                obs = norm_obs[idx]
                log_prob, entropy = self.chain_log_prob(obs, batch.extras["chain"][idx])
                policy_loss, approx_kl, clip_frac = clipped_surrogate(
                    log_prob - batch.log_prob[idx], standardize(batch.advantage[idx]), cfg.clip_coef
                )
                value_loss = 0.5 * (self.critic(obs).squeeze(-1) - batch.returns[idx]).pow(2).mean()
                loss = policy_loss - cfg.ent_coef * entropy + cfg.vf_coef * value_loss
                actor_params = [*self.actor.parameters(), *self.noise.parameters()]
                clipped_step(loss, [(self.actor_optimizer, actor_params),
                                    (self.critic_optimizer, list(self.critic.parameters()))],
                             cfg.max_grad_norm)  # fmt: skip
                for key, value in (("policy_loss", policy_loss), ("value_loss", value_loss),
                                   ("entropy", entropy), ("approx_kl", approx_kl),
                                   ("clip_fraction", clip_frac)):  # fmt: skip
                    stats[key].append(value.item())
            if cfg.target_kl is not None and approx_kl.item() > cfg.target_kl:
                break
        self.updates += 1
        self.sigma_max = self.sigma_max_at(progress)
        return {**{k: float(np.mean(v)) for k, v in stats.items()}, "sigma_max": self.sigma_max}

    def _parts(self) -> dict:
        return {"actor": self.actor, "noise": self.noise, "critic": self.critic,
                "obs_normalizer": self.obs_normalizer, "actor_optimizer": self.actor_optimizer,
                "critic_optimizer": self.critic_optimizer}  # fmt: skip

    def state_dict(self) -> dict:
        return {**state_of(**self._parts()), "updates": self.updates, "sigma_max": self.sigma_max}

    def load_state_dict(self, state: dict) -> None:
        load_state_into(state, **self._parts())
        self.updates = int(state["updates"])
        self.sigma_max = float(state["sigma_max"])
