"""RLPD: online RL with offline data mixed into every minibatch.

Paper: P. J. Ball, L. Smith, I. Kostrikov, S. Levine, "Efficient Online Reinforcement
Learning with Offline Data", ICML 2023 (arXiv:2302.02948). RLPD is SAC with three design
choices: symmetric sampling (every minibatch half offline, half online), LayerNorm in the
critics, and a large ensemble at a high update-to-data ratio (10 critics, the TD target
takes the min over a random 2 of them, 20 critic steps per env step, then one actor and
temperature step whose loss uses the ensemble's MEAN Q). Defaults: lr 3e-4 everywhere,
initial temperature 1, target entropy -|A|/2, 256x256 MLPs, batch 256, gamma 0.99,
tau 5e-3, entropy in the backup, 5000 uniform random steps before learning.

This file only configures SAC (algos/sac.py, whose ensemble options implement all of the
above): ``RLPDConfig`` holds RLPD's defaults, ``RLPD`` is the SAC agent with the target
entropy -|A|/2. The symmetric sampling is the loop's (``offline_data="mix"``,
``offline_fraction=0.5``): each ``update`` gets ``utd_ratio`` minibatches of
``batch_size`` rows stacked in one batch, each minibatch half dataset, half online rows.

Departures from the paper / its reference code (ikostrikov/rlpd):
* The policy's log-std is squashed by tanh into [-5, 2] (algos/sac.py); the reference
  clips it into [-20, 2]. Measured (tests/golden/rlpd.json, 5 updates at UTD 20 from
  equal weights and draws): actor 2.9e-3, critics 5.2e-2, log alpha 3.0e-3 apart.
* LayerNorm epsilon is PyTorch's 1e-5; flax's is 1e-6: critics 1.3e-3 apart after the
  same 5 updates. With both set to the reference's, parameters agree within 1.2e-5
  (docs/PARITY.md).
* Networks start from torch's nn.Linear initialisation; the reference uses Xavier-uniform
  weights (and zero biases) in every layer.
* The critic loss sums the critics' MSEs; the reference averages them over the ensemble
  (a constant factor 10 on the critic gradient, which Adam's normalisation removes up to
  its eps).
* The target critics' subset is drawn without replacement at every critic step as in the
  reference, from torch's generator instead of a JAX key.
* ``compile=True`` (off by default) runs the update through compiled graphs; eager
  otherwise (same maths). The reference jits all 20 critic steps as one function;
  ``compile_steps=None`` does that here too, but inductor's compile time grows with the
  unrolled steps (over 15 minutes for 20 on 2 busy CPU cores), so the default compiles one
  critic step and calls it 20 times (the per-call overhead is tiny next to a critic step).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import torch

from rlcore.algos.sac import SAC, SACConfig
from rlcore.plan import DataRecipe, RunPlan, Schedule


@dataclass
class RLPDConfig(SACConfig):
    """RLPD hyper-parameters: every SACConfig field (commented there) plus the loop's
    offline-data fields; RLPD's defaults where they differ from SAC's."""

    critic_lr: float = 3e-4  # lr 3e-4 for actor, critics and temperature
    alpha_lr: float = 3e-4
    num_critics: int = 10  # ensemble of 10 ...
    layer_norm: bool = True  # ... LayerNorm critics
    critic_subset: int | None = 2  # target: min over 2 random target critics
    utd_ratio: int = 20  # critic steps per env step (one actor step after them)
    compile_steps: int | None = 1  # compiled: one critic step per graph call (None: all 20)
    actor_q: str = "mean"  # the actor maximises the ensemble's mean Q
    actor_batch: str = "last"  # actor/temperature step on the last minibatch
    policy_frequency: int = 1  # one actor + temperature step per update call
    target_entropy: float | None = None  # None -> -action_dim / 2
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    offline_data: str = "mix"  # every minibatch mixes dataset and online rows ...
    offline_fraction: float = 0.5  # ... half and half (symmetric sampling)
    offline_steps: int = 0  # no offline pre-training
    # dataset and online rewards r <- reward_scale * r + reward_bias; the reference's antmaze
    # recipe (train_finetuning.py: rewards - 1 in every offline and online batch) is
    # reward_bias=-1
    reward_scale: float = 1.0
    reward_bias: float = 0.0

    def plan(self) -> RunPlan:
        """Online, with the dataset mixed into every batch (``offline_data``)."""
        schedule = Schedule(
            offline_steps=self.offline_steps, online_steps=self.total_steps,
            batch_size=self.batch_size, buffer_size=self.buffer_size,
            learning_starts=self.learning_starts, updates_per_step=self.updates_per_step,
            utd_ratio=self.utd_ratio, offline_data=self.offline_data,
            offline_fraction=self.offline_fraction,
        )  # fmt: skip
        data = DataRecipe(reward_scale=self.reward_scale, reward_bias=self.reward_bias)
        return RunPlan(schedule, data=data, gamma=self.gamma, precision=self.precision,
                       compile=self.compile)  # fmt: skip


class RLPD(SAC):
    """The SAC agent with RLPD's ensemble settings and target entropy -|A|/2."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: RLPDConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        config = config or RLPDConfig()
        super().__init__(observation_space, action_space, config, device)
        if config.target_entropy is None:
            self.target_entropy = -0.5 * float(self.plumbing.action_dim)
