"""Generative action heads for diffusion and flow policies (DPPO, ReinFlow, ResiP's base).

Both heads map an observation (optionally a short history, flattened) to an action
CHUNK ``(B, H, A)`` in normalised action units [-1, 1], sampled in a batch over envs
with one network call per denoising / integration step (no per-sample Python):

* ``DDPMHead`` -- DDPM (Ho et al. 2020) with epsilon prediction, a cosine (Nichol &
  Dhariwal 2021) or VP (Song et al. 2021, discretised as in DPPO) beta schedule, the
  predicted x0 clipped to [-clip_x0, clip_x0] before the posterior mean (DPPO's
  ``denoised_clip_value``). ``transition`` gives the Gaussian of one reverse step, with an
  optional std floor (DPPO fine-tunes with std >= 0.1), so fine-tuning scores x_{i+1} | x_i.
* ``FlowHead`` -- 1-rectified flow (Liu et al. 2023): the velocity field v(x_t, t, s) is
  regressed on x1 - x0 along x_t = (1 - t) x0 + t x1, x0 ~ N(0, I), x1 the data; acting
  integrates K Euler steps on the grid t_k = k / K (the grid ReinFlow also scores on).

Chains are indexed by sampling order: ``chain[:, 0]`` is the initial noise, ``chain[:, i]``
the sample after i steps, ``chain[:, K]`` the action chunk. For the DDPM head step i uses
the DDPM timestep ``K - 1 - i``.

``DenoisingMLP`` is DPPO's "MLP 3x512 residual" shape: input [obs, x, time embedding],
residual blocks of two linear layers with Mish, a linear output. ``EMA`` keeps the
exponential moving average of a module's parameters (pre-training evaluates the EMA
weights, decay 0.995 in DPPO).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from rlcore.nets import sinusoidal_encoding

SCHEDULES = ("cosine", "vp")


def cosine_betas(steps: int, s: float = 0.008, max_beta: float = 0.999) -> torch.Tensor:
    """Nichol & Dhariwal's cosine schedule: alpha_bar(t) = f(t) / f(0) with
    f(t) = cos^2(((t / K) + s) / (1 + s) * pi / 2), beta_k = 1 - alpha_bar(k+1) /
    alpha_bar(k), clipped at ``max_beta``. Float64 maths, float32 result."""
    t = torch.arange(steps + 1, dtype=torch.float64) / steps
    f = torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2
    alpha_bar = f / f[0]
    return (1 - alpha_bar[1:] / alpha_bar[:-1]).clamp(max=max_beta).float()


def vp_betas(steps: int, beta_min: float = 0.1, beta_max: float = 10.0) -> torch.Tensor:
    """The variance-preserving SDE's betas discretised to ``steps`` (DPPO / IDQL "vp"):
    beta_k = 1 - exp(-beta_min / K - (beta_max - beta_min) (2k - 1) / (2 K^2)), k = 1..K."""
    k = torch.arange(1, steps + 1, dtype=torch.float64)
    alpha = torch.exp(-beta_min / steps - 0.5 * (beta_max - beta_min) * (2 * k - 1) / steps**2)
    return (1 - alpha).float()


class TimeEmbedding(nn.Module):
    """Sinusoidal features of the step / time, then Linear -> Mish -> Linear (DPPO)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.net = nn.Sequential(nn.Linear(dim, 2 * dim), nn.Mish(), nn.Linear(2 * dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.net(sinusoidal_encoding(t.float(), self.dim))


class DenoisingMLP(nn.Module):
    """(obs (B, O), x (B, H, A), t (B,)) -> (B, H, A): input layer, residual blocks of
    two Mish linear layers each, output layer (``hidden`` widths must be equal)."""

    def __init__(
        self,
        obs_dim: int,
        horizon: int,
        action_dim: int,
        hidden: Sequence[int] = (512, 512, 512),
        time_dim: int = 16,
    ) -> None:
        super().__init__()
        if len(set(hidden)) != 1:
            raise ValueError(f"residual blocks need equal widths, got hidden={tuple(hidden)}")
        width = hidden[0]
        self.horizon, self.action_dim = horizon, action_dim
        self.time = TimeEmbedding(time_dim)
        self.inp = nn.Linear(obs_dim + horizon * action_dim + time_dim, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Mish(), nn.Linear(width, width), nn.Mish(), nn.Linear(width, width))
            for _ in range(len(hidden) - 1)
        )
        self.out = nn.Sequential(nn.Mish(), nn.Linear(width, horizon * action_dim))

    def forward(self, obs: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.inp(torch.cat([obs, x.flatten(1), self.time(t)], dim=-1))
        for block in self.blocks:
            h = h + block(h)
        return self.out(h).view(-1, self.horizon, self.action_dim)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """log N(x; mean, std^2) summed over every dim but the first: (B, ...) -> (B,)."""
    var = std.pow(2)
    per_dim = -((x - mean).pow(2)) / (2 * var) - std.log() - 0.5 * math.log(2 * math.pi)
    return per_dim.flatten(1).sum(-1)


class DDPMHead(nn.Module):
    """DDPM over action chunks: ``loss`` for behaviour cloning, ``sample`` to act,
    ``transition`` for the Gaussian of one reverse step (DPPO's likelihoods)."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        horizon: int = 4,
        steps: int = 20,
        schedule: str = "cosine",
        hidden: Sequence[int] = (512, 512, 512),
        time_dim: int = 16,
        clip_x0: float | None = 1.0,
    ) -> None:
        super().__init__()
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule={schedule!r}: choose from {SCHEDULES}")
        if steps < 1 or horizon < 1:
            raise ValueError(f"steps={steps} and horizon={horizon} must be >= 1")
        self.obs_dim, self.action_dim, self.horizon, self.steps = (
            obs_dim,
            action_dim,
            horizon,
            steps,
        )
        self.clip_x0 = clip_x0
        self.net = DenoisingMLP(obs_dim, horizon, action_dim, hidden, time_dim)
        betas = cosine_betas(steps) if schedule == "cosine" else vp_betas(steps)
        alphas = 1 - betas
        alpha_bar = torch.cumprod(alphas.double(), 0).float()
        alpha_bar_prev = torch.cat([torch.ones(1), alpha_bar[:-1]])
        self.register_buffer("betas", betas)
        self.register_buffer("alpha_bar", alpha_bar)
        # q(x_{t-1} | x_t, x0) = N(coef_x0 x0 + coef_xt x_t, posterior_var)
        self.register_buffer("coef_x0", betas * alpha_bar_prev.sqrt() / (1 - alpha_bar))
        self.register_buffer("coef_xt", (1 - alpha_bar_prev) * alphas.sqrt() / (1 - alpha_bar))
        self.register_buffer("posterior_var", betas * (1 - alpha_bar_prev) / (1 - alpha_bar))

    def loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Epsilon-prediction MSE at a uniformly drawn timestep per sample."""
        t = torch.randint(0, self.steps, (len(actions),), device=actions.device)
        noise = torch.randn_like(actions)
        ab = self.alpha_bar[t].view(-1, 1, 1)
        noisy = ab.sqrt() * actions + (1 - ab).sqrt() * noise
        return F.mse_loss(self.net(obs, noisy, t), noise)

    def transition(
        self, obs: torch.Tensor, x: torch.Tensor, i: int, std_floor: float = 0.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) of sampling step ``i`` (DDPM timestep t = K - 1 - i) from ``x``:
        x0 predicted from epsilon and clipped, the posterior mean, std = sqrt of the
        posterior variance (0 at the last step) raised to ``std_floor``."""
        t = self.steps - 1 - i
        ab = self.alpha_bar[t]
        eps = self.net(obs, x, torch.full((len(x),), t, device=x.device))
        x0 = (x - (1 - ab).sqrt() * eps) / ab.sqrt()
        if self.clip_x0 is not None:
            x0 = x0.clamp(-self.clip_x0, self.clip_x0)
        mean = self.coef_x0[t] * x0 + self.coef_xt[t] * x
        std = self.posterior_var[t].sqrt().clamp(min=std_floor).expand_as(mean)
        return mean, std

    @torch.no_grad()
    def sample(
        self,
        obs: torch.Tensor,
        std_floor: float = 0.0,
        generator: torch.Generator | None = None,
        return_chain: bool = False,
        noise_scale: float = 1.0,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Action chunks (B, H, A) in [-1, 1]; with ``return_chain`` also the chain
        (B, K + 1, H, A) of every intermediate sample (chain[:, -1] before the clip).
        ``noise_scale`` multiplies the initial and the injected noise (0: the
        deterministic mean path, what ``act(deterministic=True)`` uses)."""
        shape = (len(obs), self.horizon, self.action_dim)
        x = noise_scale * torch.randn(shape, generator=generator, device=obs.device)
        chain = [x]
        for i in range(self.steps):
            mean, std = self.transition(obs, x, i, std_floor)
            noise = torch.randn(shape, generator=generator, device=obs.device)
            x = mean + noise_scale * std * noise
            chain.append(x)
        action = x.clamp(-1.0, 1.0)
        return (action, torch.stack(chain, 1)) if return_chain else action


class FlowHead(nn.Module):
    """1-rectified flow over action chunks: ``loss`` for behaviour cloning, ``velocity``
    and ``sample`` (K Euler steps on t_k = k / K) to act."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        horizon: int = 4,
        steps: int = 4,
        hidden: Sequence[int] = (512, 512, 512),
        time_dim: int = 16,
    ) -> None:
        super().__init__()
        if steps < 1 or horizon < 1:
            raise ValueError(f"steps={steps} and horizon={horizon} must be >= 1")
        self.obs_dim, self.action_dim, self.horizon, self.steps = (
            obs_dim,
            action_dim,
            horizon,
            steps,
        )
        self.net = DenoisingMLP(obs_dim, horizon, action_dim, hidden, time_dim)

    def velocity(self, obs: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """v(x_t, t, s) for t in [0, 1] (scaled to the embedding's step range)."""
        return self.net(obs, x, t * 1000.0)

    def loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """MSE of v(x_t, t) to x1 - x0 at t ~ U[0, 1]."""
        x0 = torch.randn_like(actions)
        t = torch.rand(len(actions), device=actions.device)
        xt = (1 - t.view(-1, 1, 1)) * x0 + t.view(-1, 1, 1) * actions
        return F.mse_loss(self.velocity(obs, xt, t), actions - x0)

    def times(self, device: torch.device | None = None) -> torch.Tensor:
        """The Euler grid t_k = k / K, k = 0 .. K - 1 (acting and scoring share it)."""
        return torch.arange(self.steps, device=device, dtype=torch.float32) / self.steps

    @torch.no_grad()
    def sample(
        self,
        obs: torch.Tensor,
        generator: torch.Generator | None = None,
        return_chain: bool = False,
        noise_scale: float = 1.0,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Action chunks (B, H, A) in [-1, 1] by K Euler steps from x0 ~ N(0, I) (times
        ``noise_scale``; 0: the deterministic path from x0 = 0); with ``return_chain``
        also (B, K + 1, H, A)."""
        shape = (len(obs), self.horizon, self.action_dim)
        x = noise_scale * torch.randn(shape, generator=generator, device=obs.device)
        chain = [x]
        for t in self.times(obs.device):
            x = x + self.velocity(obs, x, t.expand(len(obs))) / self.steps
            chain.append(x)
        action = x.clamp(-1.0, 1.0)
        return (action, torch.stack(chain, 1)) if return_chain else action


class EMA:
    """Exponential moving average of a module's parameters and buffers:
    shadow <- decay * shadow + (1 - decay) * current after every ``update``."""

    def __init__(self, module: nn.Module, decay: float = 0.995) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay={decay} must be in [0, 1)")
        self.decay = decay
        self.shadow = copy.deepcopy(module).requires_grad_(False)

    @torch.no_grad()
    def update(self, module: nn.Module) -> None:
        for avg, cur in zip(self.shadow.parameters(), module.parameters()):
            avg.lerp_(cur, 1.0 - self.decay)
        for avg, cur in zip(self.shadow.buffers(), module.buffers()):
            avg.copy_(cur)

    def state_dict(self) -> dict:
        return self.shadow.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.shadow.load_state_dict(state)
