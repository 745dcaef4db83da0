"""The run plan: what the core executes for an algorithm, declared by the algorithm.

Every algorithm's config implements ``plan() -> RunPlan`` (the ``Planned`` protocol of
``rlcore.capabilities``): its schedule (phases, batches, buffer, update rate), the env
recipe (normalisation, action chunks, observation history, costs) and what is done to an
offline dataset. The composition root (``rlcore.train``) builds envs, buffers, samplers and
phases from the plan and reads no other field of an algorithm's config, so a config name
read by two layers cannot silently mean two things there. The option names users write
(``algo.batch_size=...``) stay the papers' hyperparameter names; each config maps them onto
the plan in one explicit function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

OfflineData = Literal["drop", "keep", "mix"]
OFFLINE_DATA_MODES: tuple[str, ...] = ("drop", "keep", "mix")


@dataclass(frozen=True)
class Schedule:
    """How a run spends its steps.

    A replay-based run is ``offline_steps`` gradient steps on the dataset, then
    ``online_steps`` env steps (summed over sub-envs): ``warmup_steps`` (plus
    ``warmup_vector_steps`` vector steps, i.e. that many times num_envs env steps) with
    the policy acting and no updates, ``learning_starts`` with uniform random actions, then
    ``updates_per_step`` updates per env step (fractions carry over), each on
    ``utd_ratio`` minibatches of ``batch_size``; ``updates_per_vector_step``, when set,
    replaces ``updates_per_step``: that many updates after every vector step whatever the
    number of sub-envs (FastTD3's cadence: more envs mean more data per update). An on-policy run is ``online_steps`` env
    steps in rollouts of ``rollout_steps`` per sub-env."""

    offline_steps: int = 0
    online_steps: int = 0
    batch_size: int = 256
    # online replay capacity; None keeps every online transition
    buffer_size: int | None = None
    learning_starts: int = 0
    warmup_steps: int = 0
    warmup_vector_steps: int = 0
    updates_per_step: float = 1.0
    updates_per_vector_step: float | None = None
    utd_ratio: int = 1
    # n-step returns (rlcore.buffers.NStepReturns, discounted with the plan's gamma): each
    # online batch's reward sums up to n steps and carries ``discount`` = gamma^k
    n_step: int = 1
    # on-policy: env steps per sub-env per rollout (0: a replay-based run) and minibatches
    rollout_steps: int = 0
    num_minibatches: int | None = None
    # the dataset online: drop (online buffer only), keep (dataset rows in the online
    # buffer) or mix (MixedSampler, ``offline_fraction`` of every batch from the dataset)
    offline_data: OfflineData = "drop"
    offline_fraction: float = 0.5

    @property
    def on_policy(self) -> bool:
        """A run of rollouts (PPO family) rather than of replayed transitions."""
        return self.rollout_steps > 0

    def warmup_length(self, num_envs: int) -> int:
        """Env steps of the policy-acting warm-up: ``warmup_steps`` plus
        ``warmup_vector_steps`` vector steps of ``num_envs`` sub-envs."""
        return self.warmup_steps + self.warmup_vector_steps * num_envs


@dataclass(frozen=True)
class Returns:
    """Discounting of an on-policy run's advantages (and of its cost's, when constrained)."""

    gamma: float = 0.99
    gae_lambda: float = 0.95
    cost_gamma: float | None = None
    cost_gae_lambda: float | None = None


@dataclass(frozen=True)
class EnvRecipe:
    """How the training env is wrapped for the algorithm."""

    normalize_obs: bool = False  # running observation standardisation (env side)
    normalize_reward: bool = False  # running-std reward scaling (PPO family)
    reward_gamma: float = 0.99  # the discount the reward scaling's return estimate uses
    action_chunk: int = 1  # actions per agent decision, executed open loop (DPPO, ReinFlow)
    obs_history: int = 1  # observations stacked over the last T env steps
    cost: bool = False  # a constrained algorithm: the task must report info["cost"]


@dataclass(frozen=True)
class DataRecipe:
    """What is done to an offline dataset (and, for rewards, to online rows alike)."""

    normalize_reward_by_returns: bool = False  # r x 1000 / (max - min episode return)
    reward_scale: float = 1.0
    reward_bias: float = 0.0
    normalize_states: bool = False  # fit the agent's observation statistics on the dataset
    # sparse rewards (CORL Cal-QL's is_sparse_reward): every row of an episode that ends on
    # this reward (after scale and bias: it never succeeded) gets the return-to-go r / (1 -
    # gamma), as if it failed forever; None: plain discounted sums
    sparse_failure_reward: float | None = None
    # which episodes failed: "last" reward is the failure one (CORL), "all" rewards are (WSRL)
    sparse_rule: str = "last"
    # an offline algorithm: it always trains with its dataset (an online phase after
    # ``init_from`` too: the dataset's reward and state statistics). Its ``total_steps``
    # are gradient steps and its online phase is ``algo.online_steps``.
    required: bool = False


@dataclass(frozen=True)
class ModelRecipe:
    """Model-based offline training (``rlcore.model_based.ModelRollouts``, MOPO / MOBILE /
    MOREC as OfflineRL-Kit runs them): before the first update the agent's dynamics
    ensemble is fitted on the dataset; every ``rollout_freq`` updates ``rollout_batch``
    dataset states start ``rollout_length``-step rollouts of the policy in the model,
    kept for ``retain_epochs`` rollouts; every batch takes ``real_ratio`` of its rows
    from the dataset, the rest from the rollouts. Imagined rewards lose ``penalty_coef``
    times MOPO's uncertainty."""

    rollout_freq: int = 1000
    rollout_batch: int = 50_000
    rollout_length: int = 5
    retain_epochs: int = 5
    real_ratio: float = 0.05
    penalty_coef: float = 1.0
    # the ensemble's fit (rlcore.dynamics.fit_dynamics)
    fit_lr: float = 1e-3
    fit_batch_size: int = 256
    holdout_ratio: float = 0.2
    max_holdout: int = 1000
    patience: int = 5
    max_fit_epochs: int | None = None
    # a MOPO / MOREC run (dir or .pt) whose fitted ensemble this run starts from, on the
    # same data: no fit (the reference's load_dynamics_path; rlcore.model_based)
    dynamics_from: str | None = None
    state_clip: float | None = None  # imagined samples clipped to +-this (MOREC: 25)
    # MOREC's transition filter (candidate_draws > 0): that many draws of every elite's
    # Gaussian, the candidate of the highest learned dynamics reward kept ("max") or drawn
    # by softmax(10 r) ("softmax"); a kept transition scoring below terminal_reward ends
    # its rollout. The dynamics reward is learned before the first rollout
    # (rlcore.dynamics_reward.learn_dynamics_reward) with these settings
    candidate_draws: int = 0
    select: str = "max"
    terminal_reward: float = 0.6
    reward_iterations: int = 2000
    reward_batch_size: int = 256
    reward_snapshot_every: int = 50

    def __post_init__(self) -> None:
        for name in ("rollout_freq", "rollout_batch", "rollout_length", "retain_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if not 0.0 <= self.real_ratio <= 1.0:
            raise ValueError(f"real_ratio={self.real_ratio} must be in [0, 1]")
        if self.select not in ("max", "softmax"):
            raise ValueError(f"select={self.select!r}: choose from ('max', 'softmax')")
        if self.max_fit_epochs is not None and self.max_fit_epochs < 1:
            raise ValueError(f"max_fit_epochs={self.max_fit_epochs} must be >= 1 (or None)")


@dataclass(frozen=True)
class RunPlan:
    """An algorithm's whole declaration to the core. ``gamma`` discounts the dataset's
    Monte-Carlo returns; ``needs_pretrained`` marks fine-tuners that must start from a
    pre-trained policy, ``pretrained`` the one given (``algo.pretrained``); ``precision``
    / ``compile`` are recorded in the run's metadata (``compile`` as the config says it:
    ``"auto"`` is settled by ``rlcore.speed.settle_compile`` from the run's real length)."""

    schedule: Schedule
    env: EnvRecipe = field(default_factory=EnvRecipe)
    data: DataRecipe = field(default_factory=DataRecipe)
    returns: Returns = field(default_factory=Returns)
    gamma: float = 0.99
    model: ModelRecipe | None = None  # model-based offline training (ModelRecipe)
    needs_pretrained: bool = False
    pretrained: str | None = None
    precision: str = "float32"
    compile: bool | str = False

    def phase_lengths(self, init_from: bool) -> tuple[int, int]:
        """(offline gradient steps, online env steps); ``init_from`` (an agent loaded from
        a finished run) skips pre-training."""
        return (0 if init_from else self.schedule.offline_steps), self.schedule.online_steps

    def needs_dataset(self, init_from: bool) -> bool:
        """True when the run trains on, or mixes in, an offline dataset (an offline
        algorithm's plan always does: ``DataRecipe.required``)."""
        offline, online = self.phase_lengths(init_from)
        mixes = online > 0 and self.schedule.offline_data in ("keep", "mix")
        return self.data.required or offline > 0 or mixes
