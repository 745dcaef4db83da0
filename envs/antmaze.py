"""The Ant of AntMaze: ``AntGoal-v0`` (gymnasium's Ant walking to goal points, the
low-level skill behind D4RL-style AntMaze data, ``rlcore.offline.antmaze``) and D4RL's
evaluation mazes ``AntMazeUMazeEval-v0`` / ``AntMazeMediumEval-v0``.

D4RL (Fu et al., 2020, section 5 "AntMaze") records its AntMaze datasets with "a
goal-reaching policy" that a planner drives through the maze by waypoints. This env is
where that policy is trained: the same Ant body as gymnasium-robotics' ``AntMaze_*-v5``
(gymnasium's ``Ant-v5`` model, RK4 at 0.01 s, 5 substeps: 0.05 s per action), on an open
floor, with a goal point that it should walk to.

- Observation (29): the Ant's 27 proprioceptive numbers (``qpos[2:]``, ``qvel``; the
  ``observation`` part of ``AntMaze_*-v5`` made with ``include_cfrc_ext_in_observation=
  False``) and the goal's offset from the torso, rotated into the torso's heading (yaw)
  frame, so "walk towards the goal" is one skill whatever the heading. ``policy_input``
  builds the same 29 numbers from an AntMaze observation and a waypoint.
- Reward: the speed towards the goal (the decrease of the distance per second, as
  Ant-v5's forward reward is the x-speed) plus Ant-v5's healthy reward, minus its control
  and contact costs. Ant-v5's termination (torso height outside [0.2, 1.0]).
- Goals: at reset and whenever the torso comes within ``goal_radius`` of the goal, a new
  goal at a distance drawn from ``goal_distance`` in a uniform direction (an episode
  chains goals, as the maze's waypoints do); ``info["goal_reached"]`` marks the step.
- The goal is a mocap body of the model (``data.mocap_pos``), so checkpoints, exact
  resume and S3RL snapshots carry it with the rest of the simulator state.

The evaluation mazes are gymnasium-robotics' ``AntMazeEnv`` (``pip install
"rlcore[robotics]"``) on D4RL's evaluation maps (start ``r``, goal ``g``: top left to bottom
left of the U; top left to bottom right of medium), with D4RL's 27-number Ant observation
(no contact forces), and the episode ending when the goal is reached
(``continuing_task=False``), 700 / 1,000 steps. Train on them with ``env.flatten_obs=true``
(achieved goal, desired goal, the 27 numbers: 31 in all), as the datasets are recorded.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Any

import mujoco
import numpy as np
from gymnasium import spaces
from gymnasium.envs.mujoco.ant_v5 import AntEnv

ANT_GOAL_ID = "AntGoal-v0"
ANT_GOAL_TURNED_ID = "AntGoalTurned-v0"  # AntGoal-v0 seen by an Ant-v5 runner (frame "turned")
ANT_GOAL_SYMMETRIC_ID = "AntGoalSymmetric-v0"  # the same, body relabelled (frame "symmetric")
R, G = "r", "g"  # gymnasium-robotics' map marks: reset (start) and goal cell
EVAL_MAPS: dict[str, list[list[Any]]] = {
    "umaze": [
        [1, 1, 1, 1, 1],
        [1, R, 0, 0, 1],
        [1, 1, 1, 0, 1],
        [1, G, 0, 0, 1],
        [1, 1, 1, 1, 1],
    ],
    "medium": [
        [1, 1, 1, 1, 1, 1, 1, 1],
        [1, R, 0, 1, 1, 0, 0, 1],
        [1, 0, 0, 1, 0, 0, 0, 1],
        [1, 1, 0, 0, 0, 1, 1, 1],
        [1, 0, 0, 1, 0, 0, 0, 1],
        [1, 0, 1, 0, 0, 1, 0, 1],
        [1, 0, 0, 0, 1, 0, G, 1],
        [1, 1, 1, 1, 1, 1, 1, 1],
    ],
}
EPISODE_STEPS = {"umaze": 700, "medium": 1000}
EVAL_IDS = {"umaze": "AntMazeUMazeEval-v0", "medium": "AntMazeMediumEval-v0"}
PROPRIO_DIM = 27  # qpos[2:] (13) and qvel (14) of the Ant


def _ant_xml() -> str:
    import gymnasium.envs.mujoco.ant_v5 as ant_module

    return os.path.join(os.path.dirname(ant_module.__file__), "assets", "ant.xml")


def goal_model_path() -> str:
    """Gymnasium's ant.xml with a collision-free mocap body ``goal`` (a red marker), written
    once per content to the temp directory (MujocoEnv loads models from files)."""
    spec = mujoco.MjSpec.from_file(_ant_xml())
    goal = spec.worldbody.add_body(name="goal", mocap=True, pos=[0.0, 0.0, 0.05])
    goal.add_site(name="goal", size=[0.15, 0.0, 0.0], rgba=[0.9, 0.1, 0.1, 0.7])
    xml = spec.to_xml()
    digest = hashlib.sha256(xml.encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"rlcore_ant_goal_{digest}.xml")
    if not os.path.exists(path):
        partial = f"{path}.{os.getpid()}"
        with open(partial, "w") as handle:
            handle.write(xml)
        os.replace(partial, path)  # atomic: async workers may write it at once
    return path


def heading(quaternion: np.ndarray) -> np.ndarray:
    """Yaw of unit quaternions (w, x, y, z) over any leading axes, in radians."""
    w, x, y, z = np.moveaxis(np.asarray(quaternion, dtype=np.float64), -1, 0)
    return np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def policy_input(proprio: np.ndarray, xy: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """The 29 numbers the goal-reaching policy reads: the 27 proprioceptive ones and the
    goal's offset from ``xy`` in the torso's heading frame (leading axes broadcast).

    ``proprio[..., 1:5]`` is the torso's quaternion (``qpos[3:7]``)."""
    proprio = np.asarray(proprio, dtype=np.float64)
    offset = np.asarray(goal, dtype=np.float64) - np.asarray(xy, dtype=np.float64)
    yaw = heading(proprio[..., 1:5])
    cos, sin = np.cos(yaw), np.sin(yaw)
    local = np.stack(
        [cos * offset[..., 0] + sin * offset[..., 1], -sin * offset[..., 0] + cos * offset[..., 1]],
        axis=-1,
    )
    return np.concatenate([proprio, local], axis=-1)


