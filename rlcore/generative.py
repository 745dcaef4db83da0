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

``DenoisingMLP`` has two layouts: ``"dppo"``, DPPO's / ReinFlow's residual MLP (what
their Gym configs build: ReLU, one residual block for ``[512, 512, 512]``, a linear
output), the default of every config here; and ``"rlcore_v1"``, this project's earlier
network (Mish, len(hidden) - 1 blocks, an activation before the output), kept for
checkpoints made with it and the classes' default (FISOR builds its actor with it).
Inputs are [obs, x, time embedding] (the references: [x, time, obs], an equivalent
permutation). ``EMA`` keeps the exponential moving average of a module's parameters and
``ema_event`` the references' pre-training schedules of it; ``warmup_cosine_lr`` is the
references' learning-rate schedule; ``standard_normal`` the clipped noise of a step.

Evaluation samplers (``act(deterministic=True)`` of the algorithms) follow the references:
DDPM heads ``sample(evaluation=True)``, x_K ~ N(0, I) and the posterior noise with a std
floor of 1e-3, none at the last step (DPPO); flow heads from a random x_0 without injected
noise (ReinFlow). Both draw from the generator given (the global torch RNG by default),
so an evaluation is deterministic given the seed.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlcore.nets import activation as nets_activation
from rlcore.nets import sinusoidal_encoding
from rlcore.observations import ObsSpec

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


DENOISERS = ("dppo", "rlcore_v1")


