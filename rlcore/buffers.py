"""Replay and rollout buffers: preallocated torch tensors, no per-transition Python objects."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from rlcore.frames import DEFAULT_MARGIN, FrameStore
from rlcore.observations import ObsSpec
from rlcore.types import Batch, RolloutBatch

ArrayLike = np.ndarray | torch.Tensor
ObsArg = tuple[int, ...] | ObsSpec  # a buffer's observation: a shape (one vector) or a spec
OBS_FIELDS = ("obs", "next_obs")  # the transition fields that hold observations


def _as_tensor(x: ArrayLike, device: torch.device, dtype=torch.float32) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=dtype)
    return torch.as_tensor(np.asarray(x), dtype=dtype, device=device)


def next_actions(
    action: torch.Tensor, idx: torch.Tensor, successor: torch.Tensor, has_next: torch.Tensor
) -> dict[str, torch.Tensor]:
    """``Batch.extras`` ``next_action`` and ``has_next_action`` of rows ``idx`` of a
    store's ``action``: the action at row ``successor`` (the same episode's next step)
    where ``has_next``, the row's own action where the episode ended there or its next
    step is not stored (``has_next_action`` 0). ReBRAC's critic penalty and Cal-QL read
    them; a replay buffer and an offline dataset each know their successor rows (ring
    layout vs episode ids) and derive the rest here."""
    mask = has_next.reshape(-1, *([1] * (action.dim() - 1)))
    return {
        "next_action": torch.where(mask, action[successor], action[idx]),
        "has_next_action": has_next.float(),
    }


class Sampler(Protocol):
    """Anything a loop draws training batches from: ``ReplayBuffer``, an offline dataset
    (``rlcore.offline.datasets.OfflineDataset``, which owns its generator) and ``MixedSampler``.
    ``state_dict`` holds what sampling needs to continue exactly (e.g. the generator)."""

    def sample(self, batch_size: int) -> Batch: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


# channels whose names are ``Batch`` fields; every other channel goes to ``Batch.extras``
_BATCH_FIELDS = ("cost", "mc_return", "discount")
# a replay buffer's episode record (``track_episodes``), one int64 per row
EPISODE_CHANNELS = ("episode_step", "episode_env", "episode_start", "episode_length")
FRAME_ENV = "frames_env"  # a frame-storing buffer's env of each row (``frames=True``)
FRAME_PREFIX = "frames."  # ... and the counter of each image part: ``frames.<part>``


class ReplayBuffer:
    """Ring buffer of transitions written ``num_envs`` at a time, stored as named channels.

    Layout: the transition of env ``i`` at vector step ``t`` lives at row
    ``(t * num_envs + i) % capacity``. ``next_obs`` is stored explicitly, so the loop
    hands in the *final* observation of an episode that ended (not the reset one).

    Observations: ``obs_shape`` is a shape (one float32 vector, stored in the channels
    ``obs`` and ``next_obs``, as always) or an ``rlcore.observations.ObsSpec``; a keyed
    spec (dict observations) is stored one channel per part, ``obs.<part>`` and
    ``next_obs.<part>``, each in its part's dtype (images uint8). ``add`` then takes
    ``obs`` / ``next_obs`` as ``{part: (num_envs, *shape)}`` and ``Batch.obs`` /
    ``next_obs`` are ``{part: (B, *shape)}`` (``FlatObs`` concatenates them for agents
    that read one vector); ``buffer.obs`` reads as that dict of the stored tensors.

    The six transition fields (``FIELDS``) always exist; ``channels`` adds more, each
    ``name -> (shape, dtype)`` (e.g. ``{"mc_return": ((), torch.float32)}``). ``add`` takes
    them as keyword arguments; a channel left out of an ``add`` is written as zeros (the
    online rows of a buffer built from a dataset have no Monte-Carlo return).
    ``cost`` / ``mc_return`` / ``discount`` come back as the Batch fields of that name,
    the rest in ``Batch.extras``. With ``next_action=True``, ``sample`` also returns
    ``extras["next_action"]`` (the action stored for the same env one step later) and
    ``extras["has_next_action"]`` (0 where the episode ended or the next step is not
    stored yet; the own action stands in), as an offline dataset does.

    With ``frames=True`` every image part is stored one frame per step
    (``rlcore.frames.FrameStore``: a ring of frames per env and a counter per row) instead
    of two stacks per row; ``sample`` and ``batch`` rebuild the stacks, and ``sample``
    skips the rare rows whose oldest frame the ring has overwritten.
    """

    FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")

    def __init__(
        self,
        capacity: int,
        obs_shape: ObsArg,
        action_shape: tuple[int, ...],
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        seed: int = 0,
        action_dtype: torch.dtype = torch.float32,
        channels: dict[str, tuple[tuple[int, ...], torch.dtype]] | None = None,
        next_action: bool = False,
        track_episodes: bool = False,
        frames: bool = False,
        frame_margin: float = DEFAULT_MARGIN,
    ) -> None:
        """``action_dtype``: float32 for Box actions; int64 with ``action_shape=()`` for
        discrete action indices (``rlcore.spaces.action_storage`` gives both).
        ``track_episodes``: every row also records its episode (``EPISODE_CHANNELS``: the
        vector step it was written at, its env, the step its episode started at and the
        episode's length once it ended, 0 before), which hindsight relabelling
        (``rlcore.her``) reads to find a transition's episode. ``frames``: store the image
        parts one frame per step (``rlcore.frames``), the ring ``frame_margin`` larger
        than the rows it serves."""
        if capacity < num_envs:
            raise ValueError(f"capacity ({capacity}) must be >= num_envs ({num_envs})")
        self.capacity = int(capacity)
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.next_action = next_action
        self.obs_spec = spec = ObsSpec.of(obs_shape)
        self.frame_stores: dict[str, FrameStore] = {}
        if frames:
            if not spec.images:
                raise ValueError("frames=True stores image parts; this observation has none")
            rows_per_env = math.ceil(self.capacity / self.num_envs)
            self.frame_stores = {
                p.name: FrameStore(p, num_envs, rows_per_env, self.device, frame_margin)
                for p in spec.images
            }
        stored = [p for p in spec.parts if p.name not in self.frame_stores]  # as arrays
        # obs / next_obs -> {part: channel}: the field itself for one unkeyed part
        self.obs_channels = {
            field: {p.name: f"{field}.{p.name}" if spec.keyed else field for p in stored}
            for field in OBS_FIELDS
        }

        def observation(field: str) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
            return {self.obs_channels[field][p.name]: (p.shape, p.torch_dtype) for p in stored}

        specs = {
            **observation("obs"),
            "action": (tuple(action_shape), action_dtype),
            "reward": ((), torch.float32),
            **observation("next_obs"),
            "terminated": ((), torch.float32),
            "truncated": ((), torch.float32),
        }
        extra = dict(channels or {})
        if track_episodes:
            extra |= {name: ((), torch.int64) for name in EPISODE_CHANNELS}
        for name in self.frame_stores:
            specs[FRAME_PREFIX + name] = ((), torch.int64)
        if self.frame_stores:
            specs[FRAME_ENV] = ((), torch.int64)
        for name, (shape, dtype) in extra.items():
            if name in specs:
                raise ValueError(f"channel '{name}' is one of the fixed fields {self.FIELDS}")
            specs[name] = (tuple(shape), dtype)
        self.track_episodes = track_episodes
        self.steps = 0  # vector steps added (the episode channels count them)
        self.episode_start = np.zeros(num_envs, np.int64)  # each env's current episode
        self.specs = specs
        self.data = {
            name: torch.zeros((self.capacity, *shape), dtype=dtype, device=self.device)
            for name, (shape, dtype) in specs.items()
        }
        self.pos = 0
        self.size = 0
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(seed)

    def __getattr__(self, name: str) -> torch.Tensor:
        """Channels read as attributes: ``buffer.obs``, ``buffer.mc_return``."""
        data = self.__dict__.get("data")
        if data is not None and name in data:
            return data[name]
        parts = self.__dict__.get("obs_channels", {}).get(name)
        if data is not None and parts is not None:  # a keyed spec's obs / next_obs
            return {part: data[channel] for part, channel in parts.items()}
        raise AttributeError(f"{type(self).__name__} has no attribute or channel '{name}'")

    def __len__(self) -> int:
        return self.size

    @property
    def extra_channels(self) -> tuple[str, ...]:
        """Names of the channels beyond the six transition fields (and their parts)."""
        fields = {*self.FIELDS, *(c for f in OBS_FIELDS for c in self.obs_channels[f].values())}
        fields |= set(self._frame_channels())
        return tuple(name for name in self.specs if name not in fields)

    def _frame_channels(self) -> tuple[str, ...]:
        if not self.frame_stores:
            return ()
        return (*(FRAME_PREFIX + name for name in self.frame_stores), FRAME_ENV)

    def _observation_values(self, field: str, value: Any) -> dict[str, Any]:
        """``{channel: value}`` of one observation field as ``add`` got it (its parts in a
        frame store left out: ``_frame_values``)."""
        channels = self.obs_channels[field]
        if self.frame_stores:
            if not self.obs_spec.keyed:
                return {}
            if isinstance(value, Mapping):
                value = {k: v for k, v in value.items() if k not in self.frame_stores}
        if not self.obs_spec.keyed:
            if isinstance(value, Mapping):
                raise ValueError(f"{field} is a dict, but this buffer stores one array")
            return {field: value}
        if not isinstance(value, Mapping) or set(value) != set(channels):
            got = sorted(value) if isinstance(value, Mapping) else type(value).__name__
            raise ValueError(f"{field} must be a dict of the parts {list(channels)}, got {got}")
        return {channels[part]: value[part] for part in channels}

    def _frame_values(self, obs: Any, next_obs: Any) -> dict[str, Any]:
        """Write the image parts of a step into their frame stores; the row channels that
        find them again (each part's counter, the env)."""
        values: dict[str, Any] = {FRAME_ENV: np.arange(self.num_envs)}
        for name, store in self.frame_stores.items():
            if self.obs_spec.keyed:
                if not isinstance(obs, Mapping) or not isinstance(next_obs, Mapping):
                    raise ValueError("obs and next_obs must be dicts of the observation's parts")
                if name not in obs or name not in next_obs:
                    raise ValueError(f"obs and next_obs must hold the image part {name!r}")
                image, next_image = obs[name], next_obs[name]
            else:
                image, next_image = obs, next_obs
            values[FRAME_PREFIX + name] = store.write(
                _as_tensor(image, self.device, torch.uint8),
                _as_tensor(next_image, self.device, torch.uint8),
            )
        return values

    def add(
        self,
        obs: ArrayLike,
        action: ArrayLike,
        reward: ArrayLike,
        next_obs: ArrayLike,
        terminated: ArrayLike,
        truncated: ArrayLike,
        **channels: ArrayLike,
    ) -> None:
        """Write one vector step: every argument has leading dimension ``num_envs``."""
        unknown = set(channels) - set(self.specs)
        if unknown:
            raise ValueError(
                f"unknown channel(s) {sorted(unknown)}; this buffer has {list(self.specs)}"
            )
        n = self.num_envs
        values = dict(zip(self.FIELDS, (obs, action, reward, next_obs, terminated, truncated)))
        for field in OBS_FIELDS:
            values.update(self._observation_values(field, values.pop(field)))
        if self.frame_stores:
            values.update(self._frame_values(obs, next_obs))
        values.update(channels)
        if self.track_episodes:
            values |= {
                "episode_step": np.full(n, self.steps), "episode_env": np.arange(n),
                "episode_start": self.episode_start.copy(), "episode_length": np.zeros(n),
            }  # fmt: skip
        self._write(values, n, "num_envs")
        done = np.asarray(terminated, bool) | np.asarray(truncated, bool)
        for store in self.frame_stores.values():
            store.end_episodes(done.reshape(n))
        if self.track_episodes:
            self._end_episodes(done)
        self._advance(n)

    def add_rows(
        self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
        next_obs: torch.Tensor, terminated: torch.Tensor,
    ) -> None:  # fmt: skip
        """Write any number of unrelated transitions at once (a learned model's imagined
        steps, ``rlcore.model_based``: no episodes, never truncated), oldest rows
        overwritten first. A plain buffer of vector observations only."""
        if self.frame_stores or self.track_episodes or self.next_action or self.obs_spec.keyed:
            raise ValueError("add_rows writes plain transitions of vector observations")
        n = len(obs)
        if n > self.capacity:
            raise ValueError(f"add_rows: {n} rows do not fit a buffer of {self.capacity}")
        values = {"action": action, "reward": reward, "terminated": terminated}
        values["truncated"] = torch.zeros(n)
        for field, value in zip(OBS_FIELDS, (obs, next_obs)):
            values.update(self._observation_values(field, value))
        self._write(values, n, "rows")
        self._advance(n)

    def _write(self, values: dict[str, Any], n: int, what: str) -> None:
        """Put ``n`` rows of ``values`` (by channel; channels left out are zero) at the
        write position, wrapping around the ring."""
        if self.pos + n <= self.capacity:
            rows: slice | torch.Tensor = slice(self.pos, self.pos + n)
        else:
            rows = torch.arange(self.pos, self.pos + n, device=self.device) % self.capacity
        for name, target in self.data.items():
            if name not in values:
                target[rows] = 0
                continue
            tensor = _as_tensor(values[name], self.device, target.dtype)
            if tensor.shape[0] != n:
                raise ValueError(f"{name} has leading dim {tensor.shape[0]}, expected {what}={n}")
            target[rows] = tensor.reshape(target[rows].shape)

    def _advance(self, n: int) -> None:
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def cut_episodes(self) -> None:
        """End every env's episode at its newest stored row, as a truncation (a resumed run
        whose env cannot continue its episodes starts new ones): the row bootstraps as
        before, n-step windows and frame stacks stop there. Refused while tracking episodes
        for hindsight relabelling (their records would lose the cut)."""
        if self.track_episodes:
            raise ValueError("cut_episodes: not with track_episodes (hindsight relabelling)")
        if self.size == 0:
            return
        newest = (self.pos - self.num_envs + torch.arange(self.num_envs)) % self.capacity
        self.data["truncated"][newest.to(self.device)] = 1.0
        for store in self.frame_stores.values():
            store.end_episodes(np.ones(self.num_envs, bool))

    def _end_episodes(self, done: np.ndarray) -> None:
        """Write the length of every episode that ended in the step just added into its
        rows still in the buffer (a row overwritten since is another episode's)."""
        n, step = self.num_envs, self.steps
        for i in np.flatnonzero(done):
            length = step - int(self.episode_start[i]) + 1
            back = torch.arange(length - 1, -1, -1, device=self.device)  # steps before the end
            rows = (self.pos + int(i) - back * n) % self.capacity
            intact = (self.data["episode_step"][rows] == step - back) & (
                self.data["episode_env"][rows] == int(i)
            )
            self.data["episode_length"][rows[intact]] = length
            self.episode_start[i] = step + 1
        self.steps += 1

    def sample(self, batch_size: int) -> Batch:
        """Uniform sample with replacement (seeded, reproducible)."""
        return self.batch(self.sample_rows(batch_size))

    def sample_rows(self, batch_size: int) -> torch.Tensor:
        """The rows ``sample`` draws (on the buffer's device): uniform with replacement from
        the buffer's seeded generator, rows whose frames are gone drawn again."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty ReplayBuffer")
        idx = torch.randint(0, self.size, (batch_size,), generator=self.generator)
        if self.frame_stores:  # draw again for rows whose oldest frame is gone
            for _ in range(100):
                invalid = torch.nonzero(~self.frames_valid(idx.to(self.device))).flatten().cpu()
                if len(invalid) == 0:
                    break
                idx[invalid] = torch.randint(
                    0, self.size, (len(invalid),), generator=self.generator
                )
            else:
                raise RuntimeError(
                    "the frame store has overwritten the frames of most rows (episodes much "
                    "shorter than the frame stack): raise frame_margin"
                )
        return idx.to(self.device)

    def frames_valid(self, idx: torch.Tensor) -> torch.Tensor:
        """True where every image part of row ``idx`` still has all its frames (always,
        without a frame store)."""
        ok = torch.ones(idx.shape, dtype=torch.bool, device=self.device)
        if not self.frame_stores:
            return ok
        envs = self.data[FRAME_ENV][idx]
        for name, store in self.frame_stores.items():
            ok &= store.valid(envs, self.data[FRAME_PREFIX + name][idx])
        return ok

    def batch(self, idx: torch.Tensor) -> Batch:
        """The transitions at rows ``idx`` as a Batch (every channel)."""
        rows = {name: tensor[idx] for name, tensor in self.data.items()}
        images = self._frame_stacks(idx, rows)
        fields: dict[str, Any] = {}
        for name in self.FIELDS:
            parts = self.obs_channels.get(name)
            if parts is not None and self.obs_spec.keyed:
                stored = {part: rows.pop(channel) for part, channel in parts.items()}
                stored |= images.get(name, {})
                fields[name] = {part: stored[part] for part in self.obs_spec.names}
            elif parts is not None and images:  # one unkeyed image part
                fields[name] = next(iter(images[name].values()))
            else:
                fields[name] = rows.pop(name)
        fields.update({name: rows.pop(name) for name in _BATCH_FIELDS if name in rows})
        if self.next_action:
            successor = (idx + self.num_envs) % self.capacity
            rows |= next_actions(self.data["action"], idx, successor, self.has_successor(idx))
        return Batch(**fields, extras=rows)

    def _frame_stacks(
        self, idx: torch.Tensor, rows: dict[str, torch.Tensor]
    ) -> dict[str, dict[str, torch.Tensor]]:
        """``{field: {part: stacks}}`` of the image parts in frame stores, rebuilt for rows
        ``idx`` (their channels popped from ``rows``); refuses rows whose frames are gone."""
        if not self.frame_stores:
            return {}
        if not bool(self.frames_valid(idx).all()):
            raise ValueError(
                "some rows have lost their oldest frames to the frame ring (sample() skips "
                "them; pick rows with frames_valid)"
            )
        envs = rows.pop(FRAME_ENV)
        out: dict[str, dict[str, torch.Tensor]] = {field: {} for field in OBS_FIELDS}
        for name, store in self.frame_stores.items():
            obs, next_obs = store.stacks(envs, rows.pop(FRAME_PREFIX + name))
            out["obs"][name], out["next_obs"][name] = obs, next_obs
        return out

    def has_successor(self, idx: torch.Tensor) -> torch.Tensor:
        """True where row ``idx``'s env has its next transition stored: the episode did not
        end there and the row is not among the ``num_envs`` newest."""
        age = (self.pos - 1 - idx) % self.capacity  # 0 for the newest row
        ended = (self.data["terminated"][idx] + self.data["truncated"][idx]) > 0
        return (age >= self.num_envs) & ~ended

    def state_dict(self) -> dict:
        """Filled rows of every channel, write position and sampler RNG: enough to
        continue exactly."""
        data = {}
        for name, tensor in self.data.items():
            data[name] = tensor if self.size == self.capacity else tensor[: self.size].clone()
        state = {
            "data": data,
            "pos": self.pos,
            "size": self.size,
            "capacity": self.capacity,
            "generator": self.generator.get_state(),
        }
        if self.track_episodes:
            state["episodes"] = {"steps": self.steps, "start": self.episode_start.copy()}
        if self.frame_stores:
            state["frames"] = {
                name: store.state_dict() for name, store in self.frame_stores.items()
            }
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore a saved buffer. Loading into a larger buffer (a resumed run whose
        ``total_steps`` grew) keeps every transition, in chronological order."""
        size, saved_capacity = state["size"], state["capacity"]
        data = state["data"]
        if set(data) != set(self.data):
            raise ValueError(
                f"the saved replay buffer has channels {sorted(data)}, this one "
                f"{sorted(self.data)}: resume with the configuration that wrote it"
            )
        if saved_capacity != self.capacity:
            if size > self.capacity:
                raise ValueError(
                    f"the checkpoint's replay buffer holds {size} transitions but this buffer "
                    f"has capacity {self.capacity}; raise algo.buffer_size / total_steps"
                )
            if size == saved_capacity:  # wrapped: oldest row is at pos
                order = torch.cat([torch.arange(state["pos"], size), torch.arange(0, state["pos"])])
                data = {name: tensor[order] for name, tensor in data.items()}
            pos = size % self.capacity
        else:
            pos = state["pos"]
        for name, tensor in self.data.items():
            tensor[:size] = data[name].to(self.device)
        self.pos, self.size = pos, size
        self.generator.set_state(state["generator"])
        if self.track_episodes:
            self.steps = int(state["episodes"]["steps"])
            self.episode_start = np.asarray(state["episodes"]["start"]).copy()
        for name, store in self.frame_stores.items():
            store.load_state_dict(state["frames"][name])


class NStepReturns:
    """n-step transitions from a ``ReplayBuffer`` (Sutton & Barto, "Reinforcement Learning:
    An Introduction", 7.1; Rainbow's and DrQ-v2's ``nstep``): a sampled row's ``reward``
    becomes sum_{j<k} gamma^j r_{t+j} over the next k <= n steps of the same env,
    ``next_obs`` / ``terminated`` / ``truncated`` those of step t+k-1 and ``discount``
    gamma^k, so a critic's target is ``reward + discount * (1 - terminated) * V(next_obs)``.

    k < n where the episode ends first (its last step's flags are the ones kept, so a
    termination still stops bootstrapping) or where the env's later steps are not stored
    yet (the newest rows: a k-step return from the stored ``next_obs``, as valid). Rows
    are drawn by the buffer (``sample_rows``: its seeded generator), so resuming the
    buffer resumes the draws; nothing else is stored. Departure from DrQ-v2's sampler:
    it never starts a window in an episode's last n - 1 steps and always sums n rewards
    (DMC episodes only time out); here every stored row is drawn, each with the steps it has.
    """

    def __init__(self, buffer: ReplayBuffer, n: int, gamma: float) -> None:
        if n < 1:
            raise ValueError(f"n-step returns need n >= 1, got {n}")
        self.buffer, self.n, self.gamma = buffer, int(n), float(gamma)

    def sample(self, batch_size: int) -> Batch:
        return self.batch(self.buffer.sample_rows(batch_size))

    def batch(self, idx: torch.Tensor) -> Batch:
        """The n-step transitions starting at rows ``idx``."""
        buffer = self.buffer
        first = buffer.batch(idx)
        reward = first.reward.clone()
        discount = torch.full_like(reward, self.gamma)
        last, going = idx, buffer.has_successor(idx)
        for _ in range(1, self.n):
            following = (last + buffer.num_envs) % buffer.capacity
            reward = torch.where(
                going, reward + discount * buffer.data["reward"][following], reward
            )
            discount = torch.where(going, discount * self.gamma, discount)
            last = torch.where(going, following, last)
            going = going & buffer.has_successor(last)
        end = buffer.batch(last)
        return dataclasses.replace(
            first, reward=reward, next_obs=end.next_obs, terminated=end.terminated,
            truncated=end.truncated, discount=discount,
        )  # fmt: skip

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class MixedSampler:
    """Batches drawn from several samplers with exact per-batch counts.

    ``MixedSampler([(dataset, 0.5), (buffer, 0.5)])`` is RLPD's symmetric sampling: every
    batch of 256 holds 128 dataset rows then 128 buffer rows. Counts are the fractions
    times the batch size rounded by largest remainder (ties to the earlier source), so they
    always sum to the batch size. With ``final_fractions`` and ``anneal_batches`` the
    fractions move linearly from ``fractions`` to ``final_fractions`` over that many
    ``sample`` calls, then stay. Rows come in source order; optional Batch fields survive
    only where every source has them (``Batch.cat``). ``state_dict`` holds the call count
    only: each source's own state (buffer rows, generators) is saved by its owner.
    """

    def __init__(
        self,
        sources: Sequence[tuple[Sampler, float]],
        final_fractions: Sequence[float] | None = None,
        anneal_batches: int = 0,
    ) -> None:
        if not sources:
            raise ValueError("MixedSampler needs at least one (sampler, fraction) pair")
        self.samplers = [sampler for sampler, _ in sources]
        self.fractions = self._checked([fraction for _, fraction in sources], "fractions")
        self.final_fractions = (
            None if final_fractions is None else self._checked(final_fractions, "final_fractions")
        )
        if self.final_fractions is not None and len(self.final_fractions) != len(self.samplers):
            raise ValueError("final_fractions needs one value per source")
        self.anneal_batches = int(anneal_batches)
        self.calls = 0

    @staticmethod
    def _checked(fractions: Sequence[float], name: str) -> list[float]:
        values = [float(f) for f in fractions]
        if any(f < 0 for f in values) or abs(sum(values) - 1.0) > 1e-6:
            raise ValueError(f"MixedSampler {name} must be >= 0 and sum to 1, got {values}")
        return values

    def current_fractions(self) -> list[float]:
        """The fractions the next ``sample`` call uses (annealed by the call count)."""
        if self.final_fractions is None or self.anneal_batches <= 0:
            return list(self.fractions)
        progress = min(1.0, self.calls / self.anneal_batches)
        return [a + progress * (b - a) for a, b in zip(self.fractions, self.final_fractions)]

    def counts(self, batch_size: int) -> list[int]:
        """Rows per source for a batch of ``batch_size`` (exact, summing to it)."""
        shares = [f * batch_size for f in self.current_fractions()]
        counts = [int(math.floor(s + 1e-9)) for s in shares]
        remainders = sorted(range(len(shares)), key=lambda i: (-(shares[i] - counts[i]), i))
        for i in remainders[: batch_size - sum(counts)]:
            counts[i] += 1
        return counts

    def sample(self, batch_size: int) -> Batch:
        counts = self.counts(batch_size)
        self.calls += 1
        parts = [s.sample(c) for s, c in zip(self.samplers, counts) if c > 0]
        return Batch.cat(parts)

    def state_dict(self) -> dict:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        self.calls = int(state["calls"])


def flat_obs_batch(batch: Batch, spec: ObsSpec) -> Batch:
    """``batch`` with its dict ``obs`` / ``next_obs`` concatenated into one float32 vector
    each, the parts in ``spec``'s order (``ObsSpec.concat``)."""
    return dataclasses.replace(
        batch, obs=spec.concat(batch.obs), next_obs=spec.concat(batch.next_obs)
    )


class FlatObs:
    """A sampler whose dict observations reach the agent as one flat vector: ``sample``
    draws from ``sampler`` and concatenates the parts of ``obs`` / ``next_obs`` in the
    spec's order. An agent whose networks read one vector (every MLP agent) trains on dict
    observations of vectors through it (``rlcore.agent_state.Plumbing.batches``); a
    sampler that works on the parts (HER's relabelling of ``desired_goal``) sits below it.
    It holds no state: ``state_dict`` is the wrapped sampler's."""

    def __init__(self, sampler: Sampler, spec: ObsSpec) -> None:
        spec.flat_dim  # noqa: B018 - an image part: the encoder error, now
        self.sampler, self.spec = sampler, spec

    def sample(self, batch_size: int) -> Batch:
        return flat_obs_batch(self.sampler.sample(batch_size), self.spec)

    def state_dict(self) -> dict:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)


def draw(sampler: Sampler, batch_size: int, minibatches: int = 1) -> Batch:
    """``minibatches`` independent samples of ``batch_size`` rows, concatenated: an agent
    making ``utd_ratio`` critic steps per update splits them back with ``Batch.chunks``
    (each minibatch keeps a MixedSampler's exact fractions)."""
    return Batch.cat([sampler.sample(batch_size) for _ in range(minibatches)])


def minibatch_indices(
    rows: int, size: int, device: torch.device | str = "cpu", min_rows: int = 2
) -> list[torch.Tensor]:
    """One epoch's minibatches: a random permutation of ``rows`` cut into pieces of
    ``size`` rows. A last piece shorter than ``min_rows`` joins the one before it, so no
    minibatch is too small for per-minibatch statistics (a one-row minibatch has no
    standard deviation: standardised advantages would be NaN). Draws exactly one
    ``torch.randperm`` (the PPO-family epoch loops' random stream is unchanged)."""
    if rows < 1 or size < 1:
        raise ValueError(f"minibatch_indices needs rows >= 1 and size >= 1, got {rows}, {size}")
    order = torch.randperm(rows, device=device)
    pieces = list(order.split(size))
    if len(pieces) > 1 and len(pieces[-1]) < min_rows:
        last = pieces.pop()
        pieces[-1] = torch.cat([pieces[-1], last])
    return pieces


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    bootstrap_values: torch.Tensor,
    last_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a (T, N) rollout.

    At a truncation the value of the episode's final observation (``bootstrap_values``)
    is used; at a termination nothing is bootstrapped. Either way the recursion stops
    at an episode end, because the next row belongs to a new episode (same-step
    autoreset). ``last_values`` are V(obs after the last step). Returns (advantages,
    returns), both (T, N).
    """
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    done = torch.maximum(terminated, truncated)
    next_advantage = torch.zeros_like(last_values)
    next_value = last_values
    for t in reversed(range(steps)):
        # value of the state reached by step t, as seen from step t
        successor = torch.where(truncated[t] > 0, bootstrap_values[t], next_value)
        successor = successor * (1.0 - terminated[t])
        delta = rewards[t] + gamma * successor - values[t]
        next_advantage = delta + gamma * gae_lambda * (1.0 - done[t]) * next_advantage
        advantages[t] = next_advantage
        next_value = values[t]
    return advantages, advantages + values


def _copy_row(row: torch.Tensor, value: ArrayLike) -> None:
    """Write ``value`` into ``row``, a view of a store: ``copy_`` converts dtype and
    device in place."""
    source = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    row.copy_(source.reshape(row.shape))


class RolloutBuffer:
    """Fixed-length on-policy storage of shape (num_steps, num_envs).

    ``obs_shape``: a shape (one float32 vector) or an ``rlcore.observations.ObsSpec``; a
    keyed spec stores one tensor per part in its dtype (``self.obs`` is then ``{part:
    tensor}``, ``add`` takes ``{part: (num_envs, *shape)}`` and ``RolloutBatch.obs`` is a
    dict)."""

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shape: ObsArg,
        action_shape: tuple[int, ...],
        device: torch.device | str = "cpu",
        action_dtype: torch.dtype = torch.float32,
    ) -> None:
        """``action_dtype``: as ``ReplayBuffer``'s (int64, shape () for discrete actions)."""
        self.num_steps, self.num_envs = num_steps, num_envs
        self.device = torch.device(device)
        shape = (num_steps, num_envs)
        f32 = dict(dtype=torch.float32, device=self.device)
        self.obs_spec = spec = ObsSpec.of(obs_shape)
        self.obs: torch.Tensor | dict[str, torch.Tensor]
        if spec.keyed:
            self.obs = {
                p.name: torch.zeros((*shape, *p.shape), dtype=p.torch_dtype, device=self.device)
                for p in spec.parts
            }
        else:
            part = spec.parts[0]
            self.obs = torch.zeros(
                (*shape, *part.shape), dtype=part.torch_dtype, device=self.device
            )
        self.action = torch.zeros((*shape, *action_shape), dtype=action_dtype, device=self.device)
        self.log_prob = torch.zeros(shape, **f32)
        self.reward = torch.zeros(shape, **f32)
        self.value = torch.zeros(shape, **f32)
        self.terminated = torch.zeros(shape, **f32)
        self.truncated = torch.zeros(shape, **f32)
        self.bootstrap_value = torch.zeros(shape, **f32)
        self._stores = (  # in add()'s argument order
            self.obs,
            self.action,
            self.log_prob,
            self.reward,
            self.value,
            self.terminated,
            self.truncated,
            self.bootstrap_value,
        )
        self.extras: dict[str, torch.Tensor] = {}  # rollout channels, allocated on first add
        # constrained tasks: per-step cost, V_c(obs) and V_c(final obs) where truncated
        self.cost = torch.zeros(shape, **f32)
        self.cost_value = torch.zeros(shape, **f32)
        self.cost_bootstrap_value = torch.zeros(shape, **f32)
        self.has_cost = False  # set by the first add with costs
        self.step = 0

    def add(
        self,
        obs: ArrayLike,
        action: ArrayLike,
        log_prob: ArrayLike,
        reward: ArrayLike,
        value: ArrayLike,
        terminated: ArrayLike,
        truncated: ArrayLike,
        bootstrap_value: ArrayLike,
        extras: dict[str, torch.Tensor] | None = None,
        costs: tuple[ArrayLike, ArrayLike, ArrayLike] | None = None,
    ) -> None:
        """Store one vector step; ``bootstrap_value`` is V(final obs) where truncated, else 0.
        ``extras``: rollout channels, each (num_envs, ...) with the same keys every step.
        ``costs``: (cost, V_c(obs), V_c(final obs) where truncated else 0) on a constrained
        task, every step of the rollout."""
        if self.step >= self.num_steps:
            raise RuntimeError("RolloutBuffer is full: call compute() and reset()")
        t = self.step
        if (costs is not None) != self.has_cost and t > 0:
            raise ValueError("costs must be given at every step of a rollout or at none")
        self.has_cost = costs is not None
        fields = (obs, action, log_prob, reward, value, terminated, truncated, bootstrap_value)
        stores = self._stores
        if costs is not None:
            fields += tuple(costs)
            stores += (self.cost, self.cost_value, self.cost_bootstrap_value)
        for store, value_ in zip(stores, fields):
            if isinstance(store, dict):  # a keyed observation: one store per part
                if not isinstance(value_, Mapping) or set(value_) != set(store):
                    raise ValueError(f"obs must be a dict of the parts {list(store)}")
                for name, part_store in store.items():
                    _copy_row(part_store[t], value_[name])
            else:
                _copy_row(store[t], value_)
        extras = extras or {}
        if set(extras) != set(self.extras) and (t > 0 or self.extras):
            raise ValueError(f"rollout channels changed: {sorted(self.extras)} -> {sorted(extras)}")
        for name, value_ in extras.items():
            if name not in self.extras:
                shape = (self.num_steps, self.num_envs, *value_.shape[1:])
                self.extras[name] = torch.zeros(shape, dtype=value_.dtype, device=self.device)
            self.extras[name][t].copy_(value_)
        self.step += 1

    def compute(
        self,
        last_value: ArrayLike,
        gamma: float,
        gae_lambda: float,
        last_cost_value: ArrayLike | None = None,
        cost_gamma: float | None = None,
        cost_gae_lambda: float | None = None,
    ) -> RolloutBatch:
        """GAE over the full rollout, flattened to (num_steps * num_envs, ...). With costs
        stored, the cost's GAE too (``last_cost_value`` = V_c(obs after the last step);
        ``cost_gamma`` / ``cost_gae_lambda`` default to the reward's)."""
        if self.step != self.num_steps:
            raise RuntimeError(f"rollout incomplete: {self.step}/{self.num_steps} steps")
        n = self.num_steps * self.num_envs
        cost_fields = {}
        if self.has_cost:
            if last_cost_value is None:
                raise ValueError("the rollout holds costs: pass last_cost_value (V_c)")
            cost_advantages, cost_returns = compute_gae(
                self.cost,
                self.cost_value,
                self.terminated,
                self.truncated,
                self.cost_bootstrap_value,
                _as_tensor(last_cost_value, self.device).reshape(self.num_envs),
                gamma if cost_gamma is None else cost_gamma,
                gae_lambda if cost_gae_lambda is None else cost_gae_lambda,
            )
            cost_fields = {
                "cost_value": self.cost_value.reshape(n),
                "cost_advantage": cost_advantages.reshape(n),
                "cost_returns": cost_returns.reshape(n),
            }
        advantages, returns = compute_gae(
            self.reward,
            self.value,
            self.terminated,
            self.truncated,
            self.bootstrap_value,
            _as_tensor(last_value, self.device).reshape(self.num_envs),
            gamma,
            gae_lambda,
        )

        def flat(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(n, *x.shape[2:])

        return RolloutBatch(
            obs={k: flat(v) for k, v in self.obs.items()}
            if isinstance(self.obs, dict)
            else flat(self.obs),
            action=self.action.reshape(n, *self.action.shape[2:]),
            log_prob=self.log_prob.reshape(n),
            value=self.value.reshape(n),
            advantage=advantages.reshape(n),
            returns=returns.reshape(n),
            extras={k: v.reshape(n, *v.shape[2:]) for k, v in self.extras.items()},
            **cost_fields,
        )

    def reset(self) -> None:
        self.step = 0
