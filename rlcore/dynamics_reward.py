"""MOREC's dynamics reward: a learned score of how consistent a transition (s, a, s') is
with the data, used to filter a dynamics model's candidate transitions.

Paper: F.-M. Luo, T. Xu, X. Cao, Y. Yu, "Reward-Consistent Dynamics Models are Strongly
Generalizable for Offline Reinforcement Learning", ICLR 2024 (arXiv:2310.05422).
Reference: github.com/polixir/morec @ be8a641. Its code holds only the *use* of the
dynamics reward (``models/discriminator_ensemble_loader.py``, ``DataLoader.py``); the
training code is not released ("We will release the dynamics reward learning code in a
near future", its README) and its trained discriminators are a download. So:

What follows the reference's code (checked against it, tests/test_morec.py):

* inputs: observations min-max scaled per dimension to [-0.8, 0.8] with the dataset's
  observation range (next observations with the same range), actions to [-1, 1] with the
  dataset's action range; the network reads [s, z = 0, a, s' - s] (``delta_input``);
* K discriminators kept from the adversarial training's history, each with the logit it
  gave the data (``expert_value``) and the generator's samples (``learner_value``) when it
  was kept; a logit l is clamped into [learner, expert] and mapped linearly onto [-1, 1];
* the reward r_D = -log(1 - mean_k clamp(sigmoid(l~_k), 0, clip) + 1e-9) ("prob_mean_clip").

What is reconstructed (the paper's description of the learning; not checked against a
reference, none exists): ``learn_dynamics_reward`` trains, as GAIL does with a policy, a
discriminator to tell dataset transitions (label 1) from transitions of a generator
dynamics model on the same (s, a) (label 0), and the generator -- a Gaussian model of
s' - s fitted by maximum likelihood first, then moved by the reparameterised gradient of
log D on its samples plus an entropy bonus -- to make its transitions look like the data;
every ``snapshot_every`` iterations a copy of the discriminator joins the history with its
mean logit on that batch's data and generated transitions. The network is the
reference's vanilla GAIL encoder (input -> 128 ReLU -> 256 ReLU) followed by a
discriminator head (256 ReLU -> 1; the reference's head width is in the unreleased
configs).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rlcore.dynamics import ProbabilisticEnsemble, fit_dynamics
from rlcore.nets import MLP, EnsembleMLP
from rlcore.utils import adam

OBS_RANGE = 0.8  # observations scaled to [-0.8, 0.8] (the reference's DataLoader)


class DynamicsReward(nn.Module):
    """The ensemble of kept discriminators and the reward it gives (module docstring)."""

    def __init__(
        self, obs_dim: int, action_dim: int, capacity: int = 40,
        hidden: Sequence[int] = (128, 256, 256), clip: float = 1.0,
    ) -> None:  # fmt: skip
        super().__init__()
        self.obs_dim, self.action_dim, self.capacity, self.clip = (
            obs_dim,
            action_dim,
            capacity,
            clip,
        )
        self.in_dim = 2 * obs_dim + 1 + action_dim  # [s, z, a, s' - s]
        self.hidden = tuple(hidden)
        self.history = EnsembleMLP(capacity, self.in_dim, 1, hidden)
        self.register_buffer("expert_value", torch.ones(capacity))
        self.register_buffer("learner_value", torch.zeros(capacity))
        self.register_buffer("count", torch.tensor(0))  # discriminators kept
        self.register_buffer("obs_low", torch.full((obs_dim,), -1.0))
        self.register_buffer("obs_high", torch.ones(obs_dim))
        self.register_buffer("action_low", torch.full((action_dim,), -1.0))
        self.register_buffer("action_high", torch.ones(action_dim))

    @property
    def learned(self) -> bool:
        return int(self.count) > 0

    def set_ranges(self, obs: torch.Tensor, action: torch.Tensor) -> None:
        """The dataset's per-dimension ranges the inputs are scaled with."""
        self.obs_low.copy_(obs.amin(0))
        self.obs_high.copy_(obs.amax(0))
        self.action_low.copy_(action.amin(0))
        self.action_high.copy_(action.amax(0))

    def features(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor):
        """The network's input [s, z = 0, a, s' - s] of scaled rows (any leading dims)."""

        def scale(x: torch.Tensor, low: torch.Tensor, high: torch.Tensor, to: float):
            span = torch.where(high > low, high - low, torch.ones_like(high))
            return (2 * (x - low) / span - 1) * to

        s = scale(obs, self.obs_low, self.obs_high, OBS_RANGE)
        s_next = scale(next_obs, self.obs_low, self.obs_high, OBS_RANGE)
        a = scale(action, self.action_low, self.action_high, 1.0)
        return torch.cat([s, torch.zeros_like(s[..., :1]), a, s_next - s], -1)

    @torch.no_grad()
    def keep(self, discriminator: MLP, expert_value: float, learner_value: float) -> None:
        """Add a copy of ``discriminator`` to the history (the oldest goes when full)."""
        slot = int(self.count) % self.capacity
        layers = [*self.history.hidden_layers, self.history.output_layer]
        linears = [m for m in discriminator.modules() if isinstance(m, nn.Linear)]
        for target, source in zip(layers, linears, strict=True):
            target.weight[slot].copy_(source.weight.T)
            target.bias[slot, 0].copy_(source.bias)
        self.expert_value[slot] = expert_value
        self.learner_value[slot] = learner_value
        self.count += 1

    @torch.no_grad()
    def forward(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor):
        """r_D of (B, .) rows, (B,) (module docstring)."""
        if not self.learned:
            raise RuntimeError("the dynamics reward has no discriminator yet: learn it first")
        kept = min(int(self.count), self.capacity)
        logits = self.history(self.features(obs, action, next_obs), members=slice(0, kept))[..., 0]
        low, high = self.learner_value[:kept, None], self.expert_value[:kept, None]
        scaled = (logits.clamp(low, high) - low) / (high - low + 1e-7) * 2.0 - 1.0
        prob = torch.sigmoid(scaled).clamp(0.0, self.clip).mean(0)
        return -torch.log(1.0 - prob + 1e-9)


