"""The robot tasks: what each places, observes, rewards and calls a success.

Goal-conditioned tasks follow panda-gym 3.0's definitions (``panda_gym/envs/tasks/
{reach,push,slide,pick_and_place,stack}.py``): goal and object ranges, a 5 cm success
threshold (10 cm over Stack's two cubes), the sparse reward ``-(d > threshold)`` and the
dense ``-d`` on request, 50 steps (Stack 100). ``PandaLift`` is robomimic's Lift (success:
the cube 4 cm above the table; reward 1 on success, or its staged dense reward), and
``PandaPegInsertion`` SERL's kind of problem: a square peg held in the hand, a hole with
1 mm of clearance on each side, success when the peg's tip is within 5 mm of the
hole's bottom target (so it must be inside the hole). Departures, all tasks: see
``docs/robots.md`` ("The tasks" lists them per task).

Every function that reads the simulation takes arrays with a leading batch axis
(``SimArrays``), so one definition serves a single gymnasium env (a batch of one) and the
batched back end; the pure ones take the array module ``xp`` too (numpy, or
``jax.numpy`` on the MJX back end, ``envs/robots/mjx.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from rlcore.envs.robots.scene import OBJECT_SIZE, SceneObject

WORKSPACE_LOW = np.array([-0.35, -0.35, 0.0])  # where the end effector's target may go
WORKSPACE_HIGH = np.array([0.25, 0.35, 0.35])
EE_STEP = 0.05  # metres per unit action (panda-gym)
GRIP_STEP = 0.2  # finger-width change per unit action (panda-gym)
JOINT_STEP = 0.05  # radians per unit action (panda-gym's joint control)
PEG_HALF = 0.009  # the peg's half width; the hole's is 0.010
HOLE_DEPTH = 0.03


@dataclass(frozen=True)
class SimArrays:
    """(N, ...) views of N simulations' state, written in place by ``apply_action``."""

    qpos: np.ndarray
    qvel: np.ndarray
    ctrl: np.ndarray
    mocap_pos: np.ndarray  # (N, 1 + goals, 3): the ee target, then the goal markers
    sensordata: np.ndarray


@dataclass(frozen=True)
class Layout:
    """Where a compiled scene keeps what the task reads (addresses in its arrays)."""

    sensors: dict[str, slice]
    finger_qpos: tuple[int, int]
    arm_qpos: slice
    object_qpos: dict[str, int]  # each free joint's qpos address
    goal_mocap: tuple[int, ...]  # mocap rows of the goal markers
    target_mocap: int  # the end effector's target
    hole_mocap: int | None  # PegInsertion's hole


def _cube(name: str, rgba: str) -> SceneObject:
    half = OBJECT_SIZE / 2
    return SceneObject(name, "box", (half, half, half), mass=0.5, rgba=rgba)


