"""``PandaEnv``: one robot task as a gymnasium MuJoCo env (the sync / async back ends).

A goal-conditioned task observes a dict (``observation``, ``achieved_goal``,
``desired_goal``, gymnasium-robotics' ``GoalEnv`` convention) and offers a vectorised
``compute_reward(achieved_goal, desired_goal, info)`` for hindsight relabelling; every
task reports ``info["is_success"]``. The task's definitions (``rlcore.envs.robots.tasks``)
read batched arrays; this env hands them one-row views of its ``MjData``, so a batched
back end runs the very same code.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

from rlcore.envs.robots.scene import (
    FINGER_MAX,
    GOAL_MARKER_GROUP,
    NEUTRAL_QPOS,
    SUBSTEPS,
    scene_xml,
)
from rlcore.envs.robots.tasks import TASKS, Layout, PandaTask, SimArrays

REWARD_TYPES = ("sparse", "dense")
CONTROLS = ("ee", "joints")


def build_model(task: PandaTask, control: str) -> mujoco.MjModel:
    """The compiled scene of ``task`` under ``control``."""
    xml = scene_xml(
        task.objects, task.goals, control, task.extra_bodies, task.peg, task.sensors
    )  # fmt: skip
    return mujoco.MjModel.from_xml_string(xml)


def layout_of(model: mujoco.MjModel, task: PandaTask) -> Layout:
    """The addresses the task reads in ``model``'s arrays."""
    sensors = {}
    for i in range(model.nsensor):
        start = int(model.sensor_adr[i])
        sensors[model.sensor(i).name] = slice(start, start + int(model.sensor_dim[i]))

    def mocap(body: str) -> int:
        return int(model.body_mocapid[model.body(body).id])

    def qpos_of(joint: str) -> int:
        return int(model.jnt_qposadr[model.joint(joint).id])

    return Layout(
        sensors=sensors,
        finger_qpos=(qpos_of("finger1"), qpos_of("finger2")),
        arm_qpos=slice(qpos_of("joint1"), qpos_of("joint7") + 1),
        object_qpos={obj.name: qpos_of(obj.name) for obj in task.objects},
        goal_mocap=tuple(mocap(f"goal{i}") for i in range(task.goals)),
        target_mocap=mocap("target"),
        hole_mocap=mocap("hole") if task.extra_bodies else None,
    )


def sim_arrays(data: mujoco.MjData) -> SimArrays:
    """One-row views of ``data`` (writes reach the simulation)."""
    return SimArrays(
        data.qpos[None], data.qvel[None], data.ctrl[None], data.mocap_pos[None],
        data.sensordata[None],
    )  # fmt: skip


def reset_state(
    task: PandaTask, model: mujoco.MjModel, data: mujoco.MjData, layout: Layout,
    rng: np.random.Generator, control: str,
) -> None:  # fmt: skip
    """Put ``data`` at the start of a new episode drawn from ``rng``: the arm at its
    neutral pose (fingers open where the gripper is used), the objects and the goal as
    the task samples them, the ee target on the end effector; then ``mj_forward``."""
    mujoco.mj_resetData(model, data)
    data.qpos[layout.arm_qpos] = NEUTRAL_QPOS
    finger = FINGER_MAX if task.gripper else 0.0
    data.qpos[list(layout.finger_qpos)] = finger
    data.ctrl[-2:] = finger
    if control == "joints":
        data.ctrl[:7] = NEUTRAL_QPOS
    objects, goal = task.sample(rng)
    for obj, position in zip(task.objects, objects, strict=True):
        adr = layout.object_qpos[obj.name]
        data.qpos[adr : adr + 3] = position
        data.qpos[adr + 3 : adr + 7] = (1.0, 0.0, 0.0, 0.0)
    for row, position in zip(layout.goal_mocap, goal, strict=True):
        data.mocap_pos[row] = position
    if layout.hole_mocap is not None:  # the hole under the peg's target
        data.mocap_pos[layout.hole_mocap] = (goal[0][0], goal[0][1], 0.0)
    mujoco.mj_forward(model, data)
    data.mocap_pos[layout.target_mocap] = data.site("ee").xpos
    mujoco.mj_forward(model, data)


