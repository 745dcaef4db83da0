"""What an observation is, said once: ``ObsSpec``, the seam every consumer reads.

An observation is one or more named parts (``ObsPart``): a vector (float32, any shape,
read flattened) or an image (uint8, channel-first ``(frame_stack * C, H, W)``). A Box
observation is one part named ``"obs"`` (``keyed=False``: the env hands out one array,
exactly as before the seam); a Dict observation is one part per key (``keyed=True``: the
env hands out ``{name: array}``). Who reads the spec:

* buffers (``rlcore.buffers``): one storage tensor per part for ``obs`` and ``next_obs``
  (images as uint8); ``Batch.obs`` is a tensor for an unkeyed spec, a dict of tensors
  for a keyed one;
* networks (``rlcore.nets.ObsEncoder``): the parts concatenated in the spec's order,
  vectors flattened, images through an encoder the caller gives; ``ObsSpec.flat_dim``
  is the input size of an MLP on an all-vector spec, and an agent whose networks read one
  vector gets dict observations flattened for it (``rlcore.agent_state.Plumbing``:
  ``numpy_act`` when acting, ``rlcore.buffers.FlatObs`` for its update batches);
* normalisers (``PartNormalizer``): the parts marked ``normalize`` are standardised with
  running statistics (images never), a part may use another's statistics
  (``desired_goal`` those of ``achieved_goal``);
* checkpoints (``describe`` / ``from_record``: the ``"obs"`` entry of a checkpoint's
  ``"spaces"`` record, beside ``"obs_shape"`` for older readers), ``rlcore.load_policy``
  (dict observations in) and ``rlcore.export`` (one ONNX / TorchScript input per part).

Goal-conditioned tasks (gymnasium-robotics' dict observations) put their parts in the
order of ``GOAL_PARTS``; every other key follows in the space's own order.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch

VECTOR, IMAGE = "vector", "image"
KINDS = (VECTOR, IMAGE)
FLAT = "obs"  # the one part of a Box observation
# goal-conditioned observations (gymnasium-robotics, the robot tasks): this order, once
GOAL_PARTS = ("observation", "achieved_goal", "desired_goal")
# a part standardised with another part's statistics (both goals live in one goal space)
SHARED_STATISTICS = {"desired_goal": "achieved_goal"}
DTYPES = {"float32": torch.float32, "uint8": torch.uint8}
KIND_DTYPE = {VECTOR: "float32", IMAGE: "uint8"}

ObsLike = np.ndarray | torch.Tensor | Mapping[str, Any]


@runtime_checkable
class StackedFrames(Protocol):
    """A vector env whose image observations stack ``frame_stack`` frames along their
    first axis, oldest first (Atari: 4; ``rlcore.envs.atari.AtariVectorBackend``): what a
    gym Box cannot say, and what the replay buffer needs to keep each frame once."""

    frame_stack: int


def frame_stack_of(env: Any) -> int:
    """The frames each image observation of vector env ``env`` stacks (1 unless its back
    end declares ``StackedFrames``)."""
    base = env.unwrapped
    return int(base.frame_stack) if isinstance(base, StackedFrames) else 1


def image_encoder_needed(part: ObsPart) -> str:
    """The one message for an image part that reaches a network without an encoder."""
    return (
        f"image parts need an image encoder: pass one (rlcore.nets.ObsEncoder(spec, "
        f"image_encoder=rlcore.nets.image_encoder('nature' | 'impala' | 'drq'))); part "
        f"{part.name!r} is {part.dtype} {part.shape} (frame stack {part.frame_stack}); "
        f"DQN builds one with algo.encoder=nature | impala | drq"
    )


@dataclass(frozen=True)
class ObsPart:
    """One named part of an observation.

    ``kind`` "vector": ``dtype`` float32 (what buffers store and networks read, whatever
    the env's dtype), any ``shape``, read flattened; standardised by default. "image":
    ``dtype`` uint8, ``shape`` ``(frame_stack * C, H, W)`` channel-first, frames oldest
    first; never standardised (an encoder scales its pixels). ``statistics`` names the part
    whose running statistics standardise this one (None: its own)."""

    name: str
    shape: tuple[int, ...]
    kind: str = VECTOR
    dtype: str = ""  # "" -> the kind's ("float32" | "uint8")
    normalize: bool | None = None  # None -> vectors yes, images no
    frame_stack: int = 1
    statistics: str | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: the defaults resolved once, here
        set_(self, "shape", tuple(int(s) for s in self.shape))
        if not self.name or "." in self.name:
            raise ValueError(f"part name {self.name!r}: a non-empty name without '.'")
        if self.kind not in KINDS:
            raise ValueError(f"part {self.name!r}: kind {self.kind!r}, choose from {KINDS}")
        set_(self, "dtype", self.dtype or KIND_DTYPE[self.kind])
        if self.dtype != KIND_DTYPE[self.kind]:
            raise ValueError(
                f"part {self.name!r}: a {self.kind} part is {KIND_DTYPE[self.kind]}, "
                f"got {self.dtype}"
            )
        if self.normalize is None:
            set_(self, "normalize", self.kind == VECTOR)
        if self.kind == IMAGE:
            if self.normalize:
                raise ValueError(f"image part {self.name!r}: images are never standardised")
            if len(self.shape) != 3 or self.frame_stack < 1 or self.shape[0] % self.frame_stack:
                raise ValueError(
                    f"image part {self.name!r}: shape (frame_stack * C, H, W) with "
                    f"frame_stack >= 1 dividing the first axis, got {self.shape} and "
                    f"frame_stack {self.frame_stack}"
                )
        elif self.frame_stack != 1:
            raise ValueError(f"vector part {self.name!r}: frame_stack is for images")

    @property
    def size(self) -> int:
        """Numbers in one observation of this part (a vector's flattened length)."""
        return math.prod(self.shape)

    @property
    def channels(self) -> int:
        """An image's channels per frame (C)."""
        return self.shape[0] // self.frame_stack

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def space(self) -> gym.spaces.Box:
        """A gym Box of this part: unbounded float32, or a uint8 image in [0, 255]."""
        if self.kind == IMAGE:
            return gym.spaces.Box(0, 255, self.shape, np.uint8)
        return gym.spaces.Box(-np.inf, np.inf, self.shape, np.float32)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name, "shape": list(self.shape), "kind": self.kind,
            "dtype": self.dtype, "normalize": bool(self.normalize),
            "frame_stack": self.frame_stack, "statistics": self.statistics,
        }  # fmt: skip


def _part_of_box(name: str, space: gym.spaces.Box, frame_stack: int) -> ObsPart:
    """A Box as a part: uint8 with three axes is a channel-first image, any other Box a
    vector (what an MLP read from it before the seam: its flattened values)."""
    if space.dtype == np.uint8 and len(space.shape) == 3:
        return ObsPart(name, space.shape, IMAGE, frame_stack=frame_stack)
    if frame_stack != 1:
        raise ValueError(f"part {name!r} is a vector ({space}): frame_stack is for images")
    return ObsPart(name, space.shape)


@dataclass(frozen=True)
class ObsSpec:
    """An observation: its parts, in the order networks read them, and whether the env
    hands them out as a dict (``keyed``) or as one array (one part, ``FLAT``)."""

    parts: tuple[ObsPart, ...]
    keyed: bool = False
    _index: dict[str, ObsPart] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.parts))
        names = [part.name for part in self.parts]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"an observation has parts with distinct names, got {names}")
        if not self.keyed and len(self.parts) != 1:
            raise ValueError("an unkeyed observation (one array) has exactly one part")
        index = {part.name: part for part in self.parts}
        object.__setattr__(self, "_index", index)
        for part in self.parts:
            source = index.get(part.statistics) if part.statistics is not None else part
            if source is None or (part.statistics is not None and (
                source.statistics is not None or source.shape != part.shape
                or not (part.normalize and source.normalize and source.kind == VECTOR)
            )):  # fmt: skip
                raise ValueError(
                    f"part {part.name!r} is standardised with the statistics of "
                    f"{part.statistics!r}: that must be a standardised vector part of the "
                    "same shape with its own statistics"
                )

    # ---------------------------------------------------------------- construction

    @classmethod
    def vector(cls, shape: tuple[int, ...]) -> ObsSpec:
        """One float vector (a Box observation): the spec of every run before the seam."""
        return cls((ObsPart(FLAT, tuple(shape)),))

    @classmethod
    def from_space(cls, space: gym.Space, frame_stack: int | Mapping[str, int] = 1) -> ObsSpec:
        """The spec of a gym observation space: a Box (one part), or a Dict of Boxes (one
        part per key: ``GOAL_PARTS`` first, in that order, then the other keys in the
        space's order; ``desired_goal`` standardised with ``achieved_goal``'s statistics
        when both are vectors of one shape). uint8 Boxes with three axes are images,
        ``(frame_stack * C, H, W)``; ``frame_stack`` (one number for every image part, or one
        per part name)
        says how many frames their first axis stacks (a gym Box cannot say it)."""

        def stack(name: str) -> int:
            if isinstance(frame_stack, Mapping):
                return int(frame_stack.get(name, 1))
            return int(frame_stack)

        if isinstance(space, gym.spaces.Box):
            return cls((_part_of_box(FLAT, space, stack(FLAT)),))
        if not isinstance(space, gym.spaces.Dict):
            raise ValueError(
                f"observations are a Box or a Dict of Boxes, got {space} (env.flatten_obs=true "
                "flattens it into one vector)"
            )
        for name, sub in space.spaces.items():
            if not isinstance(sub, gym.spaces.Box):
                raise ValueError(
                    f"dict observation part {name!r} is {sub}: parts are Boxes "
                    "(env.flatten_obs=true flattens the whole observation into one vector)"
                )
        order = [n for n in GOAL_PARTS if n in space.spaces]
        order += [n for n in space.spaces if n not in GOAL_PARTS]
        parts = {}
        for name in order:
            sub = space.spaces[name]
            image = sub.dtype == np.uint8 and len(sub.shape) == 3
            # one number is every image part's stack (vectors stack nothing)
            given = stack(name) if isinstance(frame_stack, Mapping) or image else 1
            parts[name] = _part_of_box(name, sub, given)
        for name, source in SHARED_STATISTICS.items():
            part, other = parts.get(name), parts.get(source)
            if (part is not None and other is not None and part.kind == other.kind == VECTOR
                    and part.shape == other.shape):  # fmt: skip
                parts[name] = ObsPart(name, part.shape, statistics=source)
        return cls(tuple(parts.values()), keyed=True)

    @classmethod
    def of(cls, value: ObsSpec | gym.Space | tuple[int, ...] | list[int]) -> ObsSpec:
        """A spec as it is, a gym space's (``from_space``), or a shape's (``vector``):
        what a buffer's ``obs_shape`` argument may be."""
        if isinstance(value, ObsSpec):
            return value
        if isinstance(value, gym.Space):
            return cls.from_space(value)
        return cls.vector(tuple(value))

    # ---------------------------------------------------------------- reading

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(part.name for part in self.parts)

    def part(self, name: str) -> ObsPart:
        if name not in self._index:
            raise KeyError(f"no observation part {name!r} (parts: {list(self.names)})")
        return self._index[name]

    @property
    def all_vector(self) -> bool:
        return all(part.kind == VECTOR for part in self.parts)

    @property
    def images(self) -> tuple[ObsPart, ...]:
        return tuple(part for part in self.parts if part.kind == IMAGE)

    def statistic_sources(self) -> dict[str, str]:
        """Every part a normaliser standardises -> the part whose running statistics do it
        (``statistics``, else its own): what ``PartNormalizer`` and the env-side
        ``NormalizeObservation`` (``part_statistics``) read."""
        return {part.name: part.statistics or part.name for part in self.parts if part.normalize}

    @property
    def flat_dim(self) -> int:
        """Length of the one vector the parts concatenate into (an MLP's input); an
        image part raises (it needs an encoder, ``rlcore.nets.ObsEncoder``)."""
        for part in self.images:
            raise ValueError(image_encoder_needed(part))
        return sum(part.size for part in self.parts)

    # ---------------------------------------------------------------- records

    def describe(self) -> dict[str, Any]:
        """Plain description (a checkpoint's ``spaces["obs"]``)."""
        return {"keyed": self.keyed, "parts": [part.describe() for part in self.parts]}

    def spaces_record(self) -> dict[str, Any]:
        """The observation's entries of a checkpoint's ``"spaces"`` record: ``"obs"`` (this
        spec) and ``"obs_shape"`` for readers from before the seam (a Box's shape; the
        flat vector's length for a dict of vectors; None with images)."""
        if not self.keyed:
            shape: list[int] | None = list(self.parts[0].shape)
        else:
            shape = [self.flat_dim] if self.all_vector else None
        return {"obs_shape": shape, "obs": self.describe()}

    @classmethod
    def from_record(cls, spaces: Mapping[str, Any]) -> ObsSpec:
        """The spec a checkpoint's ``"spaces"`` record describes; a record written before
        the seam (``obs_shape`` only) is the one-part vector spec of that shape."""
        if "obs" not in spaces:
            return cls.vector(tuple(spaces["obs_shape"]))
        record = spaces["obs"]
        parts = tuple(
            ObsPart(
                p["name"],
                tuple(p["shape"]),
                p["kind"],
                p["dtype"],
                p["normalize"],
                p["frame_stack"],
                p["statistics"],
            )  # fmt: skip
            for p in record["parts"]
        )
        return cls(parts, keyed=bool(record["keyed"]))

    def to_space(self) -> gym.Space:
        """A gym space agents are built from (``rlcore.policies.load_agent``): an unbounded
        float32 Box for a vector (as checkpoints were always rebuilt), a uint8 Box for an
        image, a Dict in the spec's order for a keyed spec. ``from_space`` of it gives this
        spec back, except an image's ``frame_stack`` (a Box cannot hold it)."""
        if not self.keyed:
            return self.parts[0].space()
        return gym.spaces.Dict(OrderedDict((part.name, part.space()) for part in self.parts))

    # ---------------------------------------------------------------- tensors

    def tensors(
        self, obs: ObsLike, device: torch.device | str
    ) -> tuple[torch.Tensor | dict[str, torch.Tensor], bool]:
        """Observation(s) as tensors on ``device`` in each part's dtype, batched (B, ...):
        one tensor for an unkeyed spec, ``{name: tensor}`` in the spec's order for a keyed
        one; and whether a single observation (no batch axis) was given."""
        if not self.keyed:
            tensor, single = self._part_tensor(self.parts[0], obs, device)
            return tensor, single
        if not isinstance(obs, Mapping):
            raise TypeError(
                f"this observation has parts {list(self.names)}: pass a dict of arrays, "
                f"got {type(obs).__name__}"
            )
        missing = [name for name in self.names if name not in obs]
        if missing:
            raise KeyError(f"observation lacks part(s) {missing} (has {sorted(obs)})")
        out, singles = {}, set()
        for part in self.parts:
            out[part.name], single = self._part_tensor(part, obs[part.name], device)
            singles.add(single)
        if len(singles) != 1:
            raise ValueError("observation parts mix single observations and batches")
        return out, singles.pop()

    @staticmethod
    def _part_tensor(
        part: ObsPart, value: Any, device: torch.device | str
    ) -> tuple[torch.Tensor, bool]:
        if isinstance(value, torch.Tensor):
            tensor = value.to(device=device, dtype=part.torch_dtype)
        else:
            tensor = torch.as_tensor(np.asarray(value), dtype=part.torch_dtype, device=device)
        single = tensor.dim() == len(part.shape)
        if tuple(tensor.shape if single else tensor.shape[1:]) != part.shape:
            raise ValueError(
                f"observation part {part.name!r} has shape {tuple(tensor.shape)}, expected "
                f"{part.shape} or (B, *{part.shape})"
            )
        return (tensor.unsqueeze(0) if single else tensor), single

    def concat(
        self,
        obs: torch.Tensor | Mapping[str, torch.Tensor],
        encoders: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """(B, features): the parts in the spec's order, vectors flattened, each image
        through ``encoders[name]`` (none given: the image-encoder error). An unkeyed vector
        observation is returned as it is (the input networks read before the seam)."""
        encoders = encoders or {}
        if not self.keyed:
            part = self.parts[0]
            if part.kind == VECTOR:
                return obs  # type: ignore[return-value]
            obs = {part.name: obs}  # type: ignore[dict-item]
        assert isinstance(obs, Mapping)
        rows = obs[self.parts[0].name].shape[0]
        pieces = []
        for part in self.parts:
            value = obs[part.name]
            if part.kind == IMAGE:
                if part.name not in encoders:
                    raise ValueError(image_encoder_needed(part))
                pieces.append(encoders[part.name](value))
            else:
                pieces.append(value.reshape(rows, -1).to(torch.float32))
        return torch.cat(pieces, dim=-1)

    def flat_batch(self, obs: ObsLike, device: torch.device | str) -> tuple[torch.Tensor, bool]:
        """Observation(s) as the one float32 (B, flat_dim) vector of an all-vector spec
        (``tensors`` then ``concat``), and whether a single observation was given."""
        self.flat_dim  # noqa: B018 - images: the encoder error, before any conversion
        tensors, single = self.tensors(obs, device)
        return self.concat(tensors), single

    def split(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Inverse of ``concat`` for an all-vector spec: (B, flat_dim) -> ``{name: (B,
        *shape)}`` (views)."""
        sizes = [part.size for part in self.parts]
        if flat.shape[-1] != self.flat_dim:
            raise ValueError(f"a flat observation of {self.flat_dim} values, got {flat.shape}")
        pieces = flat.split(sizes, dim=-1)
        return {p.name: x.reshape(*flat.shape[:-1], *p.shape) for p, x in zip(self.parts, pieces)}


# ----------------------------------------------------------------------------- normaliser


def part_statistics(space: gym.spaces.Dict) -> dict[str, str]:
    """The env-side normaliser's ``part_statistics`` for a Dict of vectors: its spec's
    ``statistic_sources`` (rlcore.build hands this function to ``make_vec_env``)."""
    return ObsSpec.from_space(space).statistic_sources()


class PartNormalizer:
    """Running standardisation of observations part by part, as the spec marks them.

    Each part with ``normalize`` is standardised, ``(x - mean) / sqrt(var + epsilon)``
    clipped to +-``clip`` (float32 out), with the running statistics of the part its
    ``statistics`` names, or its own; images and parts without ``normalize`` pass
    unchanged. ``update`` feeds each statistic its own part's rows only: a part that uses
    another's statistics (``desired_goal``) never moves them. The statistics are
    ``rlcore.envs.make.RunningMeanStd``'s (Chan et al.'s parallel update, float64, prior
    count 1e-4), the same as the env-side ``NormalizeObservation``'s, so an unkeyed vector
    spec standardises exactly as that wrapper does.

    Goals: both goal parts live in one goal space, so ``desired_goal`` is standardised with
    the statistics of ``achieved_goal`` (``SHARED_STATISTICS``). OpenAI baselines' HER
    keeps one goal normaliser for the goal input (``her/ddpg.py``: ``g_stats``, updated with
    the goals its sampler hands out after relabelling, i.e. mostly achieved goals);
    Stable-Baselines3 has no in-agent normaliser and its ``VecNormalize`` keeps one
    statistic per dict key (``norm_obs_keys``), so there a desired goal has its own.

    Observations: an array (unkeyed spec) or ``{name: array}``, numpy or torch, batched
    (B, ...). ``state_dict`` holds one entry per statistic (numpy arrays)."""

    def __init__(self, spec: ObsSpec, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        from rlcore.envs.make import RunningMeanStd

        self.spec, self.clip, self.epsilon = spec, float(clip), float(epsilon)
        self.sources = spec.statistic_sources()  # part -> the part whose statistics do it
        self.stats = {
            name: RunningMeanStd(spec.part(name).shape)
            for name in dict.fromkeys(self.sources.values())
        }
        self._flat: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # cache

    def _parts(self, obs: ObsLike) -> Mapping[str, Any]:
        return obs if self.spec.keyed else {self.spec.parts[0].name: obs}  # type: ignore[return-value]

    def update(self, obs: ObsLike) -> None:
        """Add a batch of observations (B, ...) per part to the statistics."""
        self._update_parts(self._parts(obs))

    def update_flat(self, flat: torch.Tensor) -> None:
        """``update`` from flattened observations (B, flat_dim), the parts in the spec's
        order: what an MLP agent's update batch holds (``ObsSpec.concat``)."""
        self._update_parts(self.spec.split(flat))

    def _update_parts(self, parts: Mapping[str, Any]) -> None:
        for name, stats in self.stats.items():
            stats.update(parts[name])
        self._flat = None

    def standardize_flat(self, flat: torch.Tensor) -> torch.Tensor:
        """Flattened observations (B, flat_dim) standardised part by part, exactly as
        ``normalize`` standardises the parts (float64 arithmetic, clip, float32 out; parts
        without ``normalize`` unchanged). An MLP agent applies it inside its torch
        functions (``rlcore.agent_state.Plumbing.standardize``), so an exported policy
        carries the statistics of the moment it was exported."""
        if self._flat is None or self._flat[0].device != flat.device:
            means, variances, marks = [], [], []
            for part in self.spec.parts:
                source = self.sources.get(part.name)
                stats = self.stats[source] if source is not None else None
                means.append(_numpy(stats.mean).ravel() if stats else np.zeros(part.size))
                variances.append(_numpy(stats.var).ravel() if stats else np.ones(part.size))
                marks.append(np.full(part.size, stats is not None))
            variance = torch.as_tensor(
                np.concatenate(variances), dtype=torch.float64, device=flat.device
            )
            self._flat = (
                torch.as_tensor(np.concatenate(means), dtype=torch.float64, device=flat.device),
                (variance + self.epsilon) ** 0.5,  # as ``_standardise`` computes it
                torch.as_tensor(np.concatenate(marks), device=flat.device),
            )
        mean, std, marked = self._flat
        x = flat.double()
        scaled = ((x - mean) / std).clamp(-self.clip, self.clip)
        return torch.where(marked, scaled, x).float()

    def normalize(self, obs: ObsLike) -> ObsLike:
        """The observations with every standardised part replaced (a new dict; an unkeyed
        spec's array in, array out)."""
        parts = self._parts(obs)
        out = {}
        for name, value in parts.items():
            source = self.sources.get(name)
            out[name] = value if source is None else self._standardise(value, self.stats[source])
        return out if self.spec.keyed else out[self.spec.parts[0].name]

    def _standardise(self, value: Any, stats: Any) -> Any:
        from rlcore.envs.make import standardise

        if not isinstance(value, torch.Tensor):
            value = np.asarray(value)
        return standardise(value, stats, self.clip, self.epsilon)

    def state_dict(self) -> dict[str, Any]:
        return {name: stats.state_dict() for name, stats in self.stats.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != set(self.stats):
            raise ValueError(
                f"saved statistics of parts {sorted(state)}, this normaliser has "
                f"{sorted(self.stats)}"
            )
        for name, stats in self.stats.items():
            stats.load_state_dict(state[name])
        self._flat = None


def _numpy(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
