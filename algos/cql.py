"""Conservative Q-Learning (CQL), offline; with ``calibrate=True`` it is Cal-QL.

Paper: A. Kumar, A. Zhou, G. Tucker, S. Levine, "Conservative Q-Learning for Offline
Reinforcement Learning", NeurIPS 2020 (arXiv:2006.04779), the CQL(H) variant on a SAC
learner. Defaults follow CORL's ``cql.py`` (D4RL locomotion): actor and twin critics
3x256 ReLU, policy lr 3e-5 (temperature too), Q lr 3e-4, batch 256, tau 5e-3 every
step, automatic entropy tuning toward -|A|, no entropy in the backup, 10 sampled actions
with importance sampling, cql_alpha 10 without the Lagrange multiplier, states
standardised (+1e-3 std), 1M steps. Reward scale 1 / bias 0 for locomotion (CORL's
duplicated 5 / -1 defaults are its antmaze recipe; set them per recipe).

One update, every loss taken with the parameters from before the update:
(1) a ~ pi(s) with log pi; temperature loss -mean(log alpha * (log pi + H_target));
(2) policy loss mean(alpha log pi - min_i Q_i(s, a)) (behaviour cloning
    mean(alpha log pi - log pi(a_data|s)) for the first ``bc_steps`` updates);
(3) TD target y = r + gamma (1 - terminated) min_i Q'_i(s', a'), a' ~ pi(s') (max over
    ``cql_n_actions`` samples of it with ``cql_max_target_backup``; minus alpha log pi(a'|s')
    with ``backup_entropy``; the min over ``critic_subset`` random target critics, one draw
    per update as ``rlcore.algos.sac.subset_min``, when set: WSRL); TD loss = sum over critics of the MSE;
    per update as ``rlcore.algos.sac.subset_min``, when set: WSRL); TD loss = sum over
    critics of the MSE;
(4) CQL penalty per critic i: N uniform actions in the action box, N from pi(.|s) and N
    from pi(.|s') (all detached), ALL scored by Q_i at the current state s. With importance
    sampling, values are Q_i(s, a_rand) - log U(a_rand), Q_i(s, a_next) - log pi(a_next|s'),
    Q_i(s, a_cur) - log pi(a_cur|s) (3N values); without it, [Q_rand, Q_data, Q_next,
    Q_cur]. ood = T logsumexp(values / T); diff_i = mean_batch clamp(ood - Q_i(s, a_data));
    penalty_i = cql_alpha diff_i, or alpha' cql_alpha (diff_i - gap) with the Lagrange
    multiplier alpha' = clamp(exp(log alpha'), 0, 1e6), log alpha' (init 1) minimising
    -mean_i penalty_i at lr critic_lr; critic loss = TD loss + sum_i penalty_i
    (``cql_lagrange_form="wsrl"``: alpha' = softplus(p), p from softplus^-1(1), and no
    cql_alpha factor, as zhouzypaul/wsrl's ``cql_autotune_alpha`` for WSRL's antmaze);
(5) optimiser steps: temperature, actor, (alpha'), critics; then Polyak targets.

Cal-QL (``calibrate=True``, see algos/cal_ql.py) adds one term: before the logsumexp,
Q_i(s, a_cur) and Q_i(s, a_next) become max(Q_i, mc_return) (Monte-Carlo return-to-go of
the batch); the random-action and data values are not bounded, and the importance-sampling
log pi is subtracted after the bound. ``bound_rate`` logs how often the bound was active.

Departures from CORL and the paper:
* The twin critics are one batched ensemble (``num_critics`` may be raised), and the data
  action plus all 3N sampled actions are scored in ONE critic call on (B * (1 + 3N)) rows;
  the N-sample actor draws for s and s' (and the target's) are one actor call. Same maths.
* Every loss is computed first and checked for NaN/inf before any optimiser steps
  (``NonFiniteLossError`` leaves all parameters untouched; with ``compile=True`` the check
  follows the graph, so the failing update's steps have been applied). CORL also computes all losses
  from the pre-update parameters, so the maths is the same; critic parameters get no
  gradient from the policy loss and alpha is detached in the policy loss (CORL zeroes
  those stray gradients before they are used).
* Uniform actions are drawn in the environment's action box and their log-density is
  -sum log(high - low) (CORL: [-1, 1], -|A| log 2). Policy log-densities are in env units
  too, so importance weights stay consistent; for a [-1, 1] box it is CORL exactly.
* Behaviour cloning (``bc_steps`` > 0) uses the log-likelihood of the dataset action
  (edge actions clipped to +-(1 - 1e-6) before atanh); some CORL versions score a fresh
  policy sample instead. Off by default (bc_steps 0), as in CORL.
* ``layer_norm`` / ``actor_layer_norm`` (off by default) add LayerNorm (before the
  activation) to the critics' / actor's hidden layers: WSRL's pre-training (algos/wsrl.py).
* ``alpha_multiplier`` and ``target_update_period`` are not exposed (CORL: 1 and 1).
* Opt-in ``precision="bf16"``: hidden-layer matmuls in bfloat16 autocast (output layers,
  log-densities, the logsumexp, parameters and losses float32); a speed mode (~2.5x per
  step on CPUs with AMX: the penalty scores B * (1 + 3N) rows per critic).
* ``compile=True``: the whole update -- ``_losses``, the gradients of their sum, the Adam
  steps of policy, critics, temperature and alpha', Polyak -- runs as one
  ``torch.compile``d graph of ``_update_steps``, the function the eager update runs
  (``rlcore.compiled.CompiledUpdate``; sampling draws from torch's generator as eager code
  does). Same maths, equal to float tolerance; 1.1-1.5x the eager updates/s at Hopper
  shapes (fp32, 1 thread, with the machine's load; ``benchmarks.throughput`` section
  ``compile``); needs a C++ compiler (eager with one warning without one); ``"auto"``
  compiles runs of more than 100k steps (``rlcore.speed``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.algos.sac import subset_min
from rlcore.capabilities import ActionValue, StateStatistics
from rlcore.compiled import CompiledUpdate, EagerSteps, Steps, detached_call
from rlcore.losses import ensemble_mse
from rlcore.nets import (
    ObsNormalizer,
    QEnsemble,
    TanhGaussianActor,
    orthogonal_init,
    xavier_uniform_init,
)
from rlcore.plan import DataRecipe, RunPlan, Schedule
from rlcore.speed import resolve_speed_modes
from rlcore.types import Batch
from rlcore.utils import adam, ensure_finite, mixed_precision, scalars

NETWORK_INITS = ("cql", "orthogonal", "default")


LAGRANGE_FORMS = ("corl", "wsrl")  # CQLConfig.cql_lagrange_form

@dataclass
class CQLConfig:
    """CQL hyper-parameters (CORL D4RL-locomotion defaults)."""

    gamma: float = 0.99  # discount
    tau: float = 5e-3  # Polyak rate of the target critics (every update)
    actor_lr: float = 3e-5  # policy learning rate (CORL policy_lr)
    critic_lr: float = 3e-4  # Q learning rate (CORL qf_lr); also the Lagrange alpha' lr
    alpha_lr: float = 3e-5  # temperature learning rate (CORL: the policy lr)
    hidden: tuple[int, ...] = (256, 256, 256)  # hidden widths of the actor (and critics)
    critic_hidden: tuple[int, ...] | None = None  # hidden widths of the critics; None -> hidden
    num_critics: int = 2  # critics; targets and the policy use their minimum
    critic_subset: int | None = None  # TD target: min over this many random target critics
    layer_norm: bool = False  # LayerNorm in the critics' hidden layers (WSRL's ensemble)
    actor_layer_norm: bool = False  # LayerNorm in the actor's hidden layers (WSRL)
    # "cql": critic hidden layers orthogonal gain sqrt(2), critic output orthogonal gain 1e-2,
    # actor hidden layers nn.Linear default, actor output Xavier-uniform gain 1e-2, biases 0
    # (CORL cql.py, orthogonal_init=True); "orthogonal": every actor and critic layer
    # orthogonal gain sqrt(2), biases 0 (CORL cal_ql.py); "default": hidden layers nn.Linear
    # default, outputs Xavier-uniform gain 1e-2, biases 0 (CORL orthogonal_init=False)
    network_init: str = "cql"
    log_std_multiplier: float = 1.0  # initial m of the policy's log_std = m * raw + o
    log_std_offset: float = -1.0  # initial o (m and o are trained with the policy)
    log_std_min: float = -20.0  # clamp of the policy log-std, lower
    log_std_max: float = 2.0  # clamp of the policy log-std, upper
    init_alpha: float = 1.0  # initial temperature (fixed value if autotune_alpha is off)
    autotune_alpha: bool = True  # learn the temperature toward target_entropy
    target_entropy: float | None = None  # None -> -action_dim
    backup_entropy: bool = False  # subtract alpha log pi(a'|s') in the TD target
    bc_steps: int = 0  # first updates whose policy loss is behaviour cloning
    cql_alpha: float = 10.0  # weight of the conservative penalty
    cql_n_actions: int = 10  # sampled actions per state for each of random, pi(s), pi(s')
    cql_importance_sample: bool = True  # subtract log-densities of the sampled actions
    cql_lagrange: bool = False  # tune a multiplier alpha' toward cql_target_action_gap
    cql_target_action_gap: float = -1.0  # gap of the Lagrange variant
    # the Lagrange variant's multiplier: "corl" exp(log alpha') x cql_alpha, from e (CORL);
    # "wsrl" softplus(param), from 1, no cql_alpha factor (zhouzypaul/wsrl cql_autotune_alpha)
    cql_lagrange_form: str = "corl"
    cql_temp: float = 1.0  # temperature of the logsumexp
    cql_max_target_backup: bool = False  # TD target: max over cql_n_actions samples of a'
    cql_clip_diff_min: float = -math.inf  # clamp of (ood - Q_data) per state, lower
    cql_clip_diff_max: float = math.inf  # clamp of (ood - Q_data) per state, upper
    normalize_states: bool = True  # standardise observations with dataset statistics
    normalize_reward_by_returns: bool = False  # r * 1000 / (max - min dataset episode return)
    reward_scale: float = 1.0  # dataset and online rewards r <- reward_scale * r + reward_bias
    reward_bias: float = 0.0  # (antmaze recipes: scale 10, bias -5)
    fused_optimizer: bool = True  # fused Adam kernel (same maths, faster)
    precision: str = "float32"  # "bf16": updates' matmuls in bfloat16 autocast (speed mode)
    compile: bool | str = False  # True | False | "auto": the update as one compiled graph
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 256  # transitions per gradient step
    total_steps: int = 1_000_000  # gradient steps

    def __post_init__(self) -> None:
        if self.cql_lagrange_form not in LAGRANGE_FORMS:
            raise ValueError(
                f"cql_lagrange_form={self.cql_lagrange_form!r}: one of {LAGRANGE_FORMS}"
            )

    def plan(self) -> RunPlan:
        """Offline gradient steps only."""
        data = DataRecipe(normalize_reward_by_returns=self.normalize_reward_by_returns,
                          reward_scale=self.reward_scale, reward_bias=self.reward_bias,
                          normalize_states=self.normalize_states, required=True)  # fmt: skip
        schedule = Schedule(offline_steps=self.total_steps, batch_size=self.batch_size)
        return RunPlan(schedule, data=data, gamma=self.gamma, precision=self.precision,
                       compile=self.compile)  # fmt: skip


def cql_gap(
    q_data: torch.Tensor,
    q_rand: torch.Tensor,
    q_next: torch.Tensor,
    q_cur: torch.Tensor,
    log_density_rand: float,
    log_pi_next: torch.Tensor,
    log_pi_cur: torch.Tensor,
    temp: float = 1.0,
    importance_sample: bool = True,
    clip: tuple[float, float] = (-math.inf, math.inf),
    lower_bound: torch.Tensor | None = None,
) -> torch.Tensor:
    """CQL's per-critic gap diff_i = mean_b clamp(T logsumexp(values / T) - Q_i(s, a_data)).

    q_data (E, B); q_rand, q_next, q_cur (E, B, N): critic values at the CURRENT states of
    uniform actions, of actions from pi(.|s') and of actions from pi(.|s); log_pi_next,
    log_pi_cur (B, N) their policy log-densities; ``log_density_rand`` the uniform
    log-density. ``lower_bound`` (B,) is Cal-QL's term: q_next and q_cur are replaced by
    max(q, lower_bound) before the importance weights. Returns (E,).
    """
    if lower_bound is not None:
        bound = lower_bound[:, None]
        q_next, q_cur = torch.maximum(q_next, bound), torch.maximum(q_cur, bound)
    if importance_sample:
        values = [q_rand - log_density_rand, q_next - log_pi_next, q_cur - log_pi_cur]
    else:
        values = [q_rand, q_data.unsqueeze(-1), q_next, q_cur]
    ood = temp * torch.logsumexp(torch.cat(values, dim=-1) / temp, dim=-1)
    return (ood - q_data).clamp(*clip).mean(dim=-1)


class CQL:
    """CQL agent (Cal-QL with ``calibrate=True``): ``act``, ``update(batch)``,
    ``state_dict`` / ``load_state_dict``.

    ``calibrate`` is a plain attribute saved in the state dict: Cal-QL bounds the policy
    actions' Q by ``batch.mc_return`` while it is True. An offline-to-online loop may set it
    to False at the switch to online data (CORL's ``switch_calibration``); nothing here
    switches it.
    """

    CAPABILITIES = (StateStatistics, ActionValue)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: CQLConfig | None = None,
        device: str | torch.device = "cpu",
        calibrate: bool = False,
    ) -> None:
        # effective precision / compile (float32 where bf16 is emulated, eager without a compiler)
        self.config = config = resolve_speed_modes(config or CQLConfig(), device)
        self.plumbing = io = Plumbing(
            observation_space, action_space, device, "Cal-QL" if calibrate else "CQL"
        )
        if config.network_init not in NETWORK_INITS:
            raise ValueError(
                f"unknown network_init '{config.network_init}', choose from {NETWORK_INITS}"
            )
        if config.critic_subset is not None and not 1 <= config.critic_subset <= config.num_critics:
            raise ValueError(
                f"critic_subset={config.critic_subset} must be in [1, num_critics="
                f"{config.num_critics}] (or None for the min over all critics)"
            )
        low, high = io.low, io.high
        if not (np.isfinite(low).all() and np.isfinite(high).all() and (high > low).all()):
            raise ValueError(
                f"{type(self).__name__} needs a bounded action box, got {action_space}"
            )
        self.device = io.device
        self.calibrate = calibrate
        self.action_dim = action_dim = io.action_dim
        self.obs_normalizer = ObsNormalizer(io.obs_dim)
        self.actor = TanhGaussianActor(
            io.obs_dim, action_dim, low, high, config.hidden, layer_norm=config.actor_layer_norm,
            log_std_min=config.log_std_min, log_std_max=config.log_std_max,
            log_std_affine=(config.log_std_multiplier, config.log_std_offset),
        )  # fmt: skip
        critic_hidden = config.hidden if config.critic_hidden is None else config.critic_hidden
        self.critic = QEnsemble(
            io.obs_dim, action_dim, config.num_critics, critic_hidden, layer_norm=config.layer_norm
        )
        self._init_networks(config.network_init)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(math.log(config.init_alpha), requires_grad=True)
        # the Lagrange multiplier's parameter: log alpha' (CORL, e at the start) or the
        # softplus inverse of 1 (wsrl)
        start = 1.0 if config.cql_lagrange_form == "corl" else math.log(math.e - 1.0)
        self.log_alpha_prime = torch.tensor(start, requires_grad=True)
        self.target_entropy = (
            -float(action_dim) if config.target_entropy is None else config.target_entropy
        )
        fused = config.fused_optimizer
        self.actor_optimizer = adam(self.actor.parameters(), config.actor_lr, fused)
        self.critic_optimizer = adam(self.critic.parameters(), config.critic_lr, fused)
        self.alpha_optimizer = adam([self.log_alpha], config.alpha_lr, fused)
        self.alpha_prime_optimizer = adam([self.log_alpha_prime], config.critic_lr, fused)
        self.parts = io.declare(
            counters={"updates": int, "calibrate": bool}, obs_normalizer=self.obs_normalizer,
            actor=self.actor, critic=self.critic, target_critic=self.target_critic,
            log_alpha=self.log_alpha, log_alpha_prime=self.log_alpha_prime,
            actor_optimizer=self.actor_optimizer, critic_optimizer=self.critic_optimizer,
            alpha_optimizer=self.alpha_optimizer, alpha_prime_optimizer=self.alpha_prime_optimizer,
        )  # fmt: skip
        self.low, self.high = io.bounds()
        self.random_log_density = -float(np.log(high.astype(np.float64) - low).sum())
        modules = {"actor": self.actor, "critic": self.critic, "target_critic": self.target_critic}
        optimizers = {"actor": self.actor_optimizer, "critic": self.critic_optimizer}
        if config.cql_lagrange:
            optimizers["alpha_prime"] = self.alpha_prime_optimizer
        if config.autotune_alpha:
            optimizers["alpha"] = self.alpha_optimizer
        self._stepped = tuple(optimizers)  # the optimisers every update steps
        self._steps = EagerSteps(modules, optimizers)
        # compile: the same _update_steps as one graph (rlcore.compiled.CompiledUpdate)
        self._update_graph = (
            CompiledUpdate(
                self._update_steps, modules, optimizers,
                free=(self.log_alpha, self.log_alpha_prime),
            )
            if config.compile
            else None
        )  # fmt: skip
        self.updates = 0

    def _init_networks(self, scheme: str) -> None:
        actor, critic = self.actor.net, self.critic.net
        if scheme == "orthogonal":
            orthogonal_init(actor)
            orthogonal_init(critic)
            return
        if scheme == "cql":
            orthogonal_init(critic)
            orthogonal_init(critic.output_layer, gain=1e-2)
        else:
            xavier_uniform_init(critic.output_layer, gain=1e-2)
        xavier_uniform_init(actor[-1], gain=1e-2)

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Action for raw observation(s), in the box: a sample from the tanh-Gaussian
        policy, or tanh of its mean (the mode of the pre-tanh Gaussian) when
        ``deterministic``."""
        action, _ = self.actor(
            self.obs_normalizer(obs), deterministic=deterministic, with_log_prob=False
        )
        return torch.clamp(action, self.low, self.high)

    def action_value(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Mean of the critics' Q(s, a) for raw observations (B,), differentiable in both
        (an adversarial dataset corruption attacks it: rlcore.offline.corruption)."""
        return self.critic(self.obs_normalizer(obs), action).mean(0)

    def policy_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The greedy action for raw observations, differentiable in them."""
        action, _ = self.actor(self.obs_normalizer(obs), deterministic=True, with_log_prob=False)
        return torch.clamp(action, self.low, self.high)

    def update(self, batch: Batch) -> dict[str, float]:
        """One gradient step of every part (see the module docstring, (1)-(5))."""
        cfg = self.config
        if self.calibrate and batch.mc_return is None:
            raise ValueError(
                "Cal-QL (calibrate=True) needs batch.mc_return, the Monte-Carlo return-to-go "
                "of each transition (offline datasets provide it)"
            )
        obs, next_obs = self.obs_normalizer(batch.obs), self.obs_normalizer(batch.next_obs)
        bound = batch.mc_return if self.calibrate else None
        inputs = (obs, batch.action, batch.reward, next_obs, batch.terminated, bound)
        behaviour_cloning = self.updates < cfg.bc_steps
        if self._update_graph is None:
            losses, stats = self._update_steps(
                self._steps, self.log_alpha, self.log_alpha_prime, *inputs, behaviour_cloning
            )
        else:  # the graph steps before the losses come back: checked after the update
            losses, stats = self._update_graph(*inputs, behaviour_cloning)
            ensure_finite(**losses)
        self.updates += 1
        return scalars({**losses, **stats})

    def _update_steps(
        self,
        steps: Steps,
        log_alpha: torch.Tensor,
        log_alpha_prime: torch.Tensor,
        *inputs: Any,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The update, eager or traced into the compiled graph: ``_losses`` (``inputs``:
        the batch's tensors, then the behaviour-cloning flag), one backward pass of their
        sum (every loss reaches only its own parameters: critics are detached in the
        policy loss, alpha and the sampled actions elsewhere), a step of every optimiser
        in use, then Polyak."""
        *data, behaviour_cloning = inputs
        losses, stats = steps.minimise(
            self._stepped, self._losses, *data, log_alpha, log_alpha_prime, behaviour_cloning
        )
        steps.polyak("target_critic", "critic", self.config.tau)
        return losses, stats

    def _losses(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        bound: torch.Tensor | None,
        log_alpha: torch.Tensor,
        log_alpha_prime: torch.Tensor,
        behaviour_cloning: bool,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """(losses, detached statistics) of one update, all from the current parameters.
        ``bound`` is Cal-QL's mc_return (None for CQL). Each loss has gradients only for
        its own part, so one backward pass of their sum gives every part's gradient."""
        cfg = self.config
        size, n, dim = obs.shape[0], cfg.cql_n_actions, self.action_dim
        alpha = log_alpha.detach().exp()
        with mixed_precision(cfg.precision, self.device):
            # temperature and policy losses from a ~ pi(s), critics as they are now
            pi_action, log_prob = self.actor(obs)
            alpha_loss = -(log_alpha * (log_prob.detach() + self.target_entropy)).mean()
            if behaviour_cloning:
                actor_loss = (alpha * log_prob - self.actor.log_prob(obs, action)).mean()
            else:  # gradients reach the actions, not the critics
                q_pi = detached_call(self.critic, obs, pi_action).min(0).values
                actor_loss = (alpha * log_prob - q_pi).mean()

            with torch.no_grad():
                # one actor call: N samples at s, N at s' (penalty) and 1 or N at s' (target)
                n_backup = n if cfg.cql_max_target_backup else 1
                sample_obs = torch.cat(
                    [obs.repeat_interleave(n, 0), next_obs.repeat_interleave(n + n_backup, 0)]
                )
                sampled, sampled_log_prob = self.actor(sample_obs)
                cur_action, next_all = sampled.split([size * n, size * (n + n_backup)])
                cur_log_prob, next_all_log_prob = sampled_log_prob.split(
                    [size * n, size * (n + n_backup)]
                )
                next_all = next_all.view(size, n + n_backup, dim)
                next_all_log_prob = next_all_log_prob.view(size, n + n_backup)
                next_action, backup_action = next_all.split([n, n_backup], dim=1)
                next_log_prob, backup_log_prob = next_all_log_prob.split([n, n_backup], dim=1)
                cur_action, cur_log_prob = cur_action.view(size, n, dim), cur_log_prob.view(size, n)

                backup_q = self.target_critic(
                    next_obs.repeat_interleave(n_backup, 0), backup_action.reshape(-1, dim)
                )
                next_v, best = subset_min(backup_q, cfg.critic_subset).view(size, n_backup).max(1)
                if cfg.backup_entropy:
                    next_v = next_v - alpha * backup_log_prob.gather(1, best[:, None]).squeeze(1)
                target_q = reward + cfg.gamma * (1.0 - terminated) * next_v
                random_action = self.low + (self.high - self.low) * torch.rand(
                    size, n, dim, device=self.device
                )

            # one critic call at s: the data action, then N random, N from pi(s'), N from pi(s)
            actions = torch.cat([action.unsqueeze(1), random_action, next_action, cur_action], 1)
            rows = actions.shape[1]
            q_all = self.critic(
                obs.unsqueeze(1).expand(size, rows, obs.shape[-1]).reshape(size * rows, -1),
                actions.reshape(size * rows, dim),
            ).view(-1, size, rows)
            q_data = q_all[..., 0]
            q_rand, q_next, q_cur = q_all[..., 1:].split(n, dim=-1)
            td_loss = ensemble_mse(q_data, target_q)
            diff = cql_gap(
                q_data, q_rand, q_next, q_cur, self.random_log_density, next_log_prob, cur_log_prob,
                cfg.cql_temp, cfg.cql_importance_sample, (cfg.cql_clip_diff_min, cfg.cql_clip_diff_max),
                bound,
            )  # fmt: skip
            lagrange = {}
            if cfg.cql_lagrange:
                if cfg.cql_lagrange_form == "corl":
                    alpha_prime, weight = log_alpha_prime.exp().clamp(0.0, 1e6), cfg.cql_alpha
                else:  # wsrl: LeqLagrangeMultiplier, softplus parameterisation
                    alpha_prime, weight = torch.nn.functional.softplus(log_alpha_prime), 1.0
                gap = diff - cfg.cql_target_action_gap
                penalty = (alpha_prime.detach() * weight * gap).sum()
                lagrange["alpha_prime_loss"] = -(alpha_prime * weight * gap.detach()).mean()
            else:
                penalty = cfg.cql_alpha * diff.sum()
        losses = {"critic_loss": td_loss + penalty, "actor_loss": actor_loss, **lagrange}
        if cfg.autotune_alpha:
            losses["alpha_loss"] = alpha_loss
        stats = {
            "td_loss": td_loss,
            "cql_penalty": penalty,
            "cql_diff": diff.mean(),
            "q": q_data.mean(),
            "q_rand": q_rand.mean(),
            "q_pi": q_cur.mean(),
            "q_pi_next": q_next.mean(),
            "target_q": target_q.mean(),
            "entropy": -log_prob.mean(),
            "alpha": alpha,
        }
        if cfg.cql_lagrange:
            stats["alpha_prime"] = alpha_prime
        if bound is not None:
            below = torch.cat([q_cur, q_next], dim=-1) < bound[:, None]
            stats["bound_rate"] = below.float().mean()
        return losses, {name: value.detach().float() for name, value in stats.items()}

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
