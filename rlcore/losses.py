"""Loss pieces shared by several algorithms (each used by two or more algos/ files)."""

from __future__ import annotations

import math

import torch


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """Asymmetric L2, mean |tau - 1[diff < 0]| * diff^2 (IQL's value loss; FISOR reverses it)."""
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.pow(2)).mean()


def weight_diagnostics(weight: torch.Tensor, max_weight: float) -> dict[str, float]:
    """How concentrated advantage-regression weights are (IQL, AWAC): ``weight`` mean,
    ``weight_clamped`` = fraction at the clamp, ``weight_ess`` = effective sample size
    fraction (sum w)^2 / (n sum w^2): 1 for equal weights (plain behaviour cloning), 1/n
    when one transition carries the whole batch."""
    weight = weight.detach().float()
    ess = weight.sum().square() / (weight.numel() * weight.square().sum())
    clamped = (weight >= max_weight).float().mean()
    mean, clamped, ess = torch.stack([weight.mean(), clamped, ess]).tolist()  # one transfer
    return {"weight": mean, "weight_clamped": clamped, "weight_ess": ess}


def smoothed_target_action(
    target_action: torch.Tensor,
    scale: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
    noise_std: float,
    noise_clip: float,
) -> torch.Tensor:
    """TD3 target policy smoothing: a' + clip(N(0, std), +-clip), noise in units of the
    action half-range ``scale``, result clipped to the action box."""
    noise = (torch.randn_like(target_action) * noise_std).clamp(-noise_clip, noise_clip)
    return torch.clamp(target_action + noise * scale, low, high)


def clip_target(
    target: torch.Tensor, bounds: tuple[float, float] | None
) -> torch.Tensor:
    """The TD target clamped to ``bounds`` (low, high), or unchanged for None: OpenAI
    baselines' HER ``clip_return`` keeps a sparse -1/0 task's target in [-1/(1-gamma), 0],
    the range its true returns live in, so a diverging critic cannot feed on itself."""
    if bounds is None:
        return target
    return target.clamp(bounds[0], bounds[1])


def check_target_clip(bounds: tuple[float, float] | None) -> None:
    """Refuse a ``target_clip`` that is not a (low, high) pair with low < high."""
    if bounds is not None and (len(bounds) != 2 or not bounds[0] < bounds[1]):
        raise ValueError(
            f"target_clip={list(bounds)} must be [low, high] with low < high (a -1/0 reward "
            "with discount gamma: [-1/(1-gamma), 0]), or null for no clip"
        )


def ensemble_mse(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum over ensemble members (dim 0) of each member's MSE to a shared (B,) target."""
    return (q - target).pow(2).mean(dim=-1).sum()


def categorical_projection(
    probs: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor, support: torch.Tensor
) -> torch.Tensor:
    """Project the Bellman-updated distribution r + discount * Z onto the fixed ``support``
    (C51's projection, Bellemare et al. 2017): atom z_i of ``probs`` moves to
    clip(r + discount z_i, v_min, v_max), whose mass is split between the two neighbouring
    atoms in proportion to closeness (all of it to an atom it lands on exactly).

    ``probs`` (..., B, A) and ``support`` (A,) evenly spaced; ``reward`` and ``discount``
    (B,) (``discount`` = gamma (1 - terminated): 0 collapses the target onto r). Returns
    (..., B, A) probabilities; no gradient is meant to flow (targets)."""
    num_atoms = support.shape[0]
    v_min, v_max = support[0], support[-1]
    spacing = (v_max - v_min) / (num_atoms - 1)
    moved = (reward.unsqueeze(-1) + discount.unsqueeze(-1) * support).clamp(v_min, v_max)
    position = (moved - v_min) / spacing  # fractional atom index in [0, A - 1]
    lower = position.floor().clamp(0, num_atoms - 1)
    upper_weight = position - lower  # 0 when the atom is hit exactly
    # a NaN target keeps its NaN weights (the loss turns NaN, caught by ensure_finite) but
    # gets a valid index
    lower = lower.nan_to_num(0.0)
    upper = (lower + 1).clamp(max=num_atoms - 1)
    shape = probs.shape
    lower, upper = lower.long().expand(shape), upper.long().expand(shape)
    upper_weight = upper_weight.expand(shape)
    projected = torch.zeros_like(probs)
    projected.scatter_add_(-1, lower, probs * (1.0 - upper_weight))
    projected.scatter_add_(-1, upper, probs * upper_weight)
    return projected


def categorical_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum over ensemble members (dim 0) of each member's batch-mean cross-entropy
    -sum_j target_j log softmax(logits)_j; ``target`` (E, B, A) or one (B, A) for all."""
    return -(target * torch.log_softmax(logits, dim=-1)).sum(-1).mean(-1).sum()


def cosine_lr(base_lr: float, step: int, total_steps: int, periodic: bool = False) -> float:
    """Cosine annealing from ``base_lr`` to 0 over ``total_steps`` (constant 0 after).

    ``periodic``: the cosine goes on past ``total_steps`` (back up to ``base_lr`` at twice
    ``total_steps``, and so on), as torch's ``CosineAnnealingLR`` does when stepped longer
    than its ``T_max`` (CORL's IQL fine-tuning relies on it)."""
    progress = (step if periodic else min(step, total_steps)) / max(total_steps, 1)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def clipped_surrogate(
    log_ratio: torch.Tensor, advantage: torch.Tensor, clip: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped objective: (loss = mean max(-A r, -A clip(r, 1 +- clip)), approx. KL
    mean((r - 1) - log r), fraction of clipped ratios), r = exp(log_ratio). PPO, DPPO
    (one row per denoising step), ReinFlow (one ratio per env step) and ResiP share it."""
    ratio = log_ratio.exp()
    loss = torch.max(-advantage * ratio, -advantage * ratio.clamp(1 - clip, 1 + clip)).mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_frac = ((ratio - 1.0).abs() > clip).float().mean()
    return loss, approx_kl, clip_frac


def standardize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / (std + eps): PPO's per-minibatch advantage normalisation."""
    return (x - x.mean()) / (x.std() + eps)
