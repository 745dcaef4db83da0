"""D4RL normalised scores: pinned reference table first, dataset metadata second, never a guess.

normalised = 100 * (return - random) / (expert - random)   (``rlcore.evaluate``)

The table is D4RL's (``d4rl/infos.py``, the -random-v0 / expert values that the -v1/-v2
datasets reuse), copied from there. Minari datasets may carry their own
``ref_min_score`` / ``ref_max_score`` (random and expert policy returns on their env);
those are used only for environments the table does not pin.
"""

from __future__ import annotations

import re
from typing import Protocol

import numpy as np

from rlcore.evaluate import normalized_score as _normalized

# env family -> (random return, expert return)
D4RL_REF_SCORES: dict[str, tuple[float, float]] = {
    "hopper": (-20.272305, 3234.3),
    "halfcheetah": (-280.178953, 12135.0),
    "walker2d": (1.629008, 4592.3),
    "ant": (-325.6, 3879.7),
    "antmaze": (0.0, 1.0),  # every antmaze-* dataset
}


class ScoreReferenceError(ValueError):
    """Neither the pinned table nor the dataset gives reference scores."""


class _HasRefScores(Protocol):
    ref_min_score: float | None
    ref_max_score: float | None


def env_family(env_or_dataset_id: str) -> str | None:
    """The table's family name inside an env or dataset id, or None.

    ``Hopper-v5``, ``mujoco/hopper/medium-v0`` and ``hopper-medium-v2`` all give
    ``hopper``; ``antmaze-umaze-v2`` and ``D4RL/antmaze/umaze-v1`` give ``antmaze``.
    Tokens are matched whole, so ``Ant-v5`` is ``ant`` and ``antmaze`` never is.
    """
    for token in re.split(r"[/\-_\s.:]+", env_or_dataset_id.lower()):
        if token in D4RL_REF_SCORES:
            return token
    return None


def reference_scores(
    env_or_dataset_id: str | None, dataset: _HasRefScores | None = None
) -> tuple[float, float]:
    """(random, expert) returns: the pinned D4RL entry, else the dataset's Minari metadata."""
    family = env_family(env_or_dataset_id) if env_or_dataset_id else None
    if family is not None:
        return D4RL_REF_SCORES[family]
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