@dataclass(frozen=True)
class PandaTask:
    """One task: its scene, its draws at reset, and what it observes and scores.

    ``sample(rng)`` returns the objects' positions (one row each) and the goal (the
    desired goal's rows, one per goal marker); ``achieved`` names the sensors whose
    concatenation is the achieved goal; ``goal_conditioned`` False (Lift) makes the
    observation one vector and the reward the task's own."""

    name: str
    objects: tuple[SceneObject, ...]
    goals: int
    gripper: bool
    achieved: tuple[str, ...]
    threshold: float
    max_episode_steps: int
    sample: Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]
    goal_conditioned: bool = True
    extra_bodies: str = ""
    peg: str = ""
    sensors: tuple[str, ...] = field(default_factory=tuple)  # extra scene sensors

    def observation(self, sim: SimArrays, layout: Layout, xp: ModuleType = np) -> Any:
        """The robot and object state (N, obs_dim): end-effector position and velocity,
        finger width (tasks that use the gripper), each object's position, quaternion,
        linear and angular velocity; Lift adds the cube's position relative to the hand."""
        s = sim.sensordata
        parts = [s[:, layout.sensors["ee_pos"]], s[:, layout.sensors["ee_vel"]]]
        if self.gripper:
            f1, f2 = layout.finger_qpos
            parts.append(sim.qpos[:, f1 : f1 + 1] + sim.qpos[:, f2 : f2 + 1])
        for obj in self.objects:
            for quantity in ("pos", "quat", "linvel", "angvel"):
                parts.append(s[:, layout.sensors[f"{obj.name}_{quantity}"]])
        if not self.goal_conditioned:  # Lift: where the cube is from the hand
            parts.append(
                s[:, layout.sensors[f"{self.objects[0].name}_pos"]] - s[:, layout.sensors["ee_pos"]]
            )
        return xp.concatenate(parts, axis=1)

    def achieved_goal(self, sim: SimArrays, layout: Layout, xp: ModuleType = np) -> Any:
        return xp.concatenate([sim.sensordata[:, layout.sensors[n]] for n in self.achieved], 1)

    def desired_goal(self, sim: SimArrays, layout: Layout) -> Any:
        goal = sim.mocap_pos[:, list(layout.goal_mocap)]
        return goal.reshape(goal.shape[0], -1)

    def goal_distance(self, achieved: Any, desired: Any, xp: ModuleType = np) -> Any:
        return xp.linalg.norm(xp.asarray(achieved) - xp.asarray(desired), axis=-1)

    def is_success(self, achieved: Any, desired: Any, xp: ModuleType = np) -> Any:
        """Success over the leading axes: the goal within ``threshold`` (Lift: the cube
        ``threshold`` above the table, ``achieved`` its position)."""
        if not self.goal_conditioned:
            return xp.asarray(achieved)[..., 2] > OBJECT_SIZE / 2 + self.threshold
        return self.goal_distance(achieved, desired, xp) < self.threshold

    def compute_reward(
        self, achieved: Any, desired: Any, dense: bool, ee: Any = None, xp: ModuleType = np
    ) -> Any:
        """The reward over the leading axes (what HER recomputes): sparse ``-(d >
        threshold)`` or dense ``-d``; Lift: 1 on success, or robomimic's staged reward
        (reaching ``1 - tanh(10 |cube - hand|)``, 2.25 once lifted; ``ee`` the hand)."""
        if not self.goal_conditioned:
            success = self.is_success(achieved, desired, xp)
            if not dense:
                return success.astype(xp.float32)
            reach = 1.0 - xp.tanh(10.0 * xp.linalg.norm(xp.asarray(achieved) - ee, axis=-1))
            return xp.where(success, 2.25, reach).astype(xp.float32)
        d = self.goal_distance(achieved, desired, xp)
        return (-d if dense else -(d > self.threshold).astype(xp.float32)).astype(xp.float32)

    def action_targets(
        self, sim: SimArrays, layout: Layout, action: Any, control: str, xp: ModuleType = np
    ) -> tuple[Any, Any]:
        """What N actions command: (``ee``: the end effector's new mocap target (N, 3);
        ``joints``: the seven joint targets (N, 7)), and the fingers' half width (N,).
        ``ee``: the end effector + ``EE_STEP`` x action[:3], kept in the workspace;
        ``joints``: each joint's position + ``JOINT_STEP`` x action[:7]. The gripper's last
        action entry changes the finger width by ``GRIP_STEP`` x it (panda-gym); tasks
        without the gripper keep the fingers closed."""
        action = xp.clip(action, -1.0, 1.0)
        arm = 3 if control == "ee" else 7
        if control == "ee":
            ee = sim.sensordata[:, layout.sensors["ee_pos"]]
            targets = xp.clip(ee + EE_STEP * action[:, :3], WORKSPACE_LOW, WORKSPACE_HIGH)
        else:
            targets = sim.qpos[:, layout.arm_qpos] + JOINT_STEP * action[:, :7]
        f1, f2 = layout.finger_qpos
        if self.gripper:
            width = sim.qpos[:, f1] + sim.qpos[:, f2]
            half = xp.clip(width + GRIP_STEP * action[:, arm], 0.0, 0.08) / 2
        else:
            half = xp.zeros(action.shape[0], dtype=targets.dtype)
        return targets, half

    def apply_action(
        self, sim: SimArrays, layout: Layout, action: np.ndarray, control: str
    ) -> None:
        """Write N actions into the simulations' controls (``action_targets``)."""
        action = np.asarray(action, dtype=np.float64)
        targets, half = self.action_targets(sim, layout, action, control)
        if control == "ee":
            sim.mocap_pos[:, layout.target_mocap] = targets
        else:
            sim.ctrl[:, :7] = targets
        sim.ctrl[:, -2] = half
        sim.ctrl[:, -1] = half

    def action_dim(self, control: str) -> int:
        return (3 if control == "ee" else 7) + int(self.gripper)


