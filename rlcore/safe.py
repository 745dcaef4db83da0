"""Pieces every constrained (safe-RL) algorithm shares: the Lagrange multipliers, the window
of recent episode costs they are driven by, and the on-policy actor with reward and cost
critics.

A constrained task reports a per-step cost in ``info["cost"]`` (``rlcore.envs.safety``); the loops
store it in the buffers' ``cost`` channel, run GAE on it as on rewards, and hand every
finished episode's summed cost to ``agent.record_episode_costs`` (see ``rlcore.loops``).
The constraint is on the mean episode cost: J_c <= ``cost_limit``.

Multipliers (both as in OmniSafe, ``omnisafe/common/{lagrange,pid_lagrange}.py``):

* ``LagrangeMultiplier``: projected gradient ascent on the dual. The loss
  -lambda * (J_c - limit) takes one Adam step, then lambda is clipped to [0, upper].
  lambda rises while J_c > limit and falls (to 0 at most) while J_c < limit.
* ``PIDLagrangeMultiplier``: Stooke, Achiam & Abbeel, "Responsive Safety in Reinforcement
  Learning by PID Lagrangian Methods", ICML 2020: lambda = max(0, Kp * EMA(e) + I + Kd *
  max(0, EMA(J_c) - EMA(J_c) ``d_delay`` updates ago)), e = J_c - limit, I = max(0, I + Ki e).
"""

from __future__ import annotations

import copy
import math
from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import nn

from rlcore.agent_state import numpy_act
from rlcore.nets import MLP, GaussianActor, orthogonal_init
from rlcore.utils import ensure_finite

MULTIPLIERS = ("lagrange", "pid")


class EpisodeCostWindow:
    """The last ``size`` finished episodes' costs; ``mean()`` is the J_c the multipliers and
    CPO use (OmniSafe's ``Metrics/EpCost`` over its logger window). NaN before any episode."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"the episode-cost window needs size >= 1, got {size}")
        self.costs: deque[float] = deque(maxlen=int(size))

    def add(self, costs: Iterable[float]) -> None:
        self.costs.extend(float(c) for c in costs)

    def mean(self) -> float:
        return float(np.mean(self.costs)) if self.costs else math.nan

    def state_dict(self) -> dict[str, Any]:
        return {"costs": list(self.costs)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.costs.clear()
        self.costs.extend(state["costs"])


class LagrangeMultiplier:
    """lambda >= 0 by projected gradient: one Adam step on -lambda * (J_c - cost_limit), then
    a clip to [0, ``upper_bound``] (OmniSafe's ``Lagrange``)."""

    def __init__(
        self, cost_limit: float, init: float = 1e-3, lr: float = 0.035,
        upper_bound: float | None = None,
    ) -> None:  # fmt: skip
        self.cost_limit, self.upper_bound = float(cost_limit), upper_bound
        self.parameter = nn.Parameter(torch.tensor(max(float(init), 0.0)))
        self.optimizer = torch.optim.Adam([self.parameter], lr=lr)

    @property
    def value(self) -> float:
        return float(self.parameter.detach())

    def update(self, episode_cost: float) -> float:
        """One step toward the constraint with the mean episode cost J_c; returns lambda."""
        loss = -self.parameter * (float(episode_cost) - self.cost_limit)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        with torch.no_grad():
            self.parameter.clamp_(0.0, self.upper_bound)
        return self.value

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.parameter.detach().clone(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.parameter.copy_(state["value"])
        # a copy: Optimizer.load_state_dict would keep the source's moment tensors
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))


