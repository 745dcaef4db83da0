"""Atomic checkpoints and one-call loading of trained agents for inference."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest.pt"
FORMAT_VERSION = 1


def save_checkpoint(state: dict[str, Any], path: str | Path) -> Path:
    """Write ``state`` to ``path`` atomically: a crash mid-write never corrupts ``path``.

    The data goes to a temporary file in the same directory, is fsync'ed, then
    renamed over the target (rename is atomic on POSIX file systems).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def resolve_checkpoint(path: str | Path) -> Path:
    """A run directory, its checkpoints/ folder, or a .pt file -> the .pt file to load."""
    path = Path(path)
    if path.is_dir():
        for candidate in (path / CHECKPOINT_DIR / LATEST, path / LATEST):
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(
            f"no checkpoint found in {path} (looked for {CHECKPOINT_DIR}/{LATEST})"
        )
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by rlcore (trusted file: it holds numpy RNG states)."""
    file = resolve_checkpoint(path)
    state = torch.load(file, map_location=map_location, weights_only=False)
    if state.get("format") != FORMAT_VERSION:
        raise ValueError(f"{file} is not an rlcore checkpoint (format {state.get('format')})")
    return state


def load_agent(path: str | Path, device: str | torch.device = "cpu") -> Any:
    """Rebuild the trained agent stored in a checkpoint (or run directory), ready to ``act``."""
    import gymnasium as gym

    from rlcore import registry
    from rlcore.spaces import action_space_from

    state = load_checkpoint(path, map_location=device)
    spec = registry.get(state["algo"])
    config = spec.config_from_dict(state["config"]["algo"])
    spaces = state["spaces"]
    observation_space = gym.spaces.Box(-np.inf, np.inf, tuple(spaces["obs_shape"]), np.float32)
    action_space = action_space_from(spaces)
    agent = spec.agent_class(observation_space, action_space, config, device=device)
    agent.load_state_dict(state["agent"])
    return agent


def load_policy(
    path: str | Path, device: str | torch.device = "cpu", deterministic: bool = True
) -> Callable[[np.ndarray], np.ndarray]:
    """A ``policy(obs) -> action`` for deployment, including the observation normalisation
    the agent was trained with (if any). ``deterministic=False`` acts with the agent's own
    sampling / exploration (e.g. SAC's tanh-Gaussian), drawing from torch's global RNG."""
    from rlcore.spaces import DISCRETE, action_kind, action_space_from, to_env_action

    state = load_checkpoint(path, map_location=device)
    agent = load_agent(path, device)
    action_space = action_space_from(state["spaces"])
    discrete = action_kind(action_space) == DISCRETE
    norm = state.get("obs_normalizer")
    clip = float(state["config"].get("env", {}).get("clip_obs", 10.0))

    def policy(obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float64)
        if norm is not None:
            obs = np.clip((obs - norm["mean"]) / np.sqrt(norm["var"] + 1e-8), -clip, clip)
        action = agent.act(obs.astype(np.float32), deterministic=deterministic)
        # discrete agents act in indices 0..n-1; the env's actions start at space.start
        return to_env_action(action, action_space) if discrete else action

    return policy
