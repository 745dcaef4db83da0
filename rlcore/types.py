"""Data types passed between buffers, loops and agents."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Batch:
    """A minibatch of transitions, all tensors on the same device, leading dim = batch.

    ``terminated`` and ``truncated`` are kept apart: bootstrapping stops only on
    termination. ``discount`` is gamma^n for n-step returns (1 step: None, use gamma).
    """

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    discount: torch.Tensor | None = None
    cost: torch.Tensor | None = None
    mc_return: torch.Tensor | None = None
    extras: dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.obs.shape[0]

    def to(self, device: torch.device | str) -> Batch:
        """Copy of the batch with every tensor moved to ``device``."""

        def move(value):
            if isinstance(value, torch.Tensor):
                return value.to(device)
            if isinstance(value, dict):
                return {k: v.to(device) for k, v in value.items()}
            return value

        return Batch(**{f.name: move(getattr(self, f.name)) for f in dataclasses.fields(self)})


@dataclass(frozen=True)
class RolloutBatch:
    """On-policy samples with advantages and returns already computed (flattened)."""

    obs: torch.Tensor
    action: torch.Tensor
    log_prob: torch.Tensor
    value: torch.Tensor
    advantage: torch.Tensor
    returns: torch.Tensor

    def __len__(self) -> int:
        return self.obs.shape[0]

    def index(self, idx: torch.Tensor) -> RolloutBatch:
        """Rows ``idx`` of every field (a minibatch)."""
        return RolloutBatch(*(getattr(self, f.name)[idx] for f in dataclasses.fields(self)))

    def rows(self, start: int, stop: int) -> RolloutBatch:
        """Rows ``start:stop`` of every field, as views (no copy)."""
        return RolloutBatch(*(getattr(self, f.name)[start:stop] for f in dataclasses.fields(self)))
