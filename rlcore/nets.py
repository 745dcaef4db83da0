"""Networks shared by every algorithm: MLPs, batched critic ensembles and actors."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlcore.observations import IMAGE, ObsPart, ObsSpec, image_encoder_needed

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "mish": nn.Mish,
    "silu": nn.SiLU,
}
_FUNCTIONAL = {
    "relu": F.relu,
    "tanh": torch.tanh,
    "elu": F.elu,
    "gelu": F.gelu,
    "mish": F.mish,
    "silu": F.silu,
}
LOG_2PI = math.log(2 * math.pi)
_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))  # as torch.distributions.Normal writes it


def full_precision(x: torch.Tensor) -> torch.Tensor:
    """A half-precision (autocast) network output as float32; other dtypes unchanged, so
    heads, distributions and losses never run in bfloat16."""
    return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x


def float32_output(layer: Callable[..., torch.Tensor], x: torch.Tensor, *args: Any) -> torch.Tensor:
    """``layer(x, *args)`` in float32 even under half-precision autocast.

    Output layers are tiny (256 -> 1 for a critic) but their values are not: a Q-value of
    300 rounded to bfloat16's 8 significant bits moves in steps of 2, as large as late
    TD errors. The hidden layers keep their bf16 matmuls; this one runs in float32."""
    device_type = x.device.type
    if not torch.is_autocast_enabled(device_type):
        return layer(x, *args)
    with torch.autocast(device_type, enabled=False):
        return layer(x.float(), *args)


def activation(name: str) -> nn.Module:
    """The activation module called ``name`` (clear error listing the choices)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation '{name}', choose from {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]()


class MLP(nn.Sequential):
    """Linear -> [LayerNorm] -> activation, repeated, then a linear output layer.

    ``norm_after_activation`` puts the LayerNorm after the activation instead
    (Linear -> activation -> LayerNorm, as ReBRAC/EDAC do)."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation_name: str = "relu",
        layer_norm: bool = False,
        output_activation: str | None = None,
        norm_after_activation: bool = False,
    ) -> None:
        layers: list[nn.Module] = []
        prev = in_dim
        for width in hidden:
            layers.append(nn.Linear(prev, width))
            if layer_norm and not norm_after_activation:
                layers.append(nn.LayerNorm(width))
            layers.append(activation(activation_name))
            if layer_norm and norm_after_activation:
                layers.append(nn.LayerNorm(width))
            prev = width
        layers.append(nn.Linear(prev, out_dim))
        output_index = len(layers) - 1
        if output_activation is not None:
            layers.append(activation(output_activation))
        super().__init__(*layers)
        self.output_index = output_index  # the output nn.Linear (runs in float32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Output in float32 even under bfloat16 autocast: the output layer itself runs in
        float32 (``float32_output``), so heads and losses never see bf16 values."""
        for index, layer in enumerate(self):
            x = float32_output(layer, x) if index == self.output_index else layer(x)
        return x


