"""Model-based Offline Policy Optimization (MOPO).

Paper: T. Yu, G. Thomas, L. Yu, S. Ermon, J. Zou, S. Levine, C. Finn, T. Ma, "MOPO:
Model-based Offline Policy Optimization", NeurIPS 2020 (arXiv:2005.13239). Reference:
OfflineRL-Kit (github.com/yihaosun1124/OfflineRL-Kit @ e3ce697), ``policy/model_based/
mopo.py``, ``policy/model_free/sac.py``, ``policy_trainer/mb_policy_trainer.py`` and
``run_example/run_mopo.py`` (its defaults are these), the code MOREC builds on.

MOPO is SAC trained in a learned model whose rewards are penalised by the model's
uncertainty, r~ = r^ - lambda u(s, a):

1. the dynamics: ``rlcore.dynamics.ProbabilisticEnsemble`` (7 Gaussian MLPs of 4 x 200,
   the 5 best on held-out data are the elites), fitted on the dataset before the first
   update (``rlcore.model_based.ModelRollouts``);
2. every 1,000 updates, 50,000 dataset states start ``rollout_length``-step rollouts of
   the current policy in the model (a random elite's sample per step; the task's
   termination rule), the reward minus ``penalty_coef`` times u = the largest norm over
   members of the predicted std (``aleatoric``); rollouts are kept for 5 rounds;
3. every update is SAC on 256 rows, 5% from the dataset and 95% imagined.

SAC as OfflineRL-Kit has it (``rlcore.algos.sac.SAC``, built by ``MOPOConfig.sac_config``):
twin critics and actor 256 x 256, actor lr 1e-4 (cosine-annealed to 0 over the run, one
step per epoch of ``steps_per_epoch`` updates), critic lr 3e-4, the policy's log-std
clamped into [-5, 2], automatic temperature from alpha = 1 (log alpha 0) at lr 1e-4 on
log alpha times the entropy gap toward -|A|, the temperature used capped at 1, one actor
step per update, Polyak 0.005, gamma 0.99. Per-task settings (run_mopo.py's
suggestions): Hopper medium rollout_length 5 / penalty_coef 5, Walker2d medium 5 / 0.5,
HalfCheetah medium 5 / 0.5; medium-replay 5 / 2.5 (Hopper), 1 / 2.5 (Walker2d), 5 / 0.5
(HalfCheetah).

``transition_filter=True`` is MOREC's filter on this data path (algos/morec.py configures
it; ``rlcore.dynamics_reward``): candidate transitions from every elite, the one with the
highest learned dynamics reward kept, rollouts ended where it falls below a threshold.

Departures from the reference: the log-probability's tanh correction is the exact
log(1 - tanh(u)^2) (the reference adds 1e-6 inside the log); the twin critics are one
batched ensemble with one optimiser (same steps: each critic's gradient is its own
loss's); the data path's departures are listed in ``rlcore/model_based.py`` (real rows
rounded, not truncated; one seeded torch generator; gymnasium's termination rules); the
ensemble's in ``rlcore/dynamics.py``. ``compile`` is not offered (the actor's lr changes
every epoch).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rlcore.algos.sac import SAC, SACConfig
from rlcore.capabilities import ModelBased
from rlcore.dynamics import ProbabilisticEnsemble
from rlcore.dynamics_reward import DynamicsReward
from rlcore.losses import cosine_lr, set_lr
from rlcore.plan import DataRecipe, ModelRecipe, RunPlan, Schedule
from rlcore.types import Batch

SELECT = ("max", "softmax")


@dataclass
class MOPOConfig:
    """MOPO hyper-parameters (OfflineRL-Kit's run_mopo.py), MOREC's filter off."""

    # SAC (OfflineRL-Kit's policy; rlcore.algos.sac fields of the same names)
    gamma: float = 0.99
    tau: float = 0.005
    actor_lr: float = 1e-4  # cosine-annealed to 0, one step per epoch
    critic_lr: float = 3e-4
    alpha_lr: float = 1e-4
    hidden: tuple[int, ...] = (256, 256)
    init_alpha: float = 1.0  # log alpha starts at 0
    autotune_alpha: bool = True
    target_entropy: float | None = None  # None -> -action_dim
    max_alpha: float | None = 1.0  # the temperature used is capped at 1
    fused_optimizer: bool = True
    precision: str = "float32"
    batch_size: int = 256
    total_steps: int = 3_000_000  # gradient steps: 3,000 epochs of 1,000
    steps_per_epoch: int = 1000  # the actor's cosine schedule steps once per epoch
    # the dynamics ensemble (rlcore.dynamics.ProbabilisticEnsemble) and its fit
    members: int = 7
    elites: int = 5
    dynamics_hidden: tuple[int, ...] = (200, 200, 200, 200)
    dynamics_decays: tuple[float, ...] = (2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4)
    dynamics_lr: float = 1e-3
    dynamics_batch_size: int = 256
    dynamics_patience: int = 5  # epochs without a 1% holdout gain before the fit stops
    max_dynamics_epochs: int | None = None  # a cap on the fit (None: until it stops)
    # a MOPO / MOREC run (dir or .pt) trained on the same data whose fitted ensemble this
    # run starts from instead of fitting one (MOREC's reference loads its MOPO runs' ones)
    dynamics_from: str | None = None
    # imagined rollouts (rlcore.model_based.ModelRollouts)
    rollout_freq: int = 1000  # updates between rollout rounds
    rollout_batch: int = 50_000  # dataset states starting a round's rollouts
    rollout_length: int = 1  # model steps per rollout (run_mopo.py's default; 5 on most tasks)
    penalty_coef: float = 2.5  # lambda of r - lambda u
    retain_epochs: int = 5  # rollout rounds kept in the model buffer
    real_ratio: float = 0.05  # dataset rows in every batch
    state_clip: float | None = None  # imagined samples clipped to +-this (MOREC: 25)
    # MOREC's transition filter (algos/morec.py; rlcore.dynamics_reward)
    transition_filter: bool = False
    candidate_draws: int = 2  # draws per elite: 2 x 5 elites = 10 candidates a step
    select: str = "max"  # "max" dynamics reward, or "softmax": sampled at temperature 0.1
    terminal_reward: float = 0.6  # a chosen transition scoring below this ends its rollout
    reward_clip: float = 1.0  # d_clip of the discriminators' mean probability
    discriminators: int = 40  # kept from the adversarial training's history
    reward_iterations: int = 2000
    reward_snapshot_every: int = 50
    reward_batch_size: int = 256

    def __post_init__(self) -> None:
        if self.steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch={self.steps_per_epoch} must be >= 1")
        if self.select not in SELECT:
            raise ValueError(f"select={self.select!r}: choose from {SELECT}")
        if self.candidate_draws < 1:
            raise ValueError(f"candidate_draws={self.candidate_draws} must be >= 1")

    def sac_config(self) -> SACConfig:
        """The SAC learner's settings: OfflineRL-Kit's policy (module docstring)."""
        return SACConfig(
            gamma=self.gamma, tau=self.tau, actor_lr=self.actor_lr, critic_lr=self.critic_lr,
            alpha_lr=self.alpha_lr, hidden=self.hidden, init_alpha=self.init_alpha,
            autotune_alpha=self.autotune_alpha, target_entropy=self.target_entropy,
            clamp_log_std=True, temperature_loss="log_alpha", max_alpha=self.max_alpha,
            policy_frequency=1, fused_optimizer=self.fused_optimizer, precision=self.precision,
            compile=False, batch_size=self.batch_size, total_steps=self.total_steps,
        )  # fmt: skip

    def plan(self) -> RunPlan:
        """Offline gradient steps on dataset and imagined rows (``ModelRecipe``)."""
        model = ModelRecipe(
            rollout_freq=self.rollout_freq, rollout_batch=self.rollout_batch,
            rollout_length=self.rollout_length, retain_epochs=self.retain_epochs,
            real_ratio=self.real_ratio, penalty_coef=self.penalty_coef,
            fit_lr=self.dynamics_lr, fit_batch_size=self.dynamics_batch_size,
            patience=self.dynamics_patience, max_fit_epochs=self.max_dynamics_epochs,
            dynamics_from=self.dynamics_from,
            state_clip=self.state_clip,
            candidate_draws=self.candidate_draws if self.transition_filter else 0,
            select=self.select, terminal_reward=self.terminal_reward,
            reward_iterations=self.reward_iterations, reward_batch_size=self.reward_batch_size,
            reward_snapshot_every=self.reward_snapshot_every,
        )  # fmt: skip
        schedule = Schedule(offline_steps=self.total_steps, batch_size=self.batch_size)
        return RunPlan(schedule, data=DataRecipe(required=True), gamma=self.gamma, model=model,
                       precision=self.precision)  # fmt: skip


class MOPO:
    """A SAC learner (``self.sac``) trained in the dynamics ensemble it owns
    (``ModelBased``), its actor's lr annealed per epoch; with ``transition_filter`` it also
    owns MOREC's dynamics reward."""

    CAPABILITIES = (ModelBased,)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: MOPOConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = config = config or MOPOConfig()
        self.sac = SAC(observation_space, action_space, config.sac_config(), device)
        self.device, self.plumbing = self.sac.device, self.sac.plumbing
        # the SAC learner's networks (the same module objects)
        self.actor, self.critic = self.sac.actor, self.sac.critic
        self.target_critic = self.sac.target_critic
        io = self.plumbing
        self.dynamics = ProbabilisticEnsemble(
            io.obs_dim, io.action_dim, config.members, config.elites, config.dynamics_hidden,
            config.dynamics_decays,
        )  # fmt: skip
        self.dynamics_reward = (
            DynamicsReward(
                io.obs_dim, io.action_dim, config.discriminators, clip=config.reward_clip
            )  # fmt: skip
            if config.transition_filter
            else None
        )
        parts = {"dynamics": self.dynamics}
        if self.dynamics_reward is not None:
            parts["dynamics_reward"] = self.dynamics_reward
        self.parts = io.declare(counters={}, **parts)

    @property
    def updates(self) -> int:
        return self.sac.updates

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        return self.sac.act(obs, deterministic)

    @torch.no_grad()
    def imagine_action(self, obs: torch.Tensor) -> torch.Tensor:
        """A sample of the policy for raw observations (the model rollouts' action)."""
        action, _ = self.sac.actor(obs.to(self.device), with_log_prob=False)
        return action

    def actor_lr(self) -> float:
        """OfflineRL-Kit's CosineAnnealingLR(T_max=epochs), stepped after every epoch."""
        cfg = self.config
        epochs = max(cfg.total_steps // cfg.steps_per_epoch, 1)
        return cosine_lr(cfg.actor_lr, self.updates // cfg.steps_per_epoch, epochs)

    def update(self, batch: Batch) -> dict[str, float]:
        """SAC's update at this epoch's actor lr."""
        set_lr(self.sac.actor_optimizer, self.actor_lr())
        metrics = self.sac.update(batch)
        return {**metrics, "actor_lr": self.sac.actor_optimizer.param_groups[0]["lr"]}

    def state_dict(self) -> dict:
        """SAC's parts, the ensemble (and dynamics reward), the update count."""
        return self.sac.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sac.load_state_dict(state)
