"""Trained agents and policies back from their checkpoints: the algorithm a checkpoint
names is rebuilt through the catalog (rlcore.catalog), so this module sits above the
core, beside the tools that act with saved policies (evaluation, export, snapshot-reset
teachers, dataset recording).

    policy = rlcore.load_policy("runs/sac/hopper/<time>")
    action = policy(obs)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcore import catalog
from rlcore.agent_state import STATISTICS
from rlcore.checkpoint import load_checkpoint
from rlcore.observations import ObsSpec, PartNormalizer
from rlcore.settings import recorded_env
from rlcore.spaces import DISCRETE, action_kind, action_space_from, to_env_action


def load_agent(path: str | Path, device: str | torch.device = "cpu") -> Any:
    """Rebuild the trained agent stored in a checkpoint (or run directory), ready to ``act``."""
    state = load_checkpoint(path, map_location=device)
    spec = catalog.get(state["algo"])
    config = spec.config_from_dict(state["config"]["algo"])
    spaces = state["spaces"]
    # the observation seam's record (a checkpoint from before it: one vector, obs_shape)
    observation_space = ObsSpec.from_record(spaces).to_space()
    action_space = action_space_from(spaces)
    agent = spec.agent_class(observation_space, action_space, config, device=device)
    saved = state["agent"]
    missing = [key for key in agent.state_dict() if key not in saved]
    if STATISTICS in missing:  # acting with fresh statistics would read raw observations
        raise ValueError(
            f"{path}: the agent standardises its observations (algo.normalize_obs) but the "
            f"checkpoint holds no {STATISTICS!r}: save it beside the actor"
        )
    if missing:  # an agent-only snapshot (no optimisers / target nets): fine for acting
        saved = {**agent.state_dict(), **saved}
    agent.load_state_dict(saved)
    return agent


def obs_transform(state: dict[str, Any]) -> Callable[[Any], Any]:
    """The observation normalisation a checkpoint's agent was trained with (identity
    when it had none), as float32 for ``agent.act``. Dict observations (the checkpoint's
    observation spec is keyed) are taken as ``{part: array}``, each part in its dtype,
    standardised part by part with the env-side statistics when the run had them
    (``NormalizeObservation``'s ``{"parts": ...}``); an image observation as uint8."""
    norm = state.get("obs_normalizer")
    clip = recorded_env(state["config"]).clip_obs
    spec = ObsSpec.from_record(state["spaces"])
    if spec.keyed:
        parts_norm = None
        if norm is not None:
            parts_norm = PartNormalizer(spec, clip)
            parts_norm.load_state_dict(norm["parts"])

        def parts(obs: dict[str, Any]) -> dict[str, np.ndarray]:
            if not isinstance(obs, dict):
                raise TypeError(
                    f"this policy takes dict observations with the parts {list(spec.names)}, "
                    f"got {type(obs).__name__}"
                )
            seen = {p.name: obs[p.name] for p in spec.parts}
            if parts_norm is not None:
                seen = parts_norm.normalize(
                    {name: np.asarray(value, np.float64) for name, value in seen.items()}
                )
            return {p.name: np.asarray(seen[p.name], dtype=p.dtype) for p in spec.parts}

        return parts

    if spec.images:  # one image part: uint8 pixels, never standardised (the encoder scales)
        return lambda obs: np.asarray(obs, dtype=np.uint8)

    def transform(obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float64)
        if norm is not None:
            obs = np.clip((obs - norm["mean"]) / np.sqrt(norm["var"] + 1e-8), -clip, clip)
        return obs.astype(np.float32)

    return transform


def load_policy(
    path: str | Path, device: str | torch.device = "cpu", deterministic: bool = True
) -> Callable[[np.ndarray], np.ndarray]:
    """A ``policy(obs) -> action`` for deployment, including the observation normalisation
    the agent was trained with (if any). ``obs``: one observation or a batch, as the env
    gives them (a dict of arrays for a dict observation space). ``deterministic=False`` acts with the agent's own
    sampling / exploration (e.g. SAC's tanh-Gaussian), drawing from torch's global RNG."""
    state = load_checkpoint(path, map_location=device)
    agent = load_agent(path, device)
    action_space = action_space_from(state["spaces"])
    discrete = action_kind(action_space) == DISCRETE
    transform = obs_transform(state)

    def policy(obs: np.ndarray) -> np.ndarray:
        action = agent.act(transform(obs), deterministic=deterministic)
        # discrete agents act in indices 0..n-1; the env's actions start at space.start
        return to_env_action(action, action_space) if discrete else action

    return policy
