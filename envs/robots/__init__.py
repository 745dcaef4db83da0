"""Robot manipulation tasks on a Franka Panda (``PandaReach-v1`` ... ``PandaPegInsertion-v1``).

Importing this package registers the tasks with gymnasium; ``rlcore.envs.make`` imports it,
so ``env=PandaPush`` (or ``gym.make("PandaPush-v1")`` after ``import rlcore.envs``) works.
Options: ``reward_type`` (sparse | dense) and ``control`` (ee | joints), as
``env.kwargs.reward_type=dense``. docs/robots.md describes each task.
"""

from __future__ import annotations

import gymnasium as gym

from rlcore.envs.robots.tasks import TASKS

ROBOT_IDS = {name: f"{name}-v1" for name in TASKS}


def native_task(env_id: str) -> str | None:
    """The robot task a gymnasium id names (``PandaPush-v1`` -> ``PandaPush``), or None."""
    return next((name for name, robot_id in ROBOT_IDS.items() if robot_id == env_id), None)


def register() -> None:
    """Register every task under ``<Name>-v1`` with its episode length (idempotent)."""
    for name, env_id in ROBOT_IDS.items():
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="rlcore.envs.robots.env:PandaEnv",
                kwargs={"task": name},
                max_episode_steps=TASKS[name].max_episode_steps,
            )


register()
