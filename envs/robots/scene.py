"""The Franka Panda scene the robot tasks share, written as MJCF here (no download).

The arm's kinematics are Franka's published ones (link offsets 0.333, 0.316, 0.0825,
0.384, 0.088, 0.107 m; joint limits from the Franka datasheet, as in mujoco-menagerie's
``franka_emika_panda/panda.xml``); link masses are Franka's nominal ones with simple
inertias, and the links are capsules. Only the hand, the fingers and what a task holds
collide: the links never touch the objects in these tasks, and primitive collision geoms
keep a step cheap and MJX-compatible. Departures from the real robot (and from the
menagerie model): capsule geometry, approximate inertias, gravity compensation on every
link, and a parallel gripper of two position-controlled slide joints (0-4 cm each).

Control is at 25 Hz (timestep 2 ms, 20 substeps), as panda-gym's. End-effector control
drives a mocap body welded to the hand (the hand's orientation is held pointing down,
gymnasium-robotics' Fetch tasks do the same); joint control drives position actuators on
the seven joints with the weld switched off. The table top is z = 0 and the robot's base
stands at x = -0.6, as in panda-gym, so task coordinates read the same as theirs.

Everything a task's state needs lives in ``MjData`` (goals are mocap bodies), so the
integration state of MuJoCo (``mjSTATE_INTEGRATION``) is the whole task state: checkpoints,
snapshots and the batched back end restore it exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TIMESTEP = 0.002
SUBSTEPS = 20  # 25 Hz control
NEUTRAL_QPOS = (0.0, 0.41, 0.0, -1.85, 0.0, 2.26, 0.79)  # panda-gym's neutral joints
EE_OFFSET = 0.1034  # from the hand's frame to the point between the fingertips
FINGER_MAX = 0.04  # each finger's travel (m)
OBJECT_SIZE = 0.04  # the cubes' edge (panda-gym)
ARM_KP = (4500.0, 4500.0, 3500.0, 3500.0, 2000.0, 2000.0, 2000.0)  # joint control gains
ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 8))
# the geom group of the goal markers, and of nothing else: visible in MuJoCo's default
# view (videos, the viewer), left out of an observation camera that sits beside the goal
# vector (``env.obs=state+pixels``, envs/pixels.py's ``GoalMarkers``)
GOAL_MARKER_GROUP = 2

_FREE = '<freejoint name="{name}"/>'


@dataclass(frozen=True)
class SceneObject:
    """A free body a task places: a box (``size`` = half extents) or a cylinder
    (``size`` = radius, half height)."""

    name: str
    shape: str  # "box" | "cylinder"
    size: tuple[float, ...]
    mass: float
    rgba: str
    friction: float = 1.0


def _arm(peg: str) -> str:
    """The arm's bodies, from the base to the fingers (``peg``: extra geoms of the hand)."""
    return f"""
    <body name="link0" pos="-0.6 0 0">
      <geom type="cylinder" size="0.06 0.05" pos="0 0 0.05"/>
      <body name="link1" pos="0 0 0.333" gravcomp="1">
        <inertial pos="0 -0.04 -0.05" mass="4.97" diaginertia="0.70 0.70 0.01"/>
        <joint name="joint1" range="-2.8973 2.8973"/>
        <geom type="capsule" size="0.06" fromto="0 0 -0.283 0 0 0"/>
        <body name="link2" quat="1 -1 0 0" gravcomp="1">
          <inertial pos="0 -0.07 0.03" mass="0.646" diaginertia="0.008 0.03 0.03"/>
          <joint name="joint2" range="-1.7628 1.7628"/>
          <geom type="capsule" size="0.06" fromto="0 0 0 0 -0.316 0"/>
          <body name="link3" pos="0 -0.316 0" quat="1 1 0 0" gravcomp="1">
            <inertial pos="0.04 0.03 -0.07" mass="3.2286" diaginertia="0.04 0.04 0.01"/>
            <joint name="joint3" range="-2.8973 2.8973"/>
            <geom type="capsule" size="0.055" fromto="0 0 -0.1 0.0825 0 0"/>
            <body name="link4" pos="0.0825 0 0" quat="1 1 0 0" gravcomp="1">
              <inertial pos="-0.05 0.1 0.03" mass="3.5879" diaginertia="0.03 0.03 0.01"/>
              <joint name="joint4" range="-3.0718 -0.0698"/>
              <geom type="capsule" size="0.055" fromto="0 0 0 -0.0825 0.384 0"/>
              <body name="link5" pos="-0.0825 0.384 0" quat="1 -1 0 0" gravcomp="1">
                <inertial pos="0 0.04 -0.11" mass="1.2259" diaginertia="0.04 0.03 0.01"/>
                <joint name="joint5" range="-2.8973 2.8973"/>
                <geom type="capsule" size="0.05" fromto="0 0 -0.25 0 0 0"/>
                <body name="link6" quat="1 1 0 0" gravcomp="1">
                  <inertial pos="0.06 -0.01 0.01" mass="1.6666" diaginertia="0.002 0.004 0.005"/>
                  <joint name="joint6" range="-0.0175 3.7525"/>
                  <geom type="capsule" size="0.05" fromto="0 0 0 0.088 0 0"/>
                  <body name="link7" pos="0.088 0 0" quat="1 1 0 0" gravcomp="1">
                    <inertial pos="0 0 0.08" mass="0.7355" diaginertia="0.01 0.01 0.005"/>
                    <joint name="joint7" range="-2.8973 2.8973"/>
                    <geom type="cylinder" size="0.045 0.03" pos="0 0 0.05"/>
                    <body name="hand" pos="0 0 0.107" quat="0.9238795 0 0 -0.3826834"
                          gravcomp="1">
                      <inertial pos="0 0 0.03" mass="0.73" diaginertia="0.001 0.0025 0.0017"/>
                      <geom name="hand" type="box" size="0.02 0.1 0.03" pos="0 0 0.03"
                            contype="1" conaffinity="1"/>
                      <site name="ee" pos="0 0 {EE_OFFSET}" size="0.005" rgba="1 0 0 0"/>{peg}
                      <body name="left_finger" pos="0 0 0.0584" gravcomp="1">
                        <inertial pos="0 0 0.02" mass="0.015" diaginertia="2e-6 2e-6 1e-6"/>
                        <joint name="finger1" type="slide" axis="0 1 0" range="0 {FINGER_MAX}"
                               damping="5" armature="0.01"/>
                        <geom class="finger" type="box" size="0.01 0.006 0.026"
                              pos="0 0.008 0.027"/>
                      </body>
                      <body name="right_finger" pos="0 0 0.0584" gravcomp="1">
                        <inertial pos="0 0 0.02" mass="0.015" diaginertia="2e-6 2e-6 1e-6"/>
                        <joint name="finger2" type="slide" axis="0 -1 0"
                               range="0 {FINGER_MAX}" damping="5" armature="0.01"/>
                        <geom class="finger" type="box" size="0.01 0.006 0.026"
                              pos="0 -0.008 0.027"/>
                      </body>
                    </body>
                  </body>
                </body>
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>"""


