"""Offline datasets: D4RL-format HDF5 files and Minari datasets as one tensor dataset.

``load_dataset(spec)`` accepts

* a D4RL-format HDF5 file (keys ``observations, actions, rewards, terminals, timeouts``,
  ``next_observations`` optional),
* a Minari dataset folder (``<folder>/data/main_data.hdf5`` + ``metadata.json``, or the
  ``data`` folder itself),
* a Minari dataset id (``local/hopper/medium-v0``, ``mujoco/hopper/medium-v0``): looked up
  under ``$MINARI_DATASETS_PATH`` first, then downloaded with Minari; without a network
  this fails within seconds with a message naming the fix.

Every source becomes an ``OfflineDataset`` of flat float32 transitions with terminated and
truncated kept apart, episode ids and the discounted Monte-Carlo return-to-go (Cal-QL).
A Minari dataset of camera images (``rlcore.offline.collect obs=pixels|state+pixels``)
keeps them uint8, each episode's frames stored once (``OfflineDataset.frames``), and
samples dict observations as a replay buffer of the rendered env does, so pixel agents
(RLPD with an encoder, diffusion BC, DrQ-v2's kind) mix demonstrations into their batches.
Bad files raise ``DatasetError`` (a ValueError) naming the array, the file and the fix.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import gymnasium as gym
import h5py
import numpy as np
import torch

from rlcore.buffers import ReplayBuffer, next_actions
from rlcore.envs.make import UnknownEnvError, resolve_env_id
from rlcore.observations import FLAT, ObsSpec
from rlcore.types import Batch

D4RL_KEYS = ("observations", "actions", "rewards", "terminals", "timeouts")
MINARI_DATA_FILE = "main_data.hdf5"
MINARI_METADATA_FILE = "metadata.json"
# Seconds to wait for the remote dataset host to answer before giving up (no network).
NETWORK_PROBE_TIMEOUT_S = 3.0


class DatasetError(ValueError):
    """A dataset that cannot be used as it is: the message names the array, file and fix."""


class DatasetNotAvailableError(DatasetError):
    """A Minari dataset id that is neither stored locally nor downloadable right now."""


# which episodes Cal-QL's sparse return-to-go calls failed (OfflineDataset.fail_sparse_episodes)
SPARSE_RULES = ("last", "all")


@dataclass
class OfflineDataset:
    """Flat transitions of an offline dataset (float32 tensors on the CPU, row-aligned).

    ``terminated`` / ``truncated`` are kept apart (bootstrapping stops only on
    termination); the last row of every episode has one of them set. ``episode_id`` numbers
    episodes 0..E-1 in row order; ``mc_return`` is the discounted return-to-go inside the
    episode (no bootstrap past its end). ``episode_return`` holds the undiscounted return of
    each episode as recorded, including rows dropped at load time (see ``load_dataset``).
    """

    obs: torch.Tensor  # (N, obs_dim)
    action: torch.Tensor  # (N, act_dim)
    reward: torch.Tensor  # (N,)
    next_obs: torch.Tensor  # (N, obs_dim)
    terminated: torch.Tensor  # (N,) 0/1
    truncated: torch.Tensor  # (N,) 0/1
    episode_id: torch.Tensor  # (N,) int64
    mc_return: torch.Tensor  # (N,)
    episode_return: torch.Tensor  # (E,) float64
    gamma: float = 0.99
    env_id: str | None = None
    ref_min_score: float | None = None
    ref_max_score: float | None = None
    source: str = ""
    generator: torch.Generator = dataclasses.field(
        default_factory=lambda: torch.Generator().manual_seed(0), repr=False, compare=False
    )
    # extra per-row channels an agent asks for (``add_channel``), sampled into Batch.extras
    channels: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict, repr=False)
    # a cost-labelled dataset (safe RL): per-row cost (Batch.cost) and per-episode sums
    cost: torch.Tensor | None = None  # (N,)
    episode_cost: torch.Tensor | None = None  # (E,) float64
    # a dataset of dict observations: ((part, shape), ...) in the order of the flat columns
    # (as recorded: the space's key order, gymnasium.spaces.flatten's; ``arrange_parts``
    # puts them in an ObsSpec's order); None for a Box observation
    obs_layout: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    # camera images (uint8, ``rlcore.envs.pixels``): each episode's T + 1 observations
    # stored once, ``{part: (M, C, H, W)}``; row i observes ``frames[part][frame_index[i]]``
    # and next observes ``frame_index[i] + 1``. ``obs`` / ``next_obs`` then hold the vector
    # parts' columns only (``obs_layout`` names every part, images included) and ``sample``
    # returns ``{part: tensor}`` observations (one uint8 tensor for an image-only Box, part
    # ``"obs"``), as a replay buffer of that env does
    frames: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict, repr=False)
    frame_index: torch.Tensor | None = None  # (N,) int64
    # the corruptions applied (rlcore.offline.corruption.corrupt): kind, mode, rate,
    # scale, seed and rows changed of each, in order
    corruption: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # the env id the dataset's own metadata names (``env_id`` may be the caller's override:
    # a run's env); None for a D4RL file or a dataset without an env spec
    recorded_env_id: str | None = None

    def __len__(self) -> int:
        return self.obs.shape[0]

    @property
    def obs_dim(self) -> int:
        return self.obs.shape[1]

    @property
    def act_dim(self) -> int:
        return self.action.shape[1]

    @property
    def image_parts(self) -> tuple[str, ...]:
        """The observation parts stored as images (``frames``); () for a vector dataset."""
        return tuple(self.frames)

    def _no_images(self, what: str) -> None:
        if self.frames:
            raise DatasetError(
                f"{self.source} observes images ({', '.join(self.frames)}): {what} reads "
                "vector observations only"
            )

    def observations(self, idx: torch.Tensor, next_obs: bool = False) -> Any:
        """The observations (or next observations) of rows ``idx``: the flat float32 rows,
        or, for a dataset of images, ``{part: tensor}`` in ``obs_layout``'s order (one uint8
        tensor for an image-only Box)."""
        flat = self.next_obs if next_obs else self.obs
        if not self.frames:
            return flat[idx]
        frame_rows = self.frame_index[idx] + int(next_obs)
        if self.obs_layout is None:  # one image Box
            return self.frames[FLAT][frame_rows]
        parts, offset, columns = {}, 0, flat[idx]
        for name, shape in self.obs_layout:
            if name in self.frames:
                parts[name] = self.frames[name][frame_rows]
                continue
            size = math.prod(shape)
            parts[name] = columns[:, offset : offset + size].reshape(len(idx), *shape)
            offset += size
        return parts

    @property
    def num_episodes(self) -> int:
        return self.episode_return.shape[0]

    @property
    def episode_starts(self) -> torch.Tensor:
        """Bool (N,): True on the first stored row of every episode."""
        starts = torch.ones(len(self), dtype=torch.bool)
        starts[1:] = self.episode_id[1:] != self.episode_id[:-1]
        return starts

    def action_chunks(self, horizon: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(chunks (N, H, A), valid (N, H)): the actions of rows i .. i+H-1 of row i's
        episode, never across its end: slots past the episode's last row repeat that
        row's action and are marked invalid (diffusion / flow behaviour cloning targets)."""
        rows, valid = chunk_rows(self.episode_id, horizon)
        return self.action[rows], valid

    def obs_history(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(history (N, T, O), valid (N, T)): the observations of rows i-T+1 .. i of row
        i's episode, oldest first; slots before the episode's first row repeat it."""
        self._no_images("an observation history")
        rows, valid = chunk_rows(self.episode_id, length, backward=True)
        return self.obs[rows], valid

    def stack_observations(self, length: int) -> None:
        """Replace ``obs`` / ``next_obs`` by the last ``length`` observations, flattened
        (N, length * obs_dim), oldest first, as ``rlcore.envs.make.ObservationHistory`` shows them
        online: slots before an episode's first row repeat it; ``next_obs`` is ``obs``'s
        history shifted by one step. For policies conditioned on an observation history."""
        if length < 1:
            raise ValueError(f"observation history length {length} must be >= 1")
        if length == 1:
            return
        self._no_images("an observation history")
        history, _ = self.obs_history(length)
        next_history = torch.cat([history[:, 1:], self.next_obs[:, None]], 1)
        self.obs = history.flatten(1)
        self.next_obs = next_history.flatten(1)
        self.obs_layout = None  # a flat history now, no longer the recorded parts

    def seed(self, seed: int) -> OfflineDataset:
        """Seed the dataset's own generator, which ``sample`` draws from (the sampler
        protocol of rlcore.buffers: ``sample(batch_size)``); returns the dataset."""
        self.generator = torch.Generator().manual_seed(int(seed))
        return self

    def state_dict(self) -> dict:
        """The sampling generator's state (the rows never change during training)."""
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        """Uniform minibatch with replacement from the dataset's own seeded generator
        (``seed``), or from ``generator`` when one is given.

        ``extras["next_action"]`` is the action stored on the next row of the same episode
        (ReBRAC's critic penalty); ``extras["has_next_action"]`` is 0 on an episode's last
        row, where no such action exists (the own action stands in)."""
        generator = self.generator if generator is None else generator
        idx = torch.randint(0, len(self), (batch_size,), generator=generator)
        nxt = (idx + 1).clamp(max=len(self) - 1)
        has_next = (self.episode_id[nxt] == self.episode_id[idx]) & (nxt != idx)
        return Batch(
            obs=self.observations(idx),
            action=self.action[idx],
            reward=self.reward[idx],
            next_obs=self.observations(idx, next_obs=True),
            terminated=self.terminated[idx],
            truncated=self.truncated[idx],
            mc_return=self.mc_return[idx],
            cost=None if self.cost is None else self.cost[idx],
            extras={
                **next_actions(self.action, idx, nxt, has_next),
                **{name: values[idx] for name, values in self.channels.items()},
            },
        )

    def scale_rewards(self, scale: float, bias: float = 0.0) -> None:
        """r <- scale * r + bias in place, for training. Returns-to-go follow (exactly for
        bias 0; recomputed over the stored rows otherwise); ``episode_return`` keeps the raw
        recorded returns (behaviour-policy scores)."""
        self.reward = self.reward * scale + bias
        if bias == 0.0:
            self.mc_return = self.mc_return * scale
        else:
            ends = (self.terminated + self.truncated) > 0
            rtg = returns_to_go(self.reward.numpy(), ends.numpy(), self.gamma)
            self.mc_return = torch.as_tensor(rtg, dtype=torch.float32)

    def fail_sparse_episodes(self, failure_reward: float, rule: str = "last") -> int:
        """Cal-QL's sparse-reward return-to-go: every row of a failed episode gets
        ``failure_reward / (1 - gamma)``, the return of failing forever, instead of the
        discounted sum to its end. ``rule`` says which episodes failed: ``"last"``, those
        whose last reward equals ``failure_reward`` (CORL's ``is_sparse_reward``); ``"all"``,
        those whose every reward does (zhouzypaul/wsrl ``calc_return_to_go``: an episode
        that reached the goal on the way keeps its discounted sums). Call after the reward
        transform. Returns how many episodes were marked."""
        if rule not in SPARSE_RULES:
            raise ValueError(f"rule={rule!r}: one of {SPARSE_RULES}")
        if rule == "last":
            last = torch.ones(len(self), dtype=torch.bool)
            last[:-1] = self.episode_id[1:] != self.episode_id[:-1]
            failed = self.episode_id[last][self.reward[last] == failure_reward]
        else:
            succeeded = self.episode_id[self.reward != failure_reward].unique()
            failed = self.episode_id.unique()
            failed = failed[~torch.isin(failed, succeeded)]
        rows = torch.isin(self.episode_id, failed)
        self.mc_return[rows] = failure_reward / (1.0 - self.gamma)
        return len(failed)

    def normalize_rewards_by_return_range(self) -> float:
        """IQL/CQL locomotion recipe: r <- r * 1000 / (max - min episode return); the
        factor is returned. Uses the recorded episode returns."""
        returns = self.episode_return
        spread = float(returns.max() - returns.min())
        if spread <= 0:
            raise DatasetError(
                f"cannot normalise rewards of {self.source}: all episodes have the same return"
            )
        scale = 1000.0 / spread
        self.scale_rewards(scale)
        return scale

    def episode_returns(self) -> np.ndarray:
        """Undiscounted return of every episode (float64, in episode order)."""
        return self.episode_return.numpy().copy()

    def keep_episodes(self, keep: torch.Tensor) -> None:
        """Keep only the episodes where ``keep`` (E,) bool is True, in place (rows, episode
        returns and costs; episode ids renumbered 0..E'-1)."""
        keep = torch.as_tensor(keep, dtype=torch.bool)
        if keep.shape != (self.num_episodes,):
            raise ValueError(f"keep has shape {tuple(keep.shape)}, expected ({self.num_episodes},)")
        rows = keep[self.episode_id]
        if self.frames:  # keep the kept rows' frames (an episode's are contiguous)
            kept = torch.zeros(len(next(iter(self.frames.values()))), dtype=torch.bool)
            kept[self.frame_index[rows]] = True
            kept[self.frame_index[rows] + 1] = True
            renumbered = torch.cumsum(kept, 0) - 1
            self.frames = {name: frames[kept] for name, frames in self.frames.items()}
            self.frame_index = renumbered[self.frame_index[rows]]
        for name in ("obs", "action", "reward", "next_obs", "terminated", "truncated",
                     "mc_return", "cost"):  # fmt: skip
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name)[rows])
        self.channels = {k: v[rows] for k, v in self.channels.items()}
        self.episode_id = torch.unique(self.episode_id[rows], return_inverse=True)[1]
        self.episode_return = self.episode_return[keep]
        if self.episode_cost is not None:
            self.episode_cost = self.episode_cost[keep]

    def episode_costs(self) -> np.ndarray:
        """Summed cost of every episode (float64, episode order); a dataset without costs
        raises DatasetError."""
        if self.episode_cost is None:
            raise DatasetError(
                f"{self.source} has no costs: record a cost-labelled dataset (python -m "
                "rlcore.offline.safe_recipe) or load a D4RL-format file with a 'costs' key"
            )
        return self.episode_cost.numpy().copy()

    def to(self, device: torch.device | str) -> OfflineDataset:
        """Copy with every tensor moved to ``device`` (e.g. to sample on the GPU)."""
        moved = {
            f.name: getattr(self, f.name).to(device)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor) and f.name != "episode_cost"
        }
        moved["channels"] = {k: v.to(device) for k, v in self.channels.items()}
        moved["frames"] = {k: v.to(device) for k, v in self.frames.items()}
        return dataclasses.replace(self, **moved)

    def add_channel(self, name: str, values: torch.Tensor) -> None:
        """Store a per-row tensor (N, ...) that ``sample`` returns in ``Batch.extras[name]``
        (e.g. action chunks for chunked behaviour cloning: ``action_chunks``)."""
        if len(values) != len(self):
            raise ValueError(f"channel '{name}' has {len(values)} rows, the dataset {len(self)}")
        if name in ("next_action", "has_next_action"):
            raise ValueError(f"channel name '{name}' is taken by sample's own extras")
        self.channels[name] = values

    def to_replay_buffer(
        self,
        capacity: int | None = None,
        device: torch.device | str = "cpu",
        seed: int = 0,
        obs_spec: ObsSpec | None = None,
    ) -> ReplayBuffer:
        """A ``ReplayBuffer`` (one env) holding every transition, ready for online
        fine-tuning: rows are copied directly; the write pointer sits after the data.
        Every channel is kept: ``mc_return``, ``cost`` and the agent's ``channels`` (online
        rows appended without them read zeros there), and the buffer derives
        ``next_action`` / ``has_next_action`` from its rows as ``sample`` does here (so
        Cal-QL's bound and ReBRAC's penalty work on it, and on online rows appended later).
        ``obs_spec`` (dict observations, the dataset ``arrange_parts``-ed to it) stores one
        channel per part, as the online rows of that env come."""
        if self.frames:
            raise DatasetError(
                f"{self.source} observes images ({', '.join(self.frames)}): it is mixed into "
                "the batches (algo.offline_data=mix), not copied into a replay buffer"
            )
        n = len(self)
        spec = obs_spec if obs_spec is not None else ObsSpec.vector((self.obs_dim,))
        if spec.keyed and self.obs_layout != tuple((p.name, p.shape) for p in spec.parts):
            raise ValueError(
                f"dataset {self.source}: its observations are not laid out as {spec.names} "
                "(call arrange_parts(spec) first)"
            )
        capacity = n if capacity is None else int(capacity)
        if capacity < n:
            raise ValueError(
                f"capacity {capacity} is smaller than the dataset ({n} transitions from "
                f"{self.source}); pass capacity >= {n}"
            )
        channels = {"mc_return": ((), torch.float32)}
        if self.cost is not None:
            channels["cost"] = ((), torch.float32)
        for name, values in self.channels.items():  # the agent's channels (action chunks...)
            channels[name] = (tuple(values.shape[1:]), values.dtype)
        buffer = ReplayBuffer(
            capacity,
            spec,
            (self.act_dim,),
            num_envs=1,
            device=device,
            seed=seed,
            channels=channels,
            next_action=True,
        )
        for name in (*ReplayBuffer.FIELDS, *channels):
            values = self.channels[name] if name in self.channels else getattr(self, name)
            if name in buffer.obs_channels and spec.keyed:  # one channel per part
                for part, part_values in spec.split(values).items():
                    buffer.data[buffer.obs_channels[name][part]][:n] = part_values.to(buffer.device)
                continue
            buffer.data[name][:n] = values.to(buffer.device)
        buffer.pos, buffer.size = n % capacity, n
        return buffer

    def check_env(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        """Raise ValueError naming both shapes when the dataset does not fit the env. An
        env of dict observations needs a dataset of dict observations with the same parts
        (``arrange_parts`` then orders them as the agent reads them); an env of one vector
        (``env.flatten_obs=true`` included) takes either, by the flat size."""
        if self.frames or _image_parts(observation_space):
            self._check_images(observation_space)
            return
        if isinstance(observation_space, gym.spaces.Dict):
            parts = {name: tuple(sub.shape) for name, sub in observation_space.spaces.items()}
            if self.obs_layout is None:
                raise ValueError(
                    f"dataset {self.source} has flat observations ({self.obs_dim},) and the "
                    f"env observes a dict of {sorted(parts)}: record the dataset from the dict "
                    "observations (python -m rlcore.offline.collect without flatten_obs) or "
                    "train on the flattened env (env.flatten_obs=true)"
                )
            if dict(self.obs_layout) != parts:
                raise ValueError(
                    f"dataset {self.source} observes the parts {dict(self.obs_layout)}, the env "
                    f"{parts}: load the dataset recorded on this environment"
                )
        env_obs, env_act = gym.spaces.flatdim(observation_space), gym.spaces.flatdim(action_space)
        if (env_obs, env_act) != (self.obs_dim, self.act_dim):
            raise ValueError(
                f"dataset {self.source} does not match the environment: dataset observation "
                f"shape ({self.obs_dim},) and action shape ({self.act_dim},), env observation "
                f"shape {observation_space.shape} and action shape {action_space.shape}. "
                "Load the dataset recorded on this environment (or pass the matching env)."
            )

    def _check_images(self, observation_space: gym.Space) -> None:
        """check_env where the env or the dataset observes images: the same parts, the
        images of the same shapes (uint8 both sides, frame stacks included)."""
        if isinstance(observation_space, gym.spaces.Dict):
            wanted = {name: tuple(sub.shape) for name, sub in observation_space.spaces.items()}
        else:
            wanted = {FLAT: tuple(observation_space.shape)}
        if self.obs_layout is not None:
            recorded = dict(self.obs_layout)
        elif self.frames:
            recorded = {FLAT: tuple(self.frames[FLAT].shape[1:])}
        else:
            recorded = {FLAT: (self.obs_dim,)}
        images = set(self.frames) == set(_image_parts(observation_space))
        if recorded != wanted or not images:
            raise ValueError(
                f"dataset {self.source} observes {recorded} (images: "
                f"{sorted(self.frames) or 'none'}), the env {wanted} (images: "
                f"{_image_parts(observation_space) or 'none'}): record the dataset with "
                "the env's observation (python -m rlcore.offline.collect obs=... image_size=... "
                "frame_stack=...)"
            )

    def arrange_parts(self, spec: ObsSpec) -> None:
        """Lay the flat observation columns out in ``spec``'s part order, in place: the
        one vector an agent reading dict observations trains on (``rlcore.buffers.FlatObs``
        concatenates its online batches in that order). ValueError when the parts differ."""
        if self.obs_layout is None or not spec.keyed:
            raise ValueError(
                f"dataset {self.source}: arrange_parts needs dict observations on both sides"
            )
        layout = dict(self.obs_layout)
        wanted = {part.name: part.shape for part in spec.parts}
        if layout != wanted:
            raise ValueError(f"dataset {self.source} has the parts {layout}, the spec {wanted}")
        starts, offset = {}, 0
        for name, shape in self.obs_layout:
            if name not in self.frames:  # image parts have no columns
                starts[name] = offset
                offset += math.prod(shape)
        columns = torch.cat([
            torch.arange(starts[part.name], starts[part.name] + part.size, dtype=torch.int64)
            for part in spec.parts if part.name not in self.frames
        ] or [torch.zeros(0, dtype=torch.int64)])  # fmt: skip
        self.obs, self.next_obs = self.obs[:, columns], self.next_obs[:, columns]
        self.obs_layout = tuple((part.name, part.shape) for part in spec.parts)


def chunk_rows(
    episode_id: torch.Tensor, length: int, backward: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows (N, L), valid (N, L)) for episodes stored contiguously in row order: row i's
    next ``length`` rows i .. i+L-1 (or, ``backward``, its previous ones i-L+1 .. i),
    clamped to the rows of row i's own episode; ``valid`` is False where clamped."""
    if length < 1:
        raise ValueError(f"chunk length {length} must be >= 1")
    n = len(episode_id)
    index = torch.arange(n)
    change = torch.ones(n + 1, dtype=torch.bool)
    change[1:n] = episode_id[1:] != episode_id[:-1]
    bounds = torch.nonzero(change).flatten()  # first row of every episode, then n
    episode = torch.searchsorted(bounds, index, right=True) - 1  # 0..E-1 per row
    first, last = bounds[episode], bounds[episode + 1] - 1
    offsets = torch.arange(length) - (length - 1 if backward else 0)
    wanted = index[:, None] + offsets[None, :]
    rows = torch.minimum(torch.maximum(wanted, first[:, None]), last[:, None])
    return rows, rows == wanted


def returns_to_go(rewards: np.ndarray, episode_ends: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted return-to-go of every row; the sum restarts after each ``episode_ends`` row
    (no bootstrap past an episode's end, whether it terminated or was truncated)."""
    out = np.empty(len(rewards), dtype=np.float64)
    running = 0.0
    ends = episode_ends.tolist()
    rews = np.asarray(rewards, dtype=np.float64).tolist()
    for i in range(len(rews) - 1, -1, -1):
        if ends[i]:
            running = 0.0
        running = rews[i] + gamma * running
        out[i] = running
    return out


# ----------------------------------------------------------------------------- validation


def _check_finite(name: str, array: np.ndarray, source: str, row_offset: int = 0) -> None:
    """Numbers only (bool allowed for flags), and no NaN/inf: else a DatasetError."""
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise DatasetError(
            f"'{name}' in {source} has dtype {array.dtype}; expected numbers (float or int, "
            "bool for terminals/timeouts): regenerate or convert the dataset"
        )
    if np.issubdtype(array.dtype, np.floating):
        bad = ~np.isfinite(array)
        if bad.any():
            row = int(np.argwhere(bad)[0][0])
            value = array[row] if array.ndim == 1 else array[row][bad[row]][0]
            raise DatasetError(
                f"'{name}' in {source} holds a non-finite value ({value}) at row "
                f"{row + row_offset}; clean or regenerate the dataset"
            )


def _check_lengths(arrays: dict[str, np.ndarray], source: str, what: str = "") -> None:
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        listing = ", ".join(f"{k}={v}" for k, v in lengths.items())
        raise DatasetError(f"arrays of {source}{what} differ in length: {listing}")


def _as_rows(name: str, array: np.ndarray, ndim: int, source: str) -> np.ndarray:
    """Check the dimensionality: scalars per row may come as (N,) or (N, 1)."""
    if ndim == 1 and array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != ndim:
        expected = "(N,)" if ndim == 1 else "(N, dim)"
        raise DatasetError(f"'{name}' in {source} has shape {array.shape}; expected {expected}")
    return array


# ----------------------------------------------------------------------------- assembly


def _assemble(
    rows: dict[str, np.ndarray],
    episode_ends: np.ndarray,
    keep: np.ndarray | None,
    gamma: float,
    source: str,
    env_id: str | None,
    ref_min_score: float | None,
    ref_max_score: float | None,
) -> OfflineDataset:
    """Episode ids, returns-to-go and episode returns on the full rows, then drop rows."""
    reward = rows["reward"].astype(np.float64)
    episode = np.concatenate([[0], np.cumsum(episode_ends[:-1])]).astype(np.int64)
    mc_return = returns_to_go(reward, episode_ends, gamma)
    episode_return = np.bincount(episode, weights=reward, minlength=int(episode[-1]) + 1)
    episode_cost = None
    if "cost" in rows:
        weights = rows["cost"].astype(np.float64)
        episode_cost = np.bincount(episode, weights=weights, minlength=int(episode[-1]) + 1)
    if keep is not None:
        rows = {k: v[keep] for k, v in rows.items()}
        mc_return, episode = mc_return[keep], episode[keep]
        kept_episodes, episode = np.unique(episode, return_inverse=True)
        episode_return = episode_return[kept_episodes]
        if episode_cost is not None:
            episode_cost = episode_cost[kept_episodes]
    if len(episode) == 0:
        raise DatasetError(f"{source} holds no usable transition")
    # every stored episode ends in terminated or truncated (a cut episode is truncated)
    last = np.append(episode[1:] != episode[:-1], True)
    truncated = rows["truncated"].astype(bool) | (last & ~rows["terminated"].astype(bool))
    rows = {**rows, "truncated": truncated}

    def f32(x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(x, dtype=np.float32))

    return OfflineDataset(
        obs=f32(rows["obs"]),
        action=f32(rows["action"]),
        reward=f32(rows["reward"]),
        next_obs=f32(rows["next_obs"]),
        terminated=f32(rows["terminated"]),
        truncated=f32(rows["truncated"]),
        episode_id=torch.as_tensor(episode, dtype=torch.int64),
        mc_return=f32(mc_return),
        episode_return=torch.as_tensor(episode_return, dtype=torch.float64),
        gamma=float(gamma),
        env_id=env_id,
        ref_min_score=None if ref_min_score is None else float(ref_min_score),
        ref_max_score=None if ref_max_score is None else float(ref_max_score),
        source=source,
        cost=f32(rows["cost"]) if "cost" in rows else None,
        episode_cost=None if episode_cost is None else torch.as_tensor(episode_cost),
    )


# ----------------------------------------------------------------------------- D4RL HDF5


def load_d4rl_hdf5(
    path: str | Path, gamma: float = 0.99, env_id: str | None = None
) -> OfflineDataset:
    """Load a D4RL-format HDF5 file (an optional ``costs`` key, DSRL's safe datasets,
    becomes the dataset's per-row cost).

    Episodes end where ``terminals`` or ``timeouts`` is set (and at the end of the file).
    With ``next_observations`` every row is kept. Without it, ``next_obs`` is the
    following row, and rows with no successor in their episode (timeouts, the file's last
    row) are dropped, as in D4RL's ``qlearning_dataset``; a terminal row keeps D4RL's
    ``next_obs`` (the following row; a terminal is never bootstrapped from). Departure: a
    row that is both terminal and timeout is kept as terminated (D4RL drops it and loses
    the termination). Either way, the last stored row of an episode that did not
    terminate gets ``truncated = 1``, so episode boundaries stay visible. ``mc_return``
    and ``episode_return`` are computed on the full episodes, before rows are dropped.
    """
    path = Path(path)
    source = str(path)
    with h5py.File(path, "r") as f:
        missing = [k for k in D4RL_KEYS if k not in f]
        if missing:
            raise DatasetError(
                f"{source} is missing key(s) {missing} of the D4RL format "
                f"(needs {list(D4RL_KEYS)}, optional 'next_observations'; has {sorted(f.keys())})"
            )
        data = {k: np.asarray(f[k][()]) for k in D4RL_KEYS}
        for optional in ("next_observations", "costs"):  # costs: DSRL's safe datasets
            if optional in f:
                data[optional] = np.asarray(f[optional][()])
    _check_lengths(data, source)
    for name in ("observations", "actions", "next_observations"):
        if name in data:
            data[name] = _as_rows(name, data[name], 2, source)
    for name in ("rewards", "terminals", "timeouts", "costs"):
        if name in data:
            data[name] = _as_rows(name, data[name], 1, source)
    if (
        "next_observations" in data
        and data["next_observations"].shape != data["observations"].shape
    ):
        raise DatasetError(
            f"'next_observations' in {source} has shape {data['next_observations'].shape}, "
            f"'observations' has {data['observations'].shape}"
        )
    for name, array in data.items():
        _check_finite(name, array, source)
    n = len(data["rewards"])
    if n == 0:
        raise DatasetError(f"{source} holds no transition")

    terminals = data["terminals"].astype(bool)
    timeouts = data["timeouts"].astype(bool)
    ends = terminals | timeouts
    ends[-1] = True  # the file's end closes the last episode
    obs = data["observations"]
    if "next_observations" in data:
        next_obs, keep, truncated = data["next_observations"], None, timeouts
    else:
        next_obs = np.concatenate([obs[1:], obs[-1:]])
        keep = terminals | ~ends
        keep[-1] = False  # no successor row, even when terminal (as D4RL)
        truncated = timeouts  # kept timeout rows are terminal ones; see the docstring
    rows = {
        "obs": obs,
        "action": data["actions"],
        "reward": data["rewards"],
        "next_obs": next_obs,
        "terminated": terminals,
        "truncated": truncated,
    }
    if "costs" in data:
        rows["cost"] = data["costs"]
    return _assemble(rows, ends, keep, gamma, source, env_id, None, None)


# ----------------------------------------------------------------------------- Minari


def _flatten(name: str, value: Any, space: gym.Space, source: str) -> np.ndarray:
    """Box -> (T, prod(shape)); Dict of Boxes -> concatenation in the space's key order
    (the order of ``gymnasium.spaces.flatten``). Image parts have no columns (their frames
    are kept apart: ``_episode_images``)."""
    if _image_parts(space):
        if isinstance(space, gym.spaces.Box):
            return np.zeros((len(value), 0), dtype=np.float32)
        vectors = {k: s for k, s in space.spaces.items() if not _image_parts(s)}
        return _flatten(name, value, gym.spaces.Dict(vectors), source)
    if isinstance(space, gym.spaces.Dict):
        parts = [_flatten(f"{name}/{k}", value[k], s, source) for k, s in space.spaces.items()]
        return np.concatenate(parts, axis=1)
    if isinstance(space, gym.spaces.Box):
        array = np.asarray(value)
        return array.reshape(len(array), -1)
    raise DatasetError(
        f"{source}: {name} use a {type(space).__name__} space; only Box (and Dict of Box) "
        "spaces are supported"
    )


def _episodes_with_minari(data_dir: Path) -> tuple[list[dict], dict, gym.Space, gym.Space]:
    from minari import MinariDataset

    dataset = MinariDataset(data_dir)
    episodes = [
        {
            "observations": ep.observations,
            "actions": ep.actions,
            "rewards": ep.rewards,
            "terminations": ep.terminations,
            "truncations": ep.truncations,
            **({"costs": ep.infos["cost"]} if "cost" in (ep.infos or {}) else {}),
        }
        for ep in dataset.iterate_episodes()
    ]
    metadata = dict(dataset.storage.metadata)
    spec = dataset.spec.env_spec
    metadata["env_id"] = spec.id if spec is not None else None
    return episodes, metadata, dataset.observation_space, dataset.action_space


def _episodes_from_hdf5(data_dir: Path) -> tuple[list[dict], dict, None, None]:
    """Read Minari's HDF5 layout directly (when minari cannot be imported): Box spaces."""
    metadata = json.loads((data_dir / MINARI_METADATA_FILE).read_text())
    env_spec = metadata.get("env_spec")
    metadata["env_id"] = json.loads(env_spec).get("id") if env_spec else None
    episodes = []
    with h5py.File(data_dir / MINARI_DATA_FILE, "r") as f:
        names = sorted(f.keys(), key=lambda k: int(k.rsplit("_", 1)[1]))
        for name in names:
            group = f[name]
            episode = {}
            for key in ("observations", "actions", "rewards", "terminations", "truncations"):
                if key not in group:
                    raise DatasetError(f"{data_dir / MINARI_DATA_FILE}: {name} has no '{key}'")
                if not isinstance(group[key], h5py.Dataset):
                    raise DatasetError(
                        f"{data_dir}: '{key}' is a nested space; install minari to load it"
                    )
                episode[key] = group[key][()]
            infos = group.get("infos")
            if isinstance(infos, h5py.Group) and "cost" in infos:
                episode["costs"] = infos["cost"][()]
            episodes.append(episode)
    return episodes, metadata, None, None


def _minari_data_dir(folder: Path) -> Path:
    for candidate in (folder / "data", folder):
        if (candidate / MINARI_DATA_FILE).is_file() and (
            candidate / MINARI_METADATA_FILE
        ).is_file():
            return candidate
    raise DatasetError(
        f"{folder} is not a Minari dataset folder: expected data/{MINARI_DATA_FILE} and "
        f"data/{MINARI_METADATA_FILE} inside it"
    )


def load_minari_folder(
    folder: str | Path, gamma: float = 0.99, env_id: str | None = None, source: str | None = None
) -> OfflineDataset:
    """Load a Minari dataset folder with Minari's own classes (or, when minari is not
    installed, by reading its HDF5 episodes directly). Episodes store T+1 observations
    and T actions/rewards/terminations/truncations; an episode whose last step has
    neither flag is treated as truncated."""
    data_dir = _minari_data_dir(Path(folder))
    source = source or str(folder)
    try:
        episodes, metadata, obs_space, act_space = _episodes_with_minari(data_dir)
    except ImportError:
        episodes, metadata, obs_space, act_space = _episodes_from_hdf5(data_dir)
    if not episodes:
        raise DatasetError(f"{source} holds no episode")
    images: dict[str, list[np.ndarray]] = {name: [] for name in _image_parts(obs_space)}

    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("obs", "action", "reward")}
    parts.update({k: [] for k in ("next_obs", "terminated", "truncated", "ends")})
    with_costs = ["costs" in ep for ep in episodes]
    if any(with_costs) and not all(with_costs):
        raise DatasetError(f"{source}: some episodes have infos['cost'] and some do not")
    if all(with_costs):
        parts["cost"] = []
    offset = 0
    for index, ep in enumerate(episodes):
        where = f" (episode {index})"
        if obs_space is not None:
            observations = _flatten("observations", ep["observations"], obs_space, source)
            actions = _flatten("actions", ep["actions"], act_space, source)
        else:
            observations = _as_rows("observations", np.asarray(ep["observations"]), 2, source)
            actions = _as_rows("actions", np.asarray(ep["actions"]), 2, source)
        steps = {
            "actions": actions,
            "rewards": _as_rows("rewards", np.asarray(ep["rewards"]), 1, source),
            "terminations": _as_rows("terminations", np.asarray(ep["terminations"]), 1, source),
            "truncations": _as_rows("truncations", np.asarray(ep["truncations"]), 1, source),
        }
        _check_lengths({"observations[1:]": observations[1:], **steps}, source, where)
        for name, array in {"observations": observations, **steps}.items():
            _check_finite(f"{name}{where}", array, source, row_offset=offset)
        length = len(steps["rewards"])
        if length == 0:
            continue
        for part, frames in _episode_images(ep["observations"], obs_space, length).items():
            images[part].append(frames)
        if "cost" in parts:  # Minari infos: T + 1 values (the reset's first), or T
            costs = _as_rows("infos/cost", np.asarray(ep["costs"], dtype=np.float64), 1, source)
            costs = costs[1:] if len(costs) == length + 1 else costs
            _check_lengths({"rewards": steps["rewards"], "infos/cost": costs}, source, where)
            _check_finite(f"infos/cost{where}", costs, source, row_offset=offset)
            parts["cost"].append(costs)
        terminated = steps["terminations"].astype(bool)
        truncated = steps["truncations"].astype(bool)
        ends = np.zeros(length, dtype=bool)
        ends[-1] = True
        for key, value in (
            ("obs", observations[:-1]),
            ("action", actions),
            ("reward", steps["rewards"]),
            ("next_obs", observations[1:]),
            ("terminated", terminated),
            ("truncated", truncated),
            ("ends", ends),
        ):
            parts[key].append(value)
        offset += length
    if not parts["ends"]:
        raise DatasetError(f"{source} holds no transition")
    rows = {k: np.concatenate(v) for k, v in parts.items()}
    ends = rows.pop("ends")
    dataset = _assemble(
        rows,
        ends,
        None,
        gamma,
        source,
        env_id or metadata.get("env_id"),
        metadata.get("ref_min_score"),
        metadata.get("ref_max_score"),
    )
    dataset.obs_layout = _layout(obs_space)
    dataset.recorded_env_id = metadata.get("env_id")
    if images:  # every episode's T + 1 frames one after the other
        lengths = torch.bincount(dataset.episode_id)
        starts = torch.cumsum(lengths + 1, 0) - (lengths + 1)
        first_row = torch.cumsum(lengths, 0) - lengths
        dataset.frames = {k: torch.as_tensor(np.concatenate(v)) for k, v in images.items()}
        dataset.frame_index = (
            starts[dataset.episode_id] + torch.arange(len(dataset)) - first_row[dataset.episode_id]
        )
    return dataset


def _episode_images(value: Any, space: gym.Space | None, length: int) -> dict[str, np.ndarray]:
    """The image parts of one episode's T + 1 observations, ``{part: uint8 (T+1, C, H, W)}``
    (the part of an image Box is ``"obs"``)."""
    if space is None or not _image_parts(space):
        return {}
    if isinstance(space, gym.spaces.Box):
        frames = {FLAT: np.asarray(value)}
    else:
        frames = {name: np.asarray(value[name]) for name in _image_parts(space)}
    for name, array in frames.items():
        expected = (length + 1, *_space_of(space, name).shape)
        if array.dtype != np.uint8 or array.shape != expected:
            raise DatasetError(
                f"image part {name!r} holds {array.dtype} {array.shape}, expected uint8 {expected}"
            )
    return frames


def _space_of(space: gym.Space, name: str) -> gym.Space:
    """Part ``name`` of a Dict space (the space itself for a Box)."""
    return space.spaces[name] if isinstance(space, gym.spaces.Dict) else space


def _image_parts(space: gym.Space | None, box_name: str = FLAT) -> list[str]:
    """The parts of an observation space that are images (uint8 Boxes of 3 dimensions);
    an image Box is the one part ``box_name``."""
    if isinstance(space, gym.spaces.Dict):
        return [name for name, sub in space.spaces.items() if _image_parts(sub)]
    is_image = (
        isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3
    )
    return [box_name] if is_image else []


def _layout(space: gym.Space | None) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """The parts of a Dict of Boxes in the flat columns' order (None for anything else:
    a nested dict reads as one flat vector)."""
    if not isinstance(space, gym.spaces.Dict) or not all(
        isinstance(sub, gym.spaces.Box) for sub in space.spaces.values()
    ):
        return None
    return tuple((name, tuple(sub.shape)) for name, sub in space.spaces.items())


# the levels the D4RL-like recipe (offline/recipe.py) records, and their ids
KINDS = ("random", "medium", "medium-replay", "expert", "medium-expert")


def dataset_ids(env: str, namespace: str = "local", version: int = 0) -> dict[str, str]:
    """Dataset id of every kind, e.g. ``local/hopper/medium-replay-v0``."""
    name = resolve_env_id(env).split("-v")[0].lower()
    return {kind: f"{namespace}/{name}/{kind}-v{version}" for kind in KINDS}


# ----------------------------------------------------------------------------- remote ids


def _offline_mode() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("MINARI_OFFLINE") or ""
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def _remote_host() -> tuple[str, int]:
    """Host to probe before a download: the HTTPS proxy if one is set, else the remote."""
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    if proxy:
        parsed = urlparse(proxy if "://" in proxy else f"http://{proxy}")
        return parsed.hostname or "", parsed.port or 80
    remote = os.environ.get("MINARI_REMOTE", "hf://farama-minari")
    if remote.startswith("gcp://"):
        return "storage.googleapis.com", 443
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    return urlparse(endpoint).hostname or "huggingface.co", 443


def _reachable(host: str, port: int, timeout: float) -> bool:
    """TCP connect in a daemon thread, so a hanging DNS lookup cannot block us."""
    result: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


def _download_minari(dataset_id: str, datasets_root: Path) -> None:
    """Minari's real download, failing within seconds without a network."""
    env = "<env>"
    parts = dataset_id.split("/")
    if len(parts) >= 3:  # namespace/<env>/<name>-vN, e.g. mujoco/hopper/medium-v0
        with contextlib.suppress(UnknownEnvError):
            env = resolve_env_id(parts[-2])
    hint = (
        f"dataset {dataset_id} is not available offline: create it with "
        f"`python -m rlcore.offline.collect env={env} policy=<run dir|random> steps=<n> "
        f"dataset_id={dataset_id}` or copy its folder into $MINARI_DATASETS_PATH "
        f"({datasets_root}/{dataset_id})"
    )
    start = time.monotonic()
    if not _offline_mode():
        host, port = _remote_host()
        if not _reachable(host, port, NETWORK_PROBE_TIMEOUT_S):
            raise DatasetNotAvailableError(f"{hint}. The remote ({host}) cannot be reached.")
    try:
        import minari

        minari.download_dataset(dataset_id)
    except ImportError as error:
        raise DatasetNotAvailableError(
            f"{hint}. Downloading needs {error.name or error}: pip install 'minari[hf]'"
        ) from error
    except Exception as error:  # network, offline mode, unknown id: all end the same way
        elapsed = time.monotonic() - start
        raise DatasetNotAvailableError(
            f"{hint}. Download failed after {elapsed:.1f}s: {type(error).__name__}: {error}"
        ) from error


def check_dataset_source(spec: str | Path) -> None:
    """Raise FileNotFoundError when ``spec`` names a file or folder (an .hdf5 / .h5 name or
    a path) that does not exist; a Minari id is looked up (or downloaded) when loaded."""
    path = Path(spec).expanduser()
    text = str(spec)
    if path.exists():
        return
    if path.suffix in {".hdf5", ".h5"} or text.startswith((".", "/", "~")):
        raise FileNotFoundError(
            f"dataset file {text} does not exist (dataset= takes a D4RL .hdf5 file, a Minari "
            "dataset folder or a Minari id)"
        )


def load_dataset(
    spec: str | Path, gamma: float = 0.99, env_id: str | None = None
) -> OfflineDataset:
    """Load a D4RL HDF5 file, a Minari dataset folder, or a Minari dataset id.

    ``gamma`` discounts ``mc_return``; ``env_id`` overrides (or, for D4RL files, supplies)
    the environment the data was recorded on. Ids are looked up under
    ``$MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``) and downloaded when missing.
    """
    check_dataset_source(spec)
    path = Path(spec).expanduser()
    if path.is_file():
        with h5py.File(path, "r") as f:
            is_minari = any(k.startswith("episode_") for k in f) and "observations" not in f
        if is_minari:
            return load_minari_folder(path.parent, gamma, env_id)
        return load_d4rl_hdf5(path, gamma, env_id)
    if path.is_dir():
        return load_minari_folder(path, gamma, env_id)
    text = str(spec)

    from minari.dataset.minari_dataset import parse_dataset_id
    from minari.storage.datasets_root_dir import get_dataset_path

    try:
        parse_dataset_id(text)
    except (ValueError, TypeError) as error:  # minari raises TypeError for ids without -vN
        raise DatasetError(
            f"'{text}' is neither an existing file or folder nor a Minari dataset id "
            "(namespace/name-vN, e.g. mujoco/hopper/medium-v0)"
        ) from error
    local = get_dataset_path(text)
    if not (local / "data").is_dir():
        _download_minari(text, get_dataset_path())
    return load_minari_folder(local, gamma, env_id, source=text)