@dataclass
class RewardLearning:
    """Settings of ``learn_dynamics_reward`` (a reconstruction: module docstring)."""

    iterations: int = 2000
    batch_size: int = 256
    discriminator_lr: float = 3e-4
    generator_lr: float = 1e-4
    entropy_coef: float = 1e-3  # the reference's DiscriminatorRestrain starts at 0.001
    snapshot_every: int = 50  # iterations between kept discriminators
    generator_hidden: tuple[int, ...] = (200, 200, 200, 200)
    generator_fit_epochs: int = 20  # maximum-likelihood epochs before the adversarial game


def learn_dynamics_reward(
    reward: DynamicsReward, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor,
    settings: RewardLearning, generator: torch.Generator,
    log: Callable[[str], None] | None = None,
) -> dict[str, float]:  # fmt: skip
    """Learn ``reward``'s discriminators on dataset transitions (module docstring): returns
    the last iteration's discriminator loss and mean probability on data / generated."""
    device = reward.expert_value.device
    reward.set_ranges(obs, action)
    model = ProbabilisticEnsemble(reward.obs_dim, reward.action_dim, 1, 1, settings.generator_hidden,
                                  (0.0,) * (len(settings.generator_hidden) + 1)).to(device)  # fmt: skip
    fit_dynamics(model, obs, action, torch.zeros(len(obs), device=device), next_obs, generator,
                 max_epochs=settings.generator_fit_epochs)  # fmt: skip
    discriminator = MLP(reward.in_dim, 1, reward.hidden).to(device)
    d_optimizer = adam(discriminator.parameters(), settings.discriminator_lr)
    g_optimizer = adam([p for n, p in model.named_parameters() if "logvar" not in n],
                       settings.generator_lr)  # fmt: skip
    stats: dict[str, float] = {}
    for iteration in range(1, settings.iterations + 1):
        rows = torch.randint(len(obs), (settings.batch_size,), generator=generator).to(device)
        s, a, s_next = obs[rows], action[rows], next_obs[rows]
        mean, logvar = model(model.standardize(s, a))
        std = torch.exp(0.5 * logvar[0, :, :-1])
        noise = torch.randn(std.shape, generator=generator).to(device)
        generated = s + mean[0, :, :-1] + noise * std  # reparameterised s' of the generator
        real_logit = discriminator(reward.features(s, a, s_next))[:, 0]
        fake_logit = discriminator(reward.features(s, a, generated.detach()))[:, 0]
        d_loss = F.binary_cross_entropy_with_logits(
            real_logit, torch.ones_like(real_logit)
        ) + F.binary_cross_entropy_with_logits(fake_logit, torch.zeros_like(fake_logit))
        d_optimizer.zero_grad()
        d_loss.backward()
        d_optimizer.step()
        # the generator: non-saturating GAN loss -log D(s, a, s'_G) minus an entropy bonus
        g_logit = discriminator(reward.features(s, a, generated))[:, 0]
        g_loss = F.softplus(-g_logit).mean() - settings.entropy_coef * torch.log(std).sum(-1).mean()
        g_optimizer.zero_grad()
        g_loss.backward()
        g_optimizer.step()
        if iteration % settings.snapshot_every == 0:
            with torch.no_grad():
                real = discriminator(reward.features(s, a, s_next))[:, 0]
                fake = discriminator(reward.features(s, a, generated.detach()))[:, 0]
            reward.keep(copy.deepcopy(discriminator), real.mean().item(), fake.mean().item())
            stats = {
                "discriminator_loss": d_loss.item(),
                "data_probability": torch.sigmoid(real).mean().item(),
                "generated_probability": torch.sigmoid(fake).mean().item(),
            }
            if log is not None:
                log(f"dynamics reward iteration {iteration}: discriminator loss "
                    f"{stats['discriminator_loss']:.4g}, D(data) {stats['data_probability']:.3f}"
                    f", D(model) {stats['generated_probability']:.3f}")  # fmt: skip
    return stats
