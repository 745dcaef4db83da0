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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
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


def gaussian_log_density(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """log N(x; mean, std^2) of every element (a diagonal Gaussian's per-dim terms)."""
    return -((x - mean).pow(2)) / (2 * std.pow(2)) - std.log() - 0.5 * math.log(2 * math.pi)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """log N(x; mean, std^2) summed over every dim but the first: (B, ...) -> (B,)."""
    return gaussian_log_density(x, mean, std).flatten(1).sum(-1)


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

    def loss(
        self, obs: torch.Tensor, actions: torch.Tensor, weights: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Epsilon-prediction MSE at a uniformly drawn timestep per sample; with
        ``weights`` (B,) the mean of weight x the sample's MSE (FISOR's weighted loss)."""
        t = torch.randint(0, self.steps, (len(actions),), device=actions.device)
        noise = torch.randn_like(actions)
        ab = self.alpha_bar[t].view(-1, 1, 1)
        noisy = ab.sqrt() * actions + (1 - ab).sqrt() * noise
        if weights is None:
            return F.mse_loss(self.net(obs, noisy, t), noise)
        per_sample = (self.net(obs, noisy, t) - noise).pow(2).flatten(1).mean(1)
        return (weights * per_sample).mean()

    def transition(
        self, obs: torch.Tensor, x: torch.Tensor, i: int | torch.Tensor, std_floor: float = 0.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) of sampling step ``i`` (DDPM timestep t = K - 1 - i) from ``x``:
        x0 predicted from epsilon and clipped, the posterior mean, std = sqrt of the
        posterior variance (0 at the last step) raised to ``std_floor``. ``i`` is one step
        for the batch or a (B,) tensor of steps, one per row (DPPO scores every
        (env step, denoising step) pair of a minibatch in one call)."""
        t = self.steps - 1 - torch.as_tensor(i, device=x.device).expand(len(x))
        per_row = (-1, 1, 1)
        ab = self.alpha_bar[t].view(per_row)
        eps = self.net(obs, x, t)
        x0 = (x - (1 - ab).sqrt() * eps) / ab.sqrt()
        if self.clip_x0 is not None:
            x0 = x0.clamp(-self.clip_x0, self.clip_x0)
        mean = self.coef_x0[t].view(per_row) * x0 + self.coef_xt[t].view(per_row) * x
        std = self.posterior_var[t].sqrt().clamp(min=std_floor).view(per_row).expand_as(mean)
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


class ChunkQueue:
    """Per-env open-loop execution of action chunks for a policy that acts every env
    step (ResiP's frozen base): ``next(obs, make_chunk)`` returns each env's current
    action of its chunk, asking ``make_chunk`` for new chunks (only for the envs whose
    chunk is used up or whose episode restarted, see ``restart``)."""

    def __init__(self) -> None:
        self.plan: torch.Tensor | None = None  # (N, H, A)
        self.position: torch.Tensor | None = None  # (N,) index of the next action

    def restart(self, mask: np.ndarray | torch.Tensor) -> None:
        """Envs in ``mask`` take a fresh chunk at their next step (a new episode)."""
        if self.position is not None:
            mask = torch.as_tensor(np.asarray(mask, bool), device=self.position.device)
            self.position[mask] = self.plan.shape[1]

    def next(
        self, obs: torch.Tensor, make_chunk: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        """(N, A): the action each env executes now."""
        if self.plan is None or len(self.plan) != len(obs):
            self.plan = make_chunk(obs)
            self.position = torch.zeros(len(obs), dtype=torch.long, device=obs.device)
        need = self.position >= self.plan.shape[1]
        if need.any():
            self.plan[need] = make_chunk(obs[need])
            self.position[need] = 0
        action = self.plan[torch.arange(len(obs), device=obs.device), self.position]
        self.position += 1
        return action

    def state_dict(self) -> dict:
        return {"plan": self.plan, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.plan, self.position = state["plan"], state["position"]


HEAD_FIELDS = (
    "horizon",
    "obs_history",
    "denoising_steps",
    "schedule",
    "clip_x0",
    "hidden",
    "time_dim",
)


def make_head(kind: str, obs_dim: int, action_dim: int, config: Any) -> DDPMHead | FlowHead:
    """A ``kind`` ("ddpm" | "flow") head shaped by ``config``'s ``HEAD_FIELDS`` (the BC
    config and every fine-tuner's config carry them under the same names)."""
    common = {"horizon": config.horizon, "hidden": tuple(config.hidden),
              "time_dim": config.time_dim, "steps": config.denoising_steps}  # fmt: skip
    if kind == "ddpm":
        return DDPMHead(
            obs_dim, action_dim, schedule=config.schedule, clip_x0=config.clip_x0, **common
        )
    return FlowHead(obs_dim, action_dim, **common)


def load_pretrained(
    path: str | Path,
    kind: str,
    config: Any,
    head: nn.Module,
    obs_normalizer: nn.Module,
    device: str | torch.device = "cpu",
) -> None:
    """Copy the EMA weights and observation statistics of a behaviour-cloning run (run dir
    or checkpoint of ``algo=diffusion_bc`` for ``kind="ddpm"``, ``flow_bc`` for ``"flow"``,
    agent-only snapshots included) into a fine-tuner's ``head`` / ``obs_normalizer``.
    Raises ``ValueError`` naming the mismatch: another algorithm, or head settings in
    ``config`` that differ from the pre-trained ones."""
    from rlcore.checkpoint import load_agent

    bc = load_agent(path, device)
    found = getattr(getattr(bc, "config", None), "head", None)
    if found != kind:
        raise ValueError(
            f"algo.pretrained={path} holds a {type(bc).__name__} (head {found!r}); this "
            f"algorithm fine-tunes a {kind!r} policy (algo={'diffusion' if kind == 'ddpm' else 'flow'}_bc)"
        )
    flow_fields = ("horizon", "obs_history", "denoising_steps", "hidden", "time_dim")
    fields = HEAD_FIELDS if kind == "ddpm" else flow_fields
    differ = [
        f"{name}={getattr(config, name)!r} (pre-trained: {getattr(bc.config, name)!r})"
        for name in fields
        if _plain(getattr(config, name)) != _plain(getattr(bc.config, name))
    ]
    if differ:
        raise ValueError(
            f"algo.pretrained={path}: set the head settings to the pre-trained ones: "
            + ", ".join(differ)
        )
    head.load_state_dict(bc.ema.shadow.state_dict())
    obs_normalizer.load_state_dict(bc.obs_normalizer.state_dict())


def policy_parts(
    kind: str, observation_space: Any, action_space: Any, config: Any, device: torch.device
) -> tuple[DDPMHead | FlowHead, nn.Module, ActionBox]:
    """(head, observation normaliser, action box) of a fine-tuner, with the pre-trained
    weights and statistics of ``config.pretrained`` when it is set (random otherwise:
    a checkpoint's ``load_state_dict`` fills them). The action space may be a chunked
    env's (H, A) box: the head's action dim is its last."""
    from rlcore.nets import ObsNormalizer

    obs_dim = int(np.prod(observation_space.shape))
    head = make_head(kind, obs_dim, int(action_space.shape[-1]), config).to(device)
    obs_normalizer = ObsNormalizer(obs_dim).to(device)
    if config.pretrained:
        load_pretrained(config.pretrained, kind, config, head, obs_normalizer, device)
    return head, obs_normalizer, ActionBox(action_space.low, action_space.high, device)


def _plain(value: Any) -> Any:
    return tuple(value) if isinstance(value, (list, tuple)) else value


class ActionBox:
    """Maps between env actions and the heads' normalised units [-1, 1] (the box's bounds)."""

    def __init__(self, low: np.ndarray, high: np.ndarray, device: torch.device) -> None:
        self.low = torch.as_tensor(low, dtype=torch.float32, device=device)
        self.high = torch.as_tensor(high, dtype=torch.float32, device=device)
        if not (torch.isfinite(self.low).all() and torch.isfinite(self.high).all()):
            raise ValueError("diffusion / flow policies need a bounded action space")

    def to_unit(self, action: torch.Tensor) -> torch.Tensor:
        return 2.0 * (action - self.low) / (self.high - self.low) - 1.0

    def to_env(self, unit: torch.Tensor) -> torch.Tensor:
        return self.low + (unit + 1.0) * 0.5 * (self.high - self.low)