class EnsembleLinear(nn.Module):
    """E independent linear layers evaluated in one batched matmul.

    Input (B, in) is shared by all members, or (E, B, in) per member; output (E, B, out).
    Each member is initialised like ``nn.Linear``.
    """

    def __init__(self, num_members: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.num_members, self.in_dim, self.out_dim = num_members, in_dim, out_dim
        self.weight = nn.Parameter(torch.empty(num_members, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_dim))
        bound = 1.0 / math.sqrt(in_dim)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor, members: slice | None = None) -> torch.Tensor:
        """``members`` (a slice) evaluates only those members, e.g. ``slice(0, 1)``."""
        weight, bias = self.weight, self.bias
        if members is not None:
            weight, bias = weight[members], bias[members]
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(weight.shape[0], *x.shape)
        return torch.baddbmm(bias, x, weight)

    def extra_repr(self) -> str:
        return f"members={self.num_members}, in={self.in_dim}, out={self.out_dim}"


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the last dim with separate affine parameters per member.

    (E, B, D) input: one fused ``F.layer_norm`` (with its member's affine) per member, so
    member i computes exactly what an ``nn.LayerNorm`` would; on CPUs this is faster than
    normalising the whole (E, B, D) block then applying the affine as two more passes."""

    def __init__(self, num_members: int, width: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.width, self.eps = width, eps
        self.weight = nn.Parameter(torch.ones(num_members, 1, width))
        self.bias = nn.Parameter(torch.zeros(num_members, 1, width))

    def forward(self, x: torch.Tensor, members: slice | None = None) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if members is not None:
            weight, bias = weight[members], bias[members]
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(weight.shape[0], *x.shape)
        return torch.stack(
            [
                F.layer_norm(xi, (self.width,), w[0], b[0], self.eps)
                for xi, w, b in zip(x.unbind(0), weight.unbind(0), bias.unbind(0))
            ]
        )


class EnsembleMLP(nn.Module):
    """E MLPs of identical shape run together: every layer is one batched matmul.

    Hidden blocks are Linear -> [LayerNorm] -> activation, or Linear -> activation ->
    LayerNorm with ``norm_after_activation`` (as ReBRAC/EDAC do)."""

    def __init__(
        self,
        num_members: int,
        in_dim: int,
        out_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation_name: str = "relu",
        layer_norm: bool = False,
        norm_after_activation: bool = False,
    ) -> None:
        super().__init__()
        self.num_members = num_members
        self.norm_after_activation = norm_after_activation
        self.act = _FUNCTIONAL[activation_name]
        dims = [in_dim, *hidden]
        self.hidden_layers = nn.ModuleList(
            EnsembleLinear(num_members, a, b) for a, b in zip(dims[:-1], dims[1:])
        )
        self.norms = (
            nn.ModuleList(EnsembleLayerNorm(num_members, b) for b in hidden) if layer_norm else None
        )
        self.output_layer = EnsembleLinear(num_members, dims[-1], out_dim)

    def forward(self, x: torch.Tensor, members: slice | None = None) -> torch.Tensor:
        """(B, in) or (E, B, in) -> (E, B, out); ``members`` restricts to a slice of members."""
        for i, layer in enumerate(self.hidden_layers):
            x = layer(x, members)
            if self.norms is not None and not self.norm_after_activation:
                x = self.norms[i](x, members)
            x = self.act(x)
            if self.norms is not None and self.norm_after_activation:
                x = self.norms[i](x, members)
        return float32_output(self.output_layer, x, members)


class QEnsemble(nn.Module):
    """E state-action critics Q(s, a) in one batched network; returns (E, B)."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        num_critics: int = 2,
        hidden: Sequence[int] = (256, 256),
        activation_name: str = "relu",
        layer_norm: bool = False,
        norm_after_activation: bool = False,
    ) -> None:
        super().__init__()
        self.net = EnsembleMLP(
            num_critics,
            obs_dim + action_dim,
            1,
            hidden,
            activation_name,
            layer_norm,
            norm_after_activation=norm_after_activation,
        )

    def forward(
        self, obs: torch.Tensor, action: torch.Tensor, members: slice | None = None
    ) -> torch.Tensor:
        return self.net(torch.cat([obs, action], dim=-1), members).squeeze(-1)


class CategoricalQEnsemble(nn.Module):
    """E distributional (C51) critics: logits over ``num_atoms`` atoms of a fixed support
    ``linspace(v_min, v_max, num_atoms)`` per (s, a), in one batched network.

    ``forward`` returns logits (E, B, num_atoms); ``value`` turns probabilities into the
    expected return sum_j p_j z_j. The target side is ``rlcore.losses.categorical_projection``
    and the loss ``rlcore.losses.categorical_cross_entropy`` (Bellemare et al. 2017)."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        num_critics: int = 2,
        hidden: Sequence[int] = (256, 256),
        num_atoms: int = 101,
        v_min: float = -10.0,
        v_max: float = 10.0,
        activation_name: str = "relu",
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        if num_atoms < 2:
            raise ValueError(f"num_atoms={num_atoms}: a categorical critic needs >= 2 atoms")
        if not v_min < v_max:
            raise ValueError(f"the support needs v_min < v_max, got v_min={v_min}, v_max={v_max}")
        self.v_min, self.v_max, self.num_atoms = float(v_min), float(v_max), num_atoms
        self.net = EnsembleMLP(
            num_critics, obs_dim + action_dim, num_atoms, hidden, activation_name, layer_norm
        )
        self.register_buffer("support", torch.linspace(v_min, v_max, num_atoms))

    def forward(
        self, obs: torch.Tensor, action: torch.Tensor, members: slice | None = None
    ) -> torch.Tensor:
        """Logits (E, B, num_atoms) (E: the members evaluated)."""
        return self.net(torch.cat([obs, action], dim=-1), members)

    def value(self, probs: torch.Tensor) -> torch.Tensor:
        """Expected return of categorical distributions ``probs`` (..., num_atoms) -> (...)."""
        return (probs * self.support).sum(-1)


class ActionScale(nn.Module):
    """Maps (-1, 1) to the environment's [low, high] action box."""

    def __init__(self, low: np.ndarray | float, high: np.ndarray | float, action_dim: int):
        super().__init__()
        low_t = torch.tensor(np.broadcast_to(low, (action_dim,)), dtype=torch.float32)
        high_t = torch.tensor(np.broadcast_to(high, (action_dim,)), dtype=torch.float32)
        self.register_buffer("scale", (high_t - low_t) / 2.0)
        self.register_buffer("center", (high_t + low_t) / 2.0)

    def forward(self, squashed: torch.Tensor) -> torch.Tensor:
        return squashed * self.scale + self.center


