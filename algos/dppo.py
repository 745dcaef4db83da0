"""Diffusion Policy Policy Optimization (DPPO): PPO on the denoising steps of a
pre-trained DDPM action-chunk policy.

Paper: A. Z. Ren, J. Lidard, L. L. Ankile, A. Simeonov, P. Agrawal, A. Majumdar,
B. Burchfiel, H. Dai, M. Simchowitz, "Diffusion Policy Policy Optimization",
arXiv:2409.00588 (2024).

Reference: github.com/irom-lab/dppo @ 7b10df6 (Gym configs cfg/gym/finetune/hopper-v2/
ft_ppo_diffusion_mlp.yaml; model/diffusion/diffusion_ppo.py, diffusion_vpg.py;
agent/finetune/train_ppo_diffusion_agent.py).

The policy is a DDPM head pre-trained by ``algo=diffusion_bc`` (``algo.pretrained=<run
dir or .pt>``), DPPO's residual MLP [512, 512, 512] with ReLU (one residual block, linear
output: ft_ppo_diffusion_mlp.yaml:88-96, ``rlcore.generative.DenoisingMLP``). Sampling a
chunk runs K denoising steps from x_K ~ N(0, I); the last K' (``finetune_steps``) use a
fine-tuned copy of the network, the first K - K' the frozen original (diffusion_vpg.py:
148-163). Every (env step, fine-tuned denoising step) pair is one PPO sample: the
log-density of x_{i+1} given x_i under the step's Gaussian (std floored at ``std_floor``,
for sampling and for scoring, diffusion_vpg.py:293, 389; the injected noise clipped to +-3
std, ``noise_clip``, diffusion_vpg.py:294-296; per-dimension log-densities clamped to
[-5, 2] and averaged over the chunk's H x A dims, diffusion_ppo.py:90-99, so that clip
0.01 is a per-dimension scale), the env-level GAE advantage of its env step,
standardised per minibatch, shared by every step of the chain and multiplied by
``denoise_discount`` ^ (K' - k - 1) for the k-th fine-tuned step (the last one gets the
full advantage, diffusion_ppo.py:136-144), clip 0.01. The iteration's epochs stop after
the first minibatch whose approximate KL exceeds ``target_kl`` = 1 (train_ppo_diffusion_
agent.py:370-375). Optional BC term (``use_bc_loss``, off as in the reference): -log p of
chains the frozen base samples, under the fine-tuned network (diffusion_ppo.py:101-125).
One env step executes a chunk of H actions (``rlcore.envs.make.ActionChunks``: the reward is
the chunk's summed reward, GAE discounts per chunk as the reference does). The critic
V(s) is a 3x256 Mish MLP on the pre-training's standardised observation. Defaults: K =
20, K' = 10, H = 4, Adam(W) at a constant actor lr 1e-4, critic lr 1e-3 (the reference's
cosine runs from 1e-4 to min_lr 1e-4: constant), 5 epochs, gamma 0.99, lambda 0.95,
value coefficient 0.5, running reward scaling, no gradient clipping.

``act(obs, deterministic=True)`` is DPPO's evaluation sampler (diffusion_vpg.py:288-291):
x_K ~ N(0, I), each step's posterior std floored at 1e-3 (instead of 0.1), zero noise at
the last step, noise clipped at 3 std; random draws come from the global torch RNG, so an
evaluation is deterministic given the seed.

The paper trains with 40 envs x 500 steps per iteration (``env.num_envs=40
algo.rollout_steps=500``); the defaults here are the same, sized down by configs where a
CPU run needs it.

Images (dppo cfg/robomimic/finetune/*/ft_ppo_diffusion_mlp_img.yaml,
agent/finetune/train_ppo_diffusion_img_agent.py): a policy cloned from images
(``algo=diffusion_bc algo.encoder=...``) is fine-tuned with its encoder: the frozen base
steps read the BC run's EMA encoder, the fine-tuned steps a copy trained with the actor
(DPPO's ``actor_ft`` copies the whole network, backbone included), the critic a new
encoder of the same kind with its own MLP (DPPO's ``ViTCritic`` has its own backbone).
Before each update the rollout's images are shifted once, by up to ``shift_pad`` = 4
pixels (DPPO's ``train.augment``), and the old step scores are recomputed on the shifted
images, so every ratio starts at 1 as in the reference.

Parity (benchmarks/parity/diffusion_flow.py, tests/golden/diffusion_dppo.json): the
reference's exploring and evaluation chains and step scores on the same weights and
draws reproduced within 6e-7.

Departures from the reference:
* The critic is a plain 3x256 Mish MLP (the reference's has residual blocks).
* Minibatches of 50,000 (env step, denoising step) pairs drawn at random, advantages
  standardised over the pairs' rows; the reference draws 5,000 env steps with all
  their K' = 10 pairs (the same 50,000 pairs per minibatch, the same expected gradient)
  and standardises over the env steps.
* The optional BC term (``use_bc_loss``) samples one full base chain (K frozen-network
  steps) for every (env step, denoising step) pair of a minibatch and scores that pair's
  step k of it; the reference samples one base chain per env step of its minibatch and
  scores all K' fine-tuned steps of it (diffusion_ppo.py:101-125). Same expected loss,
  K' = 10 times the base sampling. Measured (default sizes: 512 x 3 denoiser, K = 20,
  H = 4, Hopper shapes; one thread of a 2-core AMD EPYC, busy): base chains for a
  minibatch of 5,000 pairs 1.4-2.2 s against 0.16-0.31 s for the reference's 500 env
  steps; an update of 10,000 pairs (2 minibatches) 4.6-5.4 s with the term against
  0.7-0.8 s without. Off by default, as in the reference's Gym configs.
* No per-denoising-step clip schedule (the reference's Gym configs set base = final =
  0.01, so theirs is constant too) and no quantile clipping of the advantages (the
  reference's default keeps all of them too).
* Observations keep the behaviour-cloning run's standardisation (dataset mean / std),
  not DPPO's min-max scaling to [-1, 1].
* Images: rlcore's CNN encoders instead of DPPO's ViT; the critic's values and the GAE
  come from the rollout's unshifted images (the reference values the shifted ones); the
  minibatch's pairs share one encoding per pair row (the reference encodes per env step);
  no reference run compared (its image agents need robomimic's renders).
* No evaluation iterations inside training (the reference spends every 10th iteration
  on an evaluation rollout of the training envs); rlcore evaluates on separate envs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.buffers import minibatch_indices
from rlcore.capabilities import OnPolicy
from rlcore.generative import (
    SCHEDULES,
    DDPMHead,
    gaussian_log_density,
    policy_parts,
    standard_normal,
)
from rlcore.losses import clipped_surrogate, standardize
from rlcore.nets import MLP, shift_images
from rlcore.observations import ObsSpec
from rlcore.plan import EnvRecipe, Returns, RunPlan, Schedule
from rlcore.types import Obs, RolloutBatch, take_rows
from rlcore.utils import adam, clipped_step


def step_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """DPPO's score of one denoising step: per-dim Gaussian log-densities clamped to
    [-5, 2], averaged over the chunk's dims: (B, H, A) -> (B,)."""
    return gaussian_log_density(x, mean, std).clamp(-5.0, 2.0).flatten(1).mean(-1)