class PandaEnv(MujocoEnv):
    """A Franka Panda task (``rlcore.envs.robots.tasks.TASKS``) on one MjData.

    ``reward_type``: sparse (default) or dense; ``control``: ee (Cartesian deltas of the
    end effector, default) or joints (deltas of the seven joint targets)."""

    metadata = {"render_modes": ["human", "rgb_array", "depth_array"], "render_fps": 25}
    goal_marker_group = GOAL_MARKER_GROUP  # envs/pixels.py's GoalMarkers

    def __init__(
        self,
        task: str,
        reward_type: str = "sparse",
        control: str = "ee",
        render_mode: str | None = None,
        width: int = 480,
        height: int = 480,
        camera_name: str = "front",
    ) -> None:
        if task not in TASKS:
            raise ValueError(f"unknown robot task '{task}': choose from {', '.join(TASKS)}")
        if reward_type not in REWARD_TYPES:
            raise ValueError(f"reward_type='{reward_type}': choose sparse or dense")
        if control not in CONTROLS:
            raise ValueError(f"control='{control}': choose ee (end-effector) or joints")
        self.task, self.reward_type, self.control = TASKS[task], reward_type, control
        self._model = build_model(self.task, control)
        self.layout = layout_of(self._model, self.task)
        super().__init__(
            __file__,  # MujocoEnv wants a file; the model is built in code (build_model)
            SUBSTEPS, None, render_mode, width, height, camera_name=camera_name,
        )  # fmt: skip
        self.action_space = gym.spaces.Box(
            -1.0, 1.0, (self.task.action_dim(control),), dtype=np.float32
        )
        obs = self._observe()
        if self.task.goal_conditioned:
            self.observation_space = gym.spaces.Dict(
                {
                    key: gym.spaces.Box(-np.inf, np.inf, value.shape, dtype=np.float32)
                    for key, value in obs.items()
                }
            )
        else:
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, obs.shape, np.float32)

    def _initialize_simulation(self) -> tuple[mujoco.MjModel, mujoco.MjData]:
        self._model.vis.global_.offwidth = max(self._model.vis.global_.offwidth, self.width)
        self._model.vis.global_.offheight = max(self._model.vis.global_.offheight, self.height)
        return self._model, mujoco.MjData(self._model)

    def _set_action_space(self) -> gym.spaces.Box:  # replaced in __init__ (the task's)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
        return self.action_space

    def _observe(self) -> Any:
        sim = sim_arrays(self.data)
        observation = self.task.observation(sim, self.layout)[0].astype(np.float32)
        if not self.task.goal_conditioned:
            return observation
        return {
            "observation": observation,
            "achieved_goal": self.task.achieved_goal(sim, self.layout)[0].astype(np.float32),
            "desired_goal": self.task.desired_goal(sim, self.layout)[0].astype(np.float32),
        }

    def _goals(self) -> tuple[np.ndarray, np.ndarray]:
        """(achieved goal, desired goal) of this env's current state."""
        sim = sim_arrays(self.data)
        achieved = self.task.achieved_goal(sim, self.layout)[0]
        return achieved, self.task.desired_goal(sim, self.layout)[0]

    def reset_model(self) -> Any:
        reset_state(self.task, self.model, self.data, self.layout, self.np_random, self.control)
        return self._observe()

    def _get_reset_info(self) -> dict[str, Any]:
        achieved, desired = self._goals()
        return {"is_success": bool(self.task.is_success(achieved, desired))}

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.task.apply_action(
            sim_arrays(self.data), self.layout, np.asarray(action)[None], self.control
        )
        mujoco.mj_step(self.model, self.data, nstep=self.frame_skip)
        mujoco.mj_forward(self.model, self.data)  # sensors at the state the step reached
        obs = self._observe()
        achieved, desired = self._goals()
        info = {"is_success": bool(self.task.is_success(achieved, desired))}
        ee = self.data.site("ee").xpos
        reward = float(self.task.compute_reward(achieved, desired, self.dense, ee))
        if self.render_mode == "human":
            self.render()
        return obs, reward, False, False, info

    @property
    def dense(self) -> bool:
        return self.reward_type == "dense"

    def compute_reward(
        self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any = None
    ) -> np.ndarray:
        """The reward of goals over any leading axes (HER's relabelling calls it with a
        batch); the same function the step uses."""
        return self.task.compute_reward(achieved_goal, desired_goal, self.dense)
