"""Learned dynamics for model-based offline RL: an ensemble of probabilistic MLPs.

The model of MBPO / MOPO / MOBILE / MOREC as OfflineRL-Kit implements it
(github.com/yihaosun1124/OfflineRL-Kit @ e3ce697: ``modules/dynamics_module.py``
``EnsembleDynamicsModel``, ``nets/ensemble_linear.py``, ``dynamics/ensemble_dynamics.py``
``EnsembleDynamics``, ``utils/scaler.py``): E members (7) each predicting a Gaussian over
(s' - s, r) from (s, a) standardised by the training inputs' mean and std; four hidden
layers of 200 with Swish; log-variances soft-clamped between learned bounds (start 0.5 and
-10); weight decay per layer (2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4); trained with
Adam (1e-3) on the Gaussian negative log-likelihood (the squared error over the variance
plus the log-variance, averaged over rows and outputs, summed over members) plus the decay
and 0.01 times the bounds' spread, each member on its own bootstrap of the training rows,
until no member's holdout error (20% of rows, at most 1,000) improves by 1% for 5 epochs;
each member keeps its best weights and the 5 best are the elites. ``step`` samples every
member's Gaussian and answers with a random elite's sample, with MOPO's uncertainty
penalty (``penalty``: the largest std norm over the members, ``aleatoric``).

Departures: rows, bootstraps and draws come from torch generators seeded by the caller
(the reference draws from numpy's global state); ``fit`` takes tensors and returns the
epochs it ran.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rlcore.nets import EnsembleLinear
from rlcore.utils import adam


def soft_clamp(x: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """Clamp ``x`` into (low, high) smoothly (gradients pass): high - softplus(high - x),
    then low + softplus(x - low)."""
    x = high - F.softplus(high - x)
    return low + F.softplus(x - low)


class DecayedEnsembleLinear(EnsembleLinear):
    """``rlcore.nets.EnsembleLinear`` as OfflineRL-Kit's dynamics layer: weights drawn from
    a truncated normal of std 1 / (2 sqrt(in)), biases 0, an L2 ``decay`` of
    0.5 * decay * ||W||^2, and a saved copy per member (``save`` / ``restore``)."""

    def __init__(self, members: int, in_dim: int, out_dim: int, decay: float = 0.0) -> None:
        super().__init__(members, in_dim, out_dim)
        with torch.no_grad():
            nn.init.trunc_normal_(self.weight, std=1.0 / (2.0 * math.sqrt(in_dim)))
            self.bias.zero_()
        self.register_buffer("saved_weight", self.weight.detach().clone())
        self.register_buffer("saved_bias", self.bias.detach().clone())
        self.decay = decay

    def decay_loss(self) -> torch.Tensor:
        return self.decay * 0.5 * self.weight.pow(2).sum()

    @torch.no_grad()
    def save(self, members: list[int]) -> None:
        self.saved_weight[members] = self.weight[members]
        self.saved_bias[members] = self.bias[members]

    @torch.no_grad()
    def restore(self) -> None:
        self.weight.copy_(self.saved_weight)
        self.bias.copy_(self.saved_bias)


class ProbabilisticEnsemble(nn.Module):
    """E Gaussian models of (s' - s, r) given standardised (s, a) (module docstring)."""

    def __init__(
        self, obs_dim: int, action_dim: int, members: int = 7, elites: int = 5,
        hidden: Sequence[int] = (200, 200, 200, 200),
        decays: Sequence[float] = (2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4),
    ) -> None:  # fmt: skip
        super().__init__()
        if len(decays) != len(hidden) + 1:
            raise ValueError(f"one weight decay per layer: {len(hidden) + 1}, got {len(decays)}")
        if not 1 <= elites <= members:
            raise ValueError(f"elites={elites} must be in [1, members={members}]")
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.members, self.num_elites = members, elites
        dims = [obs_dim + action_dim, *hidden]
        self.hidden = nn.ModuleList(
            DecayedEnsembleLinear(members, a, b, d) for a, b, d in zip(dims, dims[1:], decays)
        )
        out = obs_dim + 1  # (s' - s, r)
        self.output = DecayedEnsembleLinear(members, dims[-1], 2 * out, decays[-1])
        self.max_logvar = nn.Parameter(torch.full((out,), 0.5))
        self.min_logvar = nn.Parameter(torch.full((out,), -10.0))
        self.register_buffer("elites", torch.arange(elites))
        self.register_buffer("input_mean", torch.zeros(obs_dim + action_dim))
        self.register_buffer("input_std", torch.ones(obs_dim + action_dim))
        self.register_buffer("fitted", torch.tensor(False))  # set by fit_dynamics

    def layers(self) -> list[DecayedEnsembleLinear]:
        return [*self.hidden, self.output]

    def forward(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, logvar), each (E, B, obs_dim + 1), of standardised ``inputs``."""
        x = inputs
        for layer in self.hidden:
            x = F.silu(layer(x))  # Swish
        mean, logvar = self.output(x).chunk(2, dim=-1)
        return mean, soft_clamp(logvar, self.min_logvar, self.max_logvar)

    def standardize(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return (torch.cat([obs, action], -1) - self.input_mean) / self.input_std

    def loss(self, inputs: torch.Tensor, targets: torch.Tensor, logvar_coef: float = 0.01):
        """The training loss on (E, B, .) standardised inputs and targets (docstring)."""
        mean, logvar = self(inputs)
        nll = ((mean - targets).pow(2) * torch.exp(-logvar)).mean(dim=(1, 2)) + logvar.mean(
            dim=(1, 2)
        )
        decay = sum(layer.decay_loss() for layer in self.layers())
        bounds = logvar_coef * (self.max_logvar.sum() - self.min_logvar.sum())
        return nll.sum() + decay + bounds

    @torch.no_grad()
    def holdout_errors(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Each member's mean squared error of its mean on (B, .) rows: (E,)."""
        mean, _ = self(inputs)
        return (mean - targets).pow(2).mean(dim=(1, 2))

    def predict(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every member's Gaussian over (s', r) for (B, .) rows: (mean, std), each
        (E, B, obs_dim + 1)."""
        mean, logvar = self(self.standardize(obs, action))
        return torch.cat([mean[..., :-1] + obs, mean[..., -1:]], -1), torch.exp(0.5 * logvar)

    @torch.no_grad()
    def candidates(
        self, obs: torch.Tensor, action: torch.Tensor, resamples: int = 1,
        clip: float | None = None, generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """MOREC's candidate transitions: ``resamples`` draws from each elite's Gaussian,
        (resamples * elites, B, obs_dim + 1) samples of (s', r) in draw-major order,
        clipped to +-``clip``; and MOPO's penalty of every row (all members), (B,)."""
        mean, std = self.predict(obs, action)
        elites = self.elites.to(mean.device)
        mean_e, std_e = mean[elites], std[elites]
        draws = [
            mean_e + torch.randn(mean_e.shape, generator=generator, device=mean.device) * std_e
            for _ in range(resamples)
        ]
        samples = torch.cat(draws)
        if clip is not None:
            samples = samples.clamp(-clip, clip)
        return samples, std.norm(dim=-1).amax(0)

    @torch.no_grad()
    def step(
        self, obs: torch.Tensor, action: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(next_obs, reward, penalty) of one imagined step for (B, .) rows: every member's
        Gaussian sampled, a random elite's sample answering each row; ``penalty`` is MOPO's
        aleatoric uncertainty, the largest norm of a member's std."""
        mean, std = self.predict(obs, action)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device)
        samples = mean + noise * std
        pick = torch.randint(len(self.elites), (len(obs),), generator=generator)
        chosen = samples[self.elites[pick].to(samples.device), torch.arange(len(obs))]
        penalty = std.norm(dim=-1).amax(0)
        return chosen[:, :-1], chosen[:, -1], penalty


@dataclass
class FitResult:
    epochs: int
    holdout_errors: list[float]  # per member, the best reached
    elites: list[int]


def fit_dynamics(
    model: ProbabilisticEnsemble, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
    next_obs: torch.Tensor, generator: torch.Generator, lr: float = 1e-3,
    batch_size: int = 256, holdout_ratio: float = 0.2, max_holdout: int = 1000,
    patience: int = 5, max_epochs: int | None = None, logvar_coef: float = 0.01,
    log: Callable[[str], None] | None = None,
) -> FitResult:  # fmt: skip
    """Train ``model`` on transitions as OfflineRL-Kit's ``EnsembleDynamics.train`` does
    (module docstring); returns the epochs run, each member's best holdout error and the
    elites (set on the model, each member's best weights restored, ``fitted`` set);
    ``log`` gets one line per epoch."""
    inputs = torch.cat([obs, action], -1)
    targets = torch.cat([next_obs - obs, reward[:, None]], -1)
    n = len(inputs)
    holdout = min(int(n * holdout_ratio), max_holdout)
    order = torch.randperm(n, generator=generator)
    train_rows, holdout_rows = order[: n - holdout], order[n - holdout :]
    mean = inputs[train_rows].mean(0)
    std = inputs[train_rows].std(0, unbiased=False)
    std = torch.where(std < 1e-12, torch.ones_like(std), std)
    model.input_mean.copy_(mean)
    model.input_std.copy_(std)
    train_x, train_y = (inputs[train_rows] - mean) / std, targets[train_rows]
    hold_x, hold_y = (inputs[holdout_rows] - mean) / std, targets[holdout_rows]
    optimizer = adam(model.parameters(), lr)  # fused: the same steps, one kernel
    best = [1e10] * model.members  # the reference's start: any first error improves
    size = len(train_x)
    bootstrap = torch.randint(size, (model.members, size), generator=generator)
    epochs = stale = 0
    while True:
        epochs += 1
        for start in range(0, size, batch_size):
            rows = bootstrap[:, start : start + batch_size]
            loss = model.loss(train_x[rows], train_y[rows], logvar_coef)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        errors = model.holdout_errors(hold_x, hold_y).tolist()
        # each member's own shuffle of its bootstrap for the next epoch
        shuffle = torch.argsort(torch.rand(bootstrap.shape, generator=generator), dim=-1)
        bootstrap = torch.gather(bootstrap, 1, shuffle)
        improved = [i for i, (e, b) in enumerate(zip(errors, best)) if (b - e) / b > 0.01]
        if log is not None:
            log(f"dynamics epoch {epochs}: loss {loss.item():.4g}, holdout MSE "
                f"{sorted(errors)[model.num_elites - 1]:.4g} (elite-th best)")  # fmt: skip
        for i in improved:
            best[i] = errors[i]
        if improved:
            for layer in model.layers():
                layer.save(improved)
            stale = 0
        else:
            stale += 1
        if stale >= patience or (max_epochs is not None and epochs >= max_epochs):
            break
    elites = sorted(range(model.members), key=lambda i: best[i])[: model.num_elites]
    model.elites.copy_(torch.as_tensor(elites))
    for layer in model.layers():
        layer.restore()
    model.fitted.fill_(True)
    return FitResult(epochs, best, elites)
