"""Scripted experts for the robot tasks (end-effector control): waypoints on the state.

Each expert is a stateless function of the observation (the phase is read off the
geometry: is the hand above the object, is the object between the fingers, is it
lifted), so it can take over at any step and a recorded episode replays from a seed.
``noise`` adds Gaussian action noise; a ``slowness`` below 1 scales the moves down: the
two knobs of the proficient and mixed demonstration sets.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from rlcore.envs.robots.tasks import EE_STEP, OBJECT_SIZE, TASKS, PandaTask

GAIN = 1.0 / EE_STEP  # a full action moves EE_STEP metres: this gain reaches in one step


def _move(ee: np.ndarray, target: np.ndarray, slowness: float) -> np.ndarray:
    return np.clip(GAIN * (target - ee), -1.0, 1.0) * slowness


def _reach(task: PandaTask, obs: dict[str, np.ndarray], slowness: float) -> np.ndarray:
    return _move(obs["observation"][:3], obs["desired_goal"][:3], slowness)


def _push(task: PandaTask, obs: dict[str, np.ndarray], slowness: float) -> np.ndarray:
    """Get behind the object (seen from the goal), down, then push it to the goal."""
    o = obs["observation"]
    ee, obj, goal = o[:3], o[6:9], obs["desired_goal"]
    direction = goal[:2] - obj[:2]
    distance = np.linalg.norm(direction)
    if distance < 0.01:  # there: hold still
        return np.zeros(3)
    direction = direction / distance
    behind = np.array([*(obj[:2] - direction * (OBJECT_SIZE / 2 + 0.02)), 0.012])
    offset = ee[:2] - obj[:2]
    along = offset @ direction  # negative behind the object
    lateral = np.linalg.norm(offset - along * direction)
    low = ee[2] < OBJECT_SIZE / 2 + 0.01
    if along > -OBJECT_SIZE / 2 or lateral > 0.015 or not low:  # not behind it, low: get there
        if np.linalg.norm(ee[:2] - behind[:2]) > 0.01:  # over the object, not through it
            safe = OBJECT_SIZE + 0.03
            if ee[2] < safe - 0.01:  # straight up first
                return _move(ee, np.array([*ee[:2], safe]), slowness)
            return _move(ee, np.array([*behind[:2], max(ee[2], safe)]), slowness)
        return _move(ee, behind, slowness)
    target = np.array([*(goal[:2] - direction * (OBJECT_SIZE / 2)), OBJECT_SIZE / 2])
    return _move(ee, target, slowness * 0.3)


def _pick(task: PandaTask, obs: dict[str, np.ndarray] | np.ndarray, slowness: float) -> np.ndarray:
    """Above the object, down with the fingers open, close, then carry it to the goal
    (Lift: straight up; Stack: the first cube, then the second onto it)."""
    o = obs["observation"] if isinstance(obs, dict) else obs
    ee, width = o[:3], o[6]
    cubes = [o[7 + 13 * i : 10 + 13 * i] for i in range(len(task.objects))]
    goals = (
        obs["desired_goal"].reshape(-1, 3)
        if isinstance(obs, dict)
        else np.array([[cubes[0][0], cubes[0][1], 0.15]])
    )
    # the first cube that is not at its goal yet (Stack); the others: the only one
    k = next(
        (i for i, (c, g) in enumerate(zip(cubes, goals, strict=False))
         if np.linalg.norm(c - g) > 0.02),
        len(goals) - 1,
    )  # fmt: skip
    obj, goal = cubes[k], goals[k]
    grip_open, grip_close = 1.0, -1.0
    held = np.linalg.norm(ee - obj) < 0.02 and width < OBJECT_SIZE + 0.005
    if held:
        carry = goal.copy()
        if np.linalg.norm(ee[:2] - goal[:2]) > 0.02:  # carry high, then lower onto the goal
            carry[2] = max(goal[2], 0.1)
        return np.append(_move(ee, carry, slowness), grip_close)
    above = np.array([obj[0], obj[1], obj[2] + 0.06])
    if np.linalg.norm(ee[:2] - obj[:2]) > 0.01:
        return np.append(_move(ee, above if ee[2] > obj[2] + 0.03 else ee + [0, 0, 0.05], slowness), grip_open)
    if ee[2] - obj[2] > 0.01:
        return np.append(_move(ee, obj, slowness), grip_open if width > OBJECT_SIZE + 0.01 else 1.0)
    return np.append(np.zeros(3), grip_close)


def _insert(task: PandaTask, obs: dict[str, np.ndarray], slowness: float) -> np.ndarray:
    """Above the hole, aligned to a millimetre, then straight down."""
    tip, goal = obs["achieved_goal"], obs["desired_goal"]
    ee = obs["observation"][:3]
    error = goal[:2] - tip[:2]
    if np.linalg.norm(error) > 0.0005:
        hover = goal[2] + 0.04 if np.linalg.norm(error) > 0.003 else tip[2]
        target = np.array([*(ee[:2] + error), ee[2] + (hover - tip[2])])
        return _move(ee, target, slowness)
    return _move(ee, ee + np.append(error, goal[2] - tip[2]), slowness * 0.5)


EXPERTS: dict[str, Callable[..., np.ndarray]] = {
    "PandaReach": _reach,
    "PandaPush": _push,
    "PandaPickAndPlace": _pick,
    "PandaStack": _pick,
    "PandaLift": _pick,
    "PandaPegInsertion": _insert,
}


def expert_action(
    task: str, obs: dict[str, np.ndarray] | np.ndarray, rng: np.random.Generator | None = None,
    noise: float = 0.0, slowness: float = 1.0,
) -> np.ndarray:  # fmt: skip
    """The scripted expert's action for one observation of ``task`` (float32 in [-1, 1])."""
    if task not in EXPERTS:
        raise ValueError(f"no scripted expert for {task}; experts: {', '.join(EXPERTS)}")
    action = EXPERTS[task](TASKS[task], obs, slowness)
    if noise > 0.0:
        if rng is None:
            raise ValueError("noise > 0 needs an rng (the episode's seed makes it replayable)")
        action = action + noise * rng.standard_normal(action.shape)
    return np.clip(action, -1.0, 1.0).astype(np.float32)


def expert_policy(
    task: str, dict_space: gym.spaces.Dict | None = None, slowness: float = 1.0
) -> Callable[[np.ndarray], np.ndarray]:
    """The expert as a policy of one observation (``rlcore.offline.collect policy=expert``);
    with ``dict_space`` it reads observations flattened from that space (a goal task
    recorded with ``flatten_obs=true``) and unflattens them first."""
    if task not in EXPERTS:
        raise ValueError(f"no scripted expert for {task}; experts: {', '.join(EXPERTS)}")

    def act(obs: np.ndarray) -> np.ndarray:
        if dict_space is not None:
            obs = gym.spaces.unflatten(dict_space, obs)
        return expert_action(task, obs, slowness=slowness)

    return act
