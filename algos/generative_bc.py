"""Behaviour cloning of a diffusion (DDPM) or flow (rectified-flow) action-chunk policy:
the pre-training stage of DPPO, ReinFlow and ResiP.

Papers: A. Z. Ren et al., "Diffusion Policy Policy Optimization" (DPPO), 2024
(arXiv:2409.00588), pre-training section; T. Zhang et al., "ReinFlow: Fine-tuning Flow
Matching Policy with Online Reinforcement Learning", 2025 (arXiv:2505.22094), pre-training
of a 1-rectified flow; C. Chi et al., "Diffusion Policy", RSS 2023, for chunked targets.

``algo=diffusion_bc`` (DPPO's Gym pre-training, dppo cfg/gym/pretrain/hopper-medium-v2/
pre_diffusion_mlp.yaml): DDPM, K = 20 denoising steps, epsilon prediction, cosine schedule,
x0 clipped to +-1, chunks of H = 4 actions, DPPO's residual MLP [512, 512, 512] with ReLU
(one residual block, ``rlcore.generative.DenoisingMLP``), 16-dim time embedding, batch
128, AdamW with weight decay 1e-6 (dppo agent/pretrain/train_agent.py:118-122), lr 1e-3
with the reference's per-epoch schedule (one epoch at 1e-4, then a cosine to 1e-4 over
the run, train_agent.py:123-131 and train_diffusion_agent.py:53-54). EMA decay 0.995 of
the weights that act and are evaluated, on DPPO's schedule: once per epoch every 5th
epoch, the EMA copying the weights before epoch 10 (train_diffusion_agent.py:56-58,
train_agent.py:137-144; ``rlcore.generative.ema_event``). An epoch is ceil(dataset rows
/ batch size) gradient steps (``prepare_dataset``). ``algo=flow_bc`` (ReinFlow's, ReinFlow
cfg/gym/pretrain/hopper-medium-v2/pre_reflow_mlp.yaml and agent/pretrain/train_agent.py):
the same network and optimiser with a velocity field trained by rectified flow, K = 4
Euler steps, a cosine period of 3000 epochs (its Hopper runs last 40, so the rate stays
near 1e-3), and ReinFlow's EMA schedule: every 10 gradient steps, copying before epoch
20 (train_agent.py:113-114, 357-360). Targets are built from the dataset's episodes
(``OfflineDataset.action_chunks``): the H actions from each row on, never across the
episode's end (slots past it repeat its last action, as Diffusion Policy pads).

``act(obs)`` returns a chunk (H, A) per observation in env units; rlcore's evaluation
runs each chunk open loop. ``deterministic=True`` is the references' evaluation sampler:
DDPM from x_K ~ N(0, I) with the posterior noise floored at std 1e-3 and none at the last
step, noise clipped at 10 std (dppo model/diffusion/diffusion.py:279-306, the pre-trained
model's only sampler); the flow from a random x_0 with every Euler step clipped to
[-1, 1] (ReinFlow model/flow/reflow.py:196-204, train_reflow_agent.py:46-48).
``deterministic=False``: DDPM with the plain posterior noise (no floor); the flow as above.
Random draws come from the global torch RNG: evaluation is deterministic given the seed.

Images (DPPO's image recipe, dppo cfg/robomimic/pretrain/*/pre_diffusion_mlp_img.yaml and
model/diffusion/mlp_diffusion.py ``VisionDiffusionMLP``): with ``encoder`` set the
observation's image parts go through an ``rlcore.nets`` encoder whose features are
compressed to ``image_features`` (Linear, LayerNorm, ReLU: DPPO's ``compress``) and
concatenated with the vector parts; the denoiser is conditioned on that. The encoder is
trained by the BC loss and averaged with the head on the same EMA schedule (DPPO's EMA
covers its whole network); each training batch's images are randomly shifted by up to
``shift_pad`` = 4 pixels (DPPO's ``augment``: ``RandomShiftsAug(pad=4)``). Image datasets:
``rlcore.offline.datasets`` (camera demonstrations, ``collect obs=state+pixels``).

Parity (benchmarks/parity/diffusion_flow.py, docs/PARITY.md): DPPO's
learning-rate scheduler, residual MLP and evaluation sampler reproduced within 6.3e-7.

Departures: observations are standardised with the dataset's mean and std, actions map
to [-1, 1] by the env's action bounds (DPPO normalises both to [-1, 1] by dataset min /
max); the time features are rlcore's interleaved sinusoidal encoding (DPPO concatenates
the sin and cos halves); the flow's time t in [0, 1] is scaled by 1000 before the
encoding, and its Euler grid is t_k = k / K (ReinFlow's sampler steps on linspace(0, 1, K),
reflow.py:198; its fine-tuning scores on k / K). ``obs_history`` T > 1 conditions the policy on the last T observations,
flattened (the dataset's rows and the env's observations are stacked alike, slots
before an episode's start repeat its first observation; DPPO's Gym default is T = 1).
The budget is ``total_steps`` gradient steps of batches drawn by rlcore's offline loop
(the references: 3000 epochs (DPPO) / 40 epochs (ReinFlow) of D4RL hopper-medium, about
23M / 0.3M gradient steps, reshuffled each epoch); the EMA schedule assumes such lengths:
in a run of a few tens of epochs DPPO's schedule leaves the EMA near the epoch-10 weights
(set ``ema_start_epoch`` / ``ema_every`` lower for short runs). ReinFlow's loader drops
an epoch's last partial batch (floor instead of ceil: one step in ~1,500 on Hopper).
On images: rlcore's CNN encoders (DrQ-v2's, Nature's, IMPALA's) instead of DPPO's ViT with
its spatial embedding; the image features are computed once per sample (DPPO's network
encodes again inside every denoising step, and with ``augment`` on shifts again each time,
when sampling too; here acting reads the unshifted images); the state part is read as
recorded (``normalize_states`` standardises vector observations only; DPPO scales it to
[-1, 1] by the dataset's min / max); ``obs_history`` > 1 is refused with images (stack
frames instead, ``env.frame_stack``). No reference run was compared (DPPO's image agents
need robomimic's renders).
Earlier runs of this project used ``denoiser=rlcore_v1 activation=mish`` (Mish, two
residual blocks, an activation before the output), EMA every step from step 0, no
weight decay, batch 256 and a per-step cosine; the committed snapshots
``benchmarks/assets/hopper_{diffusion,flow}_bc.pt`` are such runs (their configs say so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import torch

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.capabilities import DatasetUser, StateStatistics
from rlcore.generative import (
    DENOISERS,
    EMA,
    EMA_UNITS,
    SCHEDULES,
    ActionBox,
    DDPMHead,
    FlowHead,
    HeadSettings,
    PretrainedHead,
    adamw,
    ema_event,
    head_settings,
    make_head,
    warmup_cosine_lr,
)
from rlcore.nets import ObsNormalizer, observation_encoder, shift_images
from rlcore.plan import DataRecipe, EnvRecipe, RunPlan, Schedule
from rlcore.types import Batch, Obs
from rlcore.utils import ensure_finite

HEADS = ("ddpm", "flow")


@dataclass
class DiffusionBCConfig:
    """Chunked generative behaviour cloning (DPPO's pre-training defaults, dppo
    cfg/gym/pretrain/hopper-medium-v2/pre_diffusion_mlp.yaml)."""

    head: str = "ddpm"  # "ddpm" | "flow"
    horizon: int = 4  # actions per chunk (executed open loop)
    obs_history: int = 1  # condition on the last T observations (env and dataset stacked)
    denoising_steps: int = 20  # DDPM steps K (flow: Euler steps)
    schedule: str = "cosine"  # DDPM beta schedule: "cosine" | "vp"
    clip_x0: float | None = 1.0  # clip of the predicted x0 (DDPM)
    hidden: tuple[int, ...] = (512, 512, 512)  # residual MLP widths (equal; "dppo": odd count)
    time_dim: int = 16  # time-embedding features
    denoiser: str = "dppo"  # network layout: "dppo" (the reference's) | "rlcore_v1" (earlier)
    activation: str = "relu"  # the denoiser's activation (the reference's Gym configs: ReLU)
    lr: float = 1e-3  # AdamW learning rate at the cosine's top ...
    lr_min: float = 1e-4  # ... and bottom (it starts here for lr_warmup_epochs)
    lr_warmup_epochs: int = 1  # linear warm-up from lr_min, in epochs
    lr_cycle_epochs: int | None = None  # cosine period in epochs (None: the whole run)
    weight_decay: float = 1e-6  # AdamW's decoupled weight decay
    ema_decay: float = 0.995  # EMA of the weights that act and are evaluated
    ema_start_epoch: int = 10  # before this epoch the EMA copies the weights ...
    ema_every: int = 5  # ... updated every this many ema_unit ...
    ema_unit: str = "epoch"  # ... "epoch" (DPPO) | "step" (ReinFlow)
    noise_clip: float | None = 10.0  # evaluation sampler's noise clip, in stds (DDPM)
    normalize_states: bool = True  # standardise (vector) observations with dataset statistics
    # image observations (DPPO's image recipe, module docstring): the encoder in front of
    # the denoiser, its features compressed to image_features, DrQ's shift of shift_pad
    encoder: str | None = None  # rlcore.nets image encoder: drq | nature | impala
    image_features: int = 128  # DPPO's visual_feature_dim (Linear + LayerNorm + ReLU)
    shift_pad: int = 4  # DPPO's RandomShiftsAug(pad=4) on training batches (0: none)
    fused_optimizer: bool = True  # fused AdamW kernel (same maths, faster)
    gamma: float = 0.99  # only for the dataset's return-to-go (not used by BC)
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 128  # chunks per gradient step (an epoch: dataset rows / batch_size)
    total_steps: int = 200_000  # gradient steps
    online_steps: int = 0  # BC has no online phase

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"head={self.head!r}: choose from {HEADS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r}: choose from {SCHEDULES}")
        if self.denoiser not in DENOISERS:
            raise ValueError(f"denoiser={self.denoiser!r}: choose from {DENOISERS}")
        if self.ema_unit not in EMA_UNITS:
            raise ValueError(f"ema_unit={self.ema_unit!r}: choose from {EMA_UNITS}")
        if self.online_steps:
            raise ValueError("online_steps: behaviour cloning has no online phase")

    def plan(self) -> RunPlan:
        """Offline gradient steps on chunks of the dataset's actions."""
        schedule = Schedule(offline_steps=self.total_steps, online_steps=self.online_steps,
                            batch_size=self.batch_size)  # fmt: skip
        # images: the encoder scales the pixels; the state part is read as recorded
        data = DataRecipe(normalize_states=self.normalize_states and self.encoder is None,
                          required=True)  # fmt: skip
        return RunPlan(schedule, EnvRecipe(obs_history=self.obs_history), data, gamma=self.gamma)


