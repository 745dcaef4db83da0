"""Proximal Policy Optimization (PPO), clipped objective, continuous or discrete actions.

Paper: J. Schulman et al., "Proximal Policy Optimization Algorithms", arXiv:1707.06347
(2017). Defaults follow CleanRL's ``ppo_continuous_action.py`` for MuJoCo: 2048 steps
per rollout, 32 minibatches, 10 epochs, clip 0.2, GAE lambda 0.95, lr 3e-4 annealed
linearly to 0, 64x64 tanh networks with orthogonal init, state-independent log-std,
observation and reward normalisation (env wrappers, statistics saved in checkpoints).

Discrete actions (``gym.spaces.Discrete``, e.g. CartPole-v1): the Gaussian actor is
replaced by a categorical one (``rlcore.nets.CategoricalActor``: logits from the same
64x64 tanh MLP, orthogonal init with gain 0.01 on the last layer, as CleanRL's ``ppo.py``);
actions are int64 indices 0..n-1 (stored so in the rollout buffer, never clipped), the
deterministic action is the most likely one, and everything else (GAE, clipped surrogate,
value loss, entropy bonus) is unchanged. CleanRL's CartPole defaults differ from MuJoCo's
and live in ``configs/algo_env/ppo_cartpole.yaml``.

Pixels (CleanRL's ``ppo_atari_envpool.py``): with ``encoder`` set (``nature`` for Atari,
``configs/algo_env/ppo_atari.yaml``) the image parts go through one ``rlcore.nets`` encoder
shared by actor and critic (both losses train it), orthogonally initialised with gain
sqrt(2) as CleanRL's ``layer_init``; the actor's logits and the critic's value read its
features (``hidden`` layers in between, none in CleanRL's). Images are never standardised.

Departures from the paper:
* Value loss is clipped (CleanRL default), advantages are normalised per minibatch,
  global gradient norm clipped at 0.5, separate actor and critic networks.
* Truncated episodes bootstrap from V(final observation) instead of being treated as
  terminal (rlcore.buffers.compute_gae).

Speed options (off by default, ``compile="auto"`` on the command line; same maths, results
equal to float tolerance, tested): ``fused_optimizer`` (one-kernel Adam) and ``compile``
(the whole minibatch step, loss, gradients, clipping and Adam, as one ``torch.compile``d
graph via ``rlcore.compiled.CompiledAdamStep``: a few fused kernels instead of ~200 small
ops and the autograd bookkeeping; the rollout's per-step actor + critic evaluation is
compiled too, drawing the same action noise as eager; needs a C++ compiler (eager, with
one warning, without one), costs ~10-20 s of compilation at start, so ``"auto"`` compiles
only runs of more than 100k steps (``rlcore.speed``); a non-finite loss is reported after
that minibatch's step instead of before it). With discrete actions ``compile`` covers
the minibatch step only; the rollout's categorical sampling stays eager.
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
from rlcore.compiled import CompiledAdamStep, compile_graph
from rlcore.losses import clipped_surrogate, standardize
from rlcore.nets import (
    MLP,
    CategoricalActor,
    GaussianActor,
    observation_encoder,
    orthogonal_init,
)
from rlcore.plan import EnvRecipe, Returns, RunPlan, Schedule
from rlcore.spaces import BOX, DISCRETE, action_kind
from rlcore.speed import resolve_speed_modes
from rlcore.types import RolloutBatch
from rlcore.utils import adam, ensure_finite


@dataclass
class PPOConfig:
    """PPO hyper-parameters (CleanRL MuJoCo defaults)."""

    lr: float = 3e-4  # Adam learning rate (actor and critic)
    anneal_lr: bool = True  # decay the learning rate linearly to 0 over the run
    gamma: float = 0.99  # discount
    gae_lambda: float = 0.95  # GAE lambda
    num_minibatches: int = 32  # minibatches per epoch
    update_epochs: int = 10  # passes over each rollout
    clip_coef: float = 0.2  # policy ratio clip
    clip_value_loss: bool = True  # clip the value update around the old value
    ent_coef: float = 0.0  # entropy bonus
    vf_coef: float = 0.5  # value loss weight
    max_grad_norm: float = 0.5  # global gradient norm clip
    norm_adv: bool = True  # standardise advantages per minibatch
    target_kl: float | None = None  # stop the epochs early above this approx. KL
    hidden: tuple[int, ...] = (64, 64)  # hidden widths of actor and critic
    encoder: str | None = None  # image parts: rlcore.nets encoder shared by actor and critic
    activation: str = "tanh"  # hidden activation
    init_log_std: float = 0.0  # initial policy log-std (Box actions only)
    fused_optimizer: bool = False  # fused Adam (CleanRL uses the default Adam)
    compile: bool | str = False  # True | False | "auto": the minibatch step as one graph
    # env-side recipe settings (applied by rlcore.train when building the envs)
    normalize_obs: bool = True  # running observation standardisation (clip 10)
    normalize_reward: bool = True  # scale rewards by the std of discounted returns (clip 10)
    # loop settings
    rollout_steps: int = 2048  # env steps per sub-env between updates
    total_steps: int = 1_000_000  # default training length in env steps

    def plan(self) -> RunPlan:
        """Rollouts of ``rollout_steps`` per sub-env, then an update."""
        schedule = Schedule(online_steps=self.total_steps, rollout_steps=self.rollout_steps,
                            num_minibatches=self.num_minibatches)  # fmt: skip
        env = EnvRecipe(normalize_obs=self.normalize_obs, normalize_reward=self.normalize_reward,
                        reward_gamma=self.gamma)  # fmt: skip
        return RunPlan(schedule, env, returns=Returns(self.gamma, self.gae_lambda),
                       gamma=self.gamma, compile=self.compile)  # fmt: skip


class PPO:
    """PPO agent: ``act``, ``explore``, ``value``, ``update(rollout)``, ``state_dict``."""

    CAPABILITIES = (OnPolicy,)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box | gym.spaces.Discrete,
        config: PPOConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.plumbing = io = Plumbing(
            observation_space, action_space, device, "PPO", (BOX, DISCRETE)
        )
        self.device = io.device
        # effective compile: "auto" compiles long runs only; no C++ compiler -> eager + warning
        self.config = config = resolve_speed_modes(config or PPOConfig(), self.device)
        self.discrete = action_kind(action_space) == DISCRETE
        self.encoder = observation_encoder(io.obs, config.encoder)  # None: vectors
        if self.encoder is not None and config.normalize_obs and not io.obs.keyed:
            # beside proprioception (a dict) the env-side normaliser takes the vector parts
            # only; an image alone would be all it standardises
            raise ValueError("images are never standardised: set algo.normalize_obs=false")
        features = io.obs_dim if self.encoder is None else self.encoder.out_dim
        if self.discrete:
            self.actor = CategoricalActor(features, io.action_dim, config.hidden, config.activation)
        else:
            self.actor = GaussianActor(
                features, io.action_dim, config.hidden, config.activation, config.init_log_std
            )
        self.critic = MLP(features, 1, config.hidden, config.activation)
        networks: dict[str, nn.Module] = {"actor": self.actor, "critic": self.critic}
        if self.encoder is not None:
            networks["encoder"] = self.encoder
        self.parameters = [p for network in networks.values() for p in network.parameters()]
        self.optimizer = adam(self.parameters, config.lr, config.fused_optimizer, eps=1e-5)
        self.parts = io.declare(
            counters={"updates": int}, **networks, optimizer=self.optimizer,
        )  # fmt: skip
        # initialised on the device, as before Parts moved the networks (same draws on GPU)
        orthogonal_init(self.critic)
        orthogonal_init(self.critic[-1], gain=1.0)
        if self.encoder is not None:
            orthogonal_init(self.encoder)  # CleanRL's layer_init: gain sqrt(2), bias 0
        self._compiled_step = (
            CompiledAdamStep(
                networks,
                self._minibatch_losses,
                self.optimizer,
                config.max_grad_norm,
            )
            if config.compile
            else None
        )
        self._explore_graph = (
            compile_graph(self._explore_with_noise)
            if config.compile and not self.discrete
            else None
        )
        self.updates = 0

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Action(s) for observation(s) already normalised like the training env's
        (float32 vectors, or int64 indices for a discrete action space)."""
        action, _ = self.actor(self._features(obs), deterministic=deterministic)
        return action

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        """What actor and critic read: the observation, or its encoder's features."""
        return obs if self.encoder is None else self.encoder(obs)

    @torch.no_grad()
    def explore(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sampled action, its log-probability and V(obs), for the rollout."""
        if self._explore_graph is not None:
            # the standard-normal draws torch.normal(mean, std) would make, drawn eagerly
            # (a random op inside the C++-wrapped graph is slow), then mean + std * noise
            noise = torch.randn(obs.shape[0], self.actor.log_std.shape[0], device=obs.device)
            return self._explore_graph(obs, noise)
        features = self._features(obs)
        action, log_prob = self.actor(features)
        return action, log_prob, self.critic(features).squeeze(-1)

    def _explore_with_noise(
        self, obs: torch.Tensor, noise: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        features = self._features(obs)
        dist = self.actor.distribution(features)
        action = dist.mean + dist.std * noise
        return action, dist.log_prob(action).sum(-1), self.critic(features).squeeze(-1)

    @torch.no_grad()
    def value(self, obs: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        """V(obs): a float tensor, or a dict of parts (images beside vectors) as is."""
        return self.critic(self._features(obs if isinstance(obs, dict) else obs.float())).squeeze(-1)

    def update(self, batch: RolloutBatch, progress: float = 0.0) -> dict[str, float]:
        """``update_epochs`` passes of clipped-surrogate minibatch SGD over one rollout.

        ``progress`` in [0, 1) is the fraction of training done (learning-rate annealing).
        """
        cfg = self.config
        lr = cfg.lr * (1.0 - progress) if cfg.anneal_lr else cfg.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        n = len(batch)
        minibatch = max(1, n // cfg.num_minibatches)
        clip_fracs, approx_kl = [], torch.tensor(0.0)
        for _ in range(cfg.update_epochs):
            for rows in minibatch_indices(n, minibatch, self.device):
                mb = batch.index(rows)
                inputs = (mb.obs, mb.action, mb.log_prob, mb.value, mb.advantage, mb.returns)
                if self._compiled_step is not None:  # the whole step at once
                    _, policy_loss, value_loss, entropy, approx_kl, clip_frac = self._compiled_step(
                        *inputs
                    )
                    ensure_finite(policy_loss=policy_loss, value_loss=value_loss)
                else:
                    loss, policy_loss, value_loss, entropy, approx_kl, clip_frac = (
                        self._minibatch_losses(*inputs)
                    )
                    ensure_finite(policy_loss=policy_loss, value_loss=value_loss)
                    self.optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(self.parameters, cfg.max_grad_norm)
                    self.optimizer.step()
                clip_fracs.append(clip_frac.item())
            if cfg.target_kl is not None and approx_kl.item() > cfg.target_kl:
                break
        self.updates += 1
        var_returns = batch.returns.var().item()
        explained = (
            float("nan")
            if var_returns == 0
            else 1.0 - (batch.returns - batch.value).var().item() / var_returns
        )
        metrics = {
            "policy_loss": policy_loss.item(),
            "value_loss": value_loss.item(),
            "entropy": entropy.item(),
            "approx_kl": approx_kl.item(),
            "clip_fraction": float(np.mean(clip_fracs)),
            "explained_variance": explained if math.isfinite(explained) else 0.0,
            "learning_rate": lr,
        }
        if not self.discrete:
            metrics["std"] = self.actor.log_std.exp().mean().item()
        return metrics

    def _minibatch_losses(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        old_log_prob: torch.Tensor,
        old_value: torch.Tensor,
        advantage: torch.Tensor,
        returns: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        """(total, policy, value, entropy, approx. KL, clip fraction) for one minibatch."""
        cfg = self.config
        features = self._features(obs)
        log_prob, entropy = self.actor.log_prob_entropy(features, action)
        entropy = entropy.mean()
        if cfg.norm_adv:
            advantage = standardize(advantage)
        policy_loss, approx_kl, clip_frac = clipped_surrogate(
            log_prob - old_log_prob, advantage, cfg.clip_coef
        )
        new_value = self.critic(features).squeeze(-1)
        if cfg.clip_value_loss:
            clipped = old_value + (new_value - old_value).clamp(-cfg.clip_coef, cfg.clip_coef)
            squared = torch.max((new_value - returns).pow(2), (clipped - returns).pow(2))
            value_loss = 0.5 * squared.mean()
        else:
            value_loss = 0.5 * (new_value - returns).pow(2).mean()
        loss = policy_loss - cfg.ent_coef * entropy + cfg.vf_coef * value_loss
        return loss, policy_loss, value_loss, entropy, approx_kl, clip_frac

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
