"""FISOR: Feasibility-guided Safe Offline RL (hard constraints, diffusion actor).

Paper: Y. Zheng, J. Li, D. Yu, Y. Yang, S. E. Li, X. Zhan, J. Liu, "Safe Offline
Reinforcement Learning with Feasibility-Guided Diffusion Model", ICLR 2024. Defaults follow
the authors' code (``configs/train_config.py``, ``jaxrl5/agents/fisor/fisor.py``).

One update on a batch of ``batch_size`` rows (the critics use its first
``critic_batch_size`` rows, the actor takes one step on each half):
1. Cost relabel: h = +``cost_scale`` where the step's cost > 0, else -1.
2. Feasible value (Hamilton-Jacobi reachability): Q_h(s, a) regresses on
   (1 - gamma) h + gamma max(h, V_h(s')) (h where the episode ends: a terminal or, as
   FISOR's ``masks`` = 1 - (terminal or timeout), a timeout; ``bootstrap_timeouts``
   bootstraps there instead); V_h(s) fits the max of the
   two target Q_h by a reversed expectile (weight ``cost_expectile`` where Q_h < V_h).
   The feasible region is V_h <= 0.
3. Reward critic: IQL (V by expectile ``reward_expectile`` on the min of two target Q;
   Q on r + gamma V(s'), r alone where the episode ends, as in step 2).
4. Actor: a DDPM (T = 5, VP schedule) trained by epsilon-MSE weighted per row:
   clip(exp(``cost_temperature`` (V_h - Q_h)), 0, ``cost_max_weight``) where V_h(s) > 0
   (infeasible state: move toward the safest actions); clip(exp(``reward_temperature``
   (Q - V)), 0, ``reward_max_weight``) where V_h(s) <= 0 and Q_h(s, a) <= 0 (feasible:
   advantage-weighted regression on the feasible actions); 0 otherwise.
5. Acting (``eval_policy``, what evaluation runs): ``num_samples`` actions from the EMA
   actor (rate ``actor_ema``), the one with the lowest max-ensemble target Q_h executed.

``actor_objective="bc"`` makes every weight 1 (FISOR's behaviour-cloning ablation), and
``safe_episodes_only`` keeps only the dataset's episodes with cost <= ``cost_limit``: the
two together, acting with ``num_samples=1`` (one sample of the cloned actor), are the
BC-Safe baseline of the DSRL benchmark. Behaviour cloning that acts with one sample uses no
critic, so its updates train none (``trains_critics``). Rewards are normalised by the
dataset's return range (r * 1000 / (max - min episode return)), as FISOR's
``normalize_returns``.

Departures from the authors' code: the denoiser is rlcore's residual Mish MLP
(``rlcore.generative.DenoisingMLP``, 3 x 256, sinusoidal time features) without FISOR's
LayerNorm and dropout; sampling is ``DDPMHead.sample`` (posterior mean with the predicted
x0 clipped to [-1, 1], posterior variance), not FISOR's sqrt(beta) noise with a clip of
every iterate; the epsilon-MSE is averaged over action dimensions (FISOR sums them: a
constant factor |A| on the gradient, which Adam removes only up to its epsilon: the
actors are 1.9e-4 apart after 10 steps from equal weights, tests/golden/fisor.json). The actor's learning rate follows FISOR's optax cosine over
``lr_decay_steps`` (3e6) counted in actor steps, two per update (3e-4 x 0.5 (1 + cos(pi
2u / 3e6)) at update u: 7.5e-5 at 1M updates; until this session ours counted updates,
2.25e-4 there). FISOR's ``masks`` end an episode at a timeout too (no bootstrap past a
time-limit cut): matched by default; ``bootstrap_timeouts=True`` bootstraps there as
rlcore's other algorithms do (not measured against the default: timeouts are at most one
row in 1,000 of a 1000-step-episode dataset).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import torch
import torch.nn.functional as F

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.capabilities import DatasetUser, EvalPolicy, StateStatistics
from rlcore.generative import EMA, ActionBox, DDPMHead
from rlcore.losses import cosine_lr, expectile_loss, set_lr
from rlcore.nets import MLP, ObsNormalizer, QEnsemble, polyak_update
from rlcore.plan import DataRecipe, EnvRecipe, RunPlan, Schedule
from rlcore.types import Batch
from rlcore.utils import adam, ensure_finite

ACTOR_OBJECTIVES = ("feasibility", "bc")


@dataclass
class FISORConfig:
    """FISOR hyper-parameters (the authors' defaults)."""

    cost_limit: float = 25.0  # episode-cost limit: evaluation's normalised cost, BC-Safe's filter
    cost_scale: float = 25.0  # h = cost_scale where cost > 0, else -1
    gamma: float = 0.99  # discount
    tau: float = 0.005  # Polyak rate of the target critics
    reward_expectile: float = 0.9  # IQL value expectile
    cost_expectile: float = 0.9  # reversed expectile of V_h
    reward_temperature: float = 3.0  # exp weight of the reward advantage Q - V
    cost_temperature: float = 5.0  # exp weight of the feasibility gap V_h - Q_h
    reward_max_weight: float = 100.0  # clip of the reward weights
    cost_max_weight: float = 150.0  # clip of the feasibility weights
    actor_objective: str = "feasibility"  # "feasibility" (FISOR) | "bc" (weights 1)
    safe_episodes_only: bool = False  # keep the episodes with cost <= cost_limit (BC-Safe)
    denoising_steps: int = 5  # DDPM steps T
    schedule: str = "vp"  # DDPM beta schedule
    hidden: tuple[int, ...] = (256, 256, 256)  # denoiser widths (residual, equal)
    time_dim: int = 64  # time-feature width
    critic_hidden: tuple[int, ...] = (256, 256)  # Q, V, Q_h, V_h widths
    num_samples: int = 16  # candidate actions per state when acting
    actor_ema: float = 0.001  # EMA rate of the acting actor (decay 1 - actor_ema)
    actor_lr: float = 3e-4  # denoiser learning rate (cosine over lr_decay_steps)
    lr_decay_steps: int = 3_000_000  # the actor's cosine length (FISOR: 3e6)
    critic_lr: float = 3e-4  # Q and Q_h learning rate
    value_lr: float = 3e-4  # V and V_h learning rate
    normalize_states: bool = False  # standardise observations (FISOR: no)
    normalize_reward_by_returns: bool = True  # r * 1000 / (max - min dataset episode return)
    # False: FISOR's masks, 1 - (terminal or timeout): no bootstrap at a time-limit cut
    # (Q's target r, Q_h's h there); True: bootstrap V(s') / V_h(s') at truncations
    bootstrap_timeouts: bool = False
    critic_batch_size: int = 256  # rows of the batch the critics train on
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 2048  # rows per update: the actor steps on each half
    total_steps: int = 1_000_000  # gradient steps

    def __post_init__(self) -> None:
        if self.actor_objective not in ACTOR_OBJECTIVES:
            raise ValueError(
                f"actor_objective={self.actor_objective!r}: choose from {ACTOR_OBJECTIVES}"
            )
        if self.critic_batch_size > self.batch_size:
            raise ValueError(
                f"critic_batch_size={self.critic_batch_size} exceeds batch_size={self.batch_size}"
            )
        if self.cost_scale <= 0:
            raise ValueError(f"cost_scale={self.cost_scale} must be > 0")
        if self.num_samples < 1:
            raise ValueError(f"num_samples={self.num_samples} must be >= 1")

    @property
    def trains_critics(self) -> bool:
        """Whether updates fit the critics: the actor's weights or the action selection
        need them (everything but behaviour cloning that acts with one sample)."""
        return self.actor_objective != "bc" or self.num_samples > 1

    def plan(self) -> RunPlan:
        """Offline gradient steps on a cost-labelled dataset."""
        data = DataRecipe(normalize_reward_by_returns=self.normalize_reward_by_returns,
                          normalize_states=self.normalize_states, required=True)  # fmt: skip
        schedule = Schedule(offline_steps=self.total_steps, batch_size=self.batch_size)
        return RunPlan(schedule, EnvRecipe(cost=True), data, gamma=self.gamma)


def effective_sample_fraction(weights: torch.Tensor) -> float:
    """Kish's effective sample size of per-row loss weights as a fraction of the rows:
    (sum w)^2 / (n sum w^2); 1 when every weight is equal, 1/n when one row has them all."""
    total = weights.sum()
    return float(total**2 / (len(weights) * (weights**2).sum()).clamp_min(1e-12))


class FISOR:
    """FISOR agent: ``act``, ``eval_policy``, ``prepare_dataset``, ``update(batch)`` (a
    batch with ``cost``), ``state_dict``."""

    CAPABILITIES = (DatasetUser, EvalPolicy, StateStatistics)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: FISORConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.plumbing = io = Plumbing(observation_space, action_space, device, "FISOR")
        self.config = cfg = config or FISORConfig()
        self.device = io.device
        obs_dim, action_dim = io.obs_dim, io.action_dim
        self.box = ActionBox(io.low, io.high, self.device)
        self.obs_normalizer = ObsNormalizer(obs_dim)
        self.actor = DDPMHead(
            obs_dim, action_dim, horizon=1, steps=cfg.denoising_steps, schedule=cfg.schedule,
            hidden=cfg.hidden, time_dim=cfg.time_dim,
        )  # fmt: skip
        self.ema = EMA(self.actor, decay=1.0 - cfg.actor_ema)
        self.critic = QEnsemble(obs_dim, action_dim, 2, cfg.critic_hidden)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.value = MLP(obs_dim, 1, cfg.critic_hidden, "relu")
        self.cost_critic = QEnsemble(obs_dim, action_dim, 2, cfg.critic_hidden)
        self.target_cost_critic = copy.deepcopy(self.cost_critic).requires_grad_(False)
        self.cost_value = MLP(obs_dim, 1, cfg.critic_hidden, "relu")
        self.actor_optimizer = adam(self.actor.parameters(), cfg.actor_lr)
        self.optimizers = {
            "critic": adam(self.critic.parameters(), cfg.critic_lr),
            "value": adam(self.value.parameters(), cfg.value_lr),
            "cost_critic": adam(self.cost_critic.parameters(), cfg.critic_lr),
            "cost_value": adam(self.cost_value.parameters(), cfg.value_lr),
        }
        self.parts = io.declare(
            counters={"updates": int}, actor=self.actor, ema=self.ema.shadow, critic=self.critic,
            target_critic=self.target_critic, value=self.value, cost_critic=self.cost_critic,
            target_cost_critic=self.target_cost_critic, cost_value=self.cost_value,
            obs_normalizer=self.obs_normalizer, actor_optimizer=self.actor_optimizer,
            **{f"{k}_optimizer": o for k, o in self.optimizers.items()},
        )  # fmt: skip
        self.updates = 0

    # --- data -------------------------------------------------------------------------
    def prepare_dataset(self, dataset) -> None:  # noqa: ANN001 (rlcore.offline.datasets.OfflineDataset)
        """Refuse a dataset without costs; keep only its safe episodes for BC-Safe."""
        episode_costs = dataset.episode_costs()  # raises DatasetError without costs
        if self.config.safe_episodes_only:
            safe = episode_costs <= self.config.cost_limit
            if not safe.any():
                raise ValueError(
                    f"no episode of {dataset.source} has cost <= cost_limit="
                    f"{self.config.cost_limit:g}: nothing for safe_episodes_only to keep"
                )
            dataset.keep_episodes(torch.as_tensor(safe))

    # --- acting -----------------------------------------------------------------------
    @torch.no_grad()
    def select(self, obs: torch.Tensor) -> torch.Tensor:
        """FISOR's action for each (normalised) state: ``num_samples`` EMA-actor samples,
        the one with the lowest max-ensemble target Q_h; env units."""
        n, k = len(obs), self.config.num_samples
        repeated = obs.repeat_interleave(k, 0)
        candidates = self.box.to_env(self.ema.shadow.sample(repeated)[:, 0])
        q_h = self.target_cost_critic(repeated, candidates).max(0).values.view(n, k)
        best = q_h.argmin(1)
        return candidates.view(n, k, -1)[torch.arange(n, device=obs.device), best]

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """FISOR's selected action; ``deterministic``: the EMA actor's noise-free sample
        path (no selection), for inspection."""
        obs = self.obs_normalizer(obs)
        if deterministic:
            return self.box.to_env(self.ema.shadow.sample(obs, noise_scale=0.0)[:, 0])
        return self.select(obs)

    def eval_policy(self):  # noqa: ANN201 (a policy callable)
        """What evaluation runs: FISOR's selection (the paper's evaluation policy)."""
        return lambda obs: self.act(obs, deterministic=False)

    # --- learning ---------------------------------------------------------------------
    def actor_weights(
        self, q: torch.Tensor, v: torch.Tensor, q_h: torch.Tensor, v_h: torch.Tensor
    ) -> torch.Tensor:
        """Per-row weights of the denoising loss (step 4 of the module docstring)."""
        cfg = self.config
        if cfg.actor_objective == "bc":
            return torch.ones_like(q)
        infeasible = (v_h > 0).float()
        feasible = ((v_h <= 0) & (q_h <= 0)).float()
        cost_weight = torch.exp(cfg.cost_temperature * (v_h - q_h)).clamp(0, cfg.cost_max_weight)
        reward_weight = torch.exp(cfg.reward_temperature * (q - v)).clamp(0, cfg.reward_max_weight)
        return infeasible * cost_weight + feasible * reward_weight

    def feasibility_target(
        self, h: torch.Tensor, next_v_h: torch.Tensor, done: torch.Tensor
    ) -> torch.Tensor:
        """(1 - gamma) h + gamma max(h, V_h(s')), and h where the episode ends (``done``)."""
        gamma = self.config.gamma
        running = (1 - gamma) * h + gamma * torch.maximum(h, next_v_h)
        return torch.where(done > 0, h, running)

    def episode_end(self, terminated: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
        """1 where the critics' targets stop bootstrapping: terminal or timeout rows (FISOR's
        ``masks``), terminal rows only with ``bootstrap_timeouts``."""
        return (
            terminated if self.config.bootstrap_timeouts else torch.maximum(terminated, truncated)
        )

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.config
        if batch.cost is None:
            raise ValueError("FISOR needs batches with costs (a cost-labelled dataset)")
        obs, next_obs = self.obs_normalizer(batch.obs), self.obs_normalizer(batch.next_obs)
        action, unit_action = batch.action, self.box.to_unit(batch.action)
        h = torch.where(batch.cost > 0, cfg.cost_scale, -1.0)

        # actor: one weighted denoising step on each half, with the critics before this update
        with torch.no_grad():
            if cfg.trains_critics:
                q = self.target_critic(obs, action).min(0).values
                v = self.value(obs).squeeze(-1)
                q_h = self.target_cost_critic(obs, action).max(0).values
                v_h = self.cost_value(obs).squeeze(-1)
                weights = self.actor_weights(q, v, q_h, v_h)
            else:
                weights = torch.ones(len(obs), device=obs.device)
        half = len(obs) // 2
        for i, rows in enumerate((slice(0, half), slice(half, 2 * half))):
            # FISOR's optax cosine counts actor steps: two per update
            lr = cosine_lr(cfg.actor_lr, 2 * self.updates + i, cfg.lr_decay_steps)
            set_lr(self.actor_optimizer, lr)
            actor_loss = self.actor.loss(obs[rows], unit_action[rows, None], weights[rows])
            ensure_finite(actor_loss=actor_loss)
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
            self.ema.update(self.actor)
        if not cfg.trains_critics:
            self.updates += 1
            return {"actor_loss": actor_loss.item(), "actor_lr": lr}

        # critics on the first critic_batch_size rows: V, Q, V_h, Q_h (FISOR's order)
        c = slice(0, cfg.critic_batch_size)
        obs_c, action_c, next_c = obs[c], action[c], next_obs[c]
        done_c = self.episode_end(batch.terminated[c], batch.truncated[c])
        value_loss = expectile_loss(
            q[c] - self.value(obs_c).squeeze(-1), cfg.reward_expectile
        )  # IQL: the expectile of min target Q
        self._step("value", value_loss)
        with torch.no_grad():
            target_q = batch.reward[c] + cfg.gamma * (1 - done_c) * self.value(next_c).squeeze(-1)
        critic_loss = F.mse_loss(self.critic(obs_c, action_c), target_q.expand(2, -1))
        self._step("critic", critic_loss)
        polyak_update(self.target_critic, self.critic, cfg.tau)

        cost_value_loss = expectile_loss(
            self.cost_value(obs_c).squeeze(-1) - q_h[c], cfg.cost_expectile
        )  # reversed: weight cost_expectile where Q_h < V_h
        self._step("cost_value", cost_value_loss)
        with torch.no_grad():
            next_v_h = self.cost_value(next_c).squeeze(-1)
            target_q_h = self.feasibility_target(h[c], next_v_h, done_c)
        cost_critic_loss = F.mse_loss(self.cost_critic(obs_c, action_c), target_q_h.expand(2, -1))
        self._step("cost_critic", cost_critic_loss)
        polyak_update(self.target_cost_critic, self.cost_critic, cfg.tau)
        self.updates += 1
        return {
            "actor_loss": actor_loss.item(),
            "actor_lr": lr,
            "value_loss": value_loss.item(),
            "critic_loss": critic_loss.item(),
            "cost_value_loss": cost_value_loss.item(),
            "cost_critic_loss": cost_critic_loss.item(),
            "weight_mean": weights.mean().item(),
            "weight_ess": effective_sample_fraction(weights),
            "feasible_fraction": (v_h <= 0).float().mean().item(),
            "v_h": v_h.mean().item(),
        }

    def _step(self, name: str, loss: torch.Tensor) -> None:
        ensure_finite(**{f"{name}_loss": loss})
        optimizer = self.optimizers[name]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
