"""Constrained Policy Optimization (CPO): a trust-region policy step that keeps the cost
constraint J_c <= limit.

Paper: J. Achiam, D. Held, A. Tamar, P. Abbeel, "Constrained Policy Optimization",
ICML 2017. Defaults and the step's case analysis follow OmniSafe's ``CPO.yaml`` /
``omnisafe/algorithms/on_policy/second_order/cpo.py`` (J. Ji et al., "OmniSafe", JMLR 2024).

One update (one rollout):
1. Reward advantages A_r (GAE, standardised) and cost advantages A_c (GAE, centred).
2. g = grad of the surrogate E[ratio A_r], b = grad of E[ratio A_c]; x = H^-1 g and
   p = H^-1 b by ``cg_iters`` conjugate-gradient steps on Fisher-vector products
   (H = Hessian of the mean KL, + ``cg_damping`` I). q = g'x, r = g'p, s = b'p,
   c = J_c - limit with J_c the mean cost of the last ``cost_window`` episodes
   (OmniSafe's); ``constraint_per_step``: c / T, T the rollout's rows per episode ended in
   it (Achiam's; see below).
3. The trust-region problem max g'd s.t. d'Hd/2 <= delta, c + b'd <= 0
   (delta = ``target_kl``) is solved through its dual (the paper's appendix): cases 3/4
   (the whole region feasible) take TRPO's step sqrt(2 delta / q) x; cases 1/2 take
   (x - nu* p) / lambda* with the dual optimum (lambda*, nu*); case 0 (infeasible region)
   only reduces the cost: -sqrt(2 delta / s) p.
4. Backtracking line search (``line_search_steps``, factor 0.8) accepts the first step whose
   mean KL <= delta, whose cost surrogate grows by at most max(-c, 0), and (cases 2-4) whose
   reward surrogate does not drop; none: no step.
5. V_r and V_c regress on their GAE targets, ``update_epochs`` passes of minibatches.

The constraint's scale (``constraint_per_step``, default False: OmniSafe's). J_c is an
episode sum, but b is the gradient of a per-step mean (the cost surrogate). Achiam's code
(jachiam/cpo ``sampler_safe.py`` ``safety_rescale`` = rows / paths,
``policy_gradient_safe.py``) multiplies the cost surrogate, hence b, by T, which is c / T
on our scale (B = 2 delta - c^2 / s and the line search's max(-c, 0) included). OmniSafe
uses c unscaled: then B < 0 in every update whatever J_c, so the dual only ever takes
TRPO's step (case 3) or pure cost reduction (case 0). Measured on SafetyHopperVelocity-v1
(Hopper-v5 body, native back end), cost limit 25, rollouts of 20k rows (``python -m
rlcore.train algo=cpo env=SafetyHopperVelocity total_steps=... eval_every=...
eval_episodes=5 algo.cost_limit=25 threads=1 algo.constraint_per_step=...``; the 500k
OmniSafe row is ``benchmarks/results/safe.json``'s seed 0, 10 evaluation episodes):

    scale (seed, steps)   dual cases           late training episodes   last eval
                                               return / cost / length   return / cost
    c / T (0, 200k)       3: 2, 2: 2, 1: 6      957 /  9.9 / 867         967 / 55
    c / T (1, 200k)       3: 3, 2: 2, 1: 5      749 / 52.8 / 602        1039 /  0
    c     (0, 200k)       3: 7, 0: 3            105 / 23.0 /  69         163 / 24
    c     (1, 200k)       3: 7, 0: 3            115 / 24.8 /  75         394 / 53
    c / T (0, 500k)       3: 2, 2: 6, 1: 17     768 / 33.8               389 /  0
    c     (0, 500k)       (run dir not kept)    889 /  0.3              1033 /  0

("late": episodes ending in the last 10% of steps). With c / T, B > 0 from J_c ~ 15 on
and the constrained cases 1/2 run 23 of 25 updates; with c, B < 0 in all 20 updates.
c / T learns to hop sooner (200k), but then holds the linearised constraint tight with a
100-episode J_c that lags, and hovers around the limit (at 500k J_c 12-52, above 25 in 11
of the 15 updates after 200k); c's bang-bang of TRPO steps and pure recovery ends far
under it with more return.
Default: OmniSafe's c, the better at the benchmark's budget; ``constraint_per_step=True``
reproduces Achiam's code.

Departures from OmniSafe: the dual solution is written for g = the reward surrogate's ascent
gradient throughout: nu* = (lambda* c + r) / s and f_a carries + r c / s. OmniSafe takes g
as the ascent gradient but keeps the paper's formulas, whose r is the gradient of the loss
(-g'H^-1 b), so its r has the wrong sign there (with r > 0 and c < 0 it clips lambda_a to a
negative bound); ``tests/test_safe_rl.py`` checks the step against a brute-force solution of
the step problem. Also: orthogonal initialisation (OmniSafe: kaiming-uniform); truncated
episodes bootstrap V(final observation) (``rlcore.buffers.compute_gae``). KL values are
means over states and action dimensions, as OmniSafe computes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from rlcore.agent_state import Parts, Plumbing
from rlcore.buffers import minibatch_indices
from rlcore.capabilities import CostCritic, CostRecorder, OnPolicy
from rlcore.nets import DiagNormal
from rlcore.plan import EnvRecipe, Returns, RunPlan, Schedule
from rlcore.safe import ConstrainedActorCritic, EpisodeCostWindow
from rlcore.types import RolloutBatch
from rlcore.utils import ensure_finite

EPS = 1e-8


@dataclass
class CPOConfig:
    """CPO hyper-parameters (OmniSafe ``CPO.yaml``)."""

    cost_limit: float = 25.0  # constraint on the mean episode cost
    cost_window: int = 100  # J_c = mean cost of this many last episodes
    target_kl: float = 0.01  # trust-region size delta (mean KL)
    cg_iters: int = 15  # conjugate-gradient iterations
    cg_damping: float = 0.1  # Fisher damping
    line_search_steps: int = 20  # backtracking steps
    line_search_decay: float = 0.8  # step shrink per backtracking step
    critic_lr: float = 1e-3  # V_r and V_c learning rate
    gamma: float = 0.99  # reward discount
    gae_lambda: float = 0.95  # reward GAE lambda
    cost_gamma: float = 0.99  # cost discount
    cost_gae_lambda: float = 0.95  # cost GAE lambda
    update_epochs: int = 10  # critic passes over each rollout
    minibatch_size: int = 128  # critic rows per gradient step
    max_grad_norm: float = 40.0  # critics' gradient norm clip
    critic_l2_coef: float = 0.001  # L2 penalty on the critics' weights
    hidden: tuple[int, ...] = (64, 64)  # hidden widths of actor and critics
    activation: str = "tanh"  # hidden activation
    init_log_std: float = 0.0  # initial policy log-std (learned)
    # c on the per-step scale of the cost surrogate: c / T, T = the rollout's rows per
    # episode (Achiam's code: its cost-surrogate gradient times T); False: c as OmniSafe
    # (measured on SafetyHopperVelocity: see the module docstring)
    constraint_per_step: bool = False
    # env-side recipe settings (applied by rlcore.train when building the envs)
    normalize_obs: bool = True  # running observation standardisation
    normalize_reward: bool = False  # OmniSafe: off
    # loop settings
    rollout_steps: int = 20_000  # env steps per sub-env between updates
    total_steps: int = 10_000_000  # OmniSafe's budget

    def __post_init__(self) -> None:
        if self.cost_limit < 0:
            raise ValueError(f"cost_limit={self.cost_limit} must be >= 0")
        if not 0 < self.line_search_decay < 1:
            raise ValueError(f"line_search_decay={self.line_search_decay} must lie in (0, 1)")

    def plan(self) -> RunPlan:
        """Rollouts on a task with costs (V_c and the cost's GAE in the rollout)."""
        schedule = Schedule(online_steps=self.total_steps, rollout_steps=self.rollout_steps)
        env = EnvRecipe(normalize_obs=self.normalize_obs, normalize_reward=self.normalize_reward,
                        reward_gamma=self.gamma, cost=True)  # fmt: skip
        returns = Returns(self.gamma, self.gae_lambda, self.cost_gamma, self.cost_gae_lambda)
        return RunPlan(schedule, env, returns=returns, gamma=self.gamma)


def conjugate_gradient(
    matvec: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor, iters: int,
    tol: float = 1e-10,
) -> torch.Tensor:  # fmt: skip
    """x with matvec(x) ~= b for a symmetric positive-definite operator, from x = 0."""
    x = torch.zeros_like(b)
    residual, direction = b.clone(), b.clone()
    rr = residual.dot(residual)
    for _ in range(iters):
        product = matvec(direction)
        step = rr / (direction.dot(product) + 1e-6)
        x += step * direction
        residual -= step * product
        new_rr = residual.dot(residual)
        if new_rr.sqrt() < tol:
            break
        direction = residual + new_rr / (rr + 1e-6) * direction
        rr = new_rr
    return x


def cpo_direction(
    x: torch.Tensor, p: torch.Tensor, q: float, r: float, s: float, c: float,
    b_norm_sq: float, target_kl: float,
) -> tuple[torch.Tensor, int, float, float]:  # fmt: skip
    """The dual solution of CPO's step problem: (direction, case, lambda*, nu*).

    x = H^-1 g, p = H^-1 b, q = g'x, r = g'p, s = b'p, c = J_c - limit (see the module
    docstring); cases numbered as in OmniSafe (4: no cost gradient and feasible, 3: the
    trust region lies inside the constraint, 2: feasible, boundary crosses the region,
    1: infeasible, boundary crosses, 0: infeasible, no feasible point in the region)."""
    delta = target_kl
    if b_norm_sq <= 1e-6 and c < 0:
        case, A, B = 4, 0.0, 0.0
    else:
        A = q - r**2 / (s + EPS)
        B = 2 * delta - c**2 / (s + EPS)
        if c < 0 and B < 0:
            case = 3
        elif c < 0 <= B:
            case = 2
        elif c >= 0 and B >= 0:
            case = 1
        else:
            case = 0
    if case in (3, 4):
        alpha = math.sqrt(2 * delta / (q + EPS))
        return alpha * x, case, 1.0 / (alpha + EPS), 0.0
    if case == 0:
        nu = math.sqrt(2 * delta / (s + EPS))
        return -nu * p, case, 0.0, nu
    # g is the ascent direction of the reward surrogate, so nu* = (lambda c + r) / s (the
    # paper writes r for the gradient of the loss, -g'H^-1 b); lambda_a: nu* > 0
    lambda_a, lambda_b = math.sqrt(A / B), math.sqrt(q / (2 * delta))
    boundary = -r / (c + EPS)  # where nu* = 0
    if c < 0:  # lambda_a* in [0, -r/c], lambda_b* in [-r/c, inf)
        lambda_a, lambda_b = (
            _project(lambda_a, 0.0, boundary),
            _project(lambda_b, boundary, math.inf),
        )
    else:  # lambda_a* in [-r/c, inf), lambda_b* in [0, -r/c]
        lambda_a, lambda_b = (
            _project(lambda_a, boundary, math.inf),
            _project(lambda_b, 0.0, boundary),
        )
    f_a = f_b = -math.inf  # an empty interval: that branch has no candidate
    if lambda_a is not None:
        f_a = -0.5 * (A / (lambda_a + EPS) + B * lambda_a) + r * c / (s + EPS)
    if lambda_b is not None:
        f_b = -0.5 * (q / (lambda_b + EPS) + 2 * delta * lambda_b)
    lam = lambda_a if f_a >= f_b else lambda_b
    nu = max(lam * c + r, 0.0) / (s + EPS)
    return (x - nu * p) / (lam + EPS), case, lam, nu


def _project(value: float, low: float, high: float) -> float | None:
    """``value`` clipped to [max(low, 0), high] (lambda >= 0); None when that is empty."""
    low = max(low, 0.0)
    return None if low > high else min(max(value, low), high)


class CPO:
    """CPO agent: ``act``, ``explore``, ``value``, ``cost_value``, ``record_episode_costs``,
    ``update(rollout)``, ``state_dict``."""

    CAPABILITIES = (OnPolicy, CostCritic, CostRecorder)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: CPOConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.plumbing = io = Plumbing(observation_space, action_space, device, "CPO")
        self.device = io.device
        self.config = cfg = config or CPOConfig()
        self.action_dim = io.action_dim
        self.nets = ConstrainedActorCritic(
            io.obs_dim, self.action_dim, cfg.hidden, cfg.activation, cfg.init_log_std
        ).to(self.device)
        self.critic_optimizers = self.nets.critic_optimizers(cfg.critic_lr)
        self.episode_costs = EpisodeCostWindow(cfg.cost_window)
        self.act, self.explore = self.nets.act, self.nets.explore
        self.value, self.cost_value = self.nets.value, self.nets.cost_value
        self.parts = io.declare(
            counters={"updates": int, "episodes_since_update": int}, nets=self.nets,
            episode_costs=self.episode_costs, critic_optimizers=Parts(**self.critic_optimizers),
        )  # fmt: skip
        self.updates = 0
        self.episodes_since_update = 0  # T = rollout rows / this (``constraint_per_step``)

    def record_episode_costs(self, costs: list[float]) -> None:
        """Finished episodes' summed costs (the loops call this): J_c's window."""
        self.episode_costs.add(costs)
        self.episodes_since_update += len(costs)

    def constraint_value(self, rows: int) -> tuple[float, float]:
        """(c, T): c = J_c - limit, divided by T = ``rows`` / episodes ended since the last
        update when ``constraint_per_step`` (else T = 1). Before any episode has ended J_c
        is unknown: the policy counts as feasible at the limit (c = 0)."""
        cfg, episode_cost = self.config, self.episode_costs.mean()
        c = (episode_cost if math.isfinite(episode_cost) else cfg.cost_limit) - cfg.cost_limit
        length = rows / max(self.episodes_since_update, 1) if cfg.constraint_per_step else 1.0
        return c / length, length

    def _mean_kl(self, old: DiagNormal, new: DiagNormal) -> torch.Tensor:
        """KL(old || new), mean over states and action dimensions."""
        return old.kl(new).mean() / self.action_dim

    def _surrogate(self, batch: RolloutBatch, advantage: torch.Tensor) -> torch.Tensor:
        """E[pi(a|s) / pi_old(a|s) * advantage] over the rollout."""
        log_prob, _ = self.nets.actor.log_prob_entropy(batch.obs, batch.action)
        return ((log_prob - batch.log_prob).exp() * advantage).mean()

    def update(self, batch: RolloutBatch, progress: float = 0.0) -> dict[str, float]:
        """One CPO policy step, then the critics. ``progress`` is unused (no lr schedule)."""
        cfg, actor = self.config, self.nets.actor
        if batch.cost_advantage is None:
            raise ValueError("CPO needs the rollout's cost advantages (a cost task)")
        params = list(actor.parameters())
        reward_advantage = (batch.advantage - batch.advantage.mean()) / (
            batch.advantage.std() + EPS
        )
        cost_advantage = batch.cost_advantage - batch.cost_advantage.mean()
        with torch.no_grad():
            old = actor.distribution(batch.obs)
        old_detached = DiagNormal(old.mean.detach(), old.std.detach())

        def fisher_product(vector: torch.Tensor) -> torch.Tensor:
            kl = self._mean_kl(old_detached, actor.distribution(batch.obs))
            grads = torch.autograd.grad(kl, params, create_graph=True)
            grad_vector = (torch.cat([g.reshape(-1) for g in grads]) * vector).sum()
            hessian = torch.autograd.grad(grad_vector, params)
            return torch.cat([h.reshape(-1) for h in hessian]) + cfg.cg_damping * vector

        def flat_grad(value: torch.Tensor) -> torch.Tensor:
            return torch.cat([g.reshape(-1) for g in torch.autograd.grad(value, params)])

        reward_before = self._surrogate(batch, reward_advantage)
        cost_before = self._surrogate(batch, cost_advantage)
        # the critics' targets too: the policy step comes first and must not run on bad data
        ensure_finite(
            reward_surrogate=reward_before, cost_surrogate=cost_before,
            value_targets=batch.returns.sum(), cost_value_targets=batch.cost_returns.sum(),
        )  # fmt: skip
        g = flat_grad(reward_before)
        b = flat_grad(cost_before)
        x = conjugate_gradient(fisher_product, g, cfg.cg_iters)
        p = conjugate_gradient(fisher_product, b, cfg.cg_iters)
        q, r, s = x.dot(fisher_product(x)).item(), g.dot(p).item(), b.dot(p).item()
        episode_cost = self.episode_costs.mean()
        c, length = self.constraint_value(len(batch))
        self.episodes_since_update = 0
        direction, case, lam, nu = cpo_direction(x, p, q, r, s, c, b.dot(b).item(), cfg.target_kl)

        theta_old = parameters_to_vector(params).detach()
        reward_before, cost_before = reward_before.item(), cost_before.item()
        fraction, accepted, kl = 1.0, 0, 0.0
        for step in range(cfg.line_search_steps):
            vector_to_parameters(theta_old + fraction * direction, params)
            with torch.no_grad():
                reward_gain = self._surrogate(batch, reward_advantage).item() - reward_before
                cost_rise = self._surrogate(batch, cost_advantage).item() - cost_before
                kl = self._mean_kl(old_detached, actor.distribution(batch.obs)).item()
            if (
                math.isfinite(kl)
                and not (case > 1 and reward_gain < 0)
                and cost_rise <= max(-c, 0.0)
                and kl <= cfg.target_kl
            ):
                accepted = step + 1
                break
            fraction *= cfg.line_search_decay
        if not accepted:
            fraction = 0.0
        vector_to_parameters(theta_old + fraction * direction, params)

        value_loss = cost_value_loss = math.nan
        n = len(batch)
        for _ in range(cfg.update_epochs):
            for rows in minibatch_indices(n, cfg.minibatch_size, self.device):
                value_loss, cost_value_loss = self.nets.fit_critics(
                    self.critic_optimizers,
                    batch.obs[rows],
                    batch.returns[rows],
                    batch.cost_returns[rows],
                    cfg.critic_l2_coef,
                    cfg.max_grad_norm,
                )
        self.updates += 1
        return {
            "value_loss": value_loss,
            "cost_value_loss": cost_value_loss,
            "optim_case": float(case),
            "lambda_star": lam,
            "nu_star": nu,
            "accepted_step": float(accepted),
            "step_fraction": fraction,
            "kl": kl,
            "episode_cost_window": episode_cost,
            "constraint_c": c,
            "constraint_length": length,
            "dual_b": 2 * cfg.target_kl - c**2 / (s + EPS),
            "std": actor.log_std.exp().mean().item(),
        }

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
