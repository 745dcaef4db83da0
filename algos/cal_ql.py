"""Calibrated Q-Learning (Cal-QL), offline pre-training.

Paper: M. Nakamoto, Y. Zhai, A. Singh, M. S. Mark, Y. Ma, C. Finn, A. Kumar, S. Levine,
"Cal-QL: Calibrated Offline RL Pre-Training for Efficient Online Fine-Tuning",
NeurIPS 2023 (arXiv:2303.05479). Defaults follow CORL's ``finetune/cal_ql.py``: CQL's
(algos/cql.py) except critics 2x256 (q_n_hidden_layers=2) and every actor and critic
layer orthogonal with gain sqrt(2).

Cal-QL is CQL plus one term, and this file only configures it: ``CalQL`` is the CQL agent
built with ``calibrate=True``. In the CQL penalty, the critics' values of policy actions,
Q(s, a ~ pi(s)) and Q(s, a ~ pi(s')), are replaced by max(Q, mc_return) before the
logsumexp (``batch.mc_return``: discounted Monte-Carlo return-to-go of the behaviour
policy, from the dataset; in the same reward units as the training rewards). Random-action
and data-action values are not bounded; the importance-sampling log pi is subtracted after
the bound. ``bound_rate`` logs the fraction of bounded policy-action values.

Fine-tuning online (``online_steps`` > 0, run by rlcore.loops.run_phases after the offline
phase): CORL's recipe, every online batch half dataset, half online transitions
(``offline_data="mix"``, ``offline_fraction=0.5``), one update per env step, no warm-up.

Calibration after the switch to online (decision): off. ``set_phase`` turns ``calibrate`` on
for the offline phase and sets it to ``calibrate_online`` (default False) for warm-up and
online, as CORL does (its online transitions carry no return-to-go; our online buffer rows
have none either, and a mixed batch keeps ``mc_return`` only when every row has one).

Departures: those of algos/cql.py (batched critic ensemble, all losses checked before any
step, uniform actions in the env's box); CORL's separate ``cql_alpha_online`` is not
exposed (the same ``cql_alpha`` applies online). CORL's ``is_sparse_reward`` return-to-go
is ``sparse_reward=true`` (with ``sparse_min_reward``): every row of an episode that ends
on the failure reward gets r / (1 - gamma), CORL's ``get_return_to_go`` on the same
rows to float32 rounding (tests/golden/cal_ql_sparse_returns.json). The update itself matches
CORL@6afec90 within 4.9e-6 relative on losses, 2.1e-7 on parameters after 20 updates
(tests/golden/cal_ql.json, docs/PARITY.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import gymnasium as gym
import torch

from rlcore.algos.cql import CQL, CQLConfig
from rlcore.capabilities import Phased
from rlcore.plan import RunPlan, Schedule


@dataclass
class CalQLConfig(CQLConfig):
    """Cal-QL hyper-parameters: every CQLConfig field (commented there), CORL cal_ql.py
    defaults where they differ from CQL's."""

    critic_hidden: tuple[int, ...] | None = (256, 256)  # critics 2x256 (actor stays 3x256)
    network_init: str = "orthogonal"  # every actor and critic layer orthogonal gain sqrt(2)
    # offline-to-online (read by rlcore.train; online_steps 0 = pure offline)
    online_steps: int = 0  # env steps of online fine-tuning after total_steps offline steps
    updates_per_step: float = 1.0  # online gradient updates per env step (fractions accumulate)
    offline_data: str = (
        "mix"  # online batches: "mix" dataset and online rows (CORL), "keep", "drop"
    )
    offline_fraction: float = 0.5  # share of dataset rows in every online batch ("mix")
    buffer_size: int = 1_000_000  # online replay capacity
    calibrate_online: bool = False  # keep the Monte-Carlo bound on after the switch
    # CORL's is_sparse_reward (its antmaze configs: true): an episode that ends on the
    # failure reward sparse_min_reward * reward_scale + reward_bias gets that reward /
    # (1 - gamma) as every row's return-to-go (sparse_min_reward: the task's reward without
    # success before the transform; D4RL antmaze's ref_min_score 0)
    sparse_reward: bool = False
    sparse_min_reward: float = 0.0

    def plan(self) -> RunPlan:
        """Offline gradient steps, then (``online_steps`` > 0) fine-tuning online with the
        dataset mixed into every batch."""
        schedule = Schedule(
            offline_steps=self.total_steps, online_steps=self.online_steps,
            batch_size=self.batch_size, buffer_size=self.buffer_size,
            updates_per_step=self.updates_per_step, offline_data=self.offline_data,
            offline_fraction=self.offline_fraction,
        )  # fmt: skip
        data = super().plan().data  # CQL's dataset recipe
        if self.sparse_reward:
            failure = self.sparse_min_reward * self.reward_scale + self.reward_bias
            data = dataclasses.replace(data, sparse_failure_reward=failure)
        return RunPlan(schedule, data=data, gamma=self.gamma, precision=self.precision,
                       compile=self.compile)  # fmt: skip


class CalQL(CQL):
    """The CQL agent with Cal-QL's calibrated lower bound switched on (``calibrate``)."""

    CAPABILITIES = (*CQL.CAPABILITIES, Phased)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: CalQLConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(
            observation_space, action_space, config or CalQLConfig(), device, calibrate=True
        )

    def set_phase(self, phase: str) -> None:
        """Calibrate while pre-training offline; online, as ``calibrate_online`` says."""
        self.calibrate = phase == "offline" or self.config.calibrate_online