def tanh_gaussian_log_prob(
    noise: torch.Tensor, log_std: torch.Tensor, pre_tanh: torch.Tensor
) -> torch.Tensor:
    """Per-dimension log-density of tanh(u), u = mean + exp(log_std) * noise ~ N(mean, std):
    log N(u) - log(1 - tanh(u)^2), the Jacobian term in the stable form
    2 (log 2 - u - softplus(-2u)), finite even where tanh(u) rounds to +-1."""
    log_prob = -0.5 * noise.pow(2) - log_std - 0.5 * LOG_2PI
    log_det = 2.0 * (math.log(2.0) - pre_tanh - F.softplus(-2.0 * pre_tanh))
    return log_prob - log_det


def sinusoidal_encoding(x: torch.Tensor, dim: int, base: float = 1e4) -> torch.Tensor:
    """Transformer-style sinusoidal features of a scalar: (...,) -> (..., dim).

    For i = 0 .. dim/2 - 1 the angle x / base^(2i/dim) gives slot 2i = sin(angle) and slot
    2i + 1 = cos(angle). FamO2O feeds its balance coefficient to the policy this way, so
    nearby coefficients get nearby but distinguishable inputs at several frequencies."""
    if dim <= 0 or dim % 2:
        raise ValueError(f"sinusoidal_encoding needs a positive even dim, got {dim}")
    exponents = torch.arange(0, dim, 2, dtype=x.dtype, device=x.device) / dim
    angle = x.unsqueeze(-1) / torch.pow(base, exponents)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)


class TanhGaussianActor(nn.Module):
    """SAC policy: a = center + scale * tanh(u), u ~ N(mu(s), sigma(s)).

    log_std is squashed into [log_std_min, log_std_max] with tanh (as CleanRL does). With
    ``log_std_affine=(m, o)`` it is instead ``clamp(m * raw + o, log_std_min, log_std_max)``
    with m and o trainable scalars initialised to the given values (CORL's CQL / Cal-QL
    policy, usually with bounds (-20, 2)); with ``clamp_log_std`` it is the raw output
    clamped into the bounds (OfflineRL-Kit's ``TanhDiagGaussian``, SB3's clamp).
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        action_low: np.ndarray | float = -1.0,
        action_high: np.ndarray | float = 1.0,
        hidden: Sequence[int] = (256, 256),
        activation_name: str = "relu",
        layer_norm: bool = False,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        log_std_affine: tuple[float, float] | None = None,
        clamp_log_std: bool = False,
    ) -> None:
        super().__init__()
        if clamp_log_std and log_std_affine is not None:
            raise ValueError("clamp_log_std and log_std_affine are two log-std forms: pick one")
        self.action_dim = action_dim
        self.clamp_log_std = clamp_log_std
        self.net = MLP(obs_dim, 2 * action_dim, hidden, activation_name, layer_norm)
        self.to_env = ActionScale(action_low, action_high, action_dim)
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        self.affine_log_std = log_std_affine is not None
        if log_std_affine is not None:
            self.log_std_multiplier = nn.Parameter(torch.tensor(float(log_std_affine[0])))
            self.log_std_offset = nn.Parameter(torch.tensor(float(log_std_affine[1])))

    def _log_std(self, raw: torch.Tensor) -> torch.Tensor:
        if self.affine_log_std:
            log_std = self.log_std_multiplier * raw + self.log_std_offset
            return log_std.clamp(self.log_std_min, self.log_std_max)
        if self.clamp_log_std:
            return raw.clamp(self.log_std_min, self.log_std_max)
        return self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (
            torch.tanh(raw) + 1.0
        )

    def _log_prob(
        self, noise: torch.Tensor, log_std: torch.Tensor, pre_tanh: torch.Tensor
    ) -> torch.Tensor:
        log_prob = tanh_gaussian_log_prob(noise, log_std, pre_tanh)
        return log_prob.sum(-1) - self.to_env.scale.log().sum()

    def forward(
        self, obs: torch.Tensor, deterministic: bool = False, with_log_prob: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Sampled (or mean) action in env units, and its log-probability (B,) or None."""
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        if deterministic:
            return self.to_env(torch.tanh(mean)), None
        log_std = self._log_std(log_std)
        noise = torch.randn_like(mean)
        pre_tanh = mean + noise * log_std.exp()
        action = self.to_env(torch.tanh(pre_tanh))
        if not with_log_prob:
            return action, None
        return action, self._log_prob(noise, log_std, pre_tanh)

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        """log pi(action | obs) (B,) of given env-unit actions (e.g. dataset actions); the
        squashed action is clipped to +-(1 - eps) so actions on the box edge stay finite."""
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        log_std = self._log_std(log_std)
        squashed = (action - self.to_env.center) / self.to_env.scale
        pre_tanh = torch.atanh(squashed.clamp(-1.0 + eps, 1.0 - eps))
        return self._log_prob((pre_tanh - mean) / log_std.exp(), log_std, pre_tanh)


