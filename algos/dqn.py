"""Deep Q-Network (DQN) with double-DQN targets and an optional dueling head.

Papers: V. Mnih et al., "Human-level control through deep reinforcement learning",
Nature 518 (2015) (replay, target network, epsilon-greedy); H. van Hasselt, A. Guez,
D. Silver, "Deep Reinforcement Learning with Double Q-learning", AAAI 2016
(arXiv:1509.06461) (the online network picks the next action, the target network values
it); Z. Wang et al., "Dueling Network Architectures for Deep Reinforcement Learning",
ICML 2016 (arXiv:1511.06581) (Q = V + A - mean A).
Pixels (Mnih et al. 2015's network, CleanRL ``dqn_atari.py``): with ``encoder`` set
(``nature`` for Atari, ``configs/algo_env/dqn_atari.yaml``) the image parts go through
that ``rlcore.nets`` encoder and the ``hidden`` layers read its features (Nature DQN: the
3-conv torso, then 512 units); the replay buffer keeps each frame once
(``rlcore.frames``).
Defaults follow CleanRL's ``dqn.py`` (classic control): 120x84 ReLU Q-network, Adam lr
2.5e-4, gamma 0.99, buffer 10k, batch 128, 10k warm-up steps, one update every 10 env
steps, hard target update every 500 env steps, epsilon 1 -> 0.05 linearly over half of
500k steps, MSE loss. Values tuned to solve CartPole-v1 within a test's budget live in
``configs/algo_env/dqn_cartpole.yaml`` (with their source).

Step counting (the epsilon schedule): the off-policy loop acts uniformly at random for
its first ``learning_starts`` steps without calling the agent, then calls ``act`` once
per vector step. ``act(obs)`` counts the env steps it explores (``acted_steps``, saved in
``state_dict``, so a resumed run continues the schedule exactly) and reads epsilon at env
step ``learning_starts + acted_steps``, the loop's own step count. A library user who
calls ``act`` from step 0 sets ``learning_starts=0``.

Departures from CleanRL's dqn.py:
* Double-DQN targets are on by default (``double_q``; CleanRL and Mnih et al. use
  max_a Q_target(s', a)); ``dueling`` and a Huber ``loss`` are options.
* The target update interval counts gradient updates (CleanRL counts env steps: its
  500 env steps at one update per 10 steps are the 50 updates here).
* One update every 10 env steps is ``updates_per_step=0.1`` of the shared off-policy
  loop (fractions carry over, so an update lands every 10 or 11 steps by float rounding).
* The warm-up is uniform random (epsilon 1) instead of the schedule's first values
  (~0.96 at CleanRL's 10k steps); each sub-env draws its own epsilon coin (CleanRL draws
  one for all envs).
* Truncated episodes bootstrap from Q(final observation); only termination stops it.
* ``n_step`` (1 by default, CleanRL): n-step returns from the replay buffer
  (``rlcore.buffers.NStepReturns``), the target discounted by the batch's gamma^k
  (Hessel et al. 2018, "Rainbow", use 3).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.nets import DiscreteQNetwork, observation_encoder, polyak_update
from rlcore.plan import RunPlan, Schedule
from rlcore.spaces import DISCRETE
from rlcore.types import Batch
from rlcore.utils import adam, ensure_finite

LOSSES = ("mse", "huber")


@dataclass
class DQNConfig:
    """DQN hyper-parameters (CleanRL dqn.py defaults)."""

    lr: float = 2.5e-4  # Adam learning rate
    gamma: float = 0.99  # discount
    hidden: tuple[int, ...] = (120, 84)  # hidden widths of the Q-network
    encoder: str | None = None  # image parts: rlcore.nets encoder (nature | impala | drq)
    activation: str = "relu"  # hidden activation
    dueling: bool = False  # dueling head: Q = V + A - mean_a A (Wang et al. 2016)
    double_q: bool = True  # double-DQN target (van Hasselt et al. 2016); False: max Q_target
    loss: str = "mse"  # TD loss: "mse" (CleanRL) or "huber" (Mnih et al. 2015)
    max_grad_norm: float | None = None  # global gradient norm clip (None: no clip, CleanRL)
    target_update_interval: int = 50  # gradient updates between target updates
    tau: float = 1.0  # target update: 1 copies the network, < 1 moves it by Polyak tau
    start_e: float = 1.0  # epsilon at step 0
    end_e: float = 0.05  # epsilon after the decay
    exploration_fraction: float = 0.5  # fraction of total_steps over which epsilon decays
    fused_optimizer: bool = False  # fused Adam kernel (CleanRL uses the default Adam)
    n_step: int = 1  # n-step returns (rlcore.buffers.NStepReturns; Rainbow uses 3)
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 128  # transitions per update
    buffer_size: int = 10_000  # replay capacity
    learning_starts: int = 10_000  # uniform random actions and no updates before this step
    updates_per_step: float = 0.1  # update-to-data ratio (CleanRL train_frequency 10)
    total_steps: int = 500_000  # training length in env steps (also the epsilon schedule's)

    def plan(self) -> RunPlan:
        """Online from scratch: random actions until ``learning_starts``, then updates."""
        schedule = Schedule(
            online_steps=self.total_steps, batch_size=self.batch_size,
            buffer_size=self.buffer_size, learning_starts=self.learning_starts,
            updates_per_step=self.updates_per_step, n_step=self.n_step,
        )  # fmt: skip
        return RunPlan(schedule, gamma=self.gamma)


def linear_epsilon(step: int, start: float, end: float, duration: float) -> float:
    """``start`` at step 0, linearly to ``end`` at ``duration``, then ``end`` (CleanRL's
    ``linear_schedule``)."""
    if duration <= 0:
        return end
    return start + min(step / duration, 1.0) * (end - start)


def td_target(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    discount: float | torch.Tensor,
    next_q_target: torch.Tensor,
    next_q_online: torch.Tensor | None = None,
) -> torch.Tensor:
    """r + discount * (1 - terminated) * Q_target(s', a*) with a* = argmax_a Q_online(s', a)
    (double DQN) or, without ``next_q_online``, argmax_a Q_target(s', a) (= max, Mnih et al.).
    ``next_q_*``: (B, num_actions); the rest (B,)."""
    chooser = next_q_target if next_q_online is None else next_q_online
    best = chooser.argmax(-1, keepdim=True)
    next_value = next_q_target.gather(-1, best).squeeze(-1)
    return reward + discount * (1.0 - terminated) * next_value


def q_network(io: Plumbing, config: DQNConfig) -> nn.Module:
    """Q(s, .): an MLP on the flat observation, or, for images, the ``encoder``'s
    features (``rlcore.nets.ObsEncoder``: image parts encoded, vectors appended) then the
    MLP."""
    if config.dueling and not config.hidden:
        raise ValueError("algo.dueling=true splits the last hidden layer: algo.hidden needs one")
    encoder = observation_encoder(io.obs, config.encoder)
    if encoder is None:
        return DiscreteQNetwork(
            io.obs_dim, io.action_dim, config.hidden, config.activation, config.dueling
        )
    head = DiscreteQNetwork(
        encoder.out_dim, io.action_dim, config.hidden, config.activation, config.dueling
    )
    return nn.Sequential(encoder, head)


class DQN:
    """DQN agent: ``act`` (epsilon-greedy), ``update(batch)``, ``state_dict``."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Discrete,
        config: DQNConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = config = config or DQNConfig()
        self.plumbing = io = Plumbing(observation_space, action_space, device, "DQN", (DISCRETE,))
        if config.loss not in LOSSES:
            raise ValueError(f"unknown DQN loss '{config.loss}', choose from {LOSSES}")
        self.device = io.device
        self.num_actions = io.action_dim
        self.q_network = q_network(io, config).to(self.device)
        self.target_network = copy.deepcopy(self.q_network).requires_grad_(False)
        self.optimizer = adam(self.q_network.parameters(), config.lr, config.fused_optimizer)
        self.parts = io.declare(
            counters={"updates": int, "acted_steps": int}, q_network=self.q_network,
            target_network=self.target_network, optimizer=self.optimizer,
        )  # fmt: skip
        self.updates = 0  # gradient updates (target-update schedule)
        self.acted_steps = 0  # env steps explored through act() (epsilon schedule)

    def epsilon(self) -> float:
        """Exploration rate at the loop's current env step (see the module docstring)."""
        cfg = self.config
        step = cfg.learning_starts + self.acted_steps
        duration = cfg.exploration_fraction * cfg.total_steps
        return linear_epsilon(step, cfg.start_e, cfg.end_e, duration)

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """int64 action index(es): greedy, or epsilon-greedy (random actions and coins from
        torch's global RNG) when exploring; exploring advances the epsilon schedule."""
        action = self.q_network(obs).argmax(-1).cpu()
        if not deterministic:
            n = obs.shape[0]
            explore = torch.rand(n) < self.epsilon()
            action = torch.where(explore, torch.randint(self.num_actions, (n,)), action)
            self.acted_steps += n
        return action

    def update(self, batch: Batch) -> dict[str, float]:
        """One TD step on a minibatch, then the target update every
        ``target_update_interval`` steps."""
        cfg = self.config
        discount = cfg.gamma if batch.discount is None else batch.discount
        with torch.no_grad():
            next_q_target = self.target_network(batch.next_obs)
            next_q_online = self.q_network(batch.next_obs) if cfg.double_q else None
            target = td_target(
                batch.reward, batch.terminated, discount, next_q_target, next_q_online
            )
        q = self.q_network(batch.obs).gather(-1, batch.action.long().unsqueeze(-1)).squeeze(-1)
        loss = F.mse_loss(q, target) if cfg.loss == "mse" else F.smooth_l1_loss(q, target)
        ensure_finite(q_loss=loss)
        self.optimizer.zero_grad()
        loss.backward()
        if cfg.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.q_network.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        if self.updates % cfg.target_update_interval == 0:
            polyak_update(self.target_network, self.q_network, cfg.tau)
        return {"q_loss": loss.item(), "q_value": q.mean().item(), "epsilon": self.epsilon()}

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