def _object(obj: SceneObject) -> str:
    size = " ".join(f"{s:g}" for s in obj.size)
    return (
        f'\n    <body name="{obj.name}" pos="0 0 {obj.size[-1]:g}">{_FREE.format(name=obj.name)}'
        f'<geom name="{obj.name}" type="{obj.shape}" size="{size}" mass="{obj.mass:g}" '
        f'rgba="{obj.rgba}" contype="1" conaffinity="1" condim="4" '
        f'friction="{obj.friction:g} 0.005 0.0001"/></body>'
    )


def _sensors(objects: tuple[SceneObject, ...], sites: tuple[str, ...]) -> str:
    lines = [f'<framepos name="{site}" objtype="site" objname="{site}"/>' for site in sites]
    lines += [
        '<framepos name="ee_pos" objtype="site" objname="ee"/>',
        '<framelinvel name="ee_vel" objtype="site" objname="ee"/>',
    ]
    for obj in objects:
        n = obj.name
        lines += [
            f'<framepos name="{n}_pos" objtype="body" objname="{n}"/>',
            f'<framequat name="{n}_quat" objtype="body" objname="{n}"/>',
            f'<framelinvel name="{n}_linvel" objtype="body" objname="{n}"/>',
            f'<frameangvel name="{n}_angvel" objtype="body" objname="{n}"/>',
        ]
    return "\n    ".join(lines)