@dataclass
class DPPOConfig:
    """DPPO fine-tuning (the paper's Gym defaults)."""

    pretrained: str | None = None  # run dir / .pt of an algo=diffusion_bc run
    # head settings: must equal the pre-trained run's (checked when loading it); the command
    # line leaves them unset and reads them from it (rlcore.generative.resolve_head)
    horizon: int = 4  # actions per chunk, executed open loop
    obs_history: int = 1  # observations the policy sees (the BC run's)
    denoising_steps: int = 20  # K
    schedule: str = "cosine"  # DDPM beta schedule
    clip_x0: float | None = 1.0  # clip of the predicted x0
    hidden: tuple[int, ...] = (512, 512, 512)
    time_dim: int = 16
    denoiser: str = "dppo"  # network layout (the BC run's): "dppo" | "rlcore_v1"
    activation: str = "relu"  # the denoiser's activation (the BC run's)
    # fine-tuning
    finetune_steps: int = 10  # K': the last K' denoising steps are fine-tuned (0: none)
    std_floor: float = 0.1  # minimum std of a denoising step, sampling and scoring
    noise_clip: float | None = 3.0  # injected noise clipped to +- this many stds
    denoise_discount: float = 0.99  # advantage weight per denoising step away from the last
    actor_lr: float = 1e-4
    critic_lr: float = 1e-3
    critic_hidden: tuple[int, ...] = (256, 256, 256)  # Mish MLP
    gamma: float = 0.99  # discount per chunk (env step of the chunked env)
    gae_lambda: float = 0.95
    clip_coef: float = 0.01
    vf_coef: float = 0.5
    update_epochs: int = 5
    minibatch_size: int = 50_000  # (env step, denoising step) pairs per minibatch
    target_kl: float | None = 1.0  # stop the iteration after a minibatch above this approx. KL
    use_bc_loss: bool = False  # add -log p_ft(base's chains) (the reference's option, off)
    bc_loss_coef: float = 0.0  # its weight (the reference's default)
    max_grad_norm: float | None = None  # global-norm clip per network (None: the reference's)
    fused_optimizer: bool = True
    # image observations (a BC run with algo.encoder): DPPO's train.augment, one random
    # shift of the rollout's images before its update (0: none)
    shift_pad: int = 4
    # env-side settings (rlcore.train)
    normalize_obs: bool = False  # the pre-trained standardisation is used instead
    normalize_reward: bool = True  # running reward scaling
    rollout_steps: int = 500  # chunks per sub-env between updates
    total_steps: int = 1_000_000  # chunks (env steps of the chunked env), all sub-envs

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r}: choose from {SCHEDULES}")
        if not 0 <= self.finetune_steps <= self.denoising_steps:
            raise ValueError(
                f"finetune_steps={self.finetune_steps} must be in [0, denoising_steps="
                f"{self.denoising_steps}]"
            )

    @property
    def env_chunk(self) -> int:
        """Actions per env step of the training env (rlcore.train builds it chunked)."""
        return self.horizon

    def plan(self) -> RunPlan:
        """Rollouts of chunks (the env executes each chunk of ``horizon`` actions)."""
        schedule = Schedule(online_steps=self.total_steps, rollout_steps=self.rollout_steps)
        env = EnvRecipe(normalize_obs=self.normalize_obs, normalize_reward=self.normalize_reward,
                        reward_gamma=self.gamma, action_chunk=self.env_chunk,
                        obs_history=self.obs_history)  # fmt: skip
        return RunPlan(schedule, env, returns=Returns(self.gamma, self.gae_lambda),
                       gamma=self.gamma, needs_pretrained=True, pretrained=self.pretrained)  # fmt: skip