def _uniform(rng: np.random.Generator, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    return rng.uniform(low, high)


_HALF = OBJECT_SIZE / 2
_RANGE = np.array([0.15, 0.15, 0.0])  # panda-gym's +-0.15 m in x and y


def _sample_reach(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    goal = _uniform(rng, np.array([-0.15, -0.15, 0.0]), np.array([0.15, 0.15, 0.3]))
    return np.zeros((0, 3)), goal[None]


def _sample_push(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    centre = np.array([0.0, 0.0, _HALF])
    goal = centre + _uniform(rng, -_RANGE, _RANGE)
    obj = centre + _uniform(rng, -_RANGE, _RANGE)
    return obj[None], goal[None]


def _sample_slide(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    goal = np.array([0.4, 0.0, 0.015]) + _uniform(rng, -_RANGE, _RANGE)
    obj = np.array([0.0, 0.0, 0.015]) + _uniform(rng, -_RANGE, _RANGE)
    return obj[None], goal[None]


def _sample_pick_and_place(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    centre = np.array([0.0, 0.0, _HALF])
    goal = centre + _uniform(rng, np.array([-0.15, -0.15, 0.0]), np.array([0.15, 0.15, 0.2]))
    obj = centre + _uniform(rng, -_RANGE, _RANGE)
    if rng.random() < 0.3:  # panda-gym: 30% of goals on the table
        goal[2] = _HALF
    return obj[None], goal[None]


def _sample_stack(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    centre = np.array([0.0, 0.0, _HALF])
    goal0 = centre + _uniform(rng, -_RANGE, _RANGE)
    goal1 = goal0 + np.array([0.0, 0.0, OBJECT_SIZE])
    obj0 = centre + _uniform(rng, -_RANGE, _RANGE)
    obj1 = centre + _uniform(rng, -_RANGE, _RANGE)
    while np.linalg.norm(obj0 - obj1) < 0.1:  # panda-gym: the cubes start apart
        obj0 = centre + _uniform(rng, -_RANGE, _RANGE)
        obj1 = centre + _uniform(rng, -_RANGE, _RANGE)
    return np.stack([obj0, obj1]), np.stack([goal0, goal1])


def _sample_lift(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    xy = _uniform(rng, np.array([-0.1, -0.1]), np.array([0.1, 0.1]))
    obj = np.array([xy[0], xy[1], _HALF])
    return obj[None], np.zeros((0, 3))


def _sample_peg(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The goal is where the peg's tip is when fully inserted; the hole body follows it
    (``PandaEnv`` places it)."""
    xy = _uniform(rng, np.array([-0.1, -0.1]), np.array([0.1, 0.1]))
    return np.zeros((0, 3)), np.array([[xy[0], xy[1], 0.005]])


def _hole() -> str:
    """A fixed block with a square hole (four walls, 2 cm wide inside, 3 cm deep), moved
    with the goal marker: it is a mocap body, so it needs no joint and stays put."""
    inner, wall = PEG_HALF + 0.001, 0.02
    off = inner + wall
    h = HOLE_DEPTH / 2
    walls = "".join(
        f'<geom type="box" size="{sx:g} {sy:g} {h:g}" pos="{px:g} {py:g} {h:g}" '
        f'rgba="0.3 0.4 0.8 1" contype="1" conaffinity="1" friction="0.5 0.005 0.0001"/>'
        for sx, sy, px, py in (
            (wall, off + wall, off, 0.0),
            (wall, off + wall, -off, 0.0),
            (inner, wall, 0.0, off),
            (inner, wall, 0.0, -off),
        )
    )
    return f'\n    <body name="hole" mocap="true" pos="0 0 0">{walls}</body>'


_PEG_TOP, _PEG_LENGTH = 0.09, 0.07  # in the hand's frame: from between the fingers down
_PEG = (
    f'\n                      <geom name="peg" type="box" size="{PEG_HALF} {PEG_HALF} '
    f'{_PEG_LENGTH / 2:g}" pos="0 0 {_PEG_TOP + _PEG_LENGTH / 2:g}" rgba="0.8 0.5 0.1 1" '
    f'contype="1" conaffinity="1" friction="0.3 0.005 0.0001"/>'
    f'\n                      <site name="peg_tip" pos="0 0 {_PEG_TOP + _PEG_LENGTH:g}" '
    f'size="0.003"/>'
)

TASKS: dict[str, PandaTask] = {
    task.name: task
    for task in (
        PandaTask("PandaReach", (), 1, False, ("ee_pos",), 0.05, 50, _sample_reach),
        PandaTask(
            "PandaPush", (_cube("object", "0.1 0.8 0.2 1"),), 1, False, ("object_pos",),
            0.05, 50, _sample_push,
        ),
        PandaTask(
            "PandaSlide",
            (SceneObject("object", "cylinder", (0.03, 0.015), 0.5, "0.1 0.8 0.2 1", 0.04),),
            1, False, ("object_pos",), 0.05, 50, _sample_slide,
        ),
        PandaTask(
            "PandaPickAndPlace", (_cube("object", "0.1 0.8 0.2 1"),), 1, True, ("object_pos",),
            0.05, 50, _sample_pick_and_place,
        ),
        PandaTask(
            "PandaStack",
            (_cube("object0", "0.1 0.3 0.9 1"), _cube("object1", "0.1 0.8 0.2 1")),
            2, True, ("object0_pos", "object1_pos"), 0.1, 100, _sample_stack,
        ),
        PandaTask(
            "PandaLift", (_cube("cube", "0.9 0.2 0.2 1"),), 0, True, ("cube_pos",), 0.04, 100,
            _sample_lift, goal_conditioned=False,
        ),
        PandaTask(
            "PandaPegInsertion", (), 1, False, ("peg_tip",), 0.005, 100, _sample_peg,
            extra_bodies=_hole(), peg=_PEG, sensors=("peg_tip",),
        ),
    )
}  # fmt: skip

