"""Implicit Q-Learning (IQL), offline, with optional online fine-tuning.

Paper: I. Kostrikov, A. Nair, S. Levine, "Offline Reinforcement Learning with Implicit
Q-Learning", ICLR 2022 (arXiv:2110.06169). Defaults follow CORL's ``iql.py`` (D4RL
locomotion): 256x256 networks, lr 3e-4 with the actor's cosine-annealed to 0, batch 256,
beta 3, expectile 0.7, tau 0.005, advantage weights clamped at 100, Gaussian actor with
a state-independent log-std in [-20, 2] and tanh on the mean, states standardised.
Per-dataset overrides live in configs (e.g. hopper-medium: deterministic actor, tau
0.001, reward normalisation).

One update, in order: (1) V(s') for the Q target, before anything changes; (2) V by
expectile regression toward min target Q(s, a); (3) twin Q toward r + gamma V(s');
(4) Polyak target Q; (5) actor by advantage-weighted regression,
min(exp(beta (Q - V)), 100) times -log pi(a|s) (or ||pi(s) - a||^2 when deterministic).

Offline-to-online (``online_steps`` > 0, CORL's ``finetune/iql.py``): the loop calls
``set_phase``; training is unchanged online except the actor's learning rate. CORL steps
torch's ``CosineAnnealingLR(T_max=offline steps)`` on every update, offline and online,
and that schedule is periodic: online the rate climbs back from 0 to ``actor_lr`` over the
next ``total_steps`` updates. ``set_phase("warmup"/"online")`` does the same here
(``cosine_lr(..., periodic=True)`` on the running update count), so the actor keeps
learning online instead of staying at the annealed rate 0.

Online exploration: the Gaussian policy acts with its samples; a ``deterministic_actor``
acts with pi(s) + clip(N(0, 0.03), -0.5, 0.5) (in [-1, 1] action units, scaled to the box;
the action then clipped to it), CORL's ``expl_noise`` / ``noise_clip``; evaluation
(``deterministic=True``) adds none.

Departures from the paper: the Q loss is the mean (not the sum) of the two critics'
MSEs, as in CORL; the twin critics are one batched ensemble. Every loss is taken from the
pre-update parameters (as CORL, whose Q target uses V before its step) and all are
checked for NaN/inf before any optimiser steps (``NonFiniteLossError`` leaves the
parameters untouched). Opt-in ``precision="bf16"`` runs the hidden layers' matmuls in
bfloat16 autocast (output layers, parameters, optimiser state and losses stay float32): a
speed mode, not in the paper. ``compile=True`` runs the whole update -- the three losses,
the gradients of their sum, three Adam steps (the actor's cosine lr as a tensor), Polyak
-- as one ``torch.compile``d graph of ``_update_steps``, the function the eager update
runs (``rlcore.compiled.CompiledUpdate``): same maths, equal to float tolerance, 1.3-1.5x the
eager updates/s at Hopper shapes (1 thread; ``benchmarks.throughput`` section
``compile``); a C++ compiler is needed (eager with one warning without one); the NaN
check then follows the graph, after the failing update's steps; ``"auto"`` compiles runs
of more than 100k steps (``rlcore.speed``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.capabilities import ActionValue, Phased, StateStatistics
from rlcore.compiled import CompiledUpdate, EagerSteps, Steps
from rlcore.losses import cosine_lr, ensemble_mse, expectile_loss, set_lr, weight_diagnostics
from rlcore.nets import (
    MLP,
    DeterministicActor,
    GaussianActor,
    ObsNormalizer,
    QEnsemble,
    polyak_update,
)
from rlcore.plan import DataRecipe, RunPlan, Schedule
from rlcore.speed import resolve_speed_modes
from rlcore.types import Batch
from rlcore.utils import (
    adam,
    ensure_finite,
    mixed_precision,
    scalars,
    step_summed,
)

PHASES = ("offline", "warmup", "online")  # the loop's phase names (set_phase)


def gaussian_policy(
    input_dim: int,
    action_dim: int,
    low: np.ndarray,
    high: np.ndarray,
    hidden: tuple[int, ...],
) -> GaussianActor:
    """IQL's stochastic policy (CORL): N(mean, std) with the mean squashed into the action
    box by tanh and a state-independent log-std clamped to [-20, 2]; default layer init."""
    return GaussianActor(
        input_dim, action_dim, hidden, "relu", 0.0, tanh_mean=True,
        action_low=low, action_high=high, log_std_bounds=(-20.0, 2.0), orthogonal=False,
    )  # fmt: skip


@dataclass
class IQLConfig:
    """IQL hyper-parameters (CORL defaults)."""

    gamma: float = 0.99  # discount
    tau: float = 0.005  # Polyak rate of the target critics
    actor_lr: float = 3e-4  # policy lr: cosine to 0 over total_steps, back up online (top)
    critic_lr: float = 3e-4  # Q learning rate
    value_lr: float = 3e-4  # V learning rate
    hidden: tuple[int, ...] = (256, 256)  # hidden widths of all networks
    beta: float = 3.0  # inverse temperature of the advantage weights
    expectile: float = 0.7  # expectile of the value regression
    max_weight: float = 100.0  # clamp of exp(beta * advantage)
    deterministic_actor: bool = False  # ||pi(s) - a||^2 regression instead of a Gaussian
    # exploration of the deterministic actor when acting with deterministic=False (online
    # fine-tuning; CORL finetune/iql.py): N(0, expl_noise) in [-1, 1] action units, the
    # noise clipped to +-noise_clip, the action then clipped to the box
    expl_noise: float = 0.03
    noise_clip: float = 0.5
    normalize_states: bool = True  # standardise observations with dataset statistics
    normalize_reward_by_returns: bool = False  # r * 1000 / (max - min dataset episode return)
    # dataset and online rewards r <- reward_scale * r + reward_bias (CORL's antmaze
    # recipe, finetune/iql.py modify_reward / modify_reward_online: r - 1, reward_bias=-1)
    reward_scale: float = 1.0
    reward_bias: float = 0.0
    fused_optimizer: bool = True  # fused Adam kernel (same maths, faster)
    precision: str = "float32"  # "bf16": updates' matmuls in bfloat16 autocast (speed mode)
    compile: bool | str = False  # True | False | "auto": the update as one compiled graph
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 256  # transitions per gradient step
    total_steps: int = 1_000_000  # gradient steps (also the cosine schedule length)
    online_steps: int = 0  # env steps of online fine-tuning after total_steps (0: offline only)
    updates_per_step: float = 1.0  # online gradient updates per env step (fractions accumulate)
    offline_data: str = "keep"  # online: "drop" | "keep" (dataset rows in the buffer) | "mix"

    def plan(self) -> RunPlan:
        """Offline gradient steps, then (``online_steps`` > 0) fine-tuning online with the
        dataset kept in the online buffer."""
        schedule = Schedule(
            offline_steps=self.total_steps, online_steps=self.online_steps,
            batch_size=self.batch_size, updates_per_step=self.updates_per_step,
            offline_data=self.offline_data,
        )  # fmt: skip
        data = DataRecipe(normalize_reward_by_returns=self.normalize_reward_by_returns,
                          reward_scale=self.reward_scale, reward_bias=self.reward_bias,
                          normalize_states=self.normalize_states, required=True)  # fmt: skip
        return RunPlan(schedule, data=data, gamma=self.gamma, precision=self.precision,
                       compile=self.compile)  # fmt: skip


class IQL:
    """IQL agent: ``act``, ``update(batch)``, ``state_dict`` / ``load_state_dict``."""

    CAPABILITIES = (Phased, StateStatistics, ActionValue)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: IQLConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        # effective precision / compile (float32 where bf16 is emulated, eager without a compiler)
        self.config = config = resolve_speed_modes(config or IQLConfig(), device)
        self.plumbing = io = Plumbing(observation_space, action_space, device, type(self).__name__)
        self.device = io.device
        self.obs_normalizer = ObsNormalizer(io.obs_dim)
        self.actor = self._make_actor(io.obs_dim, io.action_dim, io.low, io.high)
        self.critic = QEnsemble(io.obs_dim, io.action_dim, 2, config.hidden)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.value = MLP(io.obs_dim, 1, config.hidden)
        fused = config.fused_optimizer
        self.actor_optimizer = adam(self.actor.parameters(), config.actor_lr, fused)
        self.critic_optimizer = adam(self.critic.parameters(), config.critic_lr, fused)
        self.value_optimizer = adam(self.value.parameters(), config.value_lr, fused)
        self.parts = io.declare(
            counters={"updates": int}, obs_normalizer=self.obs_normalizer, actor=self.actor,
            critic=self.critic, target_critic=self.target_critic, value=self.value,
            actor_optimizer=self.actor_optimizer, critic_optimizer=self.critic_optimizer,
            value_optimizer=self.value_optimizer,
        )  # fmt: skip
        self.low, self.high = io.bounds()
        modules = {
            "value": self.value, "critic": self.critic, "actor": self.actor,
            "target_critic": self.target_critic,
        }  # fmt: skip
        optimizers = {
            "value": self.value_optimizer, "critic": self.critic_optimizer,
            "actor": self.actor_optimizer,
        }  # fmt: skip
        self._steps = EagerSteps(modules, optimizers)
        # compile: the same _update_steps as one graph (rlcore.compiled.CompiledUpdate);
        # FamO2O (a FamO2OConfig, with no compile option) runs its own update eagerly
        self._update_graph = (
            CompiledUpdate(self._update_steps, modules, optimizers)
            if isinstance(config, IQLConfig) and config.compile
            else None
        )
        self.updates = 0
        self.phase = "offline"  # set by the loop through set_phase; never saved

    def _make_actor(
        self, obs_dim: int, action_dim: int, low: np.ndarray, high: np.ndarray
    ) -> torch.nn.Module:
        """IQL's policy on ``obs_dim`` inputs: deterministic, or Gaussian with a tanh mean."""
        if self.config.deterministic_actor:
            return DeterministicActor(obs_dim, action_dim, low, high, self.config.hidden)
        return gaussian_policy(obs_dim, action_dim, low, high, self.config.hidden)

    def set_phase(self, phase: str) -> None:
        """Called by the loop at the start of "offline", "warmup" and "online" (and after a
        resume): selects the actor's learning-rate schedule (``_actor_lr``)."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase '{phase}', choose from {list(PHASES)}")
        self.phase = phase

    def _actor_lr(self) -> float:
        """Cosine annealing to 0 over ``total_steps`` offline; online it continues
        periodically, back up to ``actor_lr`` (CORL's CosineAnnealingLR, see the top)."""
        cfg = self.config
        periodic = self.phase != "offline"
        return cosine_lr(cfg.actor_lr, self.updates, cfg.total_steps, periodic=periodic)

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Action for raw observation(s), clipped to the box: a sample from the Gaussian
        policy, or its mean when ``deterministic``. With ``deterministic_actor``: pi(s),
        plus clipped Gaussian exploration noise (``expl_noise``, ``noise_clip``, scaled
        from [-1, 1] to the box's half-width) unless ``deterministic``, as CORL's
        fine-tuning acts online."""
        cfg = self.config
        obs = self.obs_normalizer(obs)
        if cfg.deterministic_actor:
            action = self.actor(obs)
            if not deterministic:
                noise = torch.randn_like(action) * cfg.expl_noise
                noise = noise.clamp(-cfg.noise_clip, cfg.noise_clip)
                action = action + noise * self.actor.to_env.scale
        else:
            action, _ = self.actor(obs, deterministic=deterministic)
        return torch.clamp(action, self.low, self.high)

    def action_value(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Mean of the two critics' Q(s, a) for raw observations (B,), differentiable in
        both (an adversarial dataset corruption attacks it: rlcore.offline.corruption)."""
        return self.critic(self.obs_normalizer(obs), action).mean(0)

    def policy_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The greedy action for raw observations, differentiable in them."""
        obs = self.obs_normalizer(obs)
        if self.config.deterministic_actor:
            return self.actor(obs)
        return self.actor(obs, deterministic=True)[0]

    def update(self, batch: Batch) -> dict[str, float]:
        """One step of V, Q (then Polyak) and the actor, every loss from the parameters
        before the update (the module docstring's (1)-(5))."""
        cfg = self.config
        obs, next_obs = self.obs_normalizer(batch.obs), self.obs_normalizer(batch.next_obs)
        inputs = (obs, batch.action, batch.reward, next_obs, batch.terminated)
        set_lr(self.actor_optimizer, self._actor_lr())
        if self._update_graph is None:
            losses, stats = self._update_steps(self._steps, *inputs)
        else:  # the graph steps before the losses come back: checked after the update
            losses, stats = self._update_graph(*inputs)
            ensure_finite(**losses)
        self.updates += 1
        weight = stats.pop("weight")
        return {**scalars({**losses, **stats}), **weight_diagnostics(weight, cfg.max_weight)}

    def _update_steps(
        self, steps: Steps, *inputs: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The update, eager or traced into the compiled graph: ``_losses``, one backward
        pass of their sum (V, Q and the actor each see only their own loss: targets and
        weights are detached), a step of each optimiser (the actor's at the annealed lr
        set by ``update``), then Polyak."""
        losses, stats = steps.minimise(("value", "critic", "actor"), self._losses, *inputs)
        steps.polyak("target_critic", "critic", self.config.tau)
        return losses, stats

    def _losses(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """(value, Q and actor losses; detached statistics incl. the advantage weights)."""
        cfg = self.config
        value_loss, advantage, next_v = self._value_loss(obs, action, next_obs)
        q_loss, q = self._q_loss(obs, action, reward, terminated, next_v)
        weight = torch.exp(cfg.beta * advantage.detach()).clamp(max=cfg.max_weight)
        actor_loss = self._actor_loss(obs, action, weight)
        losses = {"value_loss": value_loss, "q_loss": q_loss, "actor_loss": actor_loss}
        stats = {"advantage": advantage.mean(), "q": q.mean(), "weight": weight}
        return losses, {name: value.detach() for name, value in stats.items()}

    def _value_loss(
        self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(expectile loss of V toward min target Q(s, a), the advantage min Q - V(s) with
        V's graph, V(s') for the Q target without one)."""
        with mixed_precision(self.config.precision, self.device):
            with torch.no_grad():
                next_v = self.value(next_obs).squeeze(-1)
                target_q = self.target_critic(obs, action).min(0).values
            value = self.value(obs).squeeze(-1)
            advantage = target_q - value
            return expectile_loss(advantage, self.config.expectile), advantage, next_v

    def _q_loss(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        terminated: torch.Tensor,
        next_v: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean of the critics' MSEs toward r + gamma (1 - terminated) V(s'), Q (E, B))."""
        q_target = reward + self.config.gamma * (1.0 - terminated) * next_v
        with mixed_precision(self.config.precision, self.device):
            q = self.critic(obs, action)
        return ensemble_mse(q, q_target) / q.shape[0], q

    def _actor_loss(
        self, actor_input: torch.Tensor, action: torch.Tensor, weight: torch.Tensor
    ) -> torch.Tensor:
        """Advantage-weighted regression: mean of ``weight`` times -log pi(a|input) (or
        ||pi(input) - a||^2 for the deterministic actor)."""
        with mixed_precision(self.config.precision, self.device):
            if isinstance(self.actor, DeterministicActor):
                regression = (self.actor(actor_input) - action).pow(2).sum(-1)
            else:
                regression = -self.actor.distribution(actor_input).log_prob(action).sum(-1)
            return (weight * regression).mean()

    # one optimiser step per loss, in sequence (FamO2O interleaves its balance model)
    def _value_step(
        self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One V step; returns the loss, the advantage (V before the step) and V(s')."""
        value_loss, advantage, next_v = self._value_loss(obs, action, next_obs)
        _step(self.value_optimizer, value_loss=value_loss)
        return value_loss.detach(), advantage.detach(), next_v

    def _critic_step(
        self, obs: torch.Tensor, batch: Batch, next_v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One Q step and the Polyak target update; returns the loss and Q, detached."""
        q_loss, q = self._q_loss(obs, batch.action, batch.reward, batch.terminated, next_v)
        _step(self.critic_optimizer, q_loss=q_loss)
        polyak_update(self.target_critic, self.critic, self.config.tau)
        return q_loss.detach(), q.detach()

    def _actor_step(
        self, actor_input: torch.Tensor, action: torch.Tensor, weight: torch.Tensor
    ) -> torch.Tensor:
        """One advantage-weighted regression step at ``_actor_lr()``; returns the loss."""
        actor_loss = self._actor_loss(actor_input, action, weight)
        set_lr(self.actor_optimizer, self._actor_lr())
        _step(self.actor_optimizer, actor_loss=actor_loss)
        return actor_loss.detach()

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)


def _step(optimizer: torch.optim.Optimizer, **loss: torch.Tensor) -> None:
    """Check the one named loss, then one optimiser step on it."""
    step_summed(loss, [optimizer])
