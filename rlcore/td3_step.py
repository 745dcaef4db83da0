"""TD3's critic step (Fujimoto et al., ICML 2018), written once for TD3, TD3+BC and
ReBRAC: each calls these in its ``update`` and keeps what differs (ReBRAC's critic
penalty, the actor losses, the delayed actor step and Polyak averages) in its own file.

a' = clip(pi'(s') + clip(N(0, std^2), +-c) * scale, box) (target policy smoothing),
y = r + gamma (1 - terminated) min_i Q'_i(s', a'), and the critics' loss is the sum over
critics of the batch-mean squared error to y.
"""

from __future__ import annotations

import torch

from rlcore.losses import ensemble_mse, smoothed_target_action
from rlcore.nets import DeterministicActor, QEnsemble
from rlcore.utils import mixed_precision, step_summed


def smoothed_target_q(
    target_actor: DeterministicActor,
    target_critic: QEnsemble,
    next_obs: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
    noise_std: float,
    noise_clip: float,
    precision: str = "float32",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(a', min_i Q'_i(s', a')) without gradients: target policy smoothing (noise in units
    of the action half-range, a' clipped to the box), then the minimum over the target
    critics. ``precision="bf16"``: the forward passes in bfloat16 autocast."""
    with torch.no_grad(), mixed_precision(precision, next_obs.device):
        next_action = smoothed_target_action(
            target_actor(next_obs), target_actor.to_env.scale, low, high, noise_std, noise_clip
        )
        next_q = target_critic(next_obs, next_action).min(0).values
    return next_action, next_q


def td_target(
    reward: torch.Tensor, terminated: torch.Tensor, gamma: float, next_q: torch.Tensor
) -> torch.Tensor:
    """r + gamma (1 - terminated) next_q: bootstrapping stops at terminations only."""
    return reward + gamma * (1.0 - terminated) * next_q


def critic_step(
    critic: QEnsemble,
    optimizer: torch.optim.Optimizer,
    obs: torch.Tensor,
    action: torch.Tensor,
    target_q: torch.Tensor,
    precision: str = "float32",
) -> tuple[torch.Tensor, torch.Tensor]:
    """One checked step of the critics on the ensemble MSE to ``target_q``; returns the
    loss and Q (E, B). ``precision="bf16"``: the forward pass in bfloat16 autocast."""
    with mixed_precision(precision, obs.device):
        q = critic(obs, action)
        loss = ensemble_mse(q, target_q)
    step_summed({"critic_loss": loss}, [optimizer])
    return loss, q