def scene_xml(
    objects: tuple[SceneObject, ...] = (),
    goals: int = 0,
    control: str = "ee",
    extra_bodies: str = "",
    peg: str = "",
    site_sensors: tuple[str, ...] = (),
) -> str:
    """The MJCF of a task's scene: the arm on its table, ``objects`` (free bodies),
    ``goals`` goal markers (mocap bodies ``goal0``, ``goal1``... that hold the desired
    goal; their spheres in geom group ``GOAL_MARKER_GROUP``), fixed ``extra_bodies``
    (e.g. a hole), position sensors on ``site_sensors``, and the controllers of
    ``control`` ("ee": the mocap weld; "joints": position actuators on the joints, weld
    off)."""
    if control not in ("ee", "joints"):
        raise ValueError(f"control='{control}': choose ee (end-effector) or joints")
    goal_bodies = "".join(
        f'\n    <body name="goal{i}" mocap="true" pos="0 0 0.1"><geom type="sphere" '
        f'size="0.02" rgba="0.9 0.2 0.2 0.35" contype="0" conaffinity="0" '
        f'group="{GOAL_MARKER_GROUP}"/></body>'
        for i in range(goals)
    )
    arm_actuators = (
        "".join(
            f'\n    <position name="{j}" joint="{j}" kp="{kp:g}" kv="{2 * np.sqrt(kp):.1f}" '
            f'ctrlrange="-3.75 3.75" forcerange="-87 87"/>'
            for j, kp in zip(ARM_JOINTS, ARM_KP, strict=True)
        )
        if control == "joints"
        else ""
    )
    weld_active = "true" if control == "ee" else "false"
    return f"""<mujoco model="panda_task">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{TIMESTEP}" integrator="implicitfast" cone="elliptic" impratio="10"/>
  <visual><global offwidth="640" offheight="480"/></visual>
  <default>
    <joint damping="10" armature="0.1"/>
    <geom contype="0" conaffinity="0" rgba="0.92 0.92 0.95 1"/>
    <default class="finger">
      <geom contype="1" conaffinity="1" friction="1.5 0.05 0.001" condim="4"
            solref="0.004 1" rgba="0.2 0.2 0.2 1"/>
    </default>
  </default>
  <worldbody>
    <light pos="0 0 2.5" dir="0 0 -1" directional="true"/>
    <camera name="front" pos="0.8 0.9 0.75" xyaxes="-0.688 0.726 0 -0.342 -0.324 0.882"/>
    <geom name="floor" type="plane" size="3 3 0.1" pos="0 0 -0.4" rgba="0.75 0.75 0.75 1"
          contype="1" conaffinity="1"/>
    <geom name="table" type="box" size="0.7 0.45 0.2" pos="-0.1 0 -0.2"
          rgba="0.62 0.52 0.42 1" contype="1" conaffinity="1" friction="1 0.005 0.0001"/>
    {_arm(peg)}
    <body name="target" mocap="true" pos="0 0 0.2" quat="0 1 0 0"/>{goal_bodies}
    {"".join(_object(o) for o in objects)}{extra_bodies}
  </worldbody>
  <equality>
    <weld name="ee_weld" body1="target" body2="hand" relpose="0 0 -{EE_OFFSET} 1 0 0 0"
          solref="0.02 1" active="{weld_active}"/>
  </equality>
  <contact><exclude body1="left_finger" body2="right_finger"/></contact>
  <actuator>{arm_actuators}
    <position name="finger1" joint="finger1" kp="1000" ctrlrange="0 {FINGER_MAX}"
              forcerange="-40 40"/>
    <position name="finger2" joint="finger2" kp="1000" ctrlrange="0 {FINGER_MAX}"
              forcerange="-40 40"/>
  </actuator>
  <sensor>
    {_sensors(objects, site_sensors)}
  </sensor>
</mujoco>
"""
