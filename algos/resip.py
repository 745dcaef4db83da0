"""Residual policy learning on a frozen diffusion policy (ResiP), trained with PPO.

Paper: L. Ankile, A. Simeonov, I. Shenfeld, M. Torne, P. Agrawal, "From Imitation to
Refinement -- Residual RL for Precise Assembly", arXiv:2407.16677 (2024).
Reference: github.com/ankile/robust-rearrangement @ 41c99a0 (``src/models/residual.py``,
``src/train/residual_ppo.py``, ``src/config/base_residual_rl.yaml``,
``src/config/actor/residual_diffusion.yaml``; paths:lines below are that commit's).
Parity: ``tests/test_resip.py`` reproduces the reference's update (its
``ResidualPolicy``, optimisers, diffusers schedules and update loop, run by
``benchmarks/parity/resip_reference.py``) from the same weights, batch and minibatch
permutations: losses and parameters equal to float32 round-off (0.0 measured) after 8
minibatch updates, and after a KL stop at the 2nd.

The base is a DDPM action-chunk policy pre-trained by ``algo=diffusion_bc``
(``algo.pretrained=<run dir or .pt>``), frozen: it is asked for a chunk of H actions
when an env's previous chunk is used up or its episode restarts, and the chunk runs
open loop (``rlcore.envs.chunks.ChunkQueue``). Every env step a closed-loop residual MLP
(2x256, ReLU) sees [standardised state, current base action] and outputs a Gaussian
with a fixed log-std of -1 (residual_diffusion.yaml:8-9); the executed action is
base + 0.1 x residual in normalised action units [-1, 1] (residual_ppo.py:368). The
critic (2x256, ReLU) sees the same [state, base action] (residual.py:136-159,
residual_ppo.py:357-364): with open-loop chunks the state alone does not say which base
action runs next. ``value`` (GAE's bootstrap) peeks at the base action each env runs
next without consuming it, as the reference's bootstrap uses the next base action
(residual_ppo.py:471-474).
Initialisation (residual.py:14-64, 100-117; residual_diffusion.yaml:10-19): hidden layers
Kaiming-normal (fan-in, ReLU gain) with zero biases; the residual's output layer has no
bias and orthogonal gain 0, i.e. zero weights, so training starts at the base policy;
the critic's output layer orthogonal with gain 0.25 and bias 0.25.
PPO (base_residual_rl.yaml:42-67, residual_ppo.py:222-249, 494-593): gamma 0.999, lambda
0.95, clip 0.2, no value clipping, no entropy bonus, advantages standardised per
minibatch, loss = policy + 1.0 x value loss (0.5 MSE); one gradient-norm clip at 1.0
over the residual's and the critic's gradients together (:578-580); AdamW with eps 1e-5
and weight decay 1e-6 (one optimiser with a parameter group per network: Adam is per
parameter, so the steps are the reference's two optimisers'); actor lr 3e-4 warmed up
linearly from 0 over the first 5 / 1,395 of the run then cosine-decayed to 0, critic lr
5e-3 cosine-decayed to 0 (diffusers' ``get_cosine_schedule_with_warmup``, stepped once
per iteration, :641-642; ``warmup_cosine``); stop the update at the first minibatch
whose approximate KL exceeds 0.1 (:585-593).
Measured together (``python -m rlcore.benchmarks.finetune --methods resip --seeds 0 1``, Hopper,
200k steps, 2 seeds): 3,387 +- 97 [3,290, 3,484] after fine-tuning with these settings,
2,966 +- 64 [2,902, 3,031] with the earlier ones (state-only critic, AdamW's torch
defaults, value coefficient 0.5, tanh / orthogonal layers, a clip per network, constant
actor lr, a KL check per epoch); BC start 1,686 +- 275.

Departures from the reference (none of them measured: the reference's tasks need Isaac
Gym, and each needs a fine-tuning benchmark of its own):
* Epochs / minibatches: CleanRL's 10 x 32 per rollout, kept from before for CPU-sized
  rollouts (10^4 rows); the reference runs 50 epochs of one full-batch minibatch
  (1,024 envs x 700 steps; base_residual_rl.yaml:26-29). Not compared.
* The actor's warm-up is a fraction of the run (5 / 1,395, the reference's 5 of its
  1,395 iterations) instead of 5 iterations, so short runs do not spend a large part of
  their updates warming up; the first update (progress 0) still trains the critic only,
  as the reference's first does. The reference's schedulers count training iterations
  against a total that includes its evaluation iterations (every 5th, which do not step
  them: residual_ppo.py:338, :462), so its cosines end near 0.1 of their peak; ours
  reach 0 at the end of the run.
* The base acts on its zero-noise DDPM path (x_K = 0, no injected noise; the BC run's
  own evaluation samples from x_K ~ N(0, I) as DPPO does) in training and evaluation
  alike; the reference samples
  its base with 4 DDIM steps (eta 0) from random noise (residual_ppo.py:209,
  src/behavior/diffusion.py:55-100). Exploration comes from the residual only.
  Measured on PandaLift (2026-11-28): its mixed-demonstration BC policy succeeds in 0.44
  of 50 episodes with its own sampler and in 0 of 20 on the zero-noise path with
  open-loop chunks (0.70 re-planning every step), and ResiP trained on it stays at 0;
  ``base_noise=true`` samples the base from random noise with the BC policy's evaluation
  sampler (DDPM, not the reference's DDIM).
* States are standardised with the behaviour-cloning dataset's statistics (frozen);
  the reference min-max-normalises to [-1, 1] and clamps at +-3
  (src/behavior/residual_diffusion.py:161-178).
* Rewards are divided by the running std of the discounted return (the rlcore env
  wrapper ``NormalizeReward``, gamma = 0.999) and clipped at ``env.clip_reward`` (10 in
  the env configs; the reference's 5 needs ``env.clip_reward=5``); the reference divides
  by the running std of the rewards themselves, clipped at 5
  (src/gym/env_rl_wrapper.py:165-192, base_residual_rl.yaml:60-61).
* The executed action is clipped to [-1, 1] in normalised units before it is mapped
  to the env's box; the reference passes base + 0.1 x residual on unclipped.
* Truncated episodes bootstrap from V(final state, base action) (the rlcore loop's GAE):
  the env's next chunk action where every env's final state is valued at once (device
  back ends), a fresh chunk's first where only the truncated envs' are (host back ends:
  which envs they are, hence their place in their chunks, is not known to ``value``);
  the reference treats truncations as terminal
  (``truncation_as_done: true``, base_residual_rl.yaml:16, residual_ppo.py:373-374).
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
from rlcore.capabilities import EvalPolicy, OnPolicy, PerEnvState
from rlcore.envs.chunks import ChunkQueue
from rlcore.generative import SCHEDULES, DDPMHead, policy_parts
from rlcore.losses import clipped_surrogate, standardize
from rlcore.nets import MLP, DiagNormal
from rlcore.plan import EnvRecipe, Returns, RunPlan, Schedule
from rlcore.types import RolloutBatch
from rlcore.utils import clipped_step

# the reference's actor warm-up: 5 of its 1,395 iterations (1e9 steps // (1024 envs x 700))
REFERENCE_WARMUP = 5 / 1395


@dataclass
class ResiPConfig:
    """ResiP's PPO settings (the reference's defaults, ``base_residual_rl.yaml`` and
    ``actor/residual_diffusion.yaml``)."""

    pretrained: str | None = None  # run dir / .pt of an algo=diffusion_bc run
    # base head settings: must equal the pre-trained run's (checked when loading it); the
    # command line leaves them unset and reads them from it (rlcore.generative.resolve_head)
    horizon: int = 4
    obs_history: int = 1  # observations the policy sees (the BC run's)
    denoising_steps: int = 20
    schedule: str = "cosine"
    clip_x0: float | None = 1.0
    hidden: tuple[int, ...] = (512, 512, 512)
    time_dim: int = 16
    # the base's network layout and activation; None: the pre-trained run's (else the
    # earlier layout "rlcore_v1" with Mish); the residual's activation is its own below
    denoiser: str | None = None
    activation: str | None = None
    # residual policy and critic, both on [state, base action]
    residual_hidden: tuple[int, ...] = (256, 256)
    critic_hidden: tuple[int, ...] = (256, 256)
    # hidden layers of the residual and the critic (Kaiming-normal fan-in weights, zero
    # biases); the base head's is ``activation`` above
    residual_activation: str = "relu"
    critic_last_gain: float = 0.25  # the critic's output layer: orthogonal(gain), bias below
    critic_last_bias: float = 0.25
    residual_scale: float = 0.1  # executed = base + scale * residual (normalised units)
    log_std: float = -1.0  # fixed log-std of the residual's Gaussian
    # the base's chunks: False, the zero-noise DDPM mean path; True, sampled from
    # x_K ~ N(0, I) with the BC run's evaluation sampler (the reference samples its base
    # from random noise); PandaLift's open-loop chunks need it (docs/robots.md)
    base_noise: bool = False
    # PPO
    actor_lr: float = 3e-4  # linear warm-up over actor_warmup, then cosine to 0
    actor_warmup: float = REFERENCE_WARMUP  # fraction of the run's iterations
    critic_lr: float = 5e-3  # cosine-annealed to 0 over the run
    weight_decay: float = 1e-6  # AdamW, both networks
    adam_eps: float = 1e-5
    gamma: float = 0.999
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    vf_coef: float = 1.0
    update_epochs: int = 10
    num_minibatches: int = 32
    target_kl: float | None = 0.1  # checked after every minibatch
    max_grad_norm: float = 1.0  # one clip over the residual's and the critic's gradients
    # env-side settings (rlcore.train)
    normalize_obs: bool = False  # the pre-trained standardisation is used instead
    normalize_reward: bool = True  # clipped at env.clip_reward (5 in the paper)
    rollout_steps: int = 1000  # env steps per sub-env between updates
    total_steps: int = 1_000_000

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r}: choose from {SCHEDULES}")
        if not 0.0 <= self.actor_warmup < 1.0:
            raise ValueError(f"actor_warmup={self.actor_warmup} must be in [0, 1)")

    def plan(self) -> RunPlan:
        """Rollouts of single actions (the frozen base's chunk is executed by the agent)."""
        schedule = Schedule(online_steps=self.total_steps, rollout_steps=self.rollout_steps,
                            num_minibatches=self.num_minibatches)  # fmt: skip
        env = EnvRecipe(normalize_obs=self.normalize_obs, normalize_reward=self.normalize_reward,
                        reward_gamma=self.gamma, obs_history=self.obs_history)  # fmt: skip
        return RunPlan(schedule, env, returns=Returns(self.gamma, self.gae_lambda),
                       gamma=self.gamma, needs_pretrained=True, pretrained=self.pretrained)  # fmt: skip


def warmup_cosine(progress: float, warmup: float) -> float:
    """Learning-rate factor at ``progress`` (fraction of the run done): linear from 0 over
    the first ``warmup`` of the run, then a half cosine to 0 (diffusers'
    ``get_cosine_schedule_with_warmup`` with its steps expressed as fractions of the run)."""
    if progress < warmup:
        return progress / warmup
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (progress - warmup) / (1.0 - warmup))))


