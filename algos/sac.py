"""Soft Actor-Critic (SAC).

Paper: T. Haarnoja et al., "Soft Actor-Critic Algorithms and Applications",
arXiv:1812.05905 (2018) -- SAC with automatic temperature tuning.
Defaults follow CleanRL's ``sac_continuous_action.py`` for MuJoCo (policy lr 3e-4,
Q lr 1e-3, batch 256, 5k random warm-up steps, tau 0.005, autotuned temperature).

Departures from the paper (all as in CleanRL unless said otherwise):
* Delayed policy updates: every ``policy_frequency`` critic updates, the actor and
  temperature take ``policy_frequency`` steps (same number of actor steps overall).
* log-std is squashed by tanh into [log_std_min, log_std_max] instead of clipped.
* The temperature loss uses alpha (not log alpha) times the entropy gap.
* Departure from CleanRL (not from the paper): the temperature loss reuses the log pi
  of the actor step's own sample (as softlearning and SB3 do); CleanRL draws a fresh
  action from the just-updated actor for it. Measured against CleanRL@fe8d8a0
  (tests/golden/sac.json, docs/PARITY.md): temperature loss up to 0.076 apart (of ~1.5),
  parameters 1.3e-5 apart after 8 updates; the golden test emulates CleanRL's redraw.
* The twin critics are one batched ensemble (identical maths, one matmul per layer),
  ``num_critics`` can be raised (min over all members) and LayerNorm switched on.
* Ensemble options (off by default; RLPD and WSRL set them, algos/rlpd.py, algos/wsrl.py):
  ``critic_subset`` k: the target is the min over k target critics drawn without
  replacement (``torch.randperm``, torch's generator) at every critic step, as in
  REDQ/RLPD; ``backup_entropy=False`` drops -alpha log pi from the target; ``actor_q``
  "mean" uses the ensemble's mean Q in the actor loss; ``utd_ratio`` U: ``update`` gets U
  minibatches stacked in one batch and takes U critic steps (each followed by its Polyak
  average) before the actor/temperature burst, on the last minibatch (``actor_batch``
  "last", RLPD) or on all U of them (``"full"``, WSRL); ``critic_last_layer_scale``
  re-initialises the critics' output layer orthogonally with that gain (biases 0).
  With U = 1 the update is the plain SAC update above, unchanged.
* ``target_clip`` (off by default; neither the paper nor CleanRL has it): the TD target
  clamped to [low, high], OpenAI baselines' HER ``clip_return`` (its DDPG target is clipped
  to [-1/(1-gamma), 0] on the -1/0 robot tasks); for SAC + HER on PandaPush, whose
  critic was measured to diverge without it (benchmarks/README.md, HER). TD3 the same.
* ``max_target_backup`` (off by default; not in the paper): the TD target backs up the
  max over ``backup_actions`` next actions sampled per row (each the min over the
  target critics, the entropy term subtracted first when backed up), as CQL's
  max-target backup and WSRL's online SAC on AntMaze (zhouzypaul/wsrl@891ee35
  ``wsrl/agents/sac.py`` ``_process_target_next_qs``, ``antmaze_wsrl``: 10 actions).
  One subset of target critics is drawn per critic step for all samples, as there.
* OfflineRL-Kit's policy options (off by default; MOPO / MOREC set them, algos/mopo.py):
  ``clamp_log_std`` clamps the log-std into [log_std_min, log_std_max] instead of the tanh
  squash; ``temperature_loss="log_alpha"`` scales the entropy gap by log alpha (SB3,
  CORL, OfflineRL-Kit); ``max_alpha`` caps the temperature the losses use (OfflineRL-Kit:
  1). Checked against OfflineRL-Kit's ``SACPolicy`` through MOPO's golden test
  (tests/golden/mopo.json).
* ``normalize_obs`` (off by default; neither the paper nor CleanRL has it): the agent
  standardises its input part by part with running statistics of its update batches
  (goals with the achieved goals'), clipped at ``clip_obs``, as OpenAI baselines' HER
  does with its normaliser (docs/PARITY.md lists how it differs); TD3 the same.
* ``encoder`` (off by default; image observations, ``env.obs=pixels`` / ``state+pixels``):
  an ``rlcore.nets`` image encoder shared by actor and critics, as DrQ (Kostrikov et al.
  2020) and SERL's pixel RLPD use one: the critic loss trains it (its parameters are in
  the critic's optimiser), the actor and temperature read its features detached; the
  target critics read the online encoder's features without gradients (DrQ-v2; DrQ and
  SERL keep a Polyak copy of the encoder in the target critic). ``shift_pad`` p > 0
  shifts every image of an update batch by up to p pixels (``rlcore.nets.random_shift``,
  DrQ's augmentation); the actor step draws its own shifts (DrQ-v2 reuses the critic's).
  Images are never standardised (``normalize_obs`` is refused with them) and the update
  runs eager (``compile=True`` is refused, ``"auto"`` means eager).
* Speed, not maths: critic parameters do not get gradients in the actor step, acting
  runs without autograd, Adam uses the fused step.
* Opt-in ``precision="bf16"``: the updates' matmuls run in bfloat16 (autocast), with
  parameters, optimiser state, network outputs and losses in float32; acting and
  evaluation stay float32. Not in the paper; a speed mode for CPUs/GPUs with fast bf16
  (float32, with one warning, where bf16 would be emulated: ``rlcore.speed``).
* ``compile=True``: the whole update -- all ``utd_ratio`` critic steps with their Polyak
  averages, the actor and temperature burst; losses, gradients and Adam -- runs as one
  ``torch.compile``d graph of ``_update_steps``, the very function the eager update runs
  (``rlcore.compiled.CompiledUpdate``: gradients by torch.func, Adam in place on the
  optimisers' state; the policy's noise and the critic subsets come from torch's
  generator as in eager mode, ``fallback_random``). Same maths, equal to float tolerance;
  1.3-1.7x the eager updates/s at Hopper shapes on 1 thread (``benchmarks.throughput``
  section ``compile``); needs a C++ compiler (eager, with one warning, without one) and
  ~20-40 s of compilation. ``"auto"`` (the command line's default) compiles runs of more
  than 100k steps; the dataclass default stays eager (an agent built by hand has no run
  length). ``compile_steps=k`` puts k critic steps in the graph and calls it
  ``utd_ratio / k`` times (the actor burst rides on the last call): the compile time
  grows with the unrolled steps (RLPD's 20 took over 15 minutes on 2 busy cores), the
  speed barely does.

Against Stable-Baselines3 (the baseline of ``benchmarks/sac_hopper_vs_sb3.py`` and the
throughput suite; SB3 2.9.2 read in ``stable_baselines3/sac/sac.py``, ``sac/policies.py``,
``common/distributions.py``), with SB3's hyper-parameters set on both sides:

* log-std: squashed by tanh into [-5, 2]; SB3 clamps the raw output to [-20, 2]
  (``LOG_STD_MIN``/``LOG_STD_MAX``, ``th.clamp``). Not measured in isolation against SB3;
  against RLPD's and OmniSafe's identical clamp, docs/PARITY.md (actor params 2.9e-3 /
  5.8e-3 apart after 5 / 10 updates).
* tanh correction: log pi subtracts the exact sum of log(1 - tanh(u)^2), computed as
  2 (log 2 - u - softplus(-2u)) (``rlcore.nets.tanh_gaussian_log_prob``); SB3 subtracts
  log(1 - tanh(u)^2 + 1e-6) (``SquashedDiagGaussianDistribution``, ``epsilon=1e-6``), which
  caps the correction where |u| is large and makes its log pi a little lower. Measured on
  the committed SAC Hopper expert (``benchmarks/assets/hopper_sac_expert.pt``), 30,000
  samples at its own states: ours - SB3 = median 0.0000, 99th percentile 0.001, 99.9th
  0.009, max 0.19 nats (median |log pi| 2.4).
* critic loss scale: ours sums the critics' MSEs; SB3 takes half of that sum
  (``0.5 * sum(F.mse_loss(...))``). Not a 2x learning rate: Adam's step m / (sqrt(v) +
  eps) is unchanged by a constant loss factor c except that eps acts as eps / c, so SB3's
  critic step is ours with Adam eps 2e-8 instead of 1e-8 (measured: bit-identical
  parameters after 1,000 updates). Where a gradient is of the order of eps the steps differ:
  critic parameters 5.1e-5 apart after one update of Hopper-shaped random batches,
  7.8e-2 after 1,000 (a control, fused vs foreach Adam, also drifts 8.9e-2 by then).
  The logged ``critic_loss`` is twice SB3's.
* temperature loss: alpha times the entropy gap (CleanRL, above); SB3's is log alpha times
  the gap, so our gradient in log alpha is alpha times SB3's: a factor Adam's
  normalisation absorbs only while alpha changes slowly against its second-moment
  average (~1,000 steps). Not measured in isolation. Both use alpha from before the
  temperature step in the critic target and the actor loss.

Use in your own loop::

    agent = SAC(env.observation_space, env.action_space, SACConfig())
    action = agent.act(obs)                 # (obs_dim,) or (B, obs_dim) numpy
    metrics = agent.update(batch)           # rlcore.Batch of tensors
    torch.save(agent.state_dict(), path)    # agent.load_state_dict(torch.load(path))
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.compiled import CompiledUpdate, EagerSteps, Steps
from rlcore.losses import check_target_clip, clip_target, ensemble_mse
from rlcore.nets import (
    QEnsemble,
    TanhGaussianActor,
    observation_encoder,
    orthogonal_init,
    shift_images,
)
from rlcore.plan import RunPlan, Schedule
from rlcore.speed import resolve_speed_modes
from rlcore.types import Batch, Obs, split_rows
from rlcore.utils import adam, ensure_finite, mixed_precision

ACTOR_Q = ("min", "mean")
ACTOR_BATCH = ("last", "full")
TEMPERATURE_LOSSES = ("alpha", "log_alpha")


def subset_min(q: torch.Tensor, subset: int | None) -> torch.Tensor:
    """Min over dim 0 (ensemble members) of ``q`` (E, B), or over ``subset`` members drawn
    without replacement with torch's generator (``torch.randperm``), shared by all rows."""
    if subset is not None:
        q = q[torch.randperm(q.shape[0], device=q.device)[:subset]]
    return q.min(0).values


