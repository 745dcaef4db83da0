"""Shared fixtures: compose the packaged Hydra config and run short trainings."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import DictConfig

REPO = Path(__file__).resolve().parents[1]

# Keep tests single-threaded and quiet; MuJoCo may write its log into the cwd.
torch.set_num_threads(1)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Settings that make a run short: tiny episodes, few eval episodes, no TensorBoard.
FAST = [
    "logger=quiet",
    "eval_episodes=2",
    "eval_envs=2",
    "threads=1",
]


# Seconds after which a test's child process counts as hung. It bounds how long a broken
# run can block the suite; it claims nothing about speed (a run on a slow, busy machine
# takes far less), so no test outcome depends on how fast the machine is.
HANG_GUARD_S = 1800


def make_config(*overrides: str) -> DictConfig:
    """The composed run config for command-line style overrides (friendly names allowed)."""
    from rlcore.overrides import normalize_overrides

    with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
        return compose("config", overrides=normalize_overrides(list(overrides)))


def registered_agent(name: str, seed: int = 0) -> Any:
    """A fresh agent of the registered algorithm ``name`` with its default config, built
    after ``torch.manual_seed(seed)`` for a 5-dim observation and a 3-dim [-1, 1] box (4
    discrete actions for an algorithm that acts in discrete spaces only; 2-frame 16 x 16 RGB
    images for one that learns from images only)."""
    import gymnasium as gym
    import numpy as np

    from rlcore import catalog

    spec = catalog.get(name)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
    if spec.images_only:
        obs_space = gym.spaces.Box(0, 255, (6, 16, 16), np.uint8)
    box = gym.spaces.Box(-np.ones(3, np.float32), np.ones(3, np.float32))
    action_space = box if "box" in spec.action_spaces else gym.spaces.Discrete(4)
    torch.manual_seed(seed)
    return spec.agent_class(obs_space, action_space, spec.config_class())


def python_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "rlcore.train", *args]


@pytest.fixture
def config_factory():
    return make_config