class DeterministicActor(nn.Module):
    """TD3/DDPG policy: a = center + scale * tanh(f(s))."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        action_low: np.ndarray | float = -1.0,
        action_high: np.ndarray | float = 1.0,
        hidden: Sequence[int] = (256, 256),
        activation_name: str = "relu",
        layer_norm: bool = False,
        norm_after_activation: bool = False,
    ) -> None:
        super().__init__()
        self.net = MLP(
            obs_dim,
            action_dim,
            hidden,
            activation_name,
            layer_norm,
            norm_after_activation=norm_after_activation,
        )
        self.to_env = ActionScale(action_low, action_high, action_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.to_env(torch.tanh(self.net(obs)))


def _init_weights(module: nn.Module, init: Callable[[torch.Tensor], Any], bias: float) -> None:
    """``init`` on the weight of every nn.Linear and nn.Conv2d in ``module`` (in place) and of
    every member of every EnsembleLinear (on a fresh (out, in) tensor, then copied in, so a
    member gets exactly what an nn.Linear would); constant biases."""
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, nn.Linear | nn.Conv2d):
                init(layer.weight)
                nn.init.constant_(layer.bias, bias)
            elif isinstance(layer, EnsembleLinear):
                for member in range(layer.num_members):
                    fresh = layer.weight.new_empty(layer.out_dim, layer.in_dim)
                    init(fresh)
                    layer.weight[member].copy_(fresh.T)
                nn.init.constant_(layer.bias, bias)


def orthogonal_init(module: nn.Module, gain: float = math.sqrt(2), bias: float = 0.0) -> None:
    """Orthogonal weights and constant biases for every nn.Linear inside ``module``, and for
    every member of every EnsembleLinear (each member initialised like an nn.Linear)."""
    _init_weights(module, lambda w: nn.init.orthogonal_(w, gain), bias)


def xavier_uniform_init(module: nn.Module, gain: float = 1.0, bias: float = 0.0) -> None:
    """Xavier-uniform weights and constant biases, for the same layers as ``orthogonal_init``."""
    _init_weights(module, lambda w: nn.init.xavier_uniform_(w, gain), bias)


def edac_init(net: MLP | EnsembleMLP, output_bound: float, hidden_bias: float = 0.1) -> None:
    """EDAC-style initialisation (used by ReBRAC): hidden weights U(+-1/sqrt(fan_in)),
    hidden biases ``hidden_bias``; output weights and biases U(+-output_bound)."""
    if isinstance(net, EnsembleMLP):
        hidden, output = list(net.hidden_layers), net.output_layer
    else:
        *hidden, output = [m for m in net.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for layer in hidden:
            fan_in = layer.in_dim if isinstance(layer, EnsembleLinear) else layer.in_features
            bound = 1.0 / math.sqrt(fan_in)
            nn.init.uniform_(layer.weight, -bound, bound)
            nn.init.constant_(layer.bias, hidden_bias)
        nn.init.uniform_(output.weight, -output_bound, output_bound)
        nn.init.uniform_(output.bias, -output_bound, output_bound)


class DiagNormal:
    """Diagonal Gaussian with exactly ``torch.distributions.Normal``'s formulas and sampling
    (same numbers, same RNG draws) minus its argument validation and object overhead,
    which dominate small-network updates such as PPO's 64-sample minibatches."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        self.mean, self.std = mean, std

    @property
    def stddev(self) -> torch.Tensor:  # torch.distributions.Normal's name
        return self.std

    def sample(self) -> torch.Tensor:
        with torch.no_grad():
            return torch.normal(self.mean, self.std)

    def rsample(self) -> torch.Tensor:
        """Reparameterised sample mean + std * eps: gradients reach mean and std."""
        return self.mean + self.std * torch.randn_like(self.mean)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """Per-dimension log-density (sum over the last dim for a multivariate one)."""
        var = self.std**2
        return -((value - self.mean) ** 2) / (2 * var) - self.std.log() - _LOG_SQRT_2PI

    def entropy(self) -> torch.Tensor:
        return 0.5 + 0.5 * LOG_2PI + torch.log(self.std)

    def kl(self, other: DiagNormal) -> torch.Tensor:
        """KL(self || other), summed over the last dim (torch.distributions' formula)."""
        var_ratio = (self.std / other.std) ** 2
        mean_term = ((self.mean - other.mean) / other.std) ** 2
        return (0.5 * (var_ratio + mean_term - 1 - var_ratio.log())).sum(-1)


