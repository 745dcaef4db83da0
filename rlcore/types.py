"""Data types passed between buffers, loops and agents."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

Obs = torch.Tensor | dict[str, torch.Tensor]  # one observation tensor, or one per part


def rows_of(obs: Obs) -> int:
    """Leading (batch) size of an observation tensor or of a dict of part tensors."""
    if isinstance(obs, dict):
        return next(iter(obs.values())).shape[0]
    return obs.shape[0]


def take_rows(obs: Obs, index: torch.Tensor) -> Obs:
    """Rows ``index`` of an observation batch (every part of a dict alike)."""
    if isinstance(obs, dict):
        return {name: value[index] for name, value in obs.items()}
    return obs[index]


def split_rows(obs: Obs, chunks: int) -> list[Obs]:
    """``obs`` (a tensor, or a dict of part tensors) cut into ``chunks`` equal row blocks
    (``torch.chunk`` of each part)."""
    if isinstance(obs, dict):
        parts = {key: value.chunk(chunks) for key, value in obs.items()}
        return [{key: blocks[i] for key, blocks in parts.items()} for i in range(chunks)]
    return list(obs.chunk(chunks))


@dataclass(frozen=True)
class Batch:
    """A minibatch of transitions, all tensors on the same device, leading dim = batch.

    ``terminated`` and ``truncated`` are kept apart: bootstrapping stops only on
    termination. ``discount`` is gamma^n for n-step returns (1 step: None, use gamma).
    ``obs`` / ``next_obs`` are one tensor, or ``{part: tensor}`` for dict observations
    (``rlcore.observations.ObsSpec``, keyed; ``rlcore.buffers.FlatObs`` concatenates them).
    """

    obs: Obs
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: Obs
    terminated: torch.Tensor
    truncated: torch.Tensor
    discount: torch.Tensor | None = None
    cost: torch.Tensor | None = None
    mc_return: torch.Tensor | None = None
    extras: dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return rows_of(self.obs)

    def to(self, device: torch.device | str) -> Batch:
        """Copy of the batch with every tensor moved to ``device``."""

        def move(value):
            if isinstance(value, torch.Tensor):
                return value.to(device)
            if isinstance(value, dict):
                return {k: v.to(device) for k, v in value.items()}
            return value

        return Batch(**{f.name: move(getattr(self, f.name)) for f in dataclasses.fields(self)})

    def chunks(self, count: int) -> list[Batch]:
        """Split into ``count`` equal minibatches of consecutive rows (views, no copy): an
        update of ``utd_ratio`` critic steps takes one ``count * B`` batch and splits it."""
        if len(self) % count:
            raise ValueError(f"a batch of {len(self)} rows does not split into {count} minibatches")
        size = len(self) // count
        return [self.rows(i * size, (i + 1) * size) for i in range(count)]

    def rows(self, start: int, stop: int) -> Batch:
        """Rows ``start:stop`` of every tensor (views)."""

        def cut(value):
            if isinstance(value, torch.Tensor):
                return value[start:stop]
            if isinstance(value, dict):
                return {k: v[start:stop] for k, v in value.items()}
            return value

        return Batch(**{f.name: cut(getattr(self, f.name)) for f in dataclasses.fields(self)})

    @staticmethod
    def cat(batches: Sequence[Batch]) -> Batch:
        """Rows of ``batches`` one after the other. Optional fields and ``extras`` keys
        survive only where every batch has them (an online buffer has no ``mc_return``)."""
        if len(batches) == 1:
            return batches[0]
        values = {}
        for f in dataclasses.fields(Batch):
            parts = [getattr(b, f.name) for b in batches]
            if f.name == "extras":
                keys = set.intersection(*(set(p) for p in parts))
                values["extras"] = {k: torch.cat([p[k] for p in parts]) for k in sorted(keys)}
            elif any(isinstance(p, dict) for p in parts):  # dict observations: part by part
                if not all(isinstance(p, dict) and p.keys() == parts[0].keys() for p in parts):
                    raise ValueError(f"Batch.cat: {f.name} mixes observations of other parts")
                values[f.name] = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
            elif all(p is not None for p in parts):
                values[f.name] = torch.cat(parts)
        return Batch(**values)


@dataclass(frozen=True)
class RolloutBatch:
    """On-policy samples with advantages and returns already computed (flattened).

    ``extras`` holds the rollout channels an agent's ``explore`` returned besides the
    action (a diffusion policy's denoising chain, its per-step log-densities, a residual
    policy's base action), row-aligned with ``obs`` (a tensor, or ``{part: tensor}`` for
    dict observations). On a constrained task (an agent with a
    cost critic) ``cost_value`` / ``cost_advantage`` / ``cost_returns`` are the cost's
    V_c, GAE and value targets, computed as the reward's are; None otherwise."""

    obs: Obs
    action: torch.Tensor
    log_prob: torch.Tensor
    value: torch.Tensor
    advantage: torch.Tensor
    returns: torch.Tensor
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    cost_value: torch.Tensor | None = None
    cost_advantage: torch.Tensor | None = None
    cost_returns: torch.Tensor | None = None

    def __len__(self) -> int:
        return rows_of(self.obs)

    def _map(self, cut) -> RolloutBatch:  # noqa: ANN001 (tensor -> tensor)
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values = {k: ({c: cut(t) for c, t in v.items()} if isinstance(v, dict) else
                      None if v is None else cut(v))
                  for k, v in values.items()}  # fmt: skip
        return RolloutBatch(**values)

    def index(self, idx: torch.Tensor) -> RolloutBatch:
        """Rows ``idx`` of every field (a minibatch)."""
        return self._map(lambda t: t[idx])

    def rows(self, start: int, stop: int) -> RolloutBatch:
        """Rows ``start:stop`` of every field, as views (no copy)."""
        return self._map(lambda t: t[start:stop])