def world_turned(proprio: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """The Ant's 27 numbers as seen in a world turned about z so that ``direction``
    (radians, leading axes broadcast) is its +x: the torso's quaternion turned by
    -direction and the torso's linear velocity (world frame, ``qvel[0:3]``) rotated with it;
    the height, joints and the angular velocity (MuJoCo's free joint: in the body's own
    frame) are unchanged. A policy trained to run along +x (``Ant-v5`` without contact
    forces in its observation) then runs along ``direction``."""
    proprio = np.array(proprio, dtype=np.float64)  # a copy
    half = -0.5 * np.asarray(direction, dtype=np.float64)
    cz, sz = np.cos(half), np.sin(half)  # the turn q_z = (cz, 0, 0, sz)
    w, x, y, z = (proprio[..., i].copy() for i in range(1, 5))
    proprio[..., 1] = cz * w - sz * z  # q_z * q (Hamilton product, turn applied first)
    proprio[..., 2] = cz * x - sz * y
    proprio[..., 3] = cz * y + sz * x
    proprio[..., 4] = cz * z + sz * w
    cos, sin = np.cos(2 * half), np.sin(2 * half)  # rotation by -direction
    vx, vy = proprio[..., 13].copy(), proprio[..., 14].copy()
    proprio[..., 13] = cos * vx - sin * vy
    proprio[..., 14] = sin * vx + cos * vy
    return proprio


def steered_direction(velocity: np.ndarray, offset: np.ndarray, max_turn: float) -> float:
    """The direction (radians) a runner is shown to reach a point at ``offset`` from it while
    moving with world ``velocity`` (x, y): the point's own direction, at most ``max_turn``
    radians from the velocity's when it moves faster than 0.5 m/s. A runner trained with +x
    always ahead loses its gait when shown a direction far from where it runs, so it is
    turned like a car (``rlcore.offline.antmaze.driver`` and ``AntGoalTurned-v0``)."""
    direction = float(np.arctan2(offset[1], offset[0]))
    if float(np.hypot(velocity[0], velocity[1])) > 0.5:
        moving = float(np.arctan2(velocity[1], velocity[0]))
        turn = (direction - moving + np.pi) % (2 * np.pi) - np.pi
        direction = moving + float(np.clip(turn, -max_turn, max_turn))
    return direction


# The Ant's quarter-turn symmetry: its four legs sit at 45, 135, 225 and 315 degrees, so the
# body turned a quarter about its own z with the legs relabelled is the same body. Relabelled
# leg j is old leg _QUARTER_LEGS[j] (legs 1-4 as 0-3, in the joint order hip_1, ankle_1, ...,
# hip_4, ankle_4 of qpos); an ankle flips sign where the relabelled leg's hinge axis is the
# old one's reversed (ant.xml: axes (-1,1,0), (1,1,0), (-1,1,0), (1,1,0)).
_QUARTER_LEGS = np.array([1, 2, 3, 0])
_QUARTER_ANKLE_SIGN = np.array([-1.0, 1.0, -1.0, 1.0])
_ACTUATOR_LEGS = np.array([3, 0, 1, 2])  # ant.xml's motors: hip_4, ankle_4, hip_1, ..., ankle_3


def quarter_turned(proprio: np.ndarray, turns: int = 1) -> np.ndarray:
    """The Ant's 27 numbers described in a body frame turned ``turns`` quarter turns about
    the torso's z (yaw + turns x 90 degrees), the legs relabelled to match: the same
    physical state (checked by tests/test_antmaze.py: equal geometry, equal dynamics under
    ``quarter_turned_action``). The torso quaternion becomes q * q_z(90), the body-frame
    angular velocity turns by -90 degrees, each leg's hip and ankle angle and velocity move
    to its relabelled leg (ankles sign-flipped as ``_QUARTER_ANKLE_SIGN``); height and the
    world-frame linear velocity are unchanged. Leading axes broadcast; ``turns`` mod 4."""
    out = np.array(proprio, dtype=np.float64)  # a copy
    c = s = np.sqrt(0.5)
    for _ in range(int(turns) % 4):
        w, x, y, z = (out[..., i].copy() for i in range(1, 5))
        out[..., 1], out[..., 2] = c * w - s * z, c * x + s * y  # q * (c, 0, 0, s)
        out[..., 3], out[..., 4] = c * y - s * x, c * z + s * w
        wx, wy = out[..., 16].copy(), out[..., 17].copy()
        out[..., 16], out[..., 17] = wy, -wx
        for start in (5, 19):  # joint angles, joint velocities
            legs = out[..., start : start + 8].reshape(*out.shape[:-1], 4, 2)[..., _QUARTER_LEGS, :]
            legs[..., 1] *= _QUARTER_ANKLE_SIGN
            out[..., start : start + 8] = legs.reshape(*out.shape[:-1], 8)
    return out


def quarter_turned_action(action: np.ndarray, turns: int = 1) -> np.ndarray:
    """The inverse map for actions: torques chosen for the legs as ``quarter_turned(...,
    turns)`` labels them, returned in the Ant's own motor order (leading axes broadcast)."""
    out = np.array(action, dtype=np.float64)
    to_leg_order, old_from_new = np.argsort(_ACTUATOR_LEGS), np.argsort(_QUARTER_LEGS)
    for _ in range(int(turns) % 4):
        legs = out.reshape(*out.shape[:-1], 4, 2)[..., to_leg_order, :]  # relabelled legs 1-4
        old = legs[..., old_from_new, :].copy()  # old leg i is relabelled leg old_from_new[i]
        old[..., 1] *= _QUARTER_ANKLE_SIGN[old_from_new]
        out = old[..., _ACTUATOR_LEGS, :].reshape(out.shape)  # back to motor order
    return out


def symmetric_view(
    proprio: np.ndarray, velocity: np.ndarray, offset: np.ndarray, max_turn: float
) -> tuple[np.ndarray, int]:
    """What a runner (trained along +x at heading 0) is shown to reach a point at
    ``offset`` (frame ``symmetric``): the body relabelled by the quarter turns that bring
    its heading closest to the steered direction (``steered_direction``), then the world
    turned to that direction (``world_turned``), so the heading it sees is within 45
    degrees of its run and it never has to turn its body more than that. Returns the 27
    numbers and the quarter turns (``quarter_turned_action`` maps its action back)."""
    direction = steered_direction(velocity, offset, max_turn)
    yaw = float(heading(np.asarray(proprio)[1:5]))

    def error(turns: int) -> float:
        return abs((yaw + turns * np.pi / 2 - direction + np.pi) % (2 * np.pi) - np.pi)

    turns = min(range(4), key=error)
    return world_turned(quarter_turned(proprio, turns), direction), turns


FRAMES = ("goal", "turned", "symmetric")  # how a goal-reaching policy reads its goal


class AntGoalEnv(AntEnv):
    """Ant-v5 walking to a goal point (see the module docstring). ``frame="turned"``
    (``AntGoalTurned-v0``): the observation is the 27 numbers of a world turned towards the
    goal (``world_turned`` of ``steered_direction``, at most ``max_turn`` radians from where
    the Ant runs), as the AntMaze recorder shows an Ant-v5 runner its waypoints: the env on
    which such a runner learns to turn (``init_from`` the runner's run)."""

    def __init__(
        self,
        goal_distance: tuple[float, float] = (1.0, 5.0),
        goal_radius: float = 0.5,
        frame: str = "goal",
        max_turn: float = 1.0,
        **kwargs: Any,
    ) -> None:
        if frame not in FRAMES:
            raise ValueError(f"frame={frame!r}: one of {FRAMES}")
        if max_turn <= 0.0:
            raise ValueError(f"max_turn must be positive, got {max_turn}")
        self.frame, self.max_turn = frame, float(max_turn)
        low, high = (float(value) for value in goal_distance)
        if not 0.0 < low <= high:
            raise ValueError(f"goal_distance must be 0 < low <= high, got {goal_distance}")
        if goal_radius <= 0.0:
            raise ValueError(f"goal_radius must be positive, got {goal_radius}")
        self.goal_distance = (low, high)
        self.goal_radius = float(goal_radius)
        super().__init__(
            xml_file=goal_model_path(),
            exclude_current_positions_from_observation=False,
            include_cfrc_ext_in_observation=False,
            **kwargs,
        )
        size = PROPRIO_DIM + 2 if frame == "goal" else PROPRIO_DIM
        self.observation_space = spaces.Box(-np.inf, np.inf, (size,), np.float64)

    @property
    def goal(self) -> np.ndarray:
        """The current goal point (x, y)."""
        return self.data.mocap_pos[0, :2].copy()

    def _new_goal(self) -> None:
        distance = self.np_random.uniform(*self.goal_distance)
        angle = self.np_random.uniform(-np.pi, np.pi)
        xy = self.data.qpos[:2]
        self.data.mocap_pos[0, :2] = xy + distance * np.array([np.cos(angle), np.sin(angle)])

    def _get_obs(self) -> np.ndarray:
        qpos, qvel = self.data.qpos, self.data.qvel
        proprio = np.concatenate([qpos[2:], qvel])
        if self.frame == "turned":
            direction = steered_direction(qvel[:2], self.goal - qpos[:2], self.max_turn)
            return world_turned(proprio, direction)
        if self.frame == "symmetric":
            return self._symmetric_view()[0]
        return policy_input(proprio, qpos[:2], self.goal)

    def _symmetric_view(self) -> tuple[np.ndarray, int]:
        qpos, qvel = self.data.qpos, self.data.qvel
        proprio = np.concatenate([qpos[2:], qvel])
        return symmetric_view(proprio, qvel[:2], self.goal - qpos[:2], self.max_turn)

    def reset_model(self) -> np.ndarray:
        super().reset_model()  # Ant-v5's noisy initial state
        self._new_goal()
        return self._get_obs()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        distance_before = float(np.linalg.norm(self.goal - self.data.qpos[:2]))
        if self.frame == "symmetric":  # the action names the legs as the observation did
            action = quarter_turned_action(action, self._symmetric_view()[1])
        self.do_simulation(action, self.frame_skip)
        distance = float(np.linalg.norm(self.goal - self.data.qpos[:2]))
        speed_to_goal = (distance_before - distance) / self.dt
        ctrl_cost, contact_cost = self.control_cost(action), self.contact_cost
        reward = speed_to_goal + self.healthy_reward - ctrl_cost - contact_cost
        reached = distance <= self.goal_radius
        if reached:
            self._new_goal()
        info = {
            "goal_distance": distance,
            "goal_reached": reached,
            "reward_to_goal": speed_to_goal,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
            "reward_survive": self.healthy_reward,
        }
        terminated = (not self.is_healthy) and self._terminate_when_unhealthy
        return self._get_obs(), float(reward), bool(terminated), False, info


def register() -> None:
    """Register ``AntGoal-v0``, ``AntGoalTurned-v0``, ``AntGoalSymmetric-v0`` (1,000 steps an
    episode, as Ant-v5) and
    the evaluation mazes
    (gymnasium-robotics is imported only when one of those is made)."""
    import gymnasium as gym

    if ANT_GOAL_ID not in gym.registry:
        gym.register(
            id=ANT_GOAL_ID, entry_point="rlcore.envs.antmaze:AntGoalEnv", max_episode_steps=1000
        )
    if ANT_GOAL_TURNED_ID not in gym.registry:
        gym.register(
            id=ANT_GOAL_TURNED_ID, entry_point="rlcore.envs.antmaze:AntGoalEnv",
            kwargs={"frame": "turned"}, max_episode_steps=1000,
        )  # fmt: skip
    if ANT_GOAL_SYMMETRIC_ID not in gym.registry:
        gym.register(
            id=ANT_GOAL_SYMMETRIC_ID, entry_point="rlcore.envs.antmaze:AntGoalEnv",
            kwargs={"frame": "symmetric"}, max_episode_steps=1000,
        )  # fmt: skip
    for maze, env_id in EVAL_IDS.items():
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="gymnasium_robotics.envs.maze.ant_maze_v5:AntMazeEnv",
                kwargs={
                    "maze_map": EVAL_MAPS[maze],
                    "continuing_task": False,
                    "include_cfrc_ext_in_observation": False,
                },
                max_episode_steps=EPISODE_STEPS[maze],
            )


register()