def residual_mlp(in_dim: int, out_dim: int, cfg: ResiPConfig, hidden: tuple[int, ...]) -> MLP:
    """The reference's ``build_mlp``: Kaiming-normal (fan-in, ReLU gain) hidden weights and
    zero biases; the output layer is set by the caller."""
    net = MLP(in_dim, out_dim, hidden, cfg.residual_activation)
    with torch.no_grad():
        for index, layer in enumerate(net):
            if isinstance(layer, nn.Linear) and index != net.output_index:
                nn.init.kaiming_normal_(layer.weight, mode="fan_in", nonlinearity="relu")
                nn.init.zeros_(layer.bias)
    return net


class _ResidualPolicy:
    """A stateful evaluation policy: its own open-loop base queue, the residual's mean."""

    def __init__(self, agent: ResiP) -> None:
        self.agent, self.queue = agent, ChunkQueue()

    def episodes_started(self, mask: np.ndarray) -> None:
        self.queue.restart(mask)

    def __call__(self, obs: np.ndarray | dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():  # not inference mode: the queue is updated in place later
            if isinstance(obs, dict):  # a goal task's parts, flattened as the agent reads them
                flat, _ = self.agent.plumbing.obs_input(obs)
            else:
                flat = torch.as_tensor(obs, dtype=torch.float32, device=self.agent.device)
            norm = self.agent.obs_normalizer(flat)
            base = self.queue.next(norm, self.agent.base_chunk)
            mean = self.agent.residual_mean(norm, base)
            return self.agent.executed(base, mean).cpu().numpy()


class ResiP:
    """ResiP agent: ``act``, ``explore``, ``value``, ``update``, ``episodes_started``,
    ``eval_policy``, ``state_dict``."""

    CAPABILITIES = (OnPolicy, PerEnvState, EvalPolicy)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: ResiPConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.plumbing = io = Plumbing(observation_space, action_space, device, "ResiP")
        self.config = config = config or ResiPConfig()
        self.device = io.device
        action_dim = io.step_action_dim  # one step of a chunk
        parts = policy_parts("ddpm", observation_space, action_space, config, self.device)
        head, self.obs_normalizer, self.box = parts.head, parts.obs_normalizer, parts.box
        self.base: DDPMHead = head
        self.base.requires_grad_(False)
        in_dim = io.obs_dim + action_dim  # [state, base action] for both networks
        self.residual = residual_mlp(in_dim, action_dim, config, config.residual_hidden)
        last = nn.Linear(config.residual_hidden[-1], action_dim, bias=False)
        nn.init.zeros_(last.weight)  # training starts exactly at the base policy
        self.residual[-1] = last
        self.critic = residual_mlp(in_dim, 1, config, config.critic_hidden)
        nn.init.orthogonal_(self.critic[-1].weight, config.critic_last_gain)
        nn.init.constant_(self.critic[-1].bias, config.critic_last_bias)
        self.std = torch.tensor(float(np.exp(config.log_std)), device=self.device)
        # one AdamW, a parameter group per network (Adam is per parameter: the same steps
        # as the reference's two optimisers), so one gradient clip covers both networks
        self.optimizer = torch.optim.AdamW(
            [{"params": self.residual.parameters(), "lr": config.actor_lr},
             {"params": self.critic.parameters(), "lr": config.critic_lr}],
            eps=config.adam_eps, weight_decay=config.weight_decay,
        )  # fmt: skip
        self.queue = ChunkQueue()  # the training envs' open-loop base chunks
        self.parts = io.declare(
            counters={"updates": int}, base=self.base, residual=self.residual,
            critic=self.critic, obs_normalizer=self.obs_normalizer, optimizer=self.optimizer,
            queue=self.queue,
        )  # fmt: skip
        self.updates = 0

    # -- the policy -----------------------------------------------------------------
    def base_chunk(self, norm_obs: torch.Tensor) -> torch.Tensor:
        """The frozen base's chunk (B, H, A) in normalised units: the zero-noise path, or
        with ``base_noise`` DPPO's evaluation sampler, which the BC run evaluates with
        (x_K ~ N(0, I), the global torch RNG's draws; its injected draws unclipped, the
        BC run clips them at 10 standard deviations)."""
        if self.config.base_noise:
            return self.base.sample(norm_obs, evaluation=True)
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

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """One action per observation from a FRESH base chunk (its first action): for a
        single decision. Rollouts go through ``explore`` / ``eval_policy``, which run
        each base chunk open loop."""
        norm = self.obs_normalizer(obs)
        base = self.base_chunk(norm)[:, 0]
        mean = self.residual_mean(norm, base)
        residual = mean if deterministic else mean + self.std * torch.randn_like(mean)
        return self.executed(base, residual)

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
        value = self.critic(torch.cat([norm, base], -1)).squeeze(-1)
        channels = {"base_action": base, "residual": residual}
        return self.executed(base, residual), log_prob, value, channels

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(s, base action the env executes next) (GAE's bootstrap values)."""
        norm = self.obs_normalizer(obs.float())
        return self.critic(torch.cat([norm, self.upcoming_base(norm)], -1)).squeeze(-1)

    def upcoming_base(self, norm_obs: torch.Tensor) -> torch.Tensor:
        """(N, A): the base action each training env executes at its next step, without
        consuming it: the next action of its chunk, or, where the chunk is used up, the
        first of a fresh chunk, which the queue keeps for that step (that env's next
        observation is this one, or its episode restarts). A batch that is not the
        training envs' (the final observations of some truncated episodes) gets a fresh
        chunk's first action: which envs they are, hence their place in their chunks, is
        not known here."""
        if not self.queue.holds(len(norm_obs)):
            return self.base_chunk(norm_obs)[:, 0]
        self.queue.refill(norm_obs, self.base_chunk)
        return self.queue.peek()  # not consumed: the env's next step runs this action

    # -- learning -------------------------------------------------------------------
    def update(self, batch: RolloutBatch, progress: float = 0.0) -> dict[str, float]:
        """PPO epochs on the residual and the critic: one loss, one clipped step of both,
        stop at the first minibatch whose approximate KL exceeds ``target_kl``."""
        cfg = self.config
        actor_group, critic_group = self.optimizer.param_groups
        actor_group["lr"] = cfg.actor_lr * warmup_cosine(progress, cfg.actor_warmup)
        critic_group["lr"] = cfg.critic_lr * warmup_cosine(progress, 0.0)
        rows = len(batch)
        minibatch = max(1, rows // cfg.num_minibatches)
        inputs = torch.cat([self.obs_normalizer(batch.obs), batch.extras["base_action"]], -1)
        residual = batch.extras["residual"]
        params = [*self.residual.parameters(), *self.critic.parameters()]
        stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "approx_kl": [],
                                         "clip_fraction": []}  # fmt: skip
        stop = False
        for _ in range(cfg.update_epochs):
            for idx in minibatch_indices(rows, minibatch, self.device):
                dist = DiagNormal(self.residual(inputs[idx]), self.std.expand(residual[idx].shape))
                log_prob = dist.log_prob(residual[idx]).sum(-1)
                policy_loss, approx_kl, clip_frac = clipped_surrogate(
                    log_prob - batch.log_prob[idx], standardize(batch.advantage[idx]), cfg.clip_coef
                )
                new_value = self.critic(inputs[idx]).squeeze(-1)
                value_loss = 0.5 * (new_value - batch.returns[idx]).pow(2).mean()
                loss = policy_loss + cfg.vf_coef * value_loss
                clipped_step(loss, [(self.optimizer, params)], cfg.max_grad_norm)
                for key, value in (("policy_loss", policy_loss), ("value_loss", value_loss),
                                   ("approx_kl", approx_kl), ("clip_fraction", clip_frac)):  # fmt: skip
                    stats[key].append(value.item())
                if cfg.target_kl is not None and approx_kl.item() > cfg.target_kl:
                    stop = True
                    break
            if stop:
                break
        self.updates += 1
        return {**{k: float(np.mean(v)) for k, v in stats.items()},
                "minibatches": len(stats["policy_loss"]), "actor_lr": actor_group["lr"],
                "critic_lr": critic_group["lr"]}  # fmt: skip

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
