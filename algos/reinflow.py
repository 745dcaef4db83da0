"""ReinFlow: PPO fine-tuning of a pre-trained flow-matching action-chunk policy with a
learned noise network.

Paper: T. Zhang, C. Yu, S. Su, Y. Wang, "ReinFlow: Fine-tuning Flow Matching Policy with
Online Reinforcement Learning", arXiv:2505.22094 (2025).

Reference: github.com/ReinFlow/ReinFlow @ aed2819 (cfg/gym/finetune/hopper-v2/
ft_ppo_reflow_mlp.yaml; model/flow/ft_ppo/ppoflow.py, model/flow/mlp_flow.py;
agent/finetune/reinflow/train_ppo_flow_agent.py, train_ppo_agent.py).

The policy is a 1-rectified-flow velocity field v(x, t, s) pre-trained by
``algo=flow_bc`` (``algo.pretrained=<run dir or .pt>``; the reference's residual MLP
[512, 512, 512] with ReLU, ft_ppo_reflow_mlp.yaml:93-103). Fine-tuning adds a noise
network sigma(s, x, t) (MLP 64x64 tanh) that turns the K Euler steps into a Gaussian
Markov chain

    x_0 ~ N(0, I),   x_{k+1} ~ N(clip(x_k + v(x_k, t_k, s) / K), sigma(s, x_k, t_k)^2),

on the grid t_k = k / K, the same grid for acting and for log-probabilities (the
reference acts on linspace(0, 1, K), ppoflow.py:330, and scores on k / K, ppoflow.py:250).
Each mean is clipped to [-1, 1] (``clip_intermediate``, the config's
clip_intermediate_actions: true, ppoflow.py:259-260, 355-356), each injected noise to
+-3 std (``noise_clip``, ppoflow.py:363-364), and the last sample x_K to [-1, 1], stored
so in the chain (ppoflow.py:367-368). The chain's exact log-likelihood (the initial
Gaussian plus the K transitions), divided by (K + 1) and by the chunk's H x A dims,
gives ONE PPO ratio per env step (a chunk); both the new and the stored
log-likelihoods are clamped to [-1, 1] before the ratio (ppoflow.py:444-445). The noise
network's log-variance is squashed into [log sigma_min^2, log sigma_max^2]; sigma_max is
held for ``noise_hold`` of the iterations, then cosine-annealed to sigma_min +
``noise_decay`` x (sigma_max - sigma_min), as the reference schedule does
(train_ppo_flow_agent.py:84-97). Entropy bonus (coefficient 0.03): the chain's entropy
rate per dim, (H(x_0) + sum_k H(x_{k+1} | x_k)) / ((K + 1) H A) (ppoflow.py:238-286; the
constant H(x_0) carries no gradient). Optimisation as the Hopper config
(ft_ppo_reflow_mlp.yaml:51-89): 5 epochs over the rollout's env steps repeated 10 times
(``repeat_samples``, train_ppo_flow_agent.py:361-397) in minibatches of 50,000 rows,
stopping after the first minibatch whose approx. KL exceeds 1 (train_ppo_flow_agent.py:
392-395, checked before the next minibatch); AdamW, actor lr 4.5e-5 (weight decay 0), critic lr 6.5e-4 (weight decay 1e-5),
each a cosine with warm restarts every 100 iterations (10 of warm-up from 2e-5 / 3e-4,
``lr_at``); no gradient clipping. Defaults follow the reference's Hopper settings: K = 4,
H = 4, sigma in [0.10, 0.24], clip 0.01, value coefficient 0.5.

``act(obs, deterministic=True)`` is the reference's evaluation (``eval_mode``,
ppoflow.py:340-368): x_0 ~ N(0, I) from the global torch RNG (deterministic given the
seed), the clipped Euler means without injected noise.

Parity (benchmarks/parity/diffusion_flow.py, tests/golden/diffusion_reinflow.json): the
reference's sampler, log-likelihood, entropy rate and PPO loss terms, with our networks
behind its interfaces, reproduced within 4.8e-7; its schedules within 1e-16.

Departures from the reference:
* The noise network's input is [standardised obs, x_k, t_k] directly (the reference
  feeds it the velocity network's time embedding and the observation, mlp_flow.py:316).
* The critic is a 3x256 Mish MLP (the reference's has residual blocks); advantages are
  standardised per minibatch (as the reference).
* Observations keep the behaviour-cloning run's standardisation (dataset mean / std).
* Acting uses the scoring grid t_k = k / K; the reference samples on linspace(0, 1, K)
  (ppoflow.py:330) but scores on k / K (ppoflow.py:250): its stored and recomputed
  log-likelihoods use different velocity times for K > 1 (not measured here).
* The learning-rate schedule is indexed by our update count; the reference's iteration
  counter also counts its evaluation iterations (every 10th, no update).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.buffers import minibatch_indices
from rlcore.capabilities import OnPolicy
from rlcore.generative import (
    FlowHead,
    adamw,
    gaussian_log_prob,
    policy_parts,
    standard_normal,
    warmup_cosine_lr,
)
from rlcore.losses import clipped_surrogate, standardize
from rlcore.nets import MLP
from rlcore.plan import EnvRecipe, Returns, RunPlan, Schedule
from rlcore.types import RolloutBatch
from rlcore.utils import clipped_step


@dataclass
class ReinFlowConfig:
    """ReinFlow fine-tuning (the reference's Hopper settings, ReinFlow
    cfg/gym/finetune/hopper-v2/ft_ppo_reflow_mlp.yaml)."""

    pretrained: str | None = None  # run dir / .pt of an algo=flow_bc run
    # head settings: must equal the pre-trained run's (checked when loading it); the command
    # line leaves them unset and reads them from it (rlcore.generative.resolve_head)
    horizon: int = 4  # actions per chunk, executed open loop
    obs_history: int = 1  # observations the policy sees (the BC run's)
    denoising_steps: int = 4  # K Euler steps
    hidden: tuple[int, ...] = (512, 512, 512)
    time_dim: int = 16
    denoiser: str = "dppo"  # network layout (the BC run's): "dppo" | "rlcore_v1"
    activation: str = "relu"  # the velocity network's activation (the BC run's)
    # noise network, its range and the chain
    noise_hidden: tuple[int, ...] = (64, 64)  # tanh MLP
    sigma_min: float = 0.10
    sigma_max: float = 0.24  # 0.08 / 0.16 on Ant and Humanoid in the paper
    noise_hold: float = 0.35  # fraction of iterations at sigma_max ...
    noise_decay: float = 0.7  # ... then cosine to sigma_min + noise_decay (max - min)
    noise_clip: float | None = 3.0  # injected noise clipped to +- this many stds
    clip_intermediate: bool = True  # clip each step's mean x_k + v / K to [-1, 1]
    log_prob_min: float = -1.0  # the normalised log-likelihoods are clamped to
    log_prob_max: float = 1.0  # [min, max] in the PPO ratio (new and old alike)
    # PPO
    actor_lr: float = 4.5e-5  # velocity field and noise network: cosine with warm restarts
    actor_lr_min: float = 2e-5  # from this, warm-up to actor_lr, cosine back
    critic_lr: float = 6.5e-4
    critic_lr_min: float = 3e-4
    lr_cycle: int = 100  # iterations per cosine cycle (the schedule restarts after it)
    lr_warmup: int = 10  # warm-up iterations at the start of each cycle
    critic_weight_decay: float = 1e-5  # AdamW (the actor's is 0)
    critic_hidden: tuple[int, ...] = (256, 256, 256)  # Mish MLP
    gamma: float = 0.99  # discount per chunk
    gae_lambda: float = 0.95
    clip_coef: float = 0.01
    ent_coef: float = 0.03
    vf_coef: float = 0.5
    update_epochs: int = 5
    repeat_samples: int = 10  # every env step enters an epoch this many times ...
    minibatch_size: int = 50_000  # ... cut into minibatches of this many rows
    num_minibatches: int | None = None  # if set: this many minibatches instead
    target_kl: float | None = 1.0  # stop the iteration after a minibatch above this approx. KL
    max_grad_norm: float | None = None  # global-norm clip per network (None: the reference's)
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
        if self.repeat_samples < 1:
            raise ValueError(f"repeat_samples={self.repeat_samples} must be >= 1")
        if not self.log_prob_min < self.log_prob_max:
            raise ValueError(
                f"need log_prob_min ({self.log_prob_min}) < log_prob_max ({self.log_prob_max})"
            )

    @property
    def env_chunk(self) -> int:
        """Actions per env step of the training env (rlcore.train builds it chunked)."""
        return self.horizon

    def plan(self) -> RunPlan:
        """Rollouts of chunks (the env executes each chunk of ``horizon`` actions)."""
        schedule = Schedule(online_steps=self.total_steps, rollout_steps=self.rollout_steps,
                            num_minibatches=self.num_minibatches)  # fmt: skip
        env = EnvRecipe(normalize_obs=self.normalize_obs, normalize_reward=self.normalize_reward,
                        reward_gamma=self.gamma, action_chunk=self.env_chunk,
                        obs_history=self.obs_history)  # fmt: skip
        return RunPlan(schedule, env, returns=Returns(self.gamma, self.gae_lambda),
                       gamma=self.gamma, needs_pretrained=True, pretrained=self.pretrained)  # fmt: skip


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

    CAPABILITIES = (OnPolicy,)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: ReinFlowConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.plumbing = io = Plumbing(observation_space, action_space, device, "ReinFlow")
        self.config = config = config or ReinFlowConfig()
        self.device = io.device
        parts = policy_parts("flow", observation_space, action_space, config, self.device)
        head, self.obs_normalizer, self.box = parts.head, parts.obs_normalizer, parts.box
        self.actor: FlowHead = head
        self.noise = NoiseNetwork(
            io.obs_dim, config.horizon, io.step_action_dim, config.noise_hidden
        )
        self.critic = MLP(io.obs_dim, 1, config.critic_hidden, "mish")
        self.actor_optimizer = adamw(
            [*self.actor.parameters(), *self.noise.parameters()],
            config.actor_lr,
            fused=config.fused_optimizer,
        )
        self.critic_optimizer = adamw(
            self.critic.parameters(),
            config.critic_lr,
            config.critic_weight_decay,
            config.fused_optimizer,
        )
        self.sigma_max = config.sigma_max  # the schedule's current upper bound
        self.parts = io.declare(
            counters={"updates": int, "sigma_max": float}, actor=self.actor, noise=self.noise,
            critic=self.critic, obs_normalizer=self.obs_normalizer,
            actor_optimizer=self.actor_optimizer, critic_optimizer=self.critic_optimizer,
        )  # fmt: skip
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

    def lr_at(self, iteration: int) -> tuple[float, float]:
        """(actor, critic) learning rates of update number ``iteration`` (0-based): the
        reference's cosine with warm restarts (``warmup_cosine_lr``, stepped once per
        iteration, ReinFlow agent/finetune/reinflow/train_ppo_agent.py:71-81, 259-263)."""
        cfg = self.config
        return (
            warmup_cosine_lr(iteration, cfg.actor_lr, cfg.actor_lr_min, cfg.lr_cycle, cfg.lr_warmup),
            warmup_cosine_lr(iteration, cfg.critic_lr, cfg.critic_lr_min, cfg.lr_cycle,
                             cfg.lr_warmup),
        )  # fmt: skip

    # -- the chain ------------------------------------------------------------------
    def _step(
        self, obs: torch.Tensor, x: torch.Tensor, t: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) of x_{k+1} given x_k at time(s) t; the mean clipped to [-1, 1] with
        ``clip_intermediate`` (ReinFlow ppoflow.py:259-260, 355-356)."""
        t = t.expand(len(x))
        mean = x + self.actor.velocity(obs, x, t) / self.config.denoising_steps
        if self.config.clip_intermediate:
            mean = mean.clamp(-1.0, 1.0)
        return mean, self.noise(obs, x, t, self.config.sigma_min, self.sigma_max)

    def chain_log_prob(
        self, obs: torch.Tensor, chain: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-likelihood of chains (B, K + 1, H, A) divided by (K + 1) H A, the chain's
        entropy rate per dim, (H(x_0) + sum_k H(x_{k+1} | x_k)) / ((K + 1) H A), averaged
        over the batch: ReinFlow ppoflow.py:236-286): the K transitions scored in one
        batched network call."""
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
        dims = chain[0, 0].numel()
        half_log_2pie = 0.5 * math.log(2 * math.pi * math.e)
        # H(x_0) = dims * 0.5 log(2 pi e); H(x_{k+1} | x_k) = sum (0.5 log(2 pi e) + log std)
        log_std = std.log().flatten(1).sum(-1).view(steps, batch).sum(0)
        entropy = ((steps + 1) * dims * half_log_2pie + log_std) / ((steps + 1) * dims)
        return (initial + transitions) / ((steps + 1) * dims), entropy.mean()

    def _sample(
        self, obs: torch.Tensor, deterministic: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(unit chunk (B, H, A), chain (B, K + 1, H, A), the chain's normalised
        log-likelihood, accumulated while sampling: ``chain_log_prob``'s value without a
        second pass through the networks). x_0 ~ N(0, I); each step adds the noise
        network's Gaussian noise, clipped to +-``noise_clip`` std; the last sample is
        clipped to [-1, 1] and stored so (ReinFlow ppoflow.py:351-377). ``deterministic``:
        the reference's evaluation (ppoflow.py:362), the same chain without injected
        noise, still from a random x_0 (the global torch RNG)."""
        shape = (len(obs), self.config.horizon, self.actor.action_dim)
        x = torch.randn(shape, device=obs.device)
        chain = [x]
        log_prob = gaussian_log_prob(x, torch.zeros_like(x), torch.ones_like(x))
        last = self.config.denoising_steps - 1
        for k, t in enumerate(self.actor.times(obs.device)):
            mean, std = self._step(obs, x, t)
            x = mean
            if not deterministic:
                x = mean + std * standard_normal(shape, self.config.noise_clip, None, obs.device)
            if k == last:
                x = x.clamp(-1.0, 1.0)
            log_prob = log_prob + gaussian_log_prob(x, mean, std)
            chain.append(x)
        dims = (self.config.denoising_steps + 1) * x[0].numel()
        return x, torch.stack(chain, 1), log_prob / dims

    # -- acting ---------------------------------------------------------------------
    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Action chunk(s) (H, A) / (B, H, A) in env units. ``deterministic``: the
        reference's evaluation, the chain from a random x_0 without injected noise."""
        unit, _, _ = self._sample(self.obs_normalizer(obs), deterministic)
        return self.box.to_env(unit)

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
        """PPO epochs over the env steps (one ratio each, every row ``repeat_samples``
        times per epoch: ReinFlow train_ppo_flow_agent.py:361-397), stopping after the
        first minibatch whose approx. KL exceeds ``target_kl``; then the noise schedule."""
        cfg = self.config
        actor_lr, critic_lr = self.lr_at(self.updates)
        for optimizer, lr in ((self.actor_optimizer, actor_lr), (self.critic_optimizer, critic_lr)):
            for group in optimizer.param_groups:
                group["lr"] = lr
        total = len(batch) * cfg.repeat_samples
        size = cfg.minibatch_size if cfg.num_minibatches is None else total // cfg.num_minibatches
        norm_obs = self.obs_normalizer(batch.obs)
        stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "entropy": [],
                                         "approx_kl": [], "clip_fraction": []}  # fmt: skip
        minibatches, stop = 0, False
        for _ in range(cfg.update_epochs):
            for flat in minibatch_indices(total, max(size, 1), self.device):
                idx = flat // cfg.repeat_samples
                obs = norm_obs[idx]
                log_prob, entropy = self.chain_log_prob(obs, batch.extras["chain"][idx])
                # ReinFlow ppoflow.py:444-445: both log-likelihoods clamped before the ratio
                new = log_prob.clamp(cfg.log_prob_min, cfg.log_prob_max)
                old = batch.log_prob[idx].clamp(cfg.log_prob_min, cfg.log_prob_max)
                policy_loss, approx_kl, clip_frac = clipped_surrogate(
                    new - old, standardize(batch.advantage[idx]), cfg.clip_coef
                )
                value_loss = 0.5 * (self.critic(obs).squeeze(-1) - batch.returns[idx]).pow(2).mean()
                loss = policy_loss - cfg.ent_coef * entropy + cfg.vf_coef * value_loss
                actor_params = [*self.actor.parameters(), *self.noise.parameters()]
                clipped_step(loss, [(self.actor_optimizer, actor_params),
                                    (self.critic_optimizer, list(self.critic.parameters()))],
                             cfg.max_grad_norm)  # fmt: skip
                minibatches += 1
                for key, value in (("policy_loss", policy_loss), ("value_loss", value_loss),
                                   ("entropy", entropy), ("approx_kl", approx_kl),
                                   ("clip_fraction", clip_frac)):  # fmt: skip
                    stats[key].append(value.item())
                if cfg.target_kl is not None and approx_kl.item() > cfg.target_kl:
                    stop = True
                    break
            if stop:
                break
        self.updates += 1
        self.sigma_max = self.sigma_max_at(progress)
        return {**{k: float(np.mean(v)) for k, v in stats.items()}, "sigma_max": self.sigma_max,
                "actor_lr": actor_lr, "critic_lr": critic_lr,
                "minibatches": float(minibatches)}  # fmt: skip

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
