"""Model-based Offline Policy Optimization (MOPO).

Paper: T. Yu, G. Thomas, L. Yu, S. Ermon, J. Zou, S. Levine, C. Finn, T. Ma, "MOPO:
Model-based Offline Policy Optimization", NeurIPS 2020 (arXiv:2005.13239). Reference:
OfflineRL-Kit (github.com/yihaosun1124/OfflineRL-Kit @ e3ce697), ``policy/model_based/
mopo.py``, ``policy/model_free/sac.py``, ``policy_trainer/mb_policy_trainer.py`` and
``run_example/run_mopo.py`` (its defaults are these), the code MOREC builds on.

MOPO is SAC trained on a learned model's rollouts whose rewards are penalised by the
model's uncertainty, r~ = r^ - lambda u(s, a):

1. the dynamics: ``rlcore.dynamics.ProbabilisticEnsemble`` (7 Gaussian MLPs of 4 x 200,
   the 5 best on held-out data are the elites), fitted on the dataset before the first
   update (``rlcore.model_based.ModelRollouts``);
2. every 1,000 updates, 50,000 dataset states start ``rollout_length``-step rollouts of
   the current policy in the model (a random elite's sample per step; the task's
   termination rule), the reward minus ``penalty_coef`` times u = the largest norm over
   members of the predicted std (``aleatoric``); rollouts are kept for 5 rounds;
3. every update is SAC on 256 rows, 5% from the dataset and 95% imagined.

SAC as OfflineRL-Kit has it (``algos/sac.py`` with these settings): twin critics and
actor 256 x 256, actor lr 1e-4 (cosine-annealed to 0 over the run, one step per epoch of
``steps_per_epoch`` updates), critic lr 3e-4, the policy's log-std clamped into [-5, 2],
automatic temperature from alpha = 1 (log alpha 0) at lr 1e-4 on log alpha times the
entropy gap toward -|A|, the temperature used capped at 1, one actor step per update,
Polyak 0.005, gamma 0.99. Per-task settings (run_mopo.py's suggestions): Hopper medium
rollout_length 5 / penalty_coef 5, Walker2d medium 5 / 0.5, HalfCheetah medium 5 / 0.5;
medium-replay 5 / 2.5 (Hopper), 1 / 2.5 (Walker2d), 5 / 0.5 (HalfCheetah).

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
import torch

from rlcore.algos.sac import SAC, SACConfig
from rlcore.capabilities import ModelBased
from rlcore.dynamics import ProbabilisticEnsemble
from rlcore.losses import cosine_lr, set_lr
from rlcore.plan import DataRecipe, ModelRecipe, RunPlan, Schedule
from rlcore.types import Batch


@dataclass
class MOPOConfig(SACConfig):
    """MOPO hyper-parameters: every SACConfig field (commented there) with OfflineRL-Kit's
    values where they differ, plus the dynamics and the rollouts."""

    actor_lr: float = 1e-4  # cosine-annealed to 0, one step per epoch
    critic_lr: float = 3e-4
    alpha_lr: float = 1e-4
    clamp_log_std: bool = True
    temperature_loss: str = "log_alpha"
    max_alpha: float | None = 1.0
    policy_frequency: int = 1
    compile: bool | str = False  # not offered (module docstring)
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
    # imagined rollouts (rlcore.model_based.ModelRollouts)
    rollout_freq: int = 1000  # updates between rollout rounds
    rollout_batch: int = 50_000  # dataset states starting a round's rollouts
    rollout_length: int = 1  # model steps per rollout (run_mopo.py's default; 5 on most tasks)
    penalty_coef: float = 2.5  # lambda of r - lambda u
    retain_epochs: int = 5  # rollout rounds kept in the model buffer
    real_ratio: float = 0.05  # dataset rows in every batch

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.compile not in (False, "auto"):
            raise ValueError("MOPO's update runs eager (its actor lr changes every epoch)")
        self.compile = False
        if self.steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch={self.steps_per_epoch} must be >= 1")

    def plan(self) -> RunPlan:
        """Offline gradient steps on dataset and imagined rows (``ModelRecipe``)."""
        model = ModelRecipe(
            rollout_freq=self.rollout_freq, rollout_batch=self.rollout_batch,
            rollout_length=self.rollout_length, retain_epochs=self.retain_epochs,
            real_ratio=self.real_ratio, penalty_coef=self.penalty_coef,
            fit_lr=self.dynamics_lr, fit_batch_size=self.dynamics_batch_size,
            patience=self.dynamics_patience, max_fit_epochs=self.max_dynamics_epochs,
        )  # fmt: skip
        schedule = Schedule(offline_steps=self.total_steps, batch_size=self.batch_size)
        return RunPlan(schedule, data=DataRecipe(required=True), gamma=self.gamma, model=model,
                       precision=self.precision)  # fmt: skip


class MOPO(SAC):
    """The SAC agent with OfflineRL-Kit's settings, owning the dynamics ensemble its
    rollouts run in (``ModelBased``) and annealing the actor's lr per epoch."""

    CAPABILITIES = (ModelBased,)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: MOPOConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        config = config or MOPOConfig()
        if config.normalize_obs or config.encoder is not None:
            raise ValueError("MOPO learns a model of vector observations, unnormalised")
        super().__init__(observation_space, action_space, config, device)
        io = self.plumbing
        self.dynamics = ProbabilisticEnsemble(
            io.obs_dim, io.action_dim, config.members, config.elites, config.dynamics_hidden,
            config.dynamics_decays,
        )  # fmt: skip
        self.parts = io.declare(counters={}, dynamics=self.dynamics)

    @torch.no_grad()
    def imagine_action(self, obs: torch.Tensor) -> torch.Tensor:
        """A sample of the policy for raw observations (the model rollouts' action)."""
        action, _ = self.actor(obs.to(self.device), with_log_prob=False)
        return action

    def actor_lr(self) -> float:
        """OfflineRL-Kit's CosineAnnealingLR(T_max=epochs), stepped after every epoch."""
        cfg = self.config
        epochs = max(cfg.total_steps // cfg.steps_per_epoch, 1)
        return cosine_lr(cfg.actor_lr, self.updates // cfg.steps_per_epoch, epochs)

    def update(self, batch: Batch) -> dict[str, float]:
        """SAC's update at this epoch's actor lr."""
        set_lr(self.actor_optimizer, self.actor_lr())
        return {**super().update(batch), "actor_lr": self.actor_optimizer.param_groups[0]["lr"]}
