"""Safety-Gymnasium's velocity-constrained locomotion tasks, rebuilt on gymnasium's MuJoCo
tasks (the safety-gymnasium package pins gymnasium 0.28.1 and mujoco 2.3.3, and does not
install next to today's gymnasium).

``Safety<Task>Velocity-v1`` means what Safety-Gymnasium (PKU-Alignment/safety-gymnasium,
``safety_gymnasium/tasks/safe_velocity/safety_<task>_velocity_v1.py``) means: gymnasium's
``<Task>-v4`` body, reward, termination and observation (Ant 27 numbers without contact
forces, Humanoid 376, no contact cost in either reward), a 1000-step time limit, and
``info["cost"] = 1[velocity > threshold]`` every step with the v1 thresholds: the forward
x-velocity for Hopper, HalfCheetah, Walker2d and Swimmer, the planar speed
sqrt(vx^2 + vy^2) for Ant and Humanoid, read from the v4 task's own ``info["x_velocity"]``
/ ``info["y_velocity"]`` (computed there as Safety-Gymnasium computes them: the torso's
x for Hopper, HalfCheetah, Walker2d, Swimmer, its COM for Ant, the mass centre for
Humanoid). Measured equal to safety-gymnasium 1.0.0 on a rollout of fixed actions
(``benchmarks/parity/safety_velocity.py``).

``Safety<Task>VelocityV5-v1`` is the same cost on gymnasium's ``<Task>-v5``: Ant 105
observations (contact forces) and a contact cost in the reward, Humanoid 348 observations
and a contact cost, Walker2d's right foot with friction 1.9 (v4: 0.9), no healthy reward
on the step that terminates (Hopper, Walker2d, Ant, Humanoid). Numbers on these ids are
not comparable with Safety-Gymnasium's or OmniSafe's, except Hopper's up to the
terminating step's healthy reward (1 per early-terminated episode). The native back end (``envs/native.py``) implements the v5 bodies only, so
``make_vec_env(..., backend="auto")`` steps the v1 ids on gymnasium's vector env and the
V5 ids natively.

Importing this module registers the twelve ids with gymnasium (``rlcore.envs.make`` does). Any
gymnasium env that reports ``info["cost"]`` works as a safe task.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import gymnasium as gym

# Safety-Gymnasium v1 velocity thresholds (m/s)
VELOCITY_THRESHOLDS: dict[str, float] = {
    "Hopper": 0.7402,
    "HalfCheetah": 3.2096,
    "Walker2d": 2.3415,
    "Swimmer": 0.2282,
    "Ant": 2.6222,
    "Humanoid": 1.4149,
}
PLANAR_SPEED = frozenset({"Ant", "Humanoid"})  # cost on the xy speed, not x-velocity
BODY_VERSIONS = ("v4", "v5")  # the gymnasium task a velocity id wraps
SAFETY_VELOCITY_IDS: dict[str, str] = {  # Safety-Gymnasium's ids: v4 bodies
    task: f"Safety{task}Velocity-v1" for task in VELOCITY_THRESHOLDS
}
SAFETY_VELOCITY_V5_IDS: dict[str, str] = {  # the same cost on gymnasium's v5 bodies
    task: f"Safety{task}VelocityV5-v1" for task in VELOCITY_THRESHOLDS
}


class VelocityCost(gym.Wrapper):
    """Adds ``info["cost"] = 1.0`` where the task's velocity exceeds ``threshold`` (else
    0.0); ``planar`` uses the xy speed instead of the x-velocity."""

    def __init__(self, env: gym.Env, threshold: float, planar: bool = False) -> None:
        super().__init__(env)
        self.threshold, self.planar = float(threshold), planar

    def velocity(self, info: dict[str, Any]) -> float:
        if "x_velocity" not in info or (self.planar and "y_velocity" not in info):
            raise KeyError(
                "VelocityCost needs the task's info['x_velocity'] (and info['y_velocity'] "
                "for the planar speed): wrap a gymnasium v4/v5 MuJoCo locomotion task"
            )
        if self.planar:
            return math.hypot(float(info["x_velocity"]), float(info["y_velocity"]))
        return float(info["x_velocity"])

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["cost"] = float(self.velocity(info) > self.threshold)
        return obs, reward, terminated, truncated, info


def velocity_cost_of(env_id: str) -> tuple[str, float, bool] | None:
    """(inner gymnasium id, threshold, planar) of a velocity-constrained id (``-v1``: the v4
    task, ``V5-v1``: the v5 task), else None: how the native back end builds the same task
    (``NativeVectorEnv(velocity_cost=...)``; it implements the v5 tasks)."""
    for task in VELOCITY_THRESHOLDS:
        for body, ids in (("v4", SAFETY_VELOCITY_IDS), ("v5", SAFETY_VELOCITY_V5_IDS)):
            if env_id == ids[task]:
                return f"{task}-{body}", VELOCITY_THRESHOLDS[task], task in PLANAR_SPEED
    return None


def make_velocity_task(task: str, body: str = "v4", **kwargs: Any) -> gym.Env:
    """Gymnasium's ``<task>-<body>`` with the velocity cost (``body`` "v4":
    ``Safety<task>Velocity-v1``, "v5": ``Safety<task>VelocityV5-v1``)."""
    if task not in VELOCITY_THRESHOLDS:
        raise ValueError(
            f"no velocity-constrained version of '{task}'; choose from {sorted(VELOCITY_THRESHOLDS)}"
        )
    if body not in BODY_VERSIONS:
        raise ValueError(f"body='{body}': choose from {BODY_VERSIONS}")
    with warnings.catch_warnings():
        # the v4 bodies are Safety-Gymnasium's, chosen on purpose: gymnasium's "is out of
        # date" notice would only tell the user to change a task they did not pick
        warnings.filterwarnings("ignore", message=".*is out of date", category=DeprecationWarning)
        env = gym.make(f"{task}-{body}", **kwargs)
    return VelocityCost(env, VELOCITY_THRESHOLDS[task], planar=task in PLANAR_SPEED)


def register() -> None:
    """Register ``Safety<Task>Velocity-v1`` (v4 bodies) and ``Safety<Task>VelocityV5-v1``
    for the six tasks (idempotent). The time limit (1000 steps) is the inner task's, so the
    registration adds none."""
    for body, ids in (("v4", SAFETY_VELOCITY_IDS), ("v5", SAFETY_VELOCITY_V5_IDS)):
        for task, env_id in ids.items():
            if env_id not in gym.registry:
                gym.register(
                    id=env_id,
                    entry_point="rlcore.envs.safety:make_velocity_task",
                    kwargs={"task": task, "body": body},
                )


register()