class GaussianActor(nn.Module):
    """N(mu(s), exp(log_std)) with a state-independent log_std.

    PPO: unbounded mean, orthogonal init (the defaults). IQL (CORL): ``tanh_mean=True``
    squashes the mean into the action box; log_std is clamped to ``log_std_bounds``.
    Actions are in env units; the mean is scaled to the box when ``tanh_mean``.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int] = (64, 64),
        activation_name: str = "tanh",
        init_log_std: float = 0.0,
        tanh_mean: bool = False,
        action_low: np.ndarray | float = -1.0,
        action_high: np.ndarray | float = 1.0,
        log_std_bounds: tuple[float, float] | None = None,
        orthogonal: bool = True,
    ) -> None:
        super().__init__()
        self.mean = MLP(obs_dim, action_dim, hidden, activation_name)
        if orthogonal:
            orthogonal_init(self.mean)
            orthogonal_init(self.mean[-1], gain=0.01)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))
        self.tanh_mean, self.log_std_bounds = tanh_mean, log_std_bounds
        self.to_env = ActionScale(action_low, action_high, action_dim) if tanh_mean else None

    def distribution(self, obs: torch.Tensor) -> DiagNormal:
        mean = self.mean(obs)
        if self.to_env is not None:
            mean = self.to_env(torch.tanh(mean))
        log_std = self.log_std
        if self.log_std_bounds is not None:
            log_std = log_std.clamp(*self.log_std_bounds)
        return DiagNormal(mean, log_std.exp().expand_as(mean))

    def forward(
        self, obs: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Action and its log-probability (summed over action dims)."""
        dist = self.distribution(obs)
        action = dist.mean if deterministic else dist.sample()
        return action, dist.log_prob(action).sum(-1)

    def log_prob_entropy(
        self, obs: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(action | obs) and the policy's entropy, both (B,) (summed over dims)."""
        dist = self.distribution(obs)
        return dist.log_prob(action).sum(-1), dist.entropy().sum(-1)


class Categorical:
    """Categorical distribution over the last dim of ``logits`` with the few methods PPO
    and DQN need (no argument validation, as ``DiagNormal``)."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.log_probs = logits - logits.logsumexp(-1, keepdim=True)  # normalised

    @property
    def probs(self) -> torch.Tensor:
        return self.log_probs.exp()

    def sample(self) -> torch.Tensor:
        """int64 indices, one per row, drawn from torch's global RNG."""
        with torch.no_grad():
            flat = self.probs.reshape(-1, self.log_probs.shape[-1])
            return torch.multinomial(flat, 1).reshape(self.log_probs.shape[:-1])

    def mode(self) -> torch.Tensor:
        return self.log_probs.argmax(-1)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return self.log_probs.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.probs * self.log_probs).sum(-1)


