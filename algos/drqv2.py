"""DrQ-v2: DDPG from pixels with random-shift augmentation and n-step returns.

Paper: D. Yarats, R. Fergus, A. Lazaric, L. Pinto, "Mastering Visual Continuous Control:
Improved Data-Augmented Reinforcement Learning", ICLR 2022 (arXiv:2107.09645).
Reference: facebookresearch/drqv2@c0c650b (``drqv2.py`` ``DrQV2Agent``, ``utils.py``
``TruncatedNormal`` / ``schedule``, ``cfgs/config.yaml``, ``cfgs/task/medium.yaml``).

One update (``DrQV2Agent.update``) on a batch of n-step transitions (s, a, R, gamma^k, s'):

* both observations randomly shifted (pad 4, ``rlcore.nets.random_shift``, obs first);
  h = f(aug(s)) with gradients, h' = f(aug(s')) without (one encoder f, no target copy);
* critic: a' = clamp(pi(h') + clip(sigma(t) eps, +-0.3), +-(1 - 1e-6)),
  y = R + gamma^k (1 - terminated) min_i Q'_i(h', a'), loss sum_i MSE(Q_i(h, a), y); one
  step of the critic (trunk and heads) and of the encoder: only the critic trains f;
* actor on h detached: a = clamp(pi(h) + clip(sigma(t) eps, +-0.3)) (the clamp passes
  gradients straight through), loss -min_i Q_i(h, a); no entropy term;
* the target critic (trunk included) moves by Polyak tau = 0.01.

The policy's std sigma(t) is not learned: it decays linearly from ``std_init`` to
``std_final`` over ``std_steps`` env steps (``stddev_schedule: linear(1.0,0.1,500000)``
for DMC's medium tasks; easy: 100,000, hard: 2,000,000). Acting samples pi(h) + sigma(t)
eps (unclipped noise, clamped to the box); evaluation takes pi(h). Networks: the
encoder (``rlcore.nets.DrQEncoder``: 4 convs of 32), then, for actor and critic each, a
trunk Linear(features, 50) -> LayerNorm -> tanh; the actor's MLP 1024x1024 -> tanh, the
two critics' MLPs 1024x1024 on [trunk, action]; orthogonal weights (convs ReLU gain),
zero biases. Defaults (``cfgs/config.yaml``): Adam lr 1e-4 (three optimisers), batch
256, 3-step returns, gamma 0.99, buffer 1M, 2,000 uniform random steps and no updates
before them (``num_expl_steps``; ``num_seed_frames`` 4,000 / action repeat 2), one update
every 2 steps, frame stack 3.

Departures from the reference:
* Steps are the env's steps: DMC's action repeat 2 is the task's business (a gymnasium
  task's own frame skip), so ``std_steps``, ``learning_starts`` and ``total_steps`` count
  the agent's decisions, as the reference's ``global_step`` does. The schedule's step is
  ``learning_starts + acted_steps`` (as ``algos/dqn.py``'s epsilon): with several envs a
  vector step counts ``num_envs`` steps.
* n-step returns come from ``rlcore.buffers.NStepReturns``: windows are cut at an
  episode's end and keep its termination flag (the reference never starts a window in an
  episode's last n - 1 steps; DMC episodes only time out), so
  ``(1 - terminated)`` stands for the reference's per-step env discount.
* Random shift by indexing instead of ``grid_sample`` (equal up to the bilinear weights'
  float rounding, the same ``torch.randint`` draws); the twin critics are one batched
  ``QEnsemble`` (same maths); the critic gets no gradients from the actor loss (the
  reference computes and discards them); Adam's fused step by default.
* Actions live in (-1, 1) and are scaled to the env's box (DMC's box is [-1, 1]; the
  critics read env-unit actions, as every rlcore critic does).
* Dict observations (``env.obs=state+pixels``): vector parts are appended to the
  encoder's features (``rlcore.nets.ObsEncoder``) and are not shifted; the reference
  reads pixels only.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import torch
from torch import nn

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.losses import ensemble_mse
from rlcore.nets import (
    MLP,
    ActionScale,
    QEnsemble,
    observation_encoder,
    orthogonal_init,
    polyak_update,
    shift_images,
)
from rlcore.plan import RunPlan, Schedule
from rlcore.spaces import BOX
from rlcore.types import Batch, Obs
from rlcore.utils import adam, ensure_finite, frozen, step_summed

EDGE = 1e-6  # utils.TruncatedNormal: samples stay this far inside (-1, 1)


@dataclass
class DrQV2Config:
    """DrQ-v2 hyper-parameters (facebookresearch/drqv2 cfgs/config.yaml, medium tasks)."""

    lr: float = 1e-4  # Adam learning rate of encoder, actor and critic
    gamma: float = 0.99  # discount
    n_step: int = 3  # n-step returns (rlcore.buffers.NStepReturns)
    tau: float = 0.01  # Polyak rate of the target critic
    encoder: str = "drq"  # image encoder (rlcore.nets.IMAGE_ENCODERS)
    feature_dim: int = 50  # the actor's and critic's trunk width
    hidden: tuple[int, ...] = (1024, 1024)  # hidden widths of actor and critics
    num_critics: int = 2  # critics in the ensemble; targets and actor use their minimum
    shift_pad: int = 4  # random-shift padding in pixels (0: no augmentation)
    std_init: float = 1.0  # policy std at step 0
    std_final: float = 0.1  # ... after std_steps
    std_steps: int = 500_000  # linear decay length (DMC easy 100k, medium 500k, hard 2M)
    std_clip: float = 0.3  # clip of the noise in the updates' sampled actions
    fused_optimizer: bool = True  # fused Adam kernel (same maths, faster)
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 256  # transitions per update
    buffer_size: int = 1_000_000  # replay capacity (each frame stored once: rlcore.frames)
    learning_starts: int = 2_000  # uniform random actions and no updates before this step
    updates_per_step: float = 0.5  # one update every 2 env steps (update_every_steps)
    total_steps: int = 1_500_000  # medium tasks: 3M frames at action repeat 2

    def plan(self) -> RunPlan:
        """Online from scratch: random actions until ``learning_starts``, then updates on
        ``n_step`` returns."""
        schedule = Schedule(
            online_steps=self.total_steps, batch_size=self.batch_size,
            buffer_size=self.buffer_size, learning_starts=self.learning_starts,
            updates_per_step=self.updates_per_step, n_step=self.n_step,
        )  # fmt: skip
        return RunPlan(schedule, gamma=self.gamma)


def linear_std(step: int, init: float, final: float, duration: int) -> float:
    """``init`` at step 0, linearly to ``final`` at ``duration``, then ``final``
    (drqv2 ``utils.schedule('linear(init,final,duration)', step)``)."""
    mix = min(max(step / duration, 0.0), 1.0) if duration > 0 else 1.0
    return (1.0 - mix) * init + mix * final


def noisy_action(mean: torch.Tensor, std: float, clip: float | None) -> torch.Tensor:
    """mean + std eps (eps standard normal, clipped to +-``clip`` when given), clamped
    into (-1 + 1e-6, 1 - 1e-6) with gradients passed straight through the clamp
    (drqv2 ``utils.TruncatedNormal.sample``)."""
    noise = torch.randn(mean.shape, dtype=mean.dtype, device=mean.device) * std
    if clip is not None:
        noise = noise.clamp(-clip, clip)
    action = mean + noise
    return action - action.detach() + action.detach().clamp(-1.0 + EDGE, 1.0 - EDGE)


def trunk(in_dim: int, feature_dim: int) -> nn.Sequential:
    """Linear -> LayerNorm -> tanh: what actor and critic each make of the encoder's
    features (drqv2 ``Actor.trunk`` / ``Critic.trunk``)."""
    return nn.Sequential(nn.Linear(in_dim, feature_dim), nn.LayerNorm(feature_dim), nn.Tanh())


class DrQActor(nn.Module):
    """Encoder features -> the policy's mean action in (-1, 1) (drqv2 ``Actor``)."""

    def __init__(self, in_dim: int, action_dim: int, feature_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.trunk = trunk(in_dim, feature_dim)
        self.policy = MLP(feature_dim, action_dim, hidden)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.policy(self.trunk(features)))


