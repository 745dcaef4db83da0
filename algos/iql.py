"""Implicit Q-Learning (IQL), offline.

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

Departures from the paper: the Q loss is the mean (not the sum) of the two critics'
MSEs, as in CORL; the twin critics are one batched ensemble. Every loss is taken from the
pre-update parameters (as CORL, whose Q target uses V before its step) and all are
checked for NaN/inf before any optimiser steps (``NonFiniteLossError`` leaves the
parameters untouched). Opt-in ``precision="bf16"`` runs the hidden layers' matmuls in
bfloat16 autocast (output layers, parameters, optimiser state and losses stay float32): a
speed mode, not in the paper. ``compile=True`` runs the whole update -- the three losses,
the gradients of their sum, three Adam steps (the actor's cosine lr as a tensor), Polyak
-- as one ``torch.compile``d graph (``_graph_update``): same maths, equal to float
tolerance; a C++ compiler is needed (eager with one warning without one); the NaN check
then follows the graph, after the failing update's steps; ``"auto"`` compiles runs of more
than 100k steps (``rlcore.speed``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rlcore.compiled import (
    LossModule,
    adam_constants,
    adam_steps_,
    compile_graph,
    functional_grads,
    graph_inputs,
)
from rlcore.losses import cosine_lr, ensemble_mse, expectile_loss, set_lr, weight_diagnostics
from rlcore.nets import (
    MLP,
    DeterministicActor,
    GaussianActor,
    ObsNormalizer,
    QEnsemble,
    polyak_update,
)
from rlcore.spaces import require_box_actions
from rlcore.speed import resolve_speed_modes
from rlcore.types import Batch
from rlcore.utils import (
    adam,
    batched_obs,
    ensure_finite,
    load_state_into,
    mixed_precision,
    state_of,
)


@dataclass
class IQLConfig:
    """IQL hyper-parameters (CORL defaults)."""

    gamma: float = 0.99  # discount
    tau: float = 0.005  # Polyak rate of the target critics
    actor_lr: float = 3e-4  # policy learning rate (cosine-annealed to 0 over total_steps)
    critic_lr: float = 3e-4  # Q learning rate
    value_lr: float = 3e-4  # V learning rate
    hidden: tuple[int, ...] = (256, 256)  # hidden widths of all networks
    beta: float = 3.0  # inverse temperature of the advantage weights
    expectile: float = 0.7  # expectile of the value regression
    max_weight: float = 100.0  # clamp of exp(beta * advantage)
    deterministic_actor: bool = False  # ||pi(s) - a||^2 regression instead of a Gaussian
    normalize_states: bool = True  # standardise observations with dataset statistics
    normalize_reward: bool = False  # r * 1000 / (max - min episode return)
    fused_optimizer: bool = True  # fused Adam kernel (same maths, faster)
    precision: str = "float32"  # "bf16": updates' matmuls in bfloat16 autocast (speed mode)
    compile: bool | str = False  # True | False | "auto": the update as one compiled graph
    # loop settings (read by rlcore.loops.offline through rlcore.train)
    batch_size: int = 256  # transitions per gradient step
    total_steps: int = 1_000_000  # gradient steps (also the cosine schedule length)


class IQL:
    """IQL agent: ``act``, ``update(batch)``, ``state_dict`` / ``load_state_dict``."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: IQLConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        # effective precision / compile (float32 where bf16 is emulated, eager without a compiler)
        self.config = config = resolve_speed_modes(config or IQLConfig(), device)
        require_box_actions(action_space, "IQL")
        self.device = torch.device(device)
        obs_dim = int(np.prod(observation_space.shape))
        action_dim = int(np.prod(action_space.shape))
        low, high = action_space.low, action_space.high
        self.obs_normalizer = ObsNormalizer(obs_dim).to(self.device)
        if config.deterministic_actor:
            self.actor = DeterministicActor(obs_dim, action_dim, low, high, config.hidden)
        else:
            self.actor = GaussianActor(
                obs_dim, action_dim, config.hidden, "relu", 0.0, tanh_mean=True,
                action_low=low, action_high=high, log_std_bounds=(-20.0, 2.0), orthogonal=False,
            )  # fmt: skip
        self.actor.to(self.device)
        self.critic = QEnsemble(obs_dim, action_dim, 2, config.hidden).to(self.device)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.value = MLP(obs_dim, 1, config.hidden).to(self.device)
        fused = config.fused_optimizer
        self.actor_optimizer = adam(self.actor.parameters(), config.actor_lr, fused)
        self.critic_optimizer = adam(self.critic.parameters(), config.critic_lr, fused)
        self.value_optimizer = adam(self.value.parameters(), config.value_lr, fused)
        self.low = torch.as_tensor(low, dtype=torch.float32, device=self.device)
        self.high = torch.as_tensor(high, dtype=torch.float32, device=self.device)
        self._critic_params = list(self.critic.parameters())
        self._actor_params = list(self.actor.parameters())
        self._update_graph = None
        if config.compile:  # the whole update as one compiled graph (_graph_update)
            parts = {
                "value": self.value,
                "critic": self.critic,
                "actor": self.actor,
                "target": self.target_critic,
            }
            self._loss_module = LossModule(parts, self._summed_losses)
            named = dict(self._loss_module.named_parameters())
            self._names = list(named)  # "parts.<value|critic|actor|target>.<parameter>"
            self._graph_params = list(named.values())
            self._adam_constants = [
                adam_constants(opt)
                for opt in (self.value_optimizer, self.critic_optimizer, self.actor_optimizer)
            ]
            self._update_graph = compile_graph(self._graph_update)
        self.updates = 0

    def act(self, obs: np.ndarray | torch.Tensor, deterministic: bool = False) -> np.ndarray:
        """Action for raw observation(s), clipped to the box: a sample from the Gaussian
        policy, or its mean when ``deterministic``. With ``deterministic_actor`` the policy
        has no noise and the flag is ignored."""
        with torch.inference_mode():
            obs_t, single = batched_obs(obs, self.device)
            obs_t = self.obs_normalizer(obs_t)
            if self.config.deterministic_actor:
                action = self.actor(obs_t)
            else:
                action, _ = self.actor(obs_t, deterministic=deterministic)
            action = torch.clamp(action, self.low, self.high).cpu().numpy()
        return action[0] if single else action

    def update(self, batch: Batch) -> dict[str, float]:
        """One step of V, Q (then Polyak) and the actor, every loss from the parameters
        before the update (the module docstring's (1)-(5))."""
        cfg = self.config
        obs, next_obs = self.obs_normalizer(batch.obs), self.obs_normalizer(batch.next_obs)
        inputs = (obs, batch.action, batch.reward, next_obs, batch.terminated)
        set_lr(self.actor_optimizer, cosine_lr(cfg.actor_lr, self.updates, cfg.total_steps))
        if self._update_graph is not None:
            losses, stats = self._compiled_update(inputs)
        else:
            losses, stats = self._losses(*inputs)
            ensure_finite(**losses)
            # V, Q and the actor each see only their own loss (targets and weights are
            # detached): one backward pass of the sum
            optimizers = [self.value_optimizer, self.critic_optimizer, self.actor_optimizer]
            for optimizer in optimizers:
                optimizer.zero_grad()
            sum(losses.values()).backward()
            for optimizer in optimizers:
                optimizer.step()
            polyak_update(self.target_critic, self.critic, cfg.tau)
        self.updates += 1
        weight = stats.pop("weight")
        values = {**losses, **stats}
        stacked = torch.stack([value.detach().float() for value in values.values()])
        return {
            **dict(zip(values, stacked.tolist())),  # one transfer
            **weight_diagnostics(weight, cfg.max_weight),
        }

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
        with mixed_precision(cfg.precision, self.device):
            with torch.no_grad():
                next_v = self.value(next_obs).squeeze(-1)
                target_q = self.target_critic(obs, action).min(0).values
            value = self.value(obs).squeeze(-1)
            advantage = target_q - value
            value_loss = expectile_loss(advantage, cfg.expectile)

        q_target = reward + cfg.gamma * (1.0 - terminated) * next_v
        with mixed_precision(cfg.precision, self.device):
            q = self.critic(obs, action)
            q_loss = ensemble_mse(q, q_target) / q.shape[0]

        weight = torch.exp(cfg.beta * advantage.detach()).clamp(max=cfg.max_weight)
        with mixed_precision(cfg.precision, self.device):
            if cfg.deterministic_actor:
                regression = (self.actor(obs) - action).pow(2).sum(-1)
            else:
                regression = -self.actor.distribution(obs).log_prob(action).sum(-1)
            actor_loss = (weight * regression).mean()
        losses = {"value_loss": value_loss, "q_loss": q_loss, "actor_loss": actor_loss}
        stats = {"advantage": advantage.mean(), "q": q.mean(), "weight": weight}
        return losses, {name: value.detach() for name, value in stats.items()}

    def _summed_losses(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, dict, dict]:
        """(sum of ``_losses``, the losses, the statistics): the compiled graph's loss."""
        losses, stats = self._losses(*inputs)
        return sum(losses.values()), losses, stats

    def _compiled_update(
        self, inputs: tuple[torch.Tensor, ...]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """``update`` through the compiled graph (the actor's annealed lr goes in as a
        tensor). The graph steps before the losses come back, so a non-finite loss
        raises after the step (eager: before any step, parameters untouched)."""
        optimizers = [self.value_optimizer, self.critic_optimizer, self.actor_optimizer]
        params = [list(self.value.parameters()), self._critic_params, self._actor_params]
        states, lrs = graph_inputs(optimizers, params)
        with torch.no_grad():  # the graph computes its own gradients (torch.func)
            losses, stats = self._update_graph(self._graph_params, states, lrs, *inputs)
        ensure_finite(**losses)
        return losses, stats

    def _graph_update(
        self,
        params: list[torch.Tensor],
        states: list[tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]],
        lrs: torch.Tensor,
        *inputs: torch.Tensor,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The eager update as traceable tensor code: ``_losses``, the gradients of their
        sum, three Adam steps and Polyak, every tensor updated in place."""
        values = {name: p.detach() for name, p in zip(self._names, params)}
        parts = {
            part: [n for n in self._names if n.startswith(f"parts.{part}.")]
            for part in ("value", "critic", "actor", "target")
        }
        trainable = parts["value"] + parts["critic"] + parts["actor"]
        grads, (_, losses, stats) = functional_grads(self._loss_module, values, trainable, *inputs)
        groups, start = [], 0
        for part in ("value", "critic", "actor"):
            count = len(parts[part])
            groups.append(([values[n] for n in parts[part]], grads[start : start + count]))
            start += count
        adam_steps_(groups, states, lrs, self._adam_constants)
        target = [values[n] for n in parts["target"]]
        torch._foreach_lerp_(target, groups[1][0], self.config.tau)
        return losses, stats

    def _parts(self) -> dict:
        return {
            "obs_normalizer": self.obs_normalizer,
            "actor": self.actor,
            "critic": self.critic,
            "target_critic": self.target_critic,
            "value": self.value,
            "actor_optimizer": self.actor_optimizer,
            "critic_optimizer": self.critic_optimizer,
            "value_optimizer": self.value_optimizer,
        }

    def state_dict(self) -> dict:
        return {**state_of(**self._parts()), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        load_state_into(state, **self._parts())
        self.updates = int(state["updates"])