class CategoricalActor(nn.Module):
    """pi(a | s) = softmax(f(s)) over ``num_actions`` discrete actions (PPO on Discrete
    spaces). Same MLP and initialisation as ``GaussianActor``'s mean (CleanRL's ppo.py:
    orthogonal, gain 0.01 on the logits layer, so the initial policy is near uniform)."""

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        hidden: Sequence[int] = (64, 64),
        activation_name: str = "tanh",
        orthogonal: bool = True,
    ) -> None:
        super().__init__()
        self.logits = MLP(obs_dim, num_actions, hidden, activation_name)
        if orthogonal:
            orthogonal_init(self.logits)
            orthogonal_init(self.logits[-1], gain=0.01)

    def distribution(self, obs: torch.Tensor) -> Categorical:
        return Categorical(self.logits(obs))

    def forward(
        self, obs: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Action indices (B,) int64 (sampled, or the most likely) and their log-probability."""
        dist = self.distribution(obs)
        action = dist.mode() if deterministic else dist.sample()
        return action, dist.log_prob(action)

    def log_prob_entropy(
        self, obs: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(action | obs) and the policy's entropy, both (B,)."""
        dist = self.distribution(obs)
        return dist.log_prob(action), dist.entropy()


class DiscreteQNetwork(nn.Module):
    """Q(s, .) for every discrete action at once, (B, num_actions) (DQN).

    ``dueling=True`` (Wang et al. 2016): a shared trunk, then a value head V(s) and an
    advantage head A(s, a), combined as Q = V + A - mean_a A, so mean_a Q(s, a) = V(s)."""

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        hidden: Sequence[int] = (120, 84),
        activation_name: str = "relu",
        dueling: bool = False,
    ) -> None:
        super().__init__()
        self.dueling = dueling
        if not dueling:
            self.q = MLP(obs_dim, num_actions, hidden, activation_name)
            return
        *trunk_hidden, width = hidden
        self.trunk = MLP(
            obs_dim, width, trunk_hidden, activation_name, output_activation=activation_name
        )
        self.value = nn.Linear(width, 1)
        self.advantage = nn.Linear(width, num_actions)

    def streams(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Dueling only: V(s) (B, 1) and A(s, .) (B, num_actions) before they are combined."""
        features = self.trunk(obs)
        return float32_output(self.value, features), float32_output(self.advantage, features)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.dueling:
            return self.q(obs)
        value, advantage = self.streams(obs)
        return value + advantage - advantage.mean(-1, keepdim=True)


class ObsEncoder(nn.Module):
    """An observation (``rlcore.observations.ObsSpec``) -> one feature vector (B, out_dim):
    the parts in the spec's order, each vector flattened, each image through its own
    encoder, concatenated. A network built on ``out_dim`` reads any observation the spec
    describes; for one vector part it is the identity (the networks of every run before
    the seam, unchanged).

    ``image_encoder(part) -> nn.Module`` builds the encoder of an image part: a module
    taking the part's uint8 (B, frame_stack * C, H, W) tensor (scaling its pixels itself)
    and giving (B, out_dim), with an int ``out_dim`` attribute. Without one, an image part
    is refused with the one image-encoder message (``rlcore.observations``)."""

    def __init__(
        self, spec: ObsSpec, image_encoder: Callable[[ObsPart], nn.Module] | None = None
    ) -> None:
        super().__init__()
        self.spec = spec
        self.images = nn.ModuleDict()
        out_dim = 0
        for part in spec.parts:
            if part.kind != IMAGE:
                out_dim += part.size
                continue
            if image_encoder is None:
                raise ValueError(image_encoder_needed(part))
            encoder = image_encoder(part)
            if not isinstance(getattr(encoder, "out_dim", None), int):
                raise TypeError(
                    f"the image encoder of part {part.name!r} ({type(encoder).__name__}) needs "
                    "an int out_dim attribute (its feature size)"
                )
            self.images[part.name] = encoder
            out_dim += encoder.out_dim
        self.out_dim = out_dim

    def forward(self, obs: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        return self.spec.concat(obs, self.images)


# --- image encoders (an ObsEncoder's ``image_encoder``) and DrQ's augmentation ----------
def _conv_out_dim(torso: nn.Module, shape: tuple[int, int, int]) -> int:
    """Features of ``torso`` on one (C, H, W) input (a dry run without gradients)."""
    with torch.no_grad():
        return int(torso(torch.zeros(1, *shape)).reshape(-1).shape[0])


class NatureCNN(nn.Module):
    """The DQN torso of Mnih et al. 2015 ("Human-level control through deep reinforcement
    learning", Nature): conv 32 8x8 stride 4, conv 64 4x4 stride 2, conv 64 3x3 stride 1,
    a fully connected layer of ``features`` (512), ReLU after each; pixels scaled by 1/255,
    as CleanRL's ``dqn_atari.py`` ``QNetwork`` and ``ppo_atari_envpool.py`` ``Agent``
    (3,136 features into the last layer at 84x84). Input uint8 (B, C, H, W), C the stacked
    frames' channels. PyTorch's default initialisation (CleanRL's DQN; its PPO
    re-initialises orthogonally: ``orthogonal_init(encoder)`` there)."""

    def __init__(
        self, shape: Sequence[int], features: int = 512, widths: Sequence[int] = (32, 64, 64)
    ) -> None:
        """``widths``: the three convolutions' output channels (the paper's 32, 64, 64;
        narrower in the parity tests, whose golden files must stay small)."""
        super().__init__()
        first, second, third = (int(w) for w in widths)
        self.convs = nn.Sequential(
            nn.Conv2d(int(shape[0]), first, 8, stride=4), nn.ReLU(),
            nn.Conv2d(first, second, 4, stride=2), nn.ReLU(),
            nn.Conv2d(second, third, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )  # fmt: skip
        self.conv_dim = _conv_out_dim(self.convs, tuple(shape))
        self.head = nn.Sequential(nn.Linear(self.conv_dim, features), nn.ReLU())
        self.out_dim = int(features)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.head(self.convs(pixels.float() / 255.0))


class _ResidualBlock(nn.Module):
    """IMPALA's residual block: x + conv(relu(conv(relu(x)))), 3x3 convolutions."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


class ImpalaCNN(nn.Module):
    """IMPALA's ResNet encoder (Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL
    with Importance Weighted Actor-Learner Architectures", Fig. 3): for each width in
    ``widths`` (16, 32, 32) a 3x3 conv, a 3x3 max-pool of stride 2 (padding 1) and two
    residual blocks; then ReLU, a fully connected layer of ``features`` (256) and ReLU;
    pixels scaled by 1/255, as CleanRL's ``ppo_procgen.py`` (channel-first input here: its
    NHWC permute is the env's business). Input uint8 (B, C, H, W)."""

    def __init__(
        self, shape: Sequence[int], widths: Sequence[int] = (16, 32, 32), features: int = 256
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = int(shape[0])
        for width in widths:
            layers += [
                nn.Conv2d(channels, width, 3, padding=1),
                nn.MaxPool2d(3, stride=2, padding=1),
                _ResidualBlock(width), _ResidualBlock(width),
            ]  # fmt: skip
            channels = width
        self.convs = nn.Sequential(*layers, nn.Flatten(), nn.ReLU())
        self.conv_dim = _conv_out_dim(self.convs, tuple(shape))
        self.head = nn.Sequential(nn.Linear(self.conv_dim, features), nn.ReLU())
        self.out_dim = int(features)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.head(self.convs(pixels.float() / 255.0))


class DrQEncoder(nn.Module):
    """DrQ-v2's encoder (Yarats et al. 2021, "Mastering Visual Continuous Control: Improved
    Data-Augmented Reinforcement Learning"; facebookresearch/drqv2 ``Encoder``): four 3x3
    convs of 32 channels (the first stride 2), ReLU after each, on pixels / 255 - 0.5,
    flattened (32 x 35 x 35 = 39,200 features at 84x84; the actor's and critics' trunks
    reduce them). Orthogonal weights with ReLU gain, zero biases (drqv2 ``utils.weight_init``)."""

    def __init__(self, shape: Sequence[int], channels: int = 32) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(int(shape[0]), channels, 3, stride=2), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, stride=1), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, stride=1), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )  # fmt: skip
        for conv in self.convs:
            if isinstance(conv, nn.Conv2d):
                nn.init.orthogonal_(conv.weight, nn.init.calculate_gain("relu"))
                nn.init.zeros_(conv.bias)
        self.out_dim = _conv_out_dim(self.convs, tuple(shape))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.convs(pixels.float() / 255.0 - 0.5)


