"""WSRL: warm-start RL, online fine-tuning that does not retain the offline data.

Paper: Z. Zhou, A. Peng, Q. Li, S. Levine, A. Kumar, "Efficient Online Reinforcement
Learning Fine-Tuning Need Not Retain Offline Data", arXiv:2412.07762 (2024). Defaults
follow the locomotion recipe of its reference code (zhouzypaul/wsrl: CQL pre-training
with ``--use_redq``, then ``launch_wsrl_finetune.sh``).

A run has three phases (the loop calls ``set_phase`` at the start of each):
1. ``"offline"`` -- CQL pre-training on the dataset (algos/cql.py's agent and maths,
   ``offline_steps`` gradient steps): a 10-critic LayerNorm ensemble, cql_alpha 5, 10
   sampled actions with importance sampling, max-target backup, no entropy in the backup.
2. ``"warmup"`` -- the online buffer starts EMPTY (``offline_data="drop"``); for
   ``warmup_steps`` env steps the pre-trained policy acts with stochastic samples and no
   update happens (the loop's job: it calls no ``update``).
3. ``"online"`` -- SAC (algos/sac.py) trains the SAME actor, critics and target critics
   (the modules are shared between the two agents, not copied): per env step a batch of
   ``utd_ratio`` x ``batch_size`` = 4 x 256 rows; for each minibatch one critic step
   (target r + gamma (1 - done) min over a random 2 of the 10 target critics at
   a' ~ pi(s'), no entropy term) and a Polyak average (tau 5e-3); then one actor and
   temperature step on all 1024 rows, actor loss E[alpha log pi - min over all 10 Q];
   target entropy -|A|.
Shared defaults: gamma 0.99; lr actor 1e-4, critic 3e-4, temperature 1e-4; initial
temperature 1; 256x256 ReLU networks with LayerNorm, critic output layer orthogonal with
gain 1e-2; tanh-Gaussian policy; raw (not normalised) states.

``update`` runs the CQL update in the offline phase and the SAC update afterwards;
``state_dict`` holds both agents (the shared networks appear in both, with equal values),
so a run resumes in any phase; ``act`` is the same policy in every phase.

Departures from the reference code:
* The online SAC starts with a fresh temperature (``init_alpha``) and fresh Adam states;
  the reference restores its whole CQL train state (temperature and optimiser moments
  too) into the SAC agent.
* Target-critic subsets are drawn without replacement (as RLPD; the reference draws
  indices with replacement, so its "2 of 10" is sometimes 1 critic).
* CQL pre-training uses algos/cql.py as is: the TD target's min and the conservative
  penalty cover all 10 critics (the reference applies its 2-of-10 subset there too),
  the critic losses are summed over critics (the reference averages), the policy's
  log-std is CORL's clamped affine map in [-20, 2] (the reference: std = exp(raw) clipped
  to [1e-5, 10]), and the temperature is exp(log alpha) (the reference: softplus).
* The online temperature loss reuses the actor step's samples at s (algos/sac.py); the
  reference draws fresh actions at s' for it.
* Initialisation is CQL's "cql" scheme (critic hidden layers orthogonal gain sqrt(2),
  critic output orthogonal gain 1e-2, actor output Xavier gain 1e-2); the reference puts
  the 1e-2 gain on the LAST HIDDEN layer of both networks and orthogonal sqrt(2) elsewhere.
* In the offline phase, a batch of more than ``batch_size`` rows (a loop that stacks
  ``utd_ratio`` minibatches) trains CQL on its first ``batch_size`` rows only: one CQL
  gradient step per update call, as in the reference.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from algos.cql import CQL, CQLConfig
from algos.sac import SAC, SACConfig
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
    # online SAC
    critic_subset: int | None = 2  # TD target: min over 2 random target critics
    actor_q: str = "min"  # the actor maximises the min over all critics
    utd_ratio: int = 4  # critic steps (minibatches) per env step
    actor_batch: str = "full"  # one actor/temperature step on all utd_ratio minibatches
    compile: bool | str = False  # the online update as one compiled graph (algos/sac.py)
    compile_steps: int | None = 1  # critic steps per compiled graph call (None: all 4)
    # loop settings (read by rlcore.loops.off_policy through rlcore.train)
    batch_size: int = 256  # minibatch size (offline CQL batch, online critic minibatch)
    offline_steps: int = 250_000  # CQL pre-training gradient steps
    offline_data: str = "drop"  # the online buffer starts empty; no dataset rows online
    buffer_size: int = 2_000_000  # online replay capacity
    learning_starts: int = 0  # no uniform random actions online
    warmup_steps: int = 5_000  # pre-trained policy fills the buffer, no updates
    updates_per_step: float = 1.0  # update calls per env step
    total_steps: int = 500_000  # online env steps


def _subset(cls: type, config: WSRLConfig, **changes: object) -> object:
    """An instance of the dataclass ``cls`` with the fields ``config`` shares with it."""
    names = {f.name for f in dataclasses.fields(cls)} & {f.name for f in dataclasses.fields(config)}
    return cls(**{**{name: getattr(config, name) for name in names}, **changes})


class WSRL:
    """CQL pre-training, then SAC fine-tuning of the same networks: ``set_phase``,
    ``act``, ``update(batch)``, ``state_dict`` / ``load_state_dict``."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: WSRLConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = config = config or WSRLConfig()
        if config.normalize_states:
            raise ValueError(
                "WSRL trains on raw states (its online phase never sees dataset "
                "statistics): set algo.normalize_states=false"
            )
        self.offline = CQL(observation_space, action_space, _subset(CQLConfig, config), device)
        shared = {
            "actor": self.offline.actor,
            "critic": self.offline.critic,
            "target_critic": self.offline.target_critic,
        }
        # one actor/temperature step per update call, Polyak after every critic step
        sac_config = _subset(SACConfig, config, policy_frequency=1, target_frequency=1)
        self.online = SAC(observation_space, action_space, sac_config, device, networks=shared)
        self.device = self.offline.device
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
        """ "offline": CQL updates; "warmup" / "online": SAC updates of the same networks."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}, choose from {PHASES}")
        self.phase = phase

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
        """Both agents' states (networks, optimisers, temperatures, counters)."""
        return {"offline": self.offline.state_dict(), "online": self.online.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.offline.load_state_dict(state["offline"])
        self.online.load_state_dict(state["online"])
