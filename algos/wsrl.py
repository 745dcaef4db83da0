"""WSRL: warm-start RL, online fine-tuning that does not retain the offline data.

Paper: Z. Zhou, A. Peng, Q. Li, S. Levine, A. Kumar, "Efficient Online Reinforcement
Learning Fine-Tuning Need Not Retain Offline Data", arXiv:2412.07762 (2024). Defaults
follow the locomotion recipe of its reference code (zhouzypaul/wsrl: CQL pre-training
with ``--use_redq``, then ``launch_wsrl_finetune.sh``).

A run has three phases (the loop calls ``set_phase`` at the start of each):
1. ``"offline"`` -- CQL pre-training on the dataset (algos/cql.py's agent and maths,
   ``offline_steps`` gradient steps): a 10-critic LayerNorm ensemble, cql_alpha 5, 10
   sampled actions with importance sampling, max-target backup, no entropy in the backup,
   TD target the min over a random 2 of the 10 target critics (``critic_subset``, the
   reference's ``critic_subsample_size`` of ``--use_redq``; one draw per update from
   torch's generator). Measured (2,500 CQL steps, 64x64 networks, a 10k-step Hopper
   dataset of benchmarks/assets/hopper_sac_medium.pt): mean Q on dataset rows 38.7 (min
   over all 10 critics: 36.4, 6% more pessimistic).
2. ``"warmup"`` -- the online buffer starts EMPTY (``offline_data="drop"``); for
   ``warmup_steps`` env steps the pre-trained policy acts with stochastic samples and no
   update happens (the loop's job: it calls no ``update``).
3. ``"online"`` -- SAC (algos/sac.py) trains the SAME actor, critics and target critics
   (the modules are shared between the two agents, not copied), and continues the CQL
   train state: at the switch out of ``"offline"`` the pre-trained temperature and the Adam
   states (moments and step counts) of actor, critics and temperature are copied into the
   SAC agent (``carry_state``), as the reference's SAC restores the whole CQL checkpoint
   (``finetune.py --resume_path``: flax restores params, opt_states and rng of the shared
   keys actor / critic / temperature). Measured (the setup of 1., then SAC updates on
   dataset batches): alpha online 0.81 (carried) instead of 1.0 (fresh), and the policy's
   entropy rises more slowly (-0.68 / -0.14 / 0.40 after 10 / 50 / 200 updates; fresh:
   -0.38 / 0.09 / 0.63; -0.76 at the switch). Per env step a batch of
   ``utd_ratio`` x ``batch_size`` = 4 x 256 rows; for each minibatch one critic step
   (target r + gamma (1 - done) min over a random 2 of the 10 target critics at
   a' ~ pi(s'), no entropy term) and a Polyak average (tau 5e-3); then one actor and
   temperature step on all 1024 rows, actor loss E[alpha log pi - min over all 10 Q];
   target entropy -|A|.
The AntMaze recipe (configs/experiment/wsrl_antmaze.yaml; the reference README: Cal-QL
pre-training with ``--use_redq``, then ``launch_wsrl_finetune.sh`` with ``antmaze_wsrl``)
switches on ``calibrate`` (Cal-QL's bound in the pre-training penalty, ``sparse_reward``:
the reference's return-to-go of never-successful episodes) and the online
``max_target_backup`` (the max over 10 sampled next actions, algos/sac.py), with the
reference's tuned CQL weight (``cql_lagrange_form="wsrl"``: a softplus Lagrange multiplier
from 1.0, no ``cql_alpha`` factor, gap 0.8). Departures there (sizes measured against the
reference, docs/PARITY.md): the reference computes the multiplier's loss on a fresh draw
of the penalty's sampled actions (``cql_alpha_loss_fn``), ours reuses the critic step's;
the reference's antmaze policy has a state-independent log-std (``std_parameterization=
"uniform"``: one free vector from 0), ours keeps the state-dependent head of every recipe.
Shared defaults: gamma 0.99; lr actor 1e-4, critic 3e-4, temperature 1e-4; initial
temperature 1 (pre-training; online continues from the pre-trained value); 256x256 ReLU
networks with LayerNorm, critic output layer orthogonal with gain 1e-2; tanh-Gaussian
policy; raw (not normalised) states.

``update`` runs the CQL update in the offline phase and the SAC update afterwards;
``state_dict`` holds both agents (the shared networks appear in both, with equal values),
so a run resumes in any phase; ``act`` is the same policy in every phase.

Departures from the reference code:
* No "ghost" optimiser steps (kept, measured). The reference steps EVERY optimiser in
  every ``update`` call and hands a zero gradient to the parts it freezes, so Adam still
  moves them by its momentum: each online env step the actor and temperature take 4
  momentum-only steps (one per critic minibatch) besides their real one, and the critics
  one after the actor step (pre-training updates every part each step: no ghosts there).
  That is an artefact of the reference's one-train-state design, not part of the method
  (the paper describes one actor step per 4 critic steps); its effect is a larger actor
  step. Measured with torch's Adam(0.9, 0.999) per env step, ghosts vs none: a parameter
  with a constant gradient moves 2.24x as far (actor, temperature) and 1.12x (critics);
  with zero-mean N(0, 1) gradients the step's standard deviation is 4.5x (actor) and
  1.23x (critics). So the reference's actor and temperature effectively learn 2-4x
  faster than its stated 1e-4; matching that would mean stepping frozen parts with zero
  gradients, which no other SAC here does.
* Target-critic subsets are drawn without replacement (as RLPD; the reference draws
  indices with replacement, so its "2 of 10" is sometimes 1 critic).
* CQL pre-training uses algos/cql.py as is apart from the target subset: the conservative
  penalty covers all 10 critics (the reference applies a second random 2-of-10 subset
  there, averaged: equal to ours in expectation), the critic losses are summed over
  critics (the reference averages), the policy's log-std is CORL's clamped affine map in
  [-20, 2] (the reference: std = exp(raw) clipped to [1e-5, 10]), and the temperature is
  exp(log alpha) (the reference: softplus).
* The temperature losses differ between the phases here (CQL's -log alpha (log pi + H),
  SAC's -alpha (log pi + H)); the reference uses one loss in both. The carried Adam
  moments of the temperature therefore belong to a gradient 1/alpha times the online
  one: right after the switch the temperature moves slower than fresh Adam would until
  the second moment decays (time constant 1000 steps).
* The online temperature loss reuses the actor step's samples at s (algos/sac.py); the
  reference draws fresh actions at s' for it.
* Initialisation is CQL's "cql" scheme (critic hidden layers orthogonal gain sqrt(2),
  critic output orthogonal gain 1e-2, actor output Xavier gain 1e-2); the reference puts
  the 1e-2 gain on the LAST HIDDEN layer of both networks and orthogonal sqrt(2) elsewhere.
* Each of the 10 critics has its own output layer; the reference's ``Critic`` ensembles
  only the hidden layers, so its 10 critics share one ``Dense(1)`` output layer.
  LayerNorm epsilon is PyTorch's 1e-5 (flax: 1e-6). In pre-training the reference's
  temperature loss uses 10 fresh policy samples per next state.
* Measured against the reference run (tests/golden/wsrl.json: 5 CQL updates, the switch,
  5 online updates at UTD 4, from equal weights and draws; each departure alone switched
  on in the otherwise aligned reference, max |diff| of parameters after all 10): shared
  output layer: critics 9.7e-3; ghost steps: critics 9.0e-4, log alpha 7.6e-4 (none
  offline); penalty subset: critics 5.5e-3; softplus temperature: log alpha 3.7e-4;
  LayerNorm eps: critics 4.3e-5; temperature samples: log alpha 2.9e-6; our log-std map:
  critics 3.6e-3. All aligned, ours matches within 4.9e-6 (docs/PARITY.md).
* In the offline phase, a batch of more than ``batch_size`` rows (a loop that stacks
  ``utd_ratio`` minibatches) trains CQL on its first ``batch_size`` rows only: one CQL
  gradient step per update call, as in the reference.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rlcore.agent_state import Plumbing
from rlcore.algos.cql import CQL, CQLConfig
from rlcore.algos.sac import SAC, SACConfig
from rlcore.capabilities import Phased
from rlcore.plan import RunPlan, Schedule
from rlcore.types import Batch

PHASES = ("offline", "warmup", "online")


@dataclass
class WSRLConfig(CQLConfig):
    """WSRL hyper-parameters: every CQLConfig field (commented there; they configure the
    offline phase and the shared networks), the online SAC's ensemble options and the
    loop's fields; WSRL's locomotion defaults."""

    # shared networks and learning rates (both phases)
    actor_lr: float = 1e-4  # policy learning rate
    critic_lr: float = 3e-4  # Q learning rate
    alpha_lr: float = 1e-4  # temperature learning rate
    hidden: tuple[int, ...] = (256, 256)  # hidden widths of actor and critics
    num_critics: int = 10  # critic ensemble
    layer_norm: bool = True  # LayerNorm in the critics
    actor_layer_norm: bool = True  # LayerNorm in the actor
    # offline CQL (locomotion)
    cql_alpha: float = 5.0  # conservative penalty weight
    cql_max_target_backup: bool = True  # max over the sampled next actions in the target
    normalize_states: bool = False  # WSRL trains on raw states (must stay false)
    # Cal-QL pre-training (the reference's antmaze / adroit recipe: finetune.py --agent
    # calql): CQL's penalty on policy actions bounded below by the Monte-Carlo return-to-go
    calibrate: bool = False
    # sparse tasks (calibrate only): an episode whose EVERY reward is the failure reward
    # sparse_min_reward * reward_scale + reward_bias gets that reward / (1 - gamma) as its
    # return-to-go on every row (wsrl calc_return_to_go; CORL's rule, Cal-QL's: last reward)
    sparse_reward: bool = False
    sparse_min_reward: float = 0.0
    # online SAC
    critic_subset: int | None = 2  # TD target (both phases): min over 2 random target critics
    actor_q: str = "min"  # the actor maximises the min over all critics
    utd_ratio: int = 4  # critic steps (minibatches) per env step
    actor_batch: str = "full"  # one actor/temperature step on all utd_ratio minibatches
    max_target_backup: bool = False  # online target: max over backup_actions next actions
    backup_actions: int = 10  # next actions sampled per row (max_target_backup)
    compile: bool | str = False  # the online update as one compiled graph (algos/sac.py)
    compile_steps: int | None = 1  # critic steps per compiled graph call (None: all 4)
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 256  # minibatch size (offline CQL batch, online critic minibatch)
    offline_steps: int = 250_000  # CQL pre-training gradient steps
    offline_data: str = "drop"  # the online buffer starts empty; no dataset rows online
    buffer_size: int = 2_000_000  # online replay capacity
    learning_starts: int = 0  # no uniform random actions online
    warmup_steps: int = 5_000  # pre-trained policy fills the buffer, no updates
    updates_per_step: float = 1.0  # update calls per env step
    total_steps: int = 500_000  # online env steps

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sparse_reward and not self.calibrate:
            raise ValueError(
                "sparse_reward sets Cal-QL's return-to-go, which only calibrate=true reads: "
                "set algo.calibrate=true or algo.sparse_reward=false"
            )

    def plan(self) -> RunPlan:
        """``offline_steps`` of CQL pre-training, then online SAC: ``warmup_steps`` of the
        pre-trained policy acting without updates, the dataset dropped (``offline_data``)."""
        schedule = Schedule(
            offline_steps=self.offline_steps, online_steps=self.total_steps,
            batch_size=self.batch_size, buffer_size=self.buffer_size,
            learning_starts=self.learning_starts, warmup_steps=self.warmup_steps,
            updates_per_step=self.updates_per_step, utd_ratio=self.utd_ratio,
            offline_data=self.offline_data,
        )  # fmt: skip
        # CQL's dataset recipe; the dataset is needed for pre-training only (an init_from
        # run that skips it runs without one)
        data = dataclasses.replace(super().plan().data, required=False)
        if self.sparse_reward:
            failure = self.sparse_min_reward * self.reward_scale + self.reward_bias
            data = dataclasses.replace(data, sparse_failure_reward=failure, sparse_rule="all")
        return RunPlan(schedule, data=data, gamma=self.gamma, precision=self.precision,
                       compile=self.compile)  # fmt: skip


def _subset(cls: type, config: WSRLConfig, **changes: object) -> object:
    """An instance of the dataclass ``cls`` with the fields ``config`` shares with it."""
    names = {f.name for f in dataclasses.fields(cls)} & {f.name for f in dataclasses.fields(config)}
    return cls(**{**{name: getattr(config, name) for name in names}, **changes})


class WSRL:
    """CQL pre-training, then SAC fine-tuning of the same networks: ``set_phase``,
    ``act``, ``update(batch)``, ``state_dict`` / ``load_state_dict``."""

    CAPABILITIES = (Phased,)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: WSRLConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = config = config or WSRLConfig()
        self.plumbing = io = Plumbing(observation_space, action_space, device)  # CQL checks
        self.device = io.device
        if config.normalize_states:
            raise ValueError(
                "WSRL trains on raw states (its online phase never sees dataset "
                "statistics): set algo.normalize_states=false"
            )
        self.offline = CQL(
            observation_space, action_space, _subset(CQLConfig, config), device,
            calibrate=config.calibrate,
        )  # fmt: skip
        shared = {
            "actor": self.offline.actor,
            "critic": self.offline.critic,
            "target_critic": self.offline.target_critic,
        }
        # one actor/temperature step per update call, Polyak after every critic step
        sac_config = _subset(SACConfig, config, policy_frequency=1, target_frequency=1)
        self.online = SAC(observation_space, action_space, sac_config, device, networks=shared)
        self.parts = io.declare(counters={"phase": str}, offline=self.offline, online=self.online)
        self.phase = "offline"

    @property
    def actor(self) -> torch.nn.Module:
        """The policy (shared by both phases)."""
        return self.offline.actor

    @property
    def critic(self) -> torch.nn.Module:
        """The critic ensemble (shared by both phases)."""
        return self.offline.critic

    def set_phase(self, phase: str) -> None:
        """ "offline": CQL updates; "warmup" / "online": SAC updates of the same networks.
        Leaving "offline" carries the CQL train state into the SAC agent (``carry_state``);
        the loop calls this again after a resume, where the saved phase makes it a no-op."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}, choose from {PHASES}")
        if self.phase == "offline" and phase != "offline":
            self.carry_state()
        self.phase = phase

    def carry_state(self) -> None:
        """The online SAC continues the pre-training's train state, as the reference's SAC
        agent restores the whole CQL checkpoint: the temperature (both agents use
        alpha = exp(log alpha)) and the Adam states (moments and step counts) of actor,
        critics and temperature, copied (the agents keep separate objects)."""
        offline, online = self.offline, self.online
        with torch.no_grad():
            online.log_alpha.copy_(offline.log_alpha)
        pairs = (
            (offline.actor_optimizer, online.actor_optimizer),
            (offline.critic_optimizer, online.critic_optimizer),
            (offline.alpha_optimizer, online.alpha_optimizer),
        )
        for source, target in pairs:
            target.load_state_dict(copy.deepcopy(source.state_dict()))

    def act(self, obs: np.ndarray | torch.Tensor, deterministic: bool = False) -> np.ndarray:
        """Action(s) in env units from the (shared) policy, in every phase."""
        return self.offline.act(obs, deterministic)

    def update(self, batch: Batch) -> dict[str, float]:
        """One CQL step (offline phase) or one SAC update of ``utd_ratio`` critic steps and
        one actor/temperature step (warmup / online phases)."""
        if self.phase == "offline":
            return self.offline.update(batch.rows(0, self.config.batch_size))
        return self.online.update(batch)

    def state_dict(self) -> dict:
        """Both agents' states (networks, optimisers, temperatures, counters) and the phase
        (so that ``set_phase`` after a resume does not carry the CQL state over again)."""
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