IMAGE_ENCODERS: dict[str, type[nn.Module]] = {
    "nature": NatureCNN,
    "impala": ImpalaCNN,
    "drq": DrQEncoder,
}


class CompressedImage(nn.Module):
    """An image encoder whose features are compressed: Linear -> LayerNorm -> ReLU to
    ``features`` (DPPO's ``compress`` after its vision backbone, dppo
    model/diffusion/mlp_diffusion.py ``VisionDiffusionMLP``, dropout 0), so a wide conv
    output (DrQ's 39,200 at 84 x 84) reaches an MLP as a few features."""

    def __init__(self, encoder: nn.Module, features: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.compress = nn.Sequential(
            nn.Linear(encoder.out_dim, features), nn.LayerNorm(features), nn.ReLU()
        )
        self.out_dim = int(features)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.compress(self.encoder(pixels))


def image_encoder(name: str, features: int | None = None) -> Callable[[ObsPart], nn.Module]:
    """An ``ObsEncoder`` ``image_encoder`` factory: the encoder ``name`` (``IMAGE_ENCODERS``)
    built for each image part's (frame_stack * C, H, W) shape; ``features`` compresses its
    output (``CompressedImage``)."""
    if name not in IMAGE_ENCODERS:
        raise ValueError(f"unknown image encoder {name!r}, choose from {sorted(IMAGE_ENCODERS)}")
    if features is None:
        return lambda part: IMAGE_ENCODERS[name](part.shape)
    return lambda part: CompressedImage(IMAGE_ENCODERS[name](part.shape), features)


def observation_encoder(
    spec: ObsSpec, encoder: str | None, features: int | None = None
) -> ObsEncoder | None:
    """The image encoder an agent builds for its observations (``algo.encoder``): None for
    vector observations (its MLPs read the flat vector), an ``ObsEncoder`` with the
    ``IMAGE_ENCODERS`` encoder ``encoder`` for image parts (compressed to ``features``
    each when given). Refuses an encoder without images, and images without an encoder,
    naming the fix."""
    if not spec.images:
        if encoder is not None:
            raise ValueError(f"algo.encoder={encoder} encodes images; this task has none")
        return None
    if encoder not in IMAGE_ENCODERS:
        raise ValueError(
            f"this task's observations hold images: set algo.encoder to one of "
            f"{sorted(IMAGE_ENCODERS)} (Atari: nature, configs/algo_env/<algo>_atari.yaml)"
        )
    return ObsEncoder(spec, image_encoder(encoder, features))


def random_shift(
    images: torch.Tensor, pad: int = 4, shifts: torch.Tensor | None = None
) -> torch.Tensor:
    """DrQ's random-shift augmentation (Kostrikov et al. 2020; DrQ-v2 ``RandomShiftsAug``,
    pad 4) as a batch transform: each image (B, C, H, W) padded by ``pad`` pixels that
    repeat its border, then cropped back to H x W at an offset (dx, dy), each drawn
    uniformly from 0..2 pad per image (``shifts``: (B, 2) given instead). Any dtype
    (uint8 stays uint8).

    Departure from DrQ-v2, not from the maths: the reference samples the padded image
    with ``grid_sample`` (bilinear, at pixel centres moved by whole pixels), which equals
    this crop up to float rounding of the bilinear weights; this indexes the pixels (no
    interpolation, no padded copy, square and non-square images alike)."""
    batch, _, height, width = images.shape
    if shifts is None:
        shifts = torch.randint(0, 2 * pad + 1, (batch, 2), device=images.device)
    dx, dy = shifts[:, 0:1] - pad, shifts[:, 1:2] - pad  # (B, 1) each
    rows = (torch.arange(height, device=images.device) + dy).clamp(0, height - 1)  # (B, H)
    cols = (torch.arange(width, device=images.device) + dx).clamp(0, width - 1)  # (B, W)
    index = torch.arange(batch, device=images.device)[:, None, None, None]
    channel = torch.arange(images.shape[1], device=images.device)[None, :, None, None]
    return images[index, channel, rows[:, None, :, None], cols[:, None, None, :]]


def shift_images(obs: Any, spec: ObsSpec, pad: int) -> Any:
    """``random_shift`` of every image part of an observation batch (one image tensor, or a
    dict whose image parts ``spec`` names, shifted in the dict's order; vectors untouched);
    ``pad`` 0 returns ``obs`` itself. DrQ's augmentation as DrQ-v2 and pixel SAC use it."""
    if pad == 0:
        return obs
    if not isinstance(obs, dict):
        return random_shift(obs, pad)
    images = {part.name for part in spec.images}
    return {k: random_shift(v, pad) if k in images else v for k, v in obs.items()}


class ObsNormalizer(nn.Module):
    """(obs - mean) / std with statistics fitted once on a dataset (offline algorithms).

    Lives inside the agent, so ``act`` takes raw observations and checkpoints carry the
    statistics. Identity until ``fit`` is called.
    """

    def __init__(self, obs_dim: int, eps: float = 1e-3) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("mean", torch.zeros(obs_dim))
        self.register_buffer("std", torch.ones(obs_dim))

    def fit(self, obs: torch.Tensor) -> None:
        """Set mean/std from (N, obs_dim) observations: std + eps as CORL, but torch's
        unbiased std (ddof 1) where CORL's numpy std has ddof 0 (relative 5e-7 on 1M rows)."""
        with torch.no_grad():
            self.mean.copy_(obs.mean(0))
            self.std.copy_(obs.std(0) + self.eps)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs - self.mean) / self.std


def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """target <- (1 - tau) * target + tau * source, for parameters (fused over tensors)."""
    with torch.no_grad():
        torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), tau)
