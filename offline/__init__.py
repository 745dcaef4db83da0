"""Offline RL data: D4RL / Minari datasets in, Minari datasets out, reference scores."""

from rlcore.offline.datasets import (
    DatasetError,
    DatasetNotAvailableError,
    OfflineDataset,
    load_dataset,
)
from rlcore.offline.scores import normalized_score

__all__ = [
    "DatasetError",
    "DatasetNotAvailableError",
    "OfflineDataset",
    "load_dataset",
    "normalized_score",
]