class DrQCritic(nn.Module):
    """(encoder features, action) -> (E, B) Q-values: one trunk, then E heads on
    [trunk, action] (drqv2 ``Critic``)."""

    def __init__(
        self, in_dim: int, action_dim: int, feature_dim: int, hidden: tuple[int, ...], num: int
    ):
        super().__init__()
        self.trunk = trunk(in_dim, feature_dim)
        self.heads = QEnsemble(feature_dim, action_dim, num, hidden)

    def forward(self, features: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.heads(self.trunk(features), action)


class DrQV2:
    """DrQ-v2 agent: ``act``, ``update(batch)``, ``state_dict`` / ``load_state_dict``."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.spaces.Box,
        config: DrQV2Config | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = config = config or DrQV2Config()
        self.plumbing = io = Plumbing(
            observation_space, action_space, device, "DrQ-v2", (BOX,), obs_parts=True
        )
        self.device = io.device
        if not io.obs.images:
            raise ValueError(
                "DrQ-v2 learns from images: this task's observation has none (render it: "
                "env.obs=pixels or env.obs=state+pixels)"
            )
        encoder = observation_encoder(io.obs, config.encoder)
        assert encoder is not None  # the task has images
        self.encoder = encoder
        width = self.encoder.out_dim
        self.actor = DrQActor(width, io.action_dim, config.feature_dim, config.hidden)
        self.critic = DrQCritic(
            width, io.action_dim, config.feature_dim, config.hidden, config.num_critics
        )
        orthogonal_init(self.actor, gain=1.0)  # drqv2 utils.weight_init: gain 1, bias 0
        orthogonal_init(self.critic, gain=1.0)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.to_env = ActionScale(io.low, io.high, io.action_dim)
        self.encoder_optimizer = adam(self.encoder.parameters(), config.lr, config.fused_optimizer)
        self.actor_optimizer = adam(self.actor.parameters(), config.lr, config.fused_optimizer)
        self.critic_optimizer = adam(self.critic.parameters(), config.lr, config.fused_optimizer)
        self.parts = io.declare(
            counters={"updates": int, "acted_steps": int}, encoder=self.encoder,
            actor=self.actor, critic=self.critic, critic_target=self.critic_target,
            to_env=self.to_env, encoder_optimizer=self.encoder_optimizer,
            actor_optimizer=self.actor_optimizer, critic_optimizer=self.critic_optimizer,
        )  # fmt: skip
        self.updates = 0
        self.acted_steps = 0  # env steps explored through act() (the std schedule)

    def std(self) -> float:
        """The policy's std at the loop's current env step (module docstring)."""
        cfg = self.config
        step = cfg.learning_starts + self.acted_steps
        return linear_std(step, cfg.std_init, cfg.std_final, cfg.std_steps)

    def augment(self, obs: Obs) -> Obs:
        """Every image part randomly shifted (the spec's order), vectors as they are."""
        return shift_images(obs, self.plumbing.obs, self.config.shift_pad)

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """The mean action, or (exploring) one sampled with the scheduled std; exploring
        advances the schedule."""
        mean = self.actor(self.encoder(obs))
        if deterministic:
            return self.to_env(mean)
        action = noisy_action(mean, self.std(), None)
        self.acted_steps += mean.shape[0]
        return self.to_env(action)

    def update(self, batch: Batch) -> dict[str, float]:
        """One critic step (with the encoder) and one actor step, then the target's Polyak
        step, in the reference's order of random draws (shifts of obs, of next_obs, the
        target action's noise, the actor's)."""
        cfg = self.config
        std = self.std()
        obs, next_obs = self.augment(batch.obs), self.augment(batch.next_obs)
        features = self.encoder(obs)
        discount = cfg.gamma if batch.discount is None else batch.discount
        with torch.no_grad():
            next_features = self.encoder(next_obs)
            next_action = self.to_env(noisy_action(self.actor(next_features), std, cfg.std_clip))
            next_q = self.critic_target(next_features, next_action).min(0).values
            target = batch.reward + discount * (1.0 - batch.terminated) * next_q
        q = self.critic(features, batch.action)
        critic_loss = ensemble_mse(q, target)
        step_summed({"critic_loss": critic_loss}, [self.critic_optimizer, self.encoder_optimizer])

        detached = features.detach()
        with frozen(list(self.critic.parameters())):
            action = self.to_env(noisy_action(self.actor(detached), std, cfg.std_clip))
            actor_loss = -self.critic(detached, action).min(0).values.mean()
            ensure_finite(actor_loss=actor_loss)
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
        self.actor_optimizer.step()
        polyak_update(self.critic_target, self.critic, cfg.tau)
        self.updates += 1
        return {
            "critic_loss": critic_loss.item(), "actor_loss": actor_loss.item(),
            "q_value": q.mean().item(), "target_q": target.mean().item(), "std": std,
        }  # fmt: skip

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
