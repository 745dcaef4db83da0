"""MOREC: model-based offline RL with reward consistency, on MOPO.

Paper: F.-M. Luo, T. Xu, X. Cao, Y. Yu, "Reward-Consistent Dynamics Models are Strongly
Generalizable for Offline Reinforcement Learning", ICLR 2024 (arXiv:2310.05422).
Reference: github.com/polixir/morec @ be8a641 (OfflineRL-Kit with the filter:
``offlinerlkit/dynamics/ensemble_dynamics.py`` ``step``, ``models/
discriminator_ensemble_loader.py``, ``run_example/run_morec_mopo.py``,
``generate_tmuxp_morec_mopo.py`` for the per-task settings).

MOREC is MOPO (algos/mopo.py, whose agent this is) with a transition filter: a dynamics
reward r_D(s, a, s') learned from the data (``rlcore.dynamics_reward``) scores candidate
transitions, and at every model step

1. each of the 5 elites draws ``candidate_draws`` (2) samples of (s', r), all clipped to
   +-``state_clip`` (25): 10 candidates per state;
2. the candidate of the highest r_D is kept (``select="max"``), or one is drawn with
   probabilities softmax(10 r_D) (``"softmax"``);
3. the task's termination rule, or r_D of the kept candidate below ``terminal_reward``
   (0.6), ends the rollout there (the transition is stored, flagged terminal);
4. the reward is the kept candidate's minus ``penalty_coef`` times MOPO's uncertainty.

The reference's MOREC-MOPO runs: rollouts of 100 steps from 2,000 dataset states every
1,000 updates (kept 5 rounds), everything else MOPO's. Per task (its generator script;
penalty_coef, select): halfcheetah-medium 0.5 max, -medium-replay 0.5 softmax,
-medium-expert 0.5 max, -random 0.5 softmax; hopper-medium 15 softmax, -medium-replay 15
softmax, -medium-expert 15 softmax, -random 10 max; walker2d-medium 0.5 softmax,
-medium-replay 0.25 max, -medium-expert 1.0 softmax, -random 1.0 softmax.

Departures: the dynamics reward's *learning* is a reconstruction (the authors' training
code is not released, and their trained discriminators are a download this project
cannot make): ``rlcore.dynamics_reward`` lists what follows the reference's code and
what does not. The reference loads a dynamics ensemble trained apart (its "BASELINE"
checkpoints, one per task and seed); here it is fitted at the start of the run, as MOPO's
is, unless ``dynamics_from`` names a MOPO run whose fitted ensemble it loads (the
reference's way; benchmarks/model_based.py pairs each MOREC run with the MOPO run of its
seed). MOPO's departures apply.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import torch

from rlcore.algos.mopo import MOPO, MOPOConfig


@dataclass
class MORECConfig(MOPOConfig):
    """MOREC-MOPO hyper-parameters: every MOPOConfig field (commented there) with the
    reference's MOREC values where they differ."""

    transition_filter: bool = True
    rollout_length: int = 100
    rollout_batch: int = 2000
    state_clip: float | None = 25.0  # the reference's D4RL clip (NeoRL: 1e6)
    candidate_draws: int = 2
    select: str = "max"
    terminal_reward: float = 0.6
    reward_clip: float = 1.0


class MOREC(MOPO):
    """The MOPO agent with MOREC's transition filter and dynamics reward."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: MORECConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        config = config or MORECConfig()
        if not config.transition_filter:
            raise ValueError("MOREC is MOPO with the transition filter: use algo=mopo without it")
        super().__init__(observation_space, action_space, config, device)
