"""FamO2O on IQL: a family of policies with state-adaptive balances, offline to online.

Paper: S. Wang, Q. Yang, J. Gao, M. G. Lin, H. Chen, L. Wu, N. Jia, S. Song, G. Huang,
"Train Once, Get a Family: State-Adaptive Balances for Offline-to-Online Reinforcement
Learning", NeurIPS 2023 (arXiv:2310.17966). Reference code: LeapLabTHU/FamO2O
(``jax_iql/family_learner.py``, ``family_actor.py``, ``family_train_finetune.py``).

IQL's inverse temperature beta balances policy improvement (large beta) against staying
near the data (small beta). FamO2O trains one universal policy pi(a | s, enc(beta)) for
every beta in [beta_low, beta_high] (``sinusoidal_encoding``: 6 features, base 1e4), and a
balance model that picks beta per state. One update, in order:
(1) V by expectile regression toward min target Q(s, a) (IQL's step, ``algos/iql.py``);
(2) balance model, a tanh-Gaussian over one dimension with a state-independent std:
    u ~ p(u | s), beta = (u + 1) / 2 (beta_high - beta_low) + beta_low (the reference's
    IQL mapping: u = -1, 0, 1 give low, midpoint, high), a ~ pi(. | s, enc(beta))
    reparameterised, loss E[alpha_h log p(u) - min target Q(s, a)]; the temperature
    alpha_h is tuned toward entropy ``target_entropy`` (-0.5) as in SAC;
(3) universal policy by advantage-weighted regression,
    -E[min(exp(beta (Q - V)), 100) log pi(a | s, enc(beta))] on dataset/buffer actions,
    beta ~ U[beta_low, beta_high] per transition in the ``offline`` phase and from the
    balance model (a sample drawn before step (2), no gradient) in ``warmup`` /
    ``online`` (``set_phase``);
(4) twin Q toward r + gamma V(s'), Polyak target (IQL's step).

Balance model offline (decision, as the reference): it is trained from the first offline
step, on the same batches, against the critics and the universal policy as they are; only
the policy's beta switches from uniform to the balance model when the loop calls
``set_phase("warmup")``. So the model that picks betas online starts out pre-trained.

Acting: ``act(obs, deterministic=True)`` feeds the balance model's mode tanh(mean) to the
policy and returns the policy's mean; ``deterministic=False`` samples both.

Defaults: IQL's (CORL, algos/iql.py): 256x256, lr 3e-4, batch 256, gamma 0.99, expectile
0.7, tau 0.005, weights clamped at 100; raw states as the reference (IQL/CORL standardise
them: ``normalize_states=True`` does); rewards r * 1000 / (max - min
episode return) as the reference does on locomotion (``normalize_reward_by_returns``; antmaze: off,
r - 1 instead). Balance model 256x256, Adam lr 3e-4, temperature initial 1.0, lr 3e-4,
target entropy -0.5 (reference). Beta range (1, 5): the reference ``FamilyLearner``'s
default (locomotion, around IQL's beta 3; not confirmed against the paper's appendix); its
antmaze config uses (8, 14) with expectile 0.9 and reward r - 1 (``reward_bias=-1``). 1M
offline gradient steps, then 1M online env steps, one update each, with the dataset kept
in the buffer and online transitions appended. The policy's learning rate is constant in
both phases, as in the reference's configs (``opt_decay_schedule=None``);
``cosine_actor_lr=True`` uses IQL's schedule instead (cosine to 0 over ``total_steps``,
back up online as CORL's fine-tuning does).

Departures from the reference:
- IQL's choices (algos/iql.py, CORL) where the reference (built on Kostrikov's IQL)
  differs: the advantage of step (3) and the Q target of step (4) use V before its update;
  the policy's log-std is clamped to [-20, 2] (reference: [-5, 2]); PyTorch's default
  layer initialisation; the Q loss is the mean of the two critics' MSEs; expectile 0.7 on
  locomotion (the reference learner's default is 0.8, its antmaze config 0.9).
- Online exploration (``act`` without ``deterministic``) samples the balance model; the
  reference acts with its mode and samples only the policy.
- The policy's weights follow the paper, exp(beta_i A_i) per transition i with its own
  beta_i. The reference code (``family_actor.py``) multiplies betas of shape (B, 1) by
  advantages of shape (B,), which broadcasts to a (B, B) matrix: log pi(a_j | s_j, beta_j)
  is weighted by the batch mean over i of min(exp(beta_i A_j), 100), so every transition
  gets the SAME batch-averaged balance and a state's own beta never reaches its weight
  (a mean of exponentials: dominated by the batch's largest betas where A_j > 0, by its
  smallest where A_j < 0). Measured on 256 rows, beta ~ U(1, 5), A ~ N(0, sd^2): median
  relative difference between the two weights 6% / 24% / 43% (sd 0.1 / 0.5 / 1.0),
  correlation 0.87 / 0.70 / 0.82. Our numbers therefore cannot match the reference
  code's; they test the method as published (state-adaptive weights), not that code.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlcore.agent_state import numpy_act
from rlcore.algos.iql import IQL, gaussian_policy
from rlcore.losses import weight_diagnostics
from rlcore.nets import MLP, sinusoidal_encoding, tanh_gaussian_log_prob
from rlcore.plan import DataRecipe, RunPlan, Schedule
from rlcore.types import Batch
from rlcore.utils import adam, ensure_finite, frozen, mixed_precision


@dataclass
class FamO2OConfig:
    """FamO2O-IQL hyper-parameters (IQL's CORL defaults plus the reference's balance model)."""

    gamma: float = 0.99  # discount
    tau: float = 0.005  # Polyak rate of the target critics
    actor_lr: float = 3e-4  # universal policy learning rate (constant unless cosine_actor_lr)
    critic_lr: float = 3e-4  # Q learning rate
    value_lr: float = 3e-4  # V learning rate
    hidden: tuple[int, ...] = (256, 256)  # hidden widths of policy, Q and V networks
    expectile: float = 0.7  # expectile of the value regression (antmaze: 0.9)
    max_weight: float = 100.0  # clamp of exp(beta * advantage)
    beta_low: float = 1.0  # smallest balance coefficient (antmaze: 8)
    beta_high: float = 5.0  # largest balance coefficient (antmaze: 14)
    encoding_dim: int = 6  # sinusoidal features of beta appended to the policy's input
    encoding_base: float = 1e4  # base n of the encoding: beta / n^(2i / encoding_dim)
    balance_hidden: tuple[int, ...] = (256, 256)  # hidden widths of the balance model
    balance_lr: float = 3e-4  # balance model learning rate
    alpha_lr: float = 3e-4  # learning rate of the balance model's temperature
    init_alpha: float = 1.0  # initial temperature of the balance model
    target_entropy: float = -0.5  # entropy target of the balance model's u
    cosine_actor_lr: bool = False  # IQL's cosine schedule for the policy instead of constant
    normalize_states: bool = False  # standardise observations (the reference does not)
    normalize_reward_by_returns: bool = True  # r * 1000 / (max - min dataset episode return)
    reward_scale: float = 1.0  # dataset and online rewards r <- reward_scale * r + reward_bias
    reward_bias: float = 0.0  # (antmaze recipe: reward_bias -1)
    fused_optimizer: bool = True  # fused Adam kernel (same maths, faster)
    precision: str = "float32"  # "bf16": updates' matmuls in bfloat16 autocast (speed mode)
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 256  # transitions per gradient step
    total_steps: int = 1_000_000  # offline gradient steps (cosine length if cosine_actor_lr)
    online_steps: int = 1_000_000  # env steps of online fine-tuning, one update each
    updates_per_step: float = 1.0  # online gradient updates per env step (fractions accumulate)
    offline_data: str = "keep"  # online: "drop" | "keep" (dataset rows in the buffer) | "mix"

    def plan(self) -> RunPlan:
        """Offline gradient steps, then fine-tuning online with the dataset kept."""
        schedule = Schedule(
            offline_steps=self.total_steps, online_steps=self.online_steps,
            batch_size=self.batch_size, updates_per_step=self.updates_per_step,
            offline_data=self.offline_data,
        )  # fmt: skip
        data = DataRecipe(normalize_reward_by_returns=self.normalize_reward_by_returns,
                          reward_scale=self.reward_scale, reward_bias=self.reward_bias,
                          normalize_states=self.normalize_states, required=True)  # fmt: skip
        return RunPlan(schedule, data=data, gamma=self.gamma, precision=self.precision)


def balance_to_beta(u: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """The balance model's tanh output u in [-1, 1] as beta = (u + 1) / 2 (high - low) + low:
    -1 -> low, 0 -> the midpoint, 1 -> high."""
    return (u + 1.0) / 2.0 * (high - low) + low


class BalanceModel(nn.Module):
    """u = tanh(mu(s) + sigma eps) in (-1, 1), one dimension, sigma state-independent (log
    sigma clamped to [-10, 2], the reference's bounds). Returns u (B,) and log p(u) (B,)."""

    def __init__(self, obs_dim: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.mean = MLP(obs_dim, 1, hidden)
        self.log_std = nn.Parameter(torch.zeros(1))

    def forward(
        self, obs: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A reparameterised sample and its log-density, or the mode tanh(mu(s)) and None."""
        mean = self.mean(obs)
        if deterministic:
            return torch.tanh(mean).squeeze(-1), None
        log_std = self.log_std.clamp(-10.0, 2.0).expand_as(mean)
        noise = torch.randn_like(mean)
        pre_tanh = mean + noise * log_std.exp()
        log_prob = tanh_gaussian_log_prob(noise, log_std, pre_tanh).sum(-1)
        return torch.tanh(pre_tanh).squeeze(-1), log_prob


class FamO2O(IQL):
    """IQL's value and critic steps (inherited) with a beta-conditioned universal policy and
    a balance model; ``set_phase`` switches the policy's beta from uniform to the model."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: FamO2OConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        config = config or FamO2OConfig()
        if not config.beta_low < config.beta_high:
            raise ValueError(
                f"FamO2O needs beta_low < beta_high, got ({config.beta_low}, {config.beta_high})"
            )
        if config.encoding_dim <= 0 or config.encoding_dim % 2:
            raise ValueError(
                f"encoding_dim must be a positive even number, got {config.encoding_dim}"
            )
        if config.init_alpha <= 0:
            raise ValueError(f"init_alpha must be > 0, got {config.init_alpha}")
        super().__init__(observation_space, action_space, config, device)  # type: ignore[arg-type]
        self.balance = BalanceModel(self.plumbing.obs_dim, config.balance_hidden).to(self.device)
        self.log_alpha = torch.tensor(
            float(np.log(config.init_alpha)), device=self.device, requires_grad=True
        )
        fused = config.fused_optimizer
        self.balance_optimizer = adam(self.balance.parameters(), config.balance_lr, fused)
        self.alpha_optimizer = adam([self.log_alpha], config.alpha_lr, fused)
        self._actor_params = list(self.actor.parameters())
        self.parts.add(
            balance=self.balance, log_alpha=self.log_alpha,
            balance_optimizer=self.balance_optimizer, alpha_optimizer=self.alpha_optimizer,
        )  # fmt: skip

    def _make_actor(
        self, obs_dim: int, action_dim: int, low: np.ndarray, high: np.ndarray
    ) -> nn.Module:
        """IQL's Gaussian policy on the state and the encoding of beta."""
        input_dim = obs_dim + self.config.encoding_dim
        return gaussian_policy(input_dim, action_dim, low, high, self.config.hidden)

    def _actor_lr(self) -> float:
        return super()._actor_lr() if self.config.cosine_actor_lr else self.config.actor_lr

    def policy_input(self, obs: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        """(normalised) state and enc(beta), the universal policy's input (B, obs + enc)."""
        cfg = self.config
        return torch.cat([obs, sinusoidal_encoding(beta, cfg.encoding_dim, cfg.encoding_base)], -1)

    def balance_beta(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """beta (B,) the balance model picks for (normalised) states: a sample, or its mode."""
        u, _ = self.balance(obs, deterministic=deterministic)
        return balance_to_beta(u, self.config.beta_low, self.config.beta_high)

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Action for raw observation(s), clipped to the box: beta from the balance model,
        then the universal policy; both their modes when ``deterministic``, else samples."""
        obs = self.obs_normalizer(obs)
        beta = self.balance_beta(obs, deterministic)
        action, _ = self.actor(self.policy_input(obs, beta), deterministic=deterministic)
        return torch.clamp(action, self.low, self.high)

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.config
        obs, next_obs = self.obs_normalizer(batch.obs), self.obs_normalizer(batch.next_obs)
        value_loss, advantage, next_v = self._value_step(obs, batch.action, next_obs)
        if self.phase == "offline":
            beta = torch.rand_like(advantage) * (cfg.beta_high - cfg.beta_low) + cfg.beta_low
        else:  # the balance model before its step, as in the reference
            with torch.no_grad():
                beta = self.balance_beta(obs)
        balance = self._balance_step(obs)
        weight = torch.exp(beta * advantage).clamp(max=cfg.max_weight)
        actor_loss = self._actor_step(self.policy_input(obs, beta), batch.action, weight)
        q_loss, q = self._critic_step(obs, batch, next_v)
        self.updates += 1
        return {
            "value_loss": value_loss.item(),
            "q_loss": q_loss.item(),
            "actor_loss": actor_loss.item(),
            "advantage": advantage.mean().item(),
            "q": q.mean().item(),
            "beta": beta.mean().item(),
            **balance,
            **weight_diagnostics(weight, cfg.max_weight),
        }

    def _balance_step(self, obs: torch.Tensor) -> dict[str, float]:
        """One step of the balance model on E[alpha log p(u) - min target Q(s, a)], a from
        the current policy at beta(u) (gradients reach u through a; the policy and critics
        do not change), then one temperature step toward ``target_entropy``."""
        cfg = self.config
        alpha = self.log_alpha.detach().exp()
        with frozen(self._actor_params), mixed_precision(cfg.precision, self.device):
            u, log_prob = self.balance(obs)
            beta = balance_to_beta(u, cfg.beta_low, cfg.beta_high)
            action = self.actor.distribution(self.policy_input(obs, beta)).rsample()
            q = self.target_critic(obs, action).min(0).values
            balance_loss = (alpha * log_prob - q).mean()
        ensure_finite(balance_loss=balance_loss)
        self.balance_optimizer.zero_grad()
        balance_loss.backward()
        self.balance_optimizer.step()
        entropy = -log_prob.detach().mean()
        alpha_loss = self.log_alpha.exp() * (entropy - cfg.target_entropy)
        self.alpha_optimizer.zero_grad()
        alpha_loss.backward()
        self.alpha_optimizer.step()
        values = torch.stack([balance_loss.detach(), alpha, entropy, beta.detach().mean()])
        names = ("balance_loss", "balance_alpha", "balance_entropy", "balance_beta")
        return dict(zip(names, values.tolist()))