class PIDLagrangeMultiplier:
    """PID-controlled lambda (OmniSafe's ``PIDLagrangian``, its defaults)."""

    def __init__(
        self,
        cost_limit: float,
        init: float = 1e-3,
        kp: float = 0.1,
        ki: float = 0.01,
        kd: float = 0.01,
        d_delay: int = 10,
        p_ema: float = 0.95,
        d_ema: float = 0.95,
        penalty_max: float = 100.0,
    ) -> None:
        self.cost_limit = float(cost_limit)
        self.kp, self.ki, self.kd = kp, ki, kd
        self.p_ema, self.d_ema, self.penalty_max = p_ema, d_ema, penalty_max
        self.integral = max(float(init), 0.0)
        self.delta_p = 0.0  # EMA of the violation
        self.cost_d = 0.0  # EMA of J_c, for the derivative
        self.history: deque[float] = deque([0.0], maxlen=int(d_delay))
        self.penalty = 0.0

    @property
    def value(self) -> float:
        return self.penalty

    def update(self, episode_cost: float) -> float:
        delta = float(episode_cost) - self.cost_limit
        self.integral = max(0.0, self.integral + delta * self.ki)
        self.delta_p = self.p_ema * self.delta_p + (1 - self.p_ema) * delta
        self.cost_d = self.d_ema * self.cost_d + (1 - self.d_ema) * float(episode_cost)
        derivative = max(0.0, self.cost_d - self.history[0])
        output = self.kp * self.delta_p + self.integral + self.kd * derivative
        self.penalty = min(max(0.0, output), self.penalty_max)
        self.history.append(self.cost_d)
        return self.penalty

    def state_dict(self) -> dict[str, Any]:
        keys = ("integral", "delta_p", "cost_d", "penalty")
        return {**{k: getattr(self, k) for k in keys}, "history": list(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("integral", "delta_p", "cost_d", "penalty"):
            setattr(self, key, float(state[key]))
        self.history.clear()
        self.history.extend(state["history"])


def make_multiplier(
    kind: str, cost_limit: float, init: float, lr: float
) -> LagrangeMultiplier | PIDLagrangeMultiplier:
    """``LagrangeMultiplier`` ("lagrange") or ``PIDLagrangeMultiplier`` ("pid", default gains)."""
    if kind == "lagrange":
        return LagrangeMultiplier(cost_limit, init, lr)
    if kind == "pid":
        return PIDLagrangeMultiplier(cost_limit, init)
    raise ValueError(f"unknown multiplier '{kind}': choose from {MULTIPLIERS}")


def value_loss(
    critic: nn.Module, obs: torch.Tensor, target: torch.Tensor, l2_coef: float
) -> torch.Tensor:
    """A state-value critic's regression loss toward ``target``: MSE plus ``l2_coef`` * sum
    of squared parameters (OmniSafe's critic norm)."""
    loss = nn.functional.mse_loss(critic(obs).squeeze(-1), target)
    if l2_coef > 0:
        loss = loss + l2_coef * sum(p.pow(2).sum() for p in critic.parameters())
    return loss


def step_value(
    critic: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
    max_grad_norm: float | None,
) -> float:  # fmt: skip
    """One optimiser step of ``critic`` on its (finite, checked) ``loss``, gradient norm
    clipped to ``max_grad_norm``; returns the loss."""
    optimizer.zero_grad()
    loss.backward()
    if max_grad_norm is not None:
        nn.utils.clip_grad_norm_(critic.parameters(), max_grad_norm)
    optimizer.step()
    return loss.item()


class ConstrainedActorCritic(nn.Module):
    """Gaussian policy with a reward critic V_r and a cost critic V_c (PPO-Lagrangian, CPO):
    [64, 64] tanh networks with orthogonal init, a learned state-independent log-std.

    Implements what ``rlcore.loops.on_policy`` asks of a constrained agent: ``explore``,
    ``value``, ``cost_value`` and ``act``.
    """

    def __init__(
        self, obs_dim: int, action_dim: int, hidden: tuple[int, ...], activation: str,
        init_log_std: float,
    ) -> None:  # fmt: skip
        super().__init__()
        self.actor = GaussianActor(obs_dim, action_dim, hidden, activation, init_log_std)
        self.reward_critic = MLP(obs_dim, 1, hidden, activation)
        self.cost_critic = MLP(obs_dim, 1, hidden, activation)
        for critic in (self.reward_critic, self.cost_critic):
            orthogonal_init(critic)
            orthogonal_init(critic[-1], gain=1.0)

    @property
    def device(self) -> torch.device:
        """Where the networks live (``act`` puts observations there)."""
        return self.actor.log_std.device

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        action, _ = self.actor(obs, deterministic=deterministic)
        return action

    def critic_optimizers(self, lr: float) -> dict[str, torch.optim.Optimizer]:
        """One Adam per critic ("reward_critic", "cost_critic")."""
        return {
            name: torch.optim.Adam(getattr(self, name).parameters(), lr=lr)
            for name in ("reward_critic", "cost_critic")
        }

    def fit_critics(
        self, optimizers: dict[str, torch.optim.Optimizer], obs: torch.Tensor,
        returns: torch.Tensor, cost_returns: torch.Tensor, l2_coef: float,
        max_grad_norm: float | None,
    ) -> tuple[float, float]:  # fmt: skip
        """One regression step of V_r on ``returns`` and of V_c on ``cost_returns`` (both
        losses checked finite before either critic changes); returns both losses."""
        losses = {
            "value_loss": value_loss(self.reward_critic, obs, returns, l2_coef),
            "cost_value_loss": value_loss(self.cost_critic, obs, cost_returns, l2_coef),
        }
        ensure_finite(**losses)
        return (
            step_value(self.reward_critic, optimizers["reward_critic"], losses["value_loss"],
                       max_grad_norm),
            step_value(self.cost_critic, optimizers["cost_critic"], losses["cost_value_loss"],
                       max_grad_norm),
        )  # fmt: skip

    @torch.no_grad()
    def explore(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sampled action, its log-probability and V_r(obs)."""
        action, log_prob = self.actor(obs)
        return action, log_prob, self.value(obs)

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.reward_critic(obs.float()).squeeze(-1)

    @torch.no_grad()
    def cost_value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.cost_critic(obs.float()).squeeze(-1)