@dataclass
class SACConfig:
    """SAC hyper-parameters (CleanRL MuJoCo defaults)."""

    gamma: float = 0.99  # discount
    tau: float = 0.005  # Polyak rate of the target critics
    actor_lr: float = 3e-4  # policy learning rate
    critic_lr: float = 1e-3  # Q learning rate
    alpha_lr: float = 1e-3  # temperature learning rate (CleanRL uses the Q lr)
    hidden: tuple[int, ...] = (256, 256)  # hidden widths of actor and critics
    num_critics: int = 2  # critics in the ensemble; the target uses their minimum
    layer_norm: bool = False  # LayerNorm in the critics
    init_alpha: float = 1.0  # initial temperature (fixed value if autotune is off)
    autotune_alpha: bool = True  # learn the temperature toward target_entropy
    target_entropy: float | None = None  # None -> -action_dim
    log_std_min: float = -5.0  # lower bound of the policy log-std
    log_std_max: float = 2.0  # upper bound of the policy log-std
    clamp_log_std: bool = False  # log-std clamped into the bounds (tanh-squashed if False)
    temperature_loss: str = "alpha"  # "alpha" (CleanRL) | "log_alpha" times the entropy gap
    max_alpha: float | None = None  # the temperature used is exp(log alpha) capped at this
    policy_frequency: int = 2  # critic updates per (burst of) actor updates
    target_frequency: int = 1  # critic updates per target Polyak update
    fused_optimizer: bool = True  # fused Adam kernel (same maths, faster on CPU/GPU)
    precision: str = "float32"  # "bf16": updates' forward passes in bfloat16 autocast
    compile: bool | str = False  # True | False | "auto": the update as one compiled graph
    compile_steps: int | None = None  # critic steps per compiled graph (None: all utd_ratio)
    # ensemble options (RLPD / WSRL; the defaults are plain SAC)
    critic_subset: int | None = None  # target: min over this many random target critics
    backup_entropy: bool = True  # subtract alpha log pi(a'|s') in the TD target
    actor_q: str = "min"  # "min" | "mean" over the ensemble in the actor loss
    utd_ratio: int = 1  # minibatches per update call: one critic step each, then the actor
    actor_batch: str = "last"  # actor/temperature rows: "last" minibatch | "full" batch
    critic_last_layer_scale: float | None = None  # orthogonal gain of the critics' output layer
    target_clip: tuple[float, float] | None = None  # [low, high] clamp of the TD target
    max_target_backup: bool = False  # target: max over backup_actions sampled next actions
    backup_actions: int = 10  # next actions sampled per row for max_target_backup
    # in-agent observation standardisation (rlcore.agent_state.Plumbing): dict parts one by
    # one, goals with the achieved goals' statistics; transitions are stored raw (HER)
    normalize_obs: bool = False  # running statistics of the update batches' observations
    clip_obs: float = 5.0  # clip of the standardised observation (OpenAI baselines' HER: 5)
    # image observations (module docstring): the encoder actor and critics share, and DrQ's
    # random shift of the update batches' images by up to shift_pad pixels (0: none)
    encoder: str | None = None  # rlcore.nets image encoder: drq | nature | impala
    shift_pad: int = 0
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 256  # transitions per update
    buffer_size: int = 1_000_000  # replay capacity
    learning_starts: int = 5_000  # uniform random actions and no updates before this step
    updates_per_step: float = 1.0  # update-to-data ratio (gradient updates per env step)
    total_steps: int = 1_000_000  # default training length in env steps

    def __post_init__(self) -> None:
        check_target_clip(self.target_clip)
        if self.shift_pad < 0:
            raise ValueError(f"shift_pad={self.shift_pad} must be >= 0")
        if self.encoder is not None and self.compile == "auto":
            self.compile = False  # the image encoder's update runs eager (docstring)
        if self.critic_subset is not None and not 1 <= self.critic_subset <= self.num_critics:
            raise ValueError(
                f"critic_subset={self.critic_subset} must be in [1, num_critics="
                f"{self.num_critics}] (or None for the min over all critics)"
            )
        if self.actor_q not in ACTOR_Q:
            raise ValueError(f"actor_q={self.actor_q!r}: choose from {ACTOR_Q}")
        if self.temperature_loss not in TEMPERATURE_LOSSES:
            raise ValueError(
                f"temperature_loss={self.temperature_loss!r}: choose from {TEMPERATURE_LOSSES}"
            )
        if self.max_alpha is not None and self.max_alpha <= 0:
            raise ValueError(f"max_alpha={self.max_alpha} must be > 0 (or None: no cap)")
        if self.actor_batch not in ACTOR_BATCH:
            raise ValueError(f"actor_batch={self.actor_batch!r}: choose from {ACTOR_BATCH}")
        if self.utd_ratio < 1:
            raise ValueError(f"utd_ratio={self.utd_ratio} must be >= 1")
        if self.backup_actions < 1:
            raise ValueError(f"backup_actions={self.backup_actions} must be >= 1")
        if self.compile_steps is not None and (
            self.compile_steps < 1 or self.utd_ratio % self.compile_steps
        ):
            raise ValueError(
                f"compile_steps={self.compile_steps} must be >= 1 and divide utd_ratio="
                f"{self.utd_ratio} (or None: all critic steps in one graph)"
            )

    def plan(self) -> RunPlan:
        """Online from scratch: random actions until ``learning_starts``, then updates."""
        schedule = Schedule(
            online_steps=self.total_steps, batch_size=self.batch_size,
            buffer_size=self.buffer_size, learning_starts=self.learning_starts,
            updates_per_step=self.updates_per_step, utd_ratio=self.utd_ratio,
        )  # fmt: skip
        return RunPlan(schedule, gamma=self.gamma, precision=self.precision,
                       compile=self.compile)  # fmt: skip