@dataclass
class FlowBCConfig(DiffusionBCConfig):
    """ReinFlow's pre-training: a 1-rectified flow with 4 Euler steps (ReinFlow
    cfg/gym/pretrain/hopper-medium-v2/pre_reflow_mlp.yaml, agent/pretrain/train_agent.py)."""

    head: str = "flow"
    denoising_steps: int = 4
    lr_cycle_epochs: int | None = 3000  # pre_reflow_mlp.yaml:36 (its runs last 40 epochs)
    ema_start_epoch: int = 20  # train_agent.py:113 (the config leaves the default)
    ema_every: int = 10  # train_agent.py:114, in gradient steps
    ema_unit: str = "step"


class GenerativeBC:
    """A DDPM or flow head cloned from chunked dataset actions: ``act``, ``update``,
    ``prepare_dataset``, ``state_dict`` / ``load_state_dict``."""

    CAPABILITIES = (DatasetUser, StateStatistics, PretrainedHead)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: DiffusionBCConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = config = config or DiffusionBCConfig()
        self.plumbing = io = Plumbing(
            observation_space, action_space, device, "diffusion / flow BC",
            obs_parts=config.encoder is not None,
        )  # fmt: skip
        self.device = io.device
        self.box = ActionBox(io.low, io.high, self.device)
        self.kind = config.head
        # image parts: an encoder in front of the denoiser (None: the flat vector)
        self.encoder = observation_encoder(io.obs, config.encoder, config.image_features)
        if self.encoder is not None and config.obs_history > 1:
            raise ValueError("algo.obs_history > 1 stacks vectors; images stack frames instead")
        cond_dim = io.obs_dim if self.encoder is None else self.encoder.out_dim
        self.head: DDPMHead | FlowHead = make_head(
            self.kind, cond_dim, io.action_dim, self.head_settings()
        )
        self.ema = EMA(self.head, config.ema_decay)
        self.obs_normalizer = ObsNormalizer(cond_dim)  # identity on image features (no fit)
        trained = [*self.head.parameters()]
        encoder_parts: dict[str, torch.nn.Module] = {}
        if self.encoder is not None:  # trained by the BC loss, averaged with the head
            self.encoder.to(self.device)
            self.ema_encoder = EMA(self.encoder, config.ema_decay)
            trained += [*self.encoder.parameters()]
            encoder_parts = {"encoder": self.encoder, "ema_encoder": self.ema_encoder.shadow}
        self.optimizer = adamw(trained, config.lr, config.weight_decay, config.fused_optimizer)
        self.epoch_steps: int | None = None  # gradient steps per epoch (prepare_dataset)
        self.parts = io.declare(
            counters={"updates": int}, head=self.head, ema=self.ema.shadow,
            obs_normalizer=self.obs_normalizer, optimizer=self.optimizer, **encoder_parts,
        )  # fmt: skip
        self.updates = 0

    def head_settings(self) -> HeadSettings:
        """The settings of the head (a fine-tuner's must equal them)."""
        return head_settings(self.kind, self.config)

    def prepare_dataset(self, dataset) -> None:  # noqa: ANN001 (rlcore.offline.datasets.OfflineDataset)
        """Add the chunked targets (``action_chunk``) the updates sample, and size an epoch
        (ceil(rows / batch_size) gradient steps) for the learning-rate and EMA schedules."""
        chunks, _ = dataset.action_chunks(self.config.horizon)
        dataset.add_channel("action_chunk", chunks)
        self.epoch_steps = max(1, math.ceil(len(dataset) / self.config.batch_size))

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Action chunk(s) (H, A) / (B, H, A) in env units from the EMA weights.
        ``deterministic``: the references' evaluation sampler (DDPM: x_K ~ N(0, I), std
        floor 1e-3, no noise at the last step; flow: random x_0, Euler steps clipped to
        [-1, 1]); otherwise DDPM samples with the full posterior noise. Random draws come
        from the global torch RNG (deterministic given the seed)."""
        cfg = self.config
        norm = self._condition(obs, None if self.encoder is None else self.ema_encoder.shadow)
        if cfg.head == "flow":
            unit = self.ema.shadow.sample(norm, clip_intermediate=True)
        else:
            unit = self.ema.shadow.sample(norm, noise_clip=cfg.noise_clip, evaluation=deterministic)
        return self.box.to_env(unit)

    def _condition(self, obs: Obs, encoder: torch.nn.Module | None, shift: int = 0) -> torch.Tensor:
        """What the denoiser is conditioned on: the standardised vector, or the
        ``encoder``'s features of the (``shift``-padded, randomly shifted) images and state."""
        if encoder is None:
            return self.obs_normalizer(obs)
        return encoder(shift_images(obs, self.plumbing.obs, shift))

    def _epoch_steps(self) -> int:
        if self.epoch_steps is None:
            raise ValueError(
                "call agent.prepare_dataset(dataset) first: the learning-rate and EMA "
                "schedules count epochs of the dataset"
            )
        return self.epoch_steps

    def lr_at(self, update: int) -> float:
        """The references' per-epoch schedule (``warmup_cosine_lr``): epoch e = update //
        epoch_steps, ``lr_warmup_epochs`` from lr_min, then a cosine to lr_min over
        ``lr_cycle_epochs`` (None: the run's total_steps in epochs)."""
        cfg, epoch_steps = self.config, self._epoch_steps()
        cycle = cfg.lr_cycle_epochs or math.ceil(cfg.total_steps / epoch_steps)
        cycle = max(cycle, cfg.lr_warmup_epochs + 1)
        return warmup_cosine_lr(update // epoch_steps, cfg.lr, cfg.lr_min, cycle,
                                cfg.lr_warmup_epochs)  # fmt: skip

    def update(self, batch: Batch) -> dict[str, float]:
        """One denoising / velocity regression step on the batch's chunks, then the EMA
        schedule's event (``ema_event``: copy, average or nothing)."""
        if "action_chunk" not in batch.extras:
            raise ValueError(
                "the batch has no 'action_chunk': build it with agent.prepare_dataset(dataset)"
            )
        cfg = self.config
        lr = self.lr_at(self.updates)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        obs = self._condition(batch.obs, self.encoder, cfg.shift_pad)
        target = self.box.to_unit(batch.extras["action_chunk"]).clamp(-1.0, 1.0)
        loss = self.head.loss(obs, target)
        ensure_finite(bc_loss=loss)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.updates += 1
        event = ema_event(self.updates, self._epoch_steps(), cfg.ema_start_epoch, cfg.ema_every,
                          cfg.ema_unit)  # fmt: skip
        averaged = [(self.ema, self.head)]
        if self.encoder is not None:
            averaged.append((self.ema_encoder, self.encoder))
        for ema, module in averaged:
            if event == "copy":
                ema.copy_from(module)
            elif event == "average":
                ema.update(module)
        return {"bc_loss": loss.item(), "lr": lr}

    def state_dict(self) -> dict:
        """Head, EMA weights, normaliser, optimiser and update counter."""
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
