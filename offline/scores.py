"""D4RL normalised scores: pinned reference table first, dataset metadata second, never a guess.

normalised = 100 * (return - random) / (expert - random)   (``rlcore.evaluate``)

The table is D4RL's (``rlcore.evaluation.D4RL_REF_SCORES``, in the core so that the report
reads it without reaching into the datasets). Minari datasets may carry their own
``ref_min_score`` / ``ref_max_score`` (random and expert policy returns on their env);
those are used only for environments the table does not pin.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from rlcore.evaluation import (  # the pinned table lives in the core: the report reads it too
    D4RL_REF_SCORES,
    ScoreReferenceError,
    env_family,
    pinned_reference_scores,
)
from rlcore.evaluation import normalized_score as _normalized

__all__ = [
    "D4RL_REF_SCORES",
    "ScoreReferenceError",
    "env_family",
    "normalized_score",
    "reference_scores",
]


class _HasRefScores(Protocol):
    ref_min_score: float | None
    ref_max_score: float | None


def reference_scores(
    env_or_dataset_id: str | None, dataset: _HasRefScores | None = None
) -> tuple[float, float]:
    """(random, expert) returns: the pinned D4RL entry, else the dataset's Minari metadata."""
    pinned = pinned_reference_scores(env_or_dataset_id) if env_or_dataset_id else None
    if pinned is not None:
        return pinned
    if dataset is not None:
        low, high = dataset.ref_min_score, dataset.ref_max_score
        if low is not None and high is not None:
            if high == low:
                raise ScoreReferenceError(
                    f"dataset reference scores are equal ({low}); cannot normalise"
                )
            return float(low), float(high)
    where = f"'{env_or_dataset_id}'" if env_or_dataset_id else "this run"
    has = "no dataset was given" if dataset is None else "the dataset has no ref_min/max_score"
    raise ScoreReferenceError(
        f"no reference scores for {where}: it is not in the pinned D4RL table "
        f"({', '.join(D4RL_REF_SCORES)}) and {has}. Record the dataset with "
        "ref_min_score=... ref_max_score=... (python -m rlcore.offline.collect) to normalise it."
    )


def normalized_score(
    value: float | np.ndarray,
    env_or_dataset_id: str | None = None,
    dataset: _HasRefScores | None = None,
) -> float | np.ndarray:
    """D4RL normalised score (0 = random, 100 = expert) of an undiscounted return.

    ``env_or_dataset_id`` may be an env id, a Minari id or a D4RL dataset name; when it is
    None the dataset's ``env_id`` (then ``source``) is tried for the table.
    """
    if env_or_dataset_id is None and dataset is not None:
        for attribute in ("env_id", "source"):
            candidate = getattr(dataset, attribute, None)
            if candidate and env_family(str(candidate)):
                env_or_dataset_id = str(candidate)
                break
    low, high = reference_scores(env_or_dataset_id, dataset)
    if isinstance(value, np.ndarray):
        return _normalized(value.astype(np.float64), low, high)
    return float(_normalized(float(value), low, high))