class SAC:
    """SAC agent: ``act``, ``update(batch)``, ``state_dict`` / ``load_state_dict``."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: SACConfig | None = None,
        device: str | torch.device = "cpu",
        networks: dict[str, nn.Module] | None = None,
        actor_objective: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
        | None = None,
    ) -> None:
        """``networks`` ({"actor", "critic", "target_critic"}) makes the agent train those
        module objects in place (shared, not copied: WSRL's online SAC on its pre-trained
        CQL networks); the config's architecture fields are then not used.
        ``actor_objective(obs, action, loss)`` maps the per-row actor loss
        alpha log pi - Q to the one minimised (SAC-Lagrangian adds its cost term); eager
        updates only (not with ``compile``)."""
        config = config or SACConfig()
        self.plumbing = io = Plumbing(
            observation_space, action_space, device, "SAC", obs_parts=config.encoder is not None,
            normalize_obs=config.normalize_obs, clip_obs=config.clip_obs,
        )  # fmt: skip
        if actor_objective is not None and config.compile:
            raise ValueError("SAC's actor_objective needs compile=False")
        self.actor_objective = actor_objective
        self.device = io.device
        # effective precision / compile (float32 where bf16 is emulated, eager without a compiler)
        self.config = config = resolve_speed_modes(config, self.device)
        # image parts: one encoder for actor and critics (None: the flat vector)
        self.encoder = None if networks is not None else observation_encoder(io.obs, config.encoder)
        if self.encoder is not None and config.compile:
            raise ValueError("SAC with an image encoder runs eager: set algo.compile=false")
        features = io.obs_dim if self.encoder is None else self.encoder.out_dim
        if networks is not None:
            self.actor = networks["actor"]
            self.critic = networks["critic"]
            self.target_critic = networks["target_critic"]
        else:
            self.actor = TanhGaussianActor(
                features, io.action_dim, io.low, io.high, config.hidden,
                log_std_min=config.log_std_min, log_std_max=config.log_std_max,
                clamp_log_std=config.clamp_log_std,
            )  # fmt: skip
            self.critic = QEnsemble(
                features, io.action_dim, config.num_critics, config.hidden,
                layer_norm=config.layer_norm,
            )  # fmt: skip
            if config.critic_last_layer_scale is not None:
                orthogonal_init(self.critic.net.output_layer, gain=config.critic_last_layer_scale)
            self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(float(np.log(config.init_alpha)), requires_grad=True)
        self.target_entropy = (
            -float(io.action_dim) if config.target_entropy is None else config.target_entropy
        )
        fused = config.fused_optimizer
        self.actor_optimizer = adam(self.actor.parameters(), config.actor_lr, fused)
        critic_params = [*self.critic.parameters()]
        encoder_part: dict[str, nn.Module] = {}
        if self.encoder is not None:  # trained by the critic loss
            critic_params += [*self.encoder.parameters()]
            encoder_part["encoder"] = self.encoder
        self.critic_optimizer = adam(critic_params, config.critic_lr, fused)
        self.alpha_optimizer = adam([self.log_alpha], config.alpha_lr, fused)
        self.parts = io.declare(
            counters={"updates": int}, actor=self.actor, critic=self.critic,
            target_critic=self.target_critic, log_alpha=self.log_alpha,
            actor_optimizer=self.actor_optimizer, critic_optimizer=self.critic_optimizer,
            alpha_optimizer=self.alpha_optimizer, **encoder_part,
        )  # fmt: skip
        modules = {"actor": self.actor, "critic": self.critic, "target_critic": self.target_critic}
        optimizers = {"critic": self.critic_optimizer, "actor": self.actor_optimizer}
        if config.autotune_alpha:
            optimizers["alpha"] = self.alpha_optimizer
        self._steps = EagerSteps(modules, optimizers)
        # compile: the same _update_steps as one graph (rlcore.compiled.CompiledUpdate)
        self._update_graph = (
            CompiledUpdate(self._update_steps, modules, optimizers, free=(self.log_alpha,))
            if config.compile
            else None
        )
        self.updates = 0

    @property
    def alpha(self) -> torch.Tensor:
        return self._temperature(self.log_alpha)

    def _temperature(self, log_alpha: torch.Tensor) -> torch.Tensor:
        """The temperature the losses use: exp(log alpha), capped at ``max_alpha``."""
        alpha = log_alpha.detach().exp()
        return alpha if self.config.max_alpha is None else alpha.clamp(max=self.config.max_alpha)

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Action(s) in env units for one observation or a batch (no autograd)."""
        obs = self.plumbing.standardize(obs) if self.encoder is None else self.encoder(obs)
        action, _ = self.actor(obs, deterministic=deterministic, with_log_prob=False)
        return action

    def _features(self, obs: Obs) -> torch.Tensor:
        """What actor and critics read: the observation itself, or (images) the encoder's
        features of it, its images randomly shifted first when ``shift_pad`` > 0."""
        if self.encoder is None:
            return obs  # type: ignore[return-value]
        return self.encoder(shift_images(obs, self.plumbing.obs, self.config.shift_pad))

    def update(self, batch: Batch) -> dict[str, float]:
        """``utd_ratio`` critic updates (one per minibatch of the batch, each followed by
        its Polyak average when due), then the actor/temperature burst every
        ``policy_frequency`` calls (``_update_steps``, eager or as one compiled graph).
        Critic metrics are means over the minibatches."""
        cfg = self.config
        batch = self.plumbing.standardized_batch(batch)  # normalize_obs: statistics, then inputs
        self.updates += 1
        actor_burst = self.updates % cfg.policy_frequency == 0
        # Polyak after critic step j (0-based) of this call: the critic-step count so far
        first_step = (self.updates - 1) * cfg.utd_ratio
        polyak = tuple(
            (first_step + j + 1) % cfg.target_frequency == 0 for j in range(cfg.utd_ratio)
        )
        inputs = (batch.obs, batch.action, batch.reward, batch.next_obs, batch.terminated)
        if len(batch) % cfg.utd_ratio:
            raise ValueError(
                f"a batch of {len(batch)} rows does not split into utd_ratio="
                f"{cfg.utd_ratio} equal minibatches"
            )
        actor_obs = self._actor_rows(batch.obs)
        if self._update_graph is None:
            sums, metrics = self._update_steps(
                self._steps, self.log_alpha, *inputs, actor_obs, actor_burst, polyak
            )
        else:  # compile_steps critic steps per graph call; the actor burst on the last call
            steps = cfg.compile_steps or cfg.utd_ratio
            calls = cfg.utd_ratio // steps
            sums, metrics = {}, {}
            for c, chunk in enumerate(zip(*(x.chunk(calls) for x in inputs))):
                part, metrics = self._update_graph(
                    *chunk, actor_obs, actor_burst and c == calls - 1,
                    polyak[c * steps : (c + 1) * steps],
                )  # fmt: skip
                sums = {key: sums[key] + value if sums else value for key, value in part.items()}
            # the graph steps before the losses come back: checked after the update
            ensure_finite(critic_loss=sums["critic_loss"], **metrics)
        means = {key: (value / cfg.utd_ratio).item() for key, value in sums.items()}
        return {**means, **{key: value.item() for key, value in metrics.items()}}

    def _update_steps(
        self,
        steps: Steps,
        log_alpha: torch.Tensor,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        actor_obs: torch.Tensor,
        actor_burst: bool,
        polyak: tuple[bool, ...],
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The update, eager or traced into the compiled graph: one critic step per entry
        of ``polyak`` (on its minibatch), each followed by its Polyak average when due,
        then ``policy_frequency`` actor/temperature steps if ``actor_burst``. Returns the
        critic losses and statistics summed over the critic steps (float64, the sums a
        Python loop of ``.item()`` makes) and the last actor step's metrics."""
        cfg = self.config
        inputs = (obs, action, reward, next_obs, terminated)
        sums: dict[str, torch.Tensor] = {}
        for j, minibatch in enumerate(zip(*(split_rows(x, len(polyak)) for x in inputs))):
            losses, stats = steps.minimise(
                ("critic",), self._critic_losses, *minibatch, self._temperature(log_alpha)
            )
            for key, value in {**losses, **stats}.items():
                value = value.detach().double()
                sums[key] = sums[key] + value if key in sums else value
            if polyak[j]:
                steps.polyak("target_critic", "critic", cfg.tau)
        metrics: dict[str, torch.Tensor] = {}
        for _ in range(cfg.policy_frequency if actor_burst else 0):
            metrics = self._actor_and_alpha_step(steps, log_alpha, actor_obs)
        return sums, metrics

    def _actor_and_alpha_step(
        self, steps: Steps, log_alpha: torch.Tensor, obs: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """One actor step (critics frozen), then one temperature step on its log pi."""
        losses, log_prob = steps.minimise(
            ("actor",), self._actor_losses, obs, self._temperature(log_alpha), frozen=("critic",)
        )
        log_prob = log_prob.detach()
        metrics = {"actor_loss": losses["actor_loss"].detach(), "entropy": -log_prob.mean()}
        if self.config.autotune_alpha:
            (losses,) = steps.minimise(("alpha",), self._alpha_loss, log_alpha, log_prob)
            metrics["alpha_loss"] = losses["alpha_loss"].detach()
        metrics["alpha"] = self._temperature(log_alpha)
        return metrics

    def _actor_rows(self, obs: torch.Tensor) -> torch.Tensor:
        """The states of the actor/temperature step: the last minibatch or all of them."""
        if self.config.actor_batch == "full":
            return obs
        return split_rows(obs, self.config.utd_ratio)[-1]

    def _critic_losses(
        self,
        obs: Obs,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: Obs,
        terminated: torch.Tensor,
        alpha: torch.Tensor,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """({critic_loss: sum of the critics' MSEs to the (soft) Bellman target},
        {q: mean Q, target_q: mean target})."""
        cfg = self.config
        obs = self._features(obs)  # the encoder (images) learns from this loss
        with torch.no_grad():
            next_obs = self._features(next_obs)
        with torch.no_grad(), self._autocast():
            samples = cfg.backup_actions if cfg.max_target_backup else 1
            # sample-major: sample k is rows k B .. (k + 1) B - 1
            repeated = next_obs.repeat(samples, *[1] * (next_obs.dim() - 1))
            next_action, next_log_prob = self.actor(repeated)
            next_v = subset_min(self.target_critic(repeated, next_action), cfg.critic_subset)
            if cfg.backup_entropy:
                next_v = next_v - alpha * next_log_prob
            next_v = next_v.view(samples, -1).max(0).values  # one sample: itself
            target_q = clip_target(reward + cfg.gamma * (1.0 - terminated) * next_v,
                                   cfg.target_clip)  # fmt: skip
        with self._autocast():
            q = self.critic(obs, action)  # (E, B), float32
        stats = {"q": q.detach().mean(), "target_q": target_q.mean()}
        return {"critic_loss": ensemble_mse(q, target_q)}, stats

    def _actor_losses(
        self, obs: Obs, alpha: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """({actor_loss: mean alpha log pi - Q}, log-probabilities of the sampled actions)."""
        with torch.no_grad():  # images: the encoder's features, no gradient into it
            obs = self._features(obs)
        with self._autocast():
            action, log_prob = self.actor(obs)
            q = self.critic(obs, action)
            q = q.mean(0) if self.config.actor_q == "mean" else q.min(0).values
            loss = alpha * log_prob - q
            if self.actor_objective is not None:
                loss = self.actor_objective(obs, action, loss)
            return {"actor_loss": loss.mean()}, log_prob

    def _alpha_loss(
        self, log_alpha: torch.Tensor, log_prob: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor]]:
        """({alpha_loss: -mean(alpha (log pi + target entropy))},): alpha, not log alpha,
        times the entropy gap (CleanRL); log alpha with ``temperature_loss="log_alpha"``
        (SB3, CORL, OfflineRL-Kit)."""
        scale = log_alpha.exp() if self.config.temperature_loss == "alpha" else log_alpha
        return ({"alpha_loss": -(scale * (log_prob + self.target_entropy)).mean()},)

    def _autocast(self) -> AbstractContextManager[Any]:
        return mixed_precision(self.config.precision, self.device)

    def state_dict(self) -> dict:
        """Networks, optimisers, temperature and update counter (everything to continue)."""
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
