"""Gymnasium-Robotics on MuJoCo 4: the suite's tasks through ``env=<id>``, with one adapter.

``pip install "rlcore[robotics]"`` (gymnasium-robotics 1.4) brings AntMaze, PointMaze,
Adroit, Fetch and Franka Kitchen. ``rlcore.envs.make.resolve_env_id`` names their ids
``rlcore.envs.robotics_suite:<id>`` (gymnasium's ``module:Id`` form), so every process
that makes one, async workers included, imports that module first: it registers the suite
and applies the adapter below. Nothing here runs at import (gymnasium-robotics is imported
only for a run that asks for one of its tasks).

Why Fetch and Kitchen fail at reset on MuJoCo 4 (measured with gymnasium-robotics 1.4.2):
``gymnasium_robotics.utils.mujoco_utils.set_joint_qpos`` (and ``get_joint_qpos``,
``set_joint_qvel``, ``get_joint_qvel``) read ``model.jnt_type[j]``, a ``numpy.int32``, and
assert ``joint_type in (mjtJoint.mjJNT_HINGE, mjtJoint.mjJNT_SLIDE)``. A tuple's ``in``
compares ``element == value``; MuJoCo 4.0's pybind11 enums answer ``False`` to
``mjtJoint.mjJNT_HINGE == numpy.int32(3)`` (MuJoCo 3.3.7 answered ``True``;
``numpy.int32(3) == mjJNT_HINGE`` is still ``True``, so the ``==`` tests before the
assertion pass). The four functions are replaced, in the suite's module, by ones that read
the joint type as a Python ``int`` (``joint_slice``); nothing else changes (AntMaze,
PointMaze and Adroit never call them). The adapter applies only when MuJoCo's enum
comparison is the broken one.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

SUITE = "gymnasium_robotics"
# (qpos width, qvel width) of the joint types with more than one coordinate
_WIDTHS = {int(mujoco.mjtJoint.mjJNT_FREE): (7, 6), int(mujoco.mjtJoint.mjJNT_BALL): (4, 3)}


def available() -> bool:
    """Whether gymnasium-robotics is installed."""
    return importlib.util.find_spec(SUITE) is not None


def enum_comparison_broken() -> bool:
    """MuJoCo 4.0's enums compare unequal to numpy integers of the same value."""
    hinge = mujoco.mjtJoint.mjJNT_HINGE
    return not hinge == np.int32(int(hinge))  # noqa: SIM201 - the == is what breaks


def joint_slice(model: mujoco.MjModel, name: str, field: str) -> slice:
    """The ``qpos`` or ``qvel`` entries of joint ``name`` (a free joint 7 / 6, a ball
    joint 4 / 3, a hinge or slide joint 1)."""
    joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
    if joint == -1:
        raise ValueError(f"joint '{name}' is not part of the model")
    qpos_width, qvel_width = _WIDTHS.get(int(model.jnt_type[joint]), (1, 1))
    if field == "qpos":
        start, width = int(model.jnt_qposadr[joint]), qpos_width
    else:
        start, width = int(model.jnt_dofadr[joint]), qvel_width
    return slice(start, start + width)


def _setter(field: str) -> Any:
    def set_joint(model: mujoco.MjModel, data: mujoco.MjData, name: str, value: Any) -> None:
        getattr(data, field)[joint_slice(model, name, field)] = value

    return set_joint


def _getter(field: str) -> Any:
    def get_joint(model: mujoco.MjModel, data: mujoco.MjData, name: str) -> Any:
        values = getattr(data, field)[joint_slice(model, name, field)].copy()
        return values[0] if len(values) == 1 else values

    return get_joint


def adapt() -> bool:
    """Register gymnasium-robotics' tasks and, on a MuJoCo whose enums compare unequal to
    numpy integers, replace its four joint accessors (idempotent). Returns whether the
    accessors were replaced."""
    import gymnasium_robotics
    from gymnasium_robotics.utils import mujoco_utils

    gym.register_envs(gymnasium_robotics)
    if not enum_comparison_broken():
        return False
    for field in ("qpos", "qvel"):
        setattr(mujoco_utils, f"set_joint_{field}", _setter(field))
        setattr(mujoco_utils, f"get_joint_{field}", _getter(field))
    return True


def from_suite(env_id: str) -> bool:
    """Whether a registered id is gymnasium-robotics' (made through ``suite_id``)."""
    return str(gym.registry[env_id].entry_point).startswith(SUITE)


def suite_id(name: str) -> str | None:
    """``rlcore.envs.robotics_suite:<id>`` for a gymnasium-robotics id (case as registered),
    None for any other name or when the suite is not installed."""
    if not available():
        return None
    adapt()
    lowered = {env_id.lower(): env_id for env_id, spec in gym.registry.items()
               if str(spec.entry_point).startswith(SUITE)}  # fmt: skip
    env_id = lowered.get(name.lower())
    return None if env_id is None else f"rlcore.envs.robotics_suite:{env_id}"