class DenoisingMLP(nn.Module):
    """(obs (B, O), x (B, H, A), t (B,)) -> (B, H, A) on [obs, x, time embedding].

    ``layout="dppo"``: DPPO's / ReinFlow's ``ResidualMLP`` (dppo model/common/mlp.py:84-149,
    built by model/diffusion/mlp_diffusion.py:197-215 with ``mlp_dims = hidden``): a linear
    input layer to ``hidden[0]``, (len(hidden) - 1) / 2 pre-activation residual blocks
    x + L2(act(L1(act(x)))), a linear output layer with no activation before it. The Gym
    configs' ``[512, 512, 512]`` build ONE block (mlp.py:102-114 asserts an even number of
    hidden layers; ``hidden`` of even length is refused here the same way).
    ``layout="rlcore_v1"``: this project's earlier network (kept for checkpoints made with
    it): len(hidden) - 1 blocks and the activation before the output layer."""

    def __init__(
        self,
        obs_dim: int,
        horizon: int,
        action_dim: int,
        hidden: Sequence[int] = (512, 512, 512),
        time_dim: int = 16,
        layout: str = "rlcore_v1",
        activation: str = "mish",
    ) -> None:
        super().__init__()
        if layout not in DENOISERS:
            raise ValueError(f"denoiser={layout!r}: choose from {DENOISERS}")
        if len(set(hidden)) != 1:
            raise ValueError(f"residual blocks need equal widths, got hidden={tuple(hidden)}")
        if layout == "dppo" and len(hidden) % 2 == 0:
            raise ValueError(
                f"denoiser='dppo' builds (len(hidden) - 1) / 2 residual blocks of two layers: "
                f"hidden needs an odd number of widths (e.g. [512, 512, 512]), got {list(hidden)}"
            )
        width = hidden[0]
        blocks = (len(hidden) - 1) // 2 if layout == "dppo" else len(hidden) - 1
        self.horizon, self.action_dim = horizon, action_dim
        self.time = TimeEmbedding(time_dim)
        self.inp = nn.Linear(obs_dim + horizon * action_dim + time_dim, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nets_activation(activation),
                nn.Linear(width, width),
                nets_activation(activation),
                nn.Linear(width, width),
            )  # fmt: skip
            for _ in range(blocks)
        )
        out = nn.Linear(width, horizon * action_dim)
        self.out = (
            nn.Sequential(out)
            if layout == "dppo"
            else nn.Sequential(nets_activation(activation), out)
        )

    def forward(self, obs: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        features = torch.cat([obs, x.flatten(1), self.time(t)], dim=-1)
        return self.trunk(features).view(-1, self.horizon, self.action_dim)

    def trunk(self, features: torch.Tensor) -> torch.Tensor:
        """The residual MLP on the concatenated input features (the references' ResidualMLP)."""
        h = self.inp(features)
        for block in self.blocks:
            h = h + block(h)
        return self.out(h)


def gaussian_log_density(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """log N(x; mean, std^2) of every element (a diagonal Gaussian's per-dim terms)."""
    return -((x - mean).pow(2)) / (2 * std.pow(2)) - std.log() - 0.5 * math.log(2 * math.pi)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """log N(x; mean, std^2) summed over every dim but the first: (B, ...) -> (B,)."""
    return gaussian_log_density(x, mean, std).flatten(1).sum(-1)


EVAL_STD_FLOOR = 1e-3  # DPPO's std floor of the evaluation sampler (diffusion_vpg.py:291)


def standard_normal(
    shape: Sequence[int],
    clip: float | None = None,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """N(0, I) draws clipped to [-clip, clip] (no clip when None): the injected noise of a
    reverse / Euler step, mean + std * z, stays within clip standard deviations (DPPO's
    and ReinFlow's ``randn_clip_value`` = 3: dppo diffusion_vpg.py:294-296, ReinFlow
    ppoflow.py:363-364)."""
    z = torch.randn(tuple(shape), generator=generator, device=device)
    return z if clip is None else z.clamp_(-clip, clip)


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
        layout: str = "rlcore_v1",
        activation: str = "mish",
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
        self.net = DenoisingMLP(obs_dim, horizon, action_dim, hidden, time_dim, layout, activation)
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

    def step_floor(self, i: int, std_floor: float, evaluation: bool) -> float:
        """The std floor of sampling step ``i``: ``std_floor`` when exploring; DPPO's
        evaluation path (``deterministic=True``) keeps the posterior std floored at 1e-3
        and uses zero noise only at the last step (dppo model/diffusion/diffusion.py:
        299-302, diffusion_vpg.py:288-291; the last step's posterior std is 0)."""
        if not evaluation:
            return std_floor
        return EVAL_STD_FLOOR if i < self.steps - 1 else 0.0

    @torch.no_grad()
    def sample(
        self,
        obs: torch.Tensor,
        std_floor: float = 0.0,
        generator: torch.Generator | None = None,
        return_chain: bool = False,
        noise_scale: float = 1.0,
        noise_clip: float | None = None,
        evaluation: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Action chunks (B, H, A) in [-1, 1]; with ``return_chain`` also the chain
        (B, K + 1, H, A) of every intermediate sample (chain[:, -1] before the clip).
        ``noise_scale`` multiplies the initial and the injected noise (0: the zero-noise
        mean path ResiP's base and FISOR use); ``noise_clip`` clips each injected standard
        normal draw to +-clip (DPPO's ``randn_clip_value``; the initial x_K is not clipped);
        ``evaluation``: DPPO's evaluation sampler (``step_floor``), x_K ~ N(0, I)."""
        shape = (len(obs), self.horizon, self.action_dim)
        x = noise_scale * torch.randn(shape, generator=generator, device=obs.device)
        chain = [x]
        for i in range(self.steps):
            mean, std = self.transition(obs, x, i, self.step_floor(i, std_floor, evaluation))
            x = mean + noise_scale * std * standard_normal(shape, noise_clip, generator, obs.device)
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
        layout: str = "rlcore_v1",
        activation: str = "mish",
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
        self.net = DenoisingMLP(obs_dim, horizon, action_dim, hidden, time_dim, layout, activation)

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
        clip_intermediate: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Action chunks (B, H, A) in [-1, 1] by K Euler steps from x0 ~ N(0, I) (times
        ``noise_scale``; 0: the path from x0 = 0); ``clip_intermediate`` clips every
        Euler step to [-1, 1] as ReinFlow's sampler does (reflow.py:199-204, the
        pre-training's evaluation sets it, train_reflow_agent.py:48); with
        ``return_chain`` also (B, K + 1, H, A)."""
        shape = (len(obs), self.horizon, self.action_dim)
        x = noise_scale * torch.randn(shape, generator=generator, device=obs.device)
        chain = [x]
        for t in self.times(obs.device):
            x = x + self.velocity(obs, x, t.expand(len(obs))) / self.steps
            if clip_intermediate:
                x = x.clamp(-1.0, 1.0)
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

    @torch.no_grad()
    def copy_from(self, module: nn.Module) -> None:
        """shadow <- current (the references' ``reset_parameters`` before the EMA starts)."""
        self.shadow.load_state_dict(module.state_dict())

    def state_dict(self) -> dict:
        return self.shadow.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.shadow.load_state_dict(state)


EMA_UNITS = ("epoch", "step")


def ema_event(update: int, epoch_steps: int, start_epoch: int, every: int, unit: str) -> str | None:
    """What the pre-training references do to the EMA after gradient step number
    ``update`` (1-based): "copy" (the EMA takes the weights: before ``start_epoch``),
    "average" (one EMA step) or None. Epochs count from 1 and last ``epoch_steps``.

    * ``unit="epoch"`` (DPPO, dppo agent/pretrain/train_diffusion_agent.py:56-58 and
      train_agent.py:140-144): at the end of every ``every``-th epoch.
    * ``unit="step"`` (ReinFlow, ReinFlow agent/pretrain/train_agent.py:357-360,
      400-405): after every ``every``-th gradient step, counting from the first."""
    if unit not in EMA_UNITS:
        raise ValueError(f"ema unit={unit!r}: choose from {EMA_UNITS}")
    if unit == "epoch":
        if update % epoch_steps or (update // epoch_steps) % every:
            return None
        epoch = update // epoch_steps
    else:
        if (update - 1) % every:
            return None
        epoch = (update - 1) // epoch_steps + 1
    return "copy" if epoch < start_epoch else "average"


def warmup_cosine_lr(i: int, lr_max: float, lr_min: float, cycle: int, warmup: int) -> float:
    """The learning rate after ``i`` scheduler steps of DPPO's / ReinFlow's
    ``CosineAnnealingWarmupRestarts`` (dppo util/scheduler.py:32-147, cycle_mult = gamma
    = 1; it starts at ``lr_min``, scheduler.py:71-78): in each cycle of ``cycle`` steps,
    a linear warm-up from ``lr_min`` to ``lr_max`` over ``warmup`` steps, then a cosine
    down to ``lr_min``; then the cycle restarts."""
    if cycle < 1 or not 0 <= warmup < cycle:
        raise ValueError(f"need cycle >= 1 and 0 <= warmup < cycle, got {cycle}, {warmup}")
    s = i % cycle
    if i == 0 or s < warmup:
        return lr_min + (lr_max - lr_min) * s / max(warmup, 1)
    progress = (s - warmup) / (cycle - warmup)
    return lr_min + (lr_max - lr_min) * (1 + math.cos(math.pi * progress)) / 2


def adamw(
    params: Any, lr: float, weight_decay: float = 0.0, fused: bool = True
) -> torch.optim.AdamW:
    """AdamW (decoupled weight decay), the references' optimiser (equal to Adam at
    weight decay 0), with the fused single-kernel step when requested."""
    kwargs = {"fused": True} if fused else {"foreach": True}
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **kwargs)


@dataclasses.dataclass(frozen=True)
class HeadSettings:
    """What shapes a DDPM / flow head. The BC config and every fine-tuner's config carry
    these fields under the same names; a fine-tuner's must equal its pre-trained run's.
    ``schedule`` / ``clip_x0`` are DDPM's (None for a flow head)."""

    horizon: int
    obs_history: int
    denoising_steps: int
    schedule: str | None
    clip_x0: float | None
    hidden: tuple[int, ...]
    time_dim: int
    denoiser: str
    activation: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(self.hidden))  # a config's list compares equal


LAYOUT_FIELDS = {"denoiser": "rlcore_v1", "activation": "mish"}  # the earlier layout


DDPM_ONLY = ("schedule", "clip_x0")


def head_settings(kind: str, config: Any, pretrained: HeadSettings | None = None) -> HeadSettings:
    """The ``HeadSettings`` fields of ``config`` (a dataclass or a dict) that a ``kind`` head uses
    (a flow head has no ``DDPM_ONLY`` ones). A fine-tuner's config whose layout fields
    ``denoiser`` / ``activation`` are None (ResiP's defaults, written before them) takes
    them from the pre-trained run's settings ``pretrained`` when given, else the earlier
    layout ``LAYOUT_FIELDS``; every other field must be declared."""
    declared = dict(config) if isinstance(config, Mapping) else dataclasses.asdict(config)
    layout = LAYOUT_FIELDS if pretrained is None else dataclasses.asdict(pretrained)
    settings: dict[str, Any] = {}
    for name in (field.name for field in dataclasses.fields(HeadSettings)):
        if kind != "ddpm" and name in DDPM_ONLY:
            settings[name] = None
        elif name in LAYOUT_FIELDS and declared.get(name) is None:
            settings[name] = layout[name]
        elif name in declared:
            settings[name] = declared[name]
        else:
            raise TypeError(f"{type(config).__name__} lacks the head setting {name!r}")
    return HeadSettings(**settings)


HEAD_FIELDS = tuple(field.name for field in dataclasses.fields(HeadSettings))


def declared_head_fields(config_class: type) -> list[str]:
    """The ``HeadSettings`` fields that a config dataclass declares."""
    return [field.name for field in dataclasses.fields(config_class) if field.name in HEAD_FIELDS]


def resolve_head(
    kind: str, config_class: type, values: dict[str, Any], prefix: str = "algo."
) -> dict[str, Any]:
    """A fine-tuner's config node ``values`` with its head settings resolved, as the run
    records them: the pre-trained checkpoint (``values["pretrained"]``, a ``kind`` head)
    is their source. A head setting left unset (None: the command line's default,
    rlcore.configs) takes the checkpoint's value, or the dataclass default when no
    checkpoint is given; one set explicitly (command line, experiment or algo_env file)
    that differs is refused with a ``ConfigError`` naming the override to drop."""
    from rlcore.config import ConfigError, coerce, override_text, plain

    names = declared_head_fields(config_class)
    defaults = {field.name: field.default for field in dataclasses.fields(config_class)}
    out = dict(values)
    path = values.get("pretrained")
    if not path:
        for name in names:
            if out.get(name) is None:
                out[name] = plain(defaults[name])
        return out
    theirs = dataclasses.asdict(load_bc(path, kind).head_settings())
    hints = typing.get_type_hints(config_class)
    conflicts = []
    for name in names:
        if out.get(name) is None:
            out[name] = plain(theirs[name])
            continue
        try:
            ours = coerce(out[name], hints[name])
        except TypeError:
            continue  # a wrong type: config_from_dict names it
        if ours != theirs[name]:
            conflicts.append(
                f"drop {prefix}{name}={override_text(out[name])}: the pre-trained head has "
                f"{theirs[name]!r}"
            )
    if conflicts:
        raise ConfigError(
            "; ".join(conflicts) + f" ({prefix}pretrained={path}: the head settings left "
            "unset are read from it)"
        )
    return out


def make_head(kind: str, obs_dim: int, action_dim: int, cfg: HeadSettings) -> DDPMHead | FlowHead:
    """A ``kind`` ("ddpm" | "flow") head shaped by ``cfg`` (``head_settings``)."""
    common = {"horizon": cfg.horizon, "hidden": cfg.hidden, "time_dim": cfg.time_dim,
              "steps": cfg.denoising_steps, "layout": cfg.denoiser,
              "activation": cfg.activation}  # fmt: skip
    if kind == "ddpm":
        return DDPMHead(obs_dim, action_dim, schedule=cfg.schedule, clip_x0=cfg.clip_x0, **common)
    return FlowHead(obs_dim, action_dim, **common)


@runtime_checkable
class PretrainedHead(Protocol):
    """A behaviour-cloned DDPM / flow policy (``algo=diffusion_bc`` / ``flow_bc``) as its
    fine-tuners read it: the head's kind and settings, EMA weights, observation statistics."""

    kind: str
    ema: EMA
    obs_normalizer: nn.Module

    def head_settings(self) -> HeadSettings: ...


@dataclasses.dataclass(frozen=True)
class PretrainedBC:
    """A behaviour-cloned DDPM / flow policy as a fine-tuner reads it from the run's
    checkpoint: the head's kind and settings, its EMA weights and the observation
    statistics (state dicts), without rebuilding the BC agent."""

    kind: str
    settings: HeadSettings
    ema: dict[str, torch.Tensor]  # the EMA head's state dict
    obs_normalizer: dict[str, torch.Tensor]
    obs: ObsSpec | None = None  # what it observed (None: a checkpoint without the record)
    # cloned from images (algo.encoder): the encoder's name, its compressed features and
    # the EMA encoder's state dict (None: vectors)
    encoder: str | None = None
    image_features: int | None = None
    ema_encoder: dict[str, torch.Tensor] | None = None

    def head_settings(self) -> HeadSettings:
        return self.settings


def load_bc(path: str | Path, kind: str, device: str | torch.device = "cpu") -> PretrainedBC:
    """The behaviour-cloning policy of a run dir / checkpoint (``algo=diffusion_bc`` for
    ``kind="ddpm"``, ``flow_bc`` for ``"flow"``, agent-only snapshots included), read from
    the checkpoint's config and agent parts; a ``ValueError`` naming the fix when it holds
    another algorithm."""
    from rlcore.checkpoint import load_checkpoint

    state = load_checkpoint(path, map_location=device)
    values, agent = state["config"]["algo"], state["agent"]
    found = values.get("head") if {"ema", "obs_normalizer"} <= set(agent) else None
    if found != kind:
        raise ValueError(
            f"algo.pretrained={path} holds a {state.get('algo')} agent (head {found!r}); this "
            f"algorithm fine-tunes a {kind!r} policy (algo={'diffusion' if kind == 'ddpm' else 'flow'}_bc)"
        )
    obs = ObsSpec.from_record(state["spaces"]) if "spaces" in state else None
    encoder = values.get("encoder")
    return PretrainedBC(
        kind, head_settings(kind, values), agent["ema"], agent["obs_normalizer"], obs,
        encoder, values.get("image_features") if encoder else None,
        agent.get("ema_encoder") if encoder else None,
    )  # fmt: skip


def copy_pretrained(
    bc: PretrainedBC, path: str | Path, settings: HeadSettings, head: nn.Module,
    obs_normalizer: nn.Module,
) -> None:  # fmt: skip
    """Copy the EMA weights and observation statistics of the BC policy ``bc`` into a
    fine-tuner's ``head`` / ``obs_normalizer``; a ``ValueError`` naming every head setting
    (``settings``, the fine-tuner's) that differs from the pre-trained one."""
    ours, theirs = dataclasses.asdict(settings), dataclasses.asdict(bc.head_settings())
    differ = [
        f"{name}={value!r} (pre-trained: {theirs[name]!r})"
        for name, value in ours.items()
        if value != theirs[name]
    ]
    if differ:
        raise ValueError(
            f"algo.pretrained={path}: set the head settings to the pre-trained ones: "
            + ", ".join(differ)
        )
    head.load_state_dict(bc.ema)
    obs_normalizer.load_state_dict(bc.obs_normalizer)


@dataclasses.dataclass
class PolicyParts:
    """What a fine-tuner starts from (``policy_parts``): the head, the observation
    normaliser (vectors), the action box and, for images, the pre-trained encoder."""

    head: DDPMHead | FlowHead
    obs_normalizer: nn.Module
    box: ActionBox
    encoder: nn.Module | None = None  # images: the BC run's (EMA) encoder
    fresh_encoder: nn.Module | None = None  # ... and a new one of its kind (a critic's)


def policy_parts(
    kind: str, observation_space: Any, action_space: Any, config: Any, device: torch.device,
    images: bool = False,
) -> PolicyParts:  # fmt: skip
    """The head, observation normaliser and action box of a fine-tuner, with the
    pre-trained weights and statistics of ``config.pretrained`` when it is set (random
    otherwise: a checkpoint's ``load_state_dict`` fills them). The action space may be a
    chunked env's (H, A) box: the head's action dim is its last. ``images``: the
    fine-tuner reads image observations through the BC run's encoder (``encoder``, its
    EMA weights; the BC run must have cloned from images, so ``pretrained`` is needed)."""
    from rlcore.nets import ObsNormalizer, observation_encoder

    spec = ObsSpec.from_space(observation_space)
    if spec.images and not images:
        raise ValueError(
            f"this fine-tuner reads vector observations; this env observes images "
            f"({', '.join(p.name for p in spec.images)}): algo=dppo fine-tunes a policy "
            "cloned from images (algo=diffusion_bc algo.encoder=...)"
        )
    bc = load_bc(config.pretrained, kind, device) if config.pretrained else None
    encoder = fresh = None
    if spec.images:
        if bc is None or bc.encoder is None:
            raise ValueError(
                "image observations: algo.pretrained must name a run that cloned from "
                "images (algo=diffusion_bc algo.encoder=...): its encoder is fine-tuned"
            )
        encoder = observation_encoder(spec, bc.encoder, bc.image_features).to(device)
        fresh = observation_encoder(spec, bc.encoder, bc.image_features).to(device)
    obs_dim = spec.flat_dim if encoder is None else encoder.out_dim  # dicts: as Plumbing
    if bc is not None and bc.obs is not None and _parts(bc.obs) != _parts(spec):
        raise ValueError(
            f"algo.pretrained={config.pretrained} learned from observations {_parts(bc.obs)}, "
            f"this env observes {_parts(spec)}: fine-tune on the env it was trained on (a "
            "policy cloned from a flattened dataset needs env.flatten_obs=true; one cloned "
            "from dict observations needs them here)"
        )
    settings = head_settings(kind, config, None if bc is None else bc.head_settings())
    head = make_head(kind, obs_dim, int(action_space.shape[-1]), settings)
    head.to(device)
    obs_normalizer = ObsNormalizer(obs_dim).to(device)
    if bc is not None:
        copy_pretrained(bc, config.pretrained, settings, head, obs_normalizer)
        if encoder is not None:
            encoder.load_state_dict(bc.ema_encoder)
    box = ActionBox(action_space.low, action_space.high, device)
    return PolicyParts(head, obs_normalizer, box, encoder, fresh)


def _parts(spec: ObsSpec) -> dict[str, tuple[int, ...]]:
    """An observation's parts and their shapes, in order (a Box: ``{"obs": shape}``)."""
    return {part.name: part.shape for part in spec.parts}


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