class DPPO:
    """DPPO agent: ``act``, ``explore``, ``value``, ``update(rollout)``, ``state_dict``."""

    CAPABILITIES = (OnPolicy,)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: DPPOConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        images = bool(ObsSpec.from_space(observation_space).images)
        self.plumbing = io = Plumbing(
            observation_space, action_space, device, "DPPO", obs_parts=images
        )
        self.config = config = config or DPPOConfig()
        self.device = io.device
        parts = policy_parts(
            "ddpm", observation_space, action_space, config, self.device, images=images
        )
        self.obs_normalizer, self.box = parts.obs_normalizer, parts.box
        self.base: DDPMHead = parts.head
        self.base.requires_grad_(False)
        self.actor: DDPMHead = copy.deepcopy(self.base).requires_grad_(True)
        # images: the BC run's encoder, frozen for the base steps and fine-tuned with the
        # actor (DPPO's actor_ft copies the whole network); the critic has its own
        self.base_encoder = self.actor_encoder = self.critic_encoder = None
        actor_params = [*self.actor.parameters()]
        critic_in, encoders = io.obs_dim if not images else 0, {}
        if parts.encoder is not None:
            self.base_encoder = parts.encoder.requires_grad_(False)
            self.actor_encoder = copy.deepcopy(parts.encoder).requires_grad_(True)
            self.critic_encoder = parts.fresh_encoder
            actor_params += [*self.actor_encoder.parameters()]
            critic_in = self.critic_encoder.out_dim
            encoders = {"base_encoder": self.base_encoder, "actor_encoder": self.actor_encoder,
                        "critic_encoder": self.critic_encoder}  # fmt: skip
        self.critic = MLP(critic_in, 1, config.critic_hidden, "mish").to(self.device)
        critic_params = [*self.critic.parameters()]
        if self.critic_encoder is not None:
            critic_params += [*self.critic_encoder.parameters()]
        self.actor_optimizer = adam(actor_params, config.actor_lr, config.fused_optimizer)
        self.critic_optimizer = adam(critic_params, config.critic_lr, config.fused_optimizer)
        self.parts = io.declare(
            counters={"updates": int}, actor=self.actor, base=self.base, critic=self.critic,
            obs_normalizer=self.obs_normalizer, actor_optimizer=self.actor_optimizer,
            critic_optimizer=self.critic_optimizer, **encoders,
        )  # fmt: skip
        self.updates = 0

    def _features(self, obs: Obs, encoder: nn.Module | None) -> torch.Tensor:
        """What a network reads: the standardised vector, or ``encoder``'s features."""
        if self.base_encoder is None:
            return self.obs_normalizer(obs.float())
        return encoder(obs)

    def _conditions(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor]:
        """(base network's condition, fine-tuned network's): the same vector, or each
        encoder's features of the images."""
        if self.base_encoder is None:
            norm = self._features(obs, None)
            return norm, norm
        return self._features(obs, self.base_encoder), self._features(obs, self.actor_encoder)

    # -- acting ---------------------------------------------------------------------
    def _first_tuned(self) -> int:
        return self.config.denoising_steps - self.config.finetune_steps

    def _denoise(
        self, obs: torch.Tensor, evaluation: bool = False, tuned_obs: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(unit chunk (B, H, A), chain of the fine-tuned steps (B, K' + 1, H, A), their
        log-densities (B, K')). Frozen network for steps < K - K', fine-tuned after; x_K
        ~ N(0, I); each step's noise clipped to +-``noise_clip`` std (dppo
        diffusion_vpg.py:294-297). Exploring: every std floored at ``std_floor``;
        ``evaluation``: the reference's deterministic sampler (``DDPMHead.step_floor``).
        ``tuned_obs``: the fine-tuned network's condition where it differs (images: its own
        encoder's features; default ``obs``)."""
        cfg, first = self.config, self._first_tuned()
        tuned_obs = obs if tuned_obs is None else tuned_obs
        shape = (len(obs), cfg.horizon, self.base.action_dim)
        x = torch.randn(shape, device=obs.device)
        chain, log_probs = [x] if first == 0 else [], []
        for i in range(cfg.denoising_steps):
            tuned = i >= first
            floor = self.base.step_floor(i, cfg.std_floor, evaluation)
            network, condition = (self.actor, tuned_obs) if tuned else (self.base, obs)
            mean, std = network.transition(condition, x, i, floor)
            x_next = mean + std * standard_normal(shape, cfg.noise_clip, None, obs.device)
            if tuned:
                log_probs.append(step_log_prob(x_next, mean, std))
                chain.append(x_next)
            elif i == first - 1:
                chain.append(x_next)
            x = x_next
        log_prob = torch.stack(log_probs, 1) if log_probs else x.new_zeros(len(obs), 0)
        return x.clamp(-1.0, 1.0), torch.stack(chain, 1), log_prob

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Action chunk(s) (H, A) / (B, H, A) in env units. ``deterministic``: DPPO's
        evaluation sampler (x_K ~ N(0, I), std floor 1e-3, no noise at the last step; dppo
        diffusion_vpg.py:258-297), drawing from the global torch RNG; otherwise the
        exploring sampler."""
        base, tuned = self._conditions(obs)
        unit, _, _ = self._denoise(base, evaluation=deterministic, tuned_obs=tuned)
        return self.box.to_env(unit)

    @torch.no_grad()
    def explore(
        self, obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Chunk in env units, the sum of its steps' scores, V(s), and the rollout
        channels ``chain`` (B, K' + 1, H, A) and ``step_log_prob`` (B, K')."""
        base, tuned = self._conditions(obs)
        unit, chain, log_prob = self._denoise(base, tuned_obs=tuned)
        value = self.value(obs)
        channels = {"chain": chain, "step_log_prob": log_prob}
        return self.box.to_env(unit), log_prob.sum(-1), value, channels

    @torch.no_grad()
    def value(self, obs: Obs) -> torch.Tensor:
        return self.critic(self._features(obs, self.critic_encoder)).squeeze(-1)

    # -- learning -------------------------------------------------------------------
    def bc_loss(self, obs: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """The reference's optional BC term (dppo diffusion_ppo.py:101-125): chains the
        frozen base samples (exploring sampler) for ``obs``, scored at fine-tuned step
        ``k`` (per row) by the fine-tuned network; -mean of the clamped step scores."""
        cfg, first = self.config, self._first_tuned()
        rows = torch.arange(len(obs), device=obs.device)
        with torch.no_grad():
            _, teacher = self.base.sample(obs, cfg.std_floor, return_chain=True,
                                          noise_clip=cfg.noise_clip)  # fmt: skip
        x, x_next = teacher[rows, first + k], teacher[rows, first + k + 1]
        mean, std = self.actor.transition(obs, x, first + k, cfg.std_floor)
        return -step_log_prob(x_next, mean, std).mean()

    def update(self, batch: RolloutBatch, progress: float = 0.0) -> dict[str, float]:
        """``update_epochs`` passes over the (env step, fine-tuned step) pairs; the
        iteration stops after the first minibatch whose approx. KL exceeds ``target_kl``
        (dppo agent/finetune/train_ppo_diffusion_agent.py:370-375)."""
        cfg = self.config
        tuned = cfg.finetune_steps
        rows = len(batch)
        pairs = rows * max(tuned, 1)  # K' = 0: the critic still learns, one row each
        old_log_prob = batch.extras["step_log_prob"] if tuned else None
        if self.base_encoder is None:  # vectors: standardised once, read as they are
            inputs = self.obs_normalizer(batch.obs)
        else:  # images: shifted once, the old scores recomputed on them (DPPO's augment)
            inputs = shift_images(batch.obs, self.plumbing.obs, cfg.shift_pad)
            if tuned and cfg.shift_pad:
                old_log_prob = self._step_log_probs(inputs, batch.extras["chain"])
        weight = cfg.denoise_discount ** torch.arange(tuned - 1, -1, -1, device=self.device)
        stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "approx_kl": [],
                                         "clip_fraction": [], "bc_loss": []}  # fmt: skip
        minibatches, stop = 0, False
        for _ in range(cfg.update_epochs):
            for pair in minibatch_indices(pairs, cfg.minibatch_size, self.device):
                row, k = pair // max(tuned, 1), pair % max(tuned, 1)
                obs = take_rows(inputs, row)
                critic_in = obs if self.critic_encoder is None else self.critic_encoder(obs)
                value = self.critic(critic_in).squeeze(-1)
                value_loss = 0.5 * (value - batch.returns[row]).pow(2).mean()
                loss = cfg.vf_coef * value_loss
                approx_kl = torch.zeros(())
                if tuned:
                    chain = batch.extras["chain"]
                    condition = obs if self.actor_encoder is None else self.actor_encoder(obs)
                    mean, std = self.actor.transition(
                        condition, chain[row, k], self._first_tuned() + k, cfg.std_floor
                    )
                    log_prob = step_log_prob(chain[row, k + 1], mean, std)
                    old = old_log_prob[row, k]
                    advantage = standardize(batch.advantage[row]) * weight[k]
                    policy_loss, approx_kl, clip_frac = clipped_surrogate(
                        log_prob - old, advantage, cfg.clip_coef
                    )
                    loss = loss + policy_loss
                    if cfg.use_bc_loss:
                        bc = self.bc_loss(condition, k)
                        loss = loss + cfg.bc_loss_coef * bc
                        stats["bc_loss"].append(bc.item())
                    stats["policy_loss"].append(policy_loss.item())
                    stats["clip_fraction"].append(clip_frac.item())
                groups = [(self.critic_optimizer, list(self.critic.parameters()))]
                if tuned:
                    groups.append((self.actor_optimizer, list(self.actor.parameters())))
                clipped_step(loss, groups, cfg.max_grad_norm)
                minibatches += 1
                stats["value_loss"].append(value_loss.item())
                stats["approx_kl"].append(approx_kl.item())
                if cfg.target_kl is not None and approx_kl.item() > cfg.target_kl:
                    stop = True
                    break
            if stop:
                break
        self.updates += 1
        out = {k: float(np.mean(v)) for k, v in stats.items() if v}
        return {**out, "minibatches": float(minibatches)}

    @torch.no_grad()
    def _step_log_probs(self, obs: Obs, chain: torch.Tensor) -> torch.Tensor:
        """(rows, K') scores of the rollout's fine-tuned steps under the current actor, on
        ``obs`` (the shifted images: DPPO recomputes them after its augmentation)."""
        condition = self._features(obs, self.actor_encoder)
        first, scores = self._first_tuned(), []
        for k in range(self.config.finetune_steps):
            mean, std = self.actor.transition(
                condition, chain[:, k], first + k, self.config.std_floor
            )
            scores.append(step_log_prob(chain[:, k + 1], mean, std))
        return torch.stack(scores, 1)

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
