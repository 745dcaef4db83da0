"""Behaviour cloning of a diffusion (DDPM) or flow (rectified-flow) action-chunk policy:
the pre-training stage of DPPO, ReinFlow and ResiP.

Papers: A. Z. Ren et al., "Diffusion Policy Policy Optimization" (DPPO), 2024
(arXiv:2409.00588), pre-training section; T. Zhang et al., "ReinFlow: Fine-tuning Flow
Matching Policy with Online Reinforcement Learning", 2025 (arXiv:2505.22094), pre-training
of a 1-rectified flow; C. Chi et al., "Diffusion Policy", RSS 2023, for chunked targets.

``algo=diffusion_bc``: DDPM, K = 20 denoising steps, epsilon prediction, cosine schedule,
x0 clipped to +-1, chunks of H = 4 actions, residual MLP 3x512 (Mish), 16-dim time
embedding, Adam lr 1e-3 cosine-annealed to 1e-4 over the run, EMA 0.995 (the EMA weights
act and are evaluated). ``algo=flow_bc``: the same with a velocity field trained by
rectified flow and K = 4 Euler steps. Targets are built from the dataset's episodes
(``OfflineDataset.action_chunks``): the H actions from each row on, never across the
episode's end (slots past it repeat its last action, as Diffusion Policy pads).

``act(obs)`` returns a chunk (H, A) per observation in env units; rlcore's evaluation
runs each chunk open loop. ``deterministic=True`` samples the zero-noise path (x_K = 0 and
no injected noise for DDPM; x0 = 0 for the flow), ``False`` samples.

Departures: observations are standardised with the dataset's mean and std, actions map
to [-1, 1] by the env's action bounds (DPPO normalises both to [-1, 1] by dataset min /
max); the time features are rlcore's interleaved sinusoidal encoding (DPPO concatenates
the sin and cos halves); the flow's time t in [0, 1] is scaled by 1000 before the
encoding. ``obs_history`` T > 1 conditions the policy on the last T observations,
flattened (the dataset's rows and the env's observations are stacked alike, slots
before an episode's start repeat its first observation; DPPO's Gym default is T = 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rlcore.generative import EMA, SCHEDULES, ActionBox, DDPMHead, FlowHead, make_head
from rlcore.nets import ObsNormalizer
from rlcore.spaces import require_box_actions
from rlcore.types import Batch
from rlcore.utils import adam, batched_obs, ensure_finite, load_state_into, state_of

HEADS = ("ddpm", "flow")


@dataclass
class DiffusionBCConfig:
    """Chunked generative behaviour cloning (DPPO's pre-training defaults)."""

    head: str = "ddpm"  # "ddpm" | "flow"
    horizon: int = 4  # actions per chunk (executed open loop)
    obs_history: int = 1  # condition on the last T observations (env and dataset stacked)
    denoising_steps: int = 20  # DDPM steps K (flow: Euler steps)
    schedule: str = "cosine"  # DDPM beta schedule: "cosine" | "vp"
    clip_x0: float | None = 1.0  # clip of the predicted x0 (DDPM)
    hidden: tuple[int, ...] = (512, 512, 512)  # residual MLP widths (equal)
    time_dim: int = 16  # time-embedding features
    lr: float = 1e-3  # Adam learning rate at the start ...
    lr_min: float = 1e-4  # ... cosine-annealed to this over total_steps
    ema_decay: float = 0.995  # EMA of the weights that act and are evaluated
    normalize_states: bool = True  # standardise observations with dataset statistics
    fused_optimizer: bool = True  # fused Adam kernel (same maths, faster)
    gamma: float = 0.99  # only for the dataset's return-to-go (not used by BC)
    # loop settings (read by rlcore.loops.offline through rlcore.train)
    batch_size: int = 256  # chunks per gradient step
    total_steps: int = 200_000  # gradient steps (the cosine schedule's length)
    online_steps: int = 0  # BC has no online phase

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"head={self.head!r}: choose from {HEADS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r}: choose from {SCHEDULES}")
        if self.online_steps:
            raise ValueError("online_steps: behaviour cloning has no online phase")


@dataclass
class FlowBCConfig(DiffusionBCConfig):
    """ReinFlow's pre-training: a 1-rectified flow with 4 Euler steps."""

    head: str = "flow"
    denoising_steps: int = 4


class GenerativeBC:
    """A DDPM or flow head cloned from chunked dataset actions: ``act``, ``update``,
    ``prepare_dataset``, ``state_dict`` / ``load_state_dict``."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: DiffusionBCConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        require_box_actions(action_space, "diffusion / flow BC")
        self.config = config = config or DiffusionBCConfig()
        self.device = torch.device(device)
        obs_dim, act_dim = int(np.prod(observation_space.shape)), int(action_space.shape[0])
        self.box = ActionBox(action_space.low, action_space.high, self.device)
        self.head: DDPMHead | FlowHead = make_head(config.head, obs_dim, act_dim, config)
        self.head.to(self.device)
        self.ema = EMA(self.head, config.ema_decay)
        self.obs_normalizer = ObsNormalizer(obs_dim).to(self.device)
        self.optimizer = adam(self.head.parameters(), config.lr, config.fused_optimizer)
        self.updates = 0

    def prepare_dataset(self, dataset) -> None:  # noqa: ANN001 (offline.datasets.OfflineDataset)
        """Add the chunked targets (``action_chunk``) the updates sample."""
        chunks, _ = dataset.action_chunks(self.config.horizon)
        dataset.add_channel("action_chunk", chunks)

    def act(self, obs: np.ndarray | torch.Tensor, deterministic: bool = False) -> np.ndarray:
        """Action chunk(s) (H, A) / (B, H, A) in env units from the EMA weights."""
        with torch.inference_mode():
            obs_t, single = batched_obs(obs, self.device)
            unit = self.ema.shadow.sample(
                self.obs_normalizer(obs_t), noise_scale=0.0 if deterministic else 1.0
            )
            chunk = self.box.to_env(unit).cpu().numpy()
        return chunk[0] if single else chunk

    def lr_at(self, update: int) -> float:
        """Cosine from ``lr`` to ``lr_min`` over ``total_steps`` updates."""
        cfg = self.config
        progress = min(update / max(cfg.total_steps, 1), 1.0)
        return cfg.lr_min + 0.5 * (cfg.lr - cfg.lr_min) * (1 + math.cos(math.pi * progress))

    def update(self, batch: Batch) -> dict[str, float]:
        """One denoising / velocity regression step on the batch's chunks, then the EMA."""
        if "action_chunk" not in batch.extras:
            raise ValueError(
                "the batch has no 'action_chunk': build it with agent.prepare_dataset(dataset)"
            )
        lr = self.lr_at(self.updates)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        obs = self.obs_normalizer(batch.obs)
        target = self.box.to_unit(batch.extras["action_chunk"]).clamp(-1.0, 1.0)
        loss = self.head.loss(obs, target)
        ensure_finite(bc_loss=loss)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.ema.update(self.head)
        self.updates += 1
        return {"bc_loss": loss.item(), "lr": lr}

    def _parts(self) -> dict:
        return {
            "head": self.head,
            "ema": self.ema.shadow,
            "obs_normalizer": self.obs_normalizer,
            "optimizer": self.optimizer,
        }

    def state_dict(self) -> dict:
        """Head, EMA weights, normaliser, optimiser and update counter."""
        return {**state_of(**self._parts()), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        load_state_into(state, **self._parts())
        self.updates = int(state["updates"])
