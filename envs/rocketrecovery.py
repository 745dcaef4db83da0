"""NeoRL-2's RocketRecovery: bring a rocket's first stage down on a pad in a steady
crosswind, with a 2-D Box2D body.

Paper: S. Gao et al., "NeoRL-2", 2025 (arXiv:2503.19267). Reference: github.com/polixir/
NeoRL2 @ b50d91d, ``neorl2/envs/rocketrecovery.py`` (a modified copy of gymnasium 0.29.1's
``LunarLanderContinuous``) with ``envs/reward/rocketrecovery_reward.py`` /
``envs/terminated/rocketrecovery_terminated.py``. Reimplemented here step for step and
checked against the reference on the same seeds, wind offsets and actions, and against
the authors' released validation data (two trajectories replayed from their actions:
tests/test_neorl2.py, tests/golden/rocketrecovery.json). Registered
(``rlcore.envs.neorl2``) as ``neorl2/RocketRecovery-v0`` (500 steps); ``env=RocketRecovery``
on the command line. Needs Box2D (``pip install "rlcore[neorl2]"``: ``box2d==2.3.10``).

* The body: LunarLander's lander (hull of density 5, two spring legs) 10 units above a flat
  ground at the pad's height (the reference draws LunarLander's random terrain and then
  flattens it to the pad), pushed at reset by a force ~U(-500, 500)^2 (LunarLander: 1,000).
  Continuous action a in [-1, 1]^2: the main engine fires when a[0] > 0 at (a[0] + 1) / 2
  of its power, a side engine when |a[1]| > 0.5 at |a[1]|, with LunarLander's random
  dispersion of the engines' impulse points; 50 steps a second.
* The wind: a horizontal force tanh(sin(0.02 k) + sin(0.01 pi k)) * 10 on the hull, k the
  wind offset plus the step (the reference's turbulence power is 0: no torque), applied
  on the ground as well (LunarLander stops it on contact).
* Observation (7): x and y of the hull relative to the pad (y = 0 on a landed rocket
  standing on its legs), their velocities, the angle, the angular velocity (LunarLander's
  scalings) and the wind force. Reward (the reference's reward module, on the float32
  observations): the change of the shaping -100 |(x, y)| - 100 |(vx, vy)| - 100 |angle|
  minus 0.3 per unit of main-engine power and 0.03 per unit of side power; when |y'| <=
  0.05 (down), +100 if the landing is safe (|angle'| < 0.3, |vx'| < 0.5, |vy'| < 2), else
  -100, and the episode terminates (the only termination; LunarLander's crash and
  out-of-bounds ends are off).
* ``mode="val"``: wind 1.2 times as strong (the reference's validation env).

Normalised scores: NeoRL-2's (-176, 208) (``rlcore.evaluation.D4RL_REF_SCORES``).

Departures: the wind offset k is drawn at every reset from a generator seeded with the
reset's seed (the reference draws it once, in the constructor, from numpy's unseeded
global state, and carries it over from episode to episode; the authors' data workers made
a fresh env per trajectory); ``reset(options={"wind": k})`` sets it, as the parity test
and the replay of the authors' data do. Each reset builds a new Box2D world (the reference
reuses one; measured: the same trajectories). No rendering and no engine particles
(decoration in the reference, without effect on the rocket: measured, the same
trajectories with and without). The engines' powers enter the physics as Python floats of
their float32 values, as the reference computes them under numpy 1.x (the authors'; under
numpy 2 the reference's float32 impulses are refused by Box2D).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

FPS, SCALE = 50, 30.0
MAIN_ENGINE_POWER, SIDE_ENGINE_POWER = 13.0, 0.6
INITIAL_RANDOM = 500.0
LANDER_POLY = ((-14, 17), (-17, 0), (-17, -10), (17, -10), (17, 0), (14, 17))
LEG_AWAY, LEG_DOWN, LEG_W, LEG_H, LEG_SPRING_TORQUE = 20, 18, 2, 8, 40
SIDE_ENGINE_HEIGHT, SIDE_ENGINE_AWAY, MAIN_ENGINE_Y_LOCATION = 14, 12, 4
VIEWPORT_W, VIEWPORT_H = 600, 400
CHUNKS = 11  # the terrain's chunks (drawn, then flattened to the pad: module docstring)
WIND_POWER, VAL_WIND_SCALE = 10.0, 1.2
LANDED_HEIGHT = 0.05  # |y'| at or below it: down (the reference's terminated module)
WIND_OFFSETS = (-9999, 9999)  # numpy's randint range, as the reference draws k


def _box2d() -> Any:
    try:
        import Box2D  # noqa: PLC0415 (an optional dependency: only when the env is made)
    except ImportError as error:
        raise ImportError(
            'RocketRecovery needs Box2D: pip install "rlcore[neorl2]" (box2d==2.3.10)'
        ) from error
    return Box2D


def shaping(obs: np.ndarray) -> np.ndarray:
    """LunarLander's potential on (N, 7) float32 observations (float32 arithmetic)."""
    return (
        -100 * np.sqrt(obs[..., 0] * obs[..., 0] + obs[..., 1] * obs[..., 1])
        - 100 * np.sqrt(obs[..., 2] * obs[..., 2] + obs[..., 3] * obs[..., 3])
        - 100 * np.abs(obs[..., 4])
    )


def rocket_recovery_reward(obs: np.ndarray, action: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
    """The reference's reward module, batched: float32 observations and actions in, the
    rewards (float64 holding float32 values, or +-100 on landing) out."""
    obs, next_obs = np.asarray(obs, np.float32), np.asarray(next_obs, np.float32)
    action = np.asarray(action, np.float32)
    reward = shaping(next_obs) - shaping(obs)
    main, side = action[..., 0], np.abs(action[..., 1])
    reward -= np.where(main > 0.0, (np.clip(main, 0.0, 1.0) + 1.0) * 0.5, 0) * 0.3
    reward -= np.where(side > 0.5, np.clip(side, 0.5, 1.0), 0) * 0.03
    safe = (
        (np.abs(next_obs[..., 4]) < 0.3)
        & (np.abs(next_obs[..., 2]) < 0.5)
        & (np.abs(next_obs[..., 3]) < 2)
    )
    landing = np.where(safe, 100.0, -100.0)
    return np.where(landed(next_obs), landing, reward.astype(np.float64))


def landed(next_obs: np.ndarray) -> np.ndarray:
    """The reference's terminated module: the rocket is down when |y'| <= 0.05."""
    return np.abs(np.asarray(next_obs, np.float32)[..., 1]) <= LANDED_HEIGHT


class RocketRecoveryEnv(gym.Env):
    """NeoRL-2's rocket landing in a crosswind (module docstring)."""

    metadata = {"render_modes": []}
    # rlcore.envs.env_state.UnsavedState
    unsaved_state = "its Box2D world (bodies, contacts, solver warm starts) cannot be saved"

    def __init__(self, mode: str = "train", render_mode: str | None = None) -> None:
        if mode not in ("train", "val"):
            raise ValueError(f"mode must be 'train' or 'val', got {mode!r}")
        if render_mode is not None:
            raise ValueError(f"RocketRecovery does not render (render_mode={render_mode!r}): "
                             "no frames, no video")  # fmt: skip
        self.render_mode = None
        self._box2d = _box2d()
        self.mode = mode
        self.wind_power = WIND_POWER * (VAL_WIND_SCALE if mode == "val" else 1.0)
        bound = np.array([1.5, 1.5, 5.0, 5.0, math.pi, 5.0, np.inf], dtype=np.float32)
        self.observation_space = gym.spaces.Box(-bound, bound, dtype=np.float32)
        self.action_space = gym.spaces.Box(-1, 1, (2,), dtype=np.float32)
        self.helipad_y = VIEWPORT_H / SCALE / 4
        self.wind_idx = 0
        self._wind_rng: np.random.Generator | None = None
        self._world: Any = None
        self._lander: Any = None
        self._obs: np.ndarray | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if seed is not None or self._wind_rng is None:
            self._wind_rng = np.random.default_rng(seed)
        drawn = int(self._wind_rng.integers(*WIND_OFFSETS))
        wind = (options or {}).get("wind")
        self.wind_idx = offset = drawn if wind is None else int(wind)
        self._build_world()
        self._obs = self._advance(np.zeros(2, dtype=np.float32))  # the reference's first step
        return self._obs.copy(), {"wind_offset": offset}

    def _build_world(self) -> None:
        b2 = self._box2d.b2
        width, height = VIEWPORT_W / SCALE, VIEWPORT_H / SCALE
        self.np_random.uniform(0, height / 2, size=(CHUNKS + 1,))  # the flattened terrain
        world = self._box2d.b2World(gravity=(0, -10.0))
        ground = world.CreateStaticBody(shapes=b2.edgeShape(vertices=[(0, 0), (width, 0)]))
        chunk_x = [width / (CHUNKS - 1) * i for i in range(CHUNKS)]
        for left, right in zip(chunk_x[:-1], chunk_x[1:], strict=True):
            ground.CreateEdgeFixture(vertices=[(left, self.helipad_y), (right, self.helipad_y)],
                                     density=0, friction=0.1)  # fmt: skip
        start_x, start_y = VIEWPORT_W / SCALE / 2, VIEWPORT_H / SCALE
        hull = b2.polygonShape(vertices=[(x / SCALE, y / SCALE) for x, y in LANDER_POLY])
        lander = world.CreateDynamicBody(
            position=(start_x, start_y), angle=0.0,
            fixtures=b2.fixtureDef(shape=hull, density=5.0, friction=0.1, categoryBits=0x0010,
                                   maskBits=0x001, restitution=0.0),
        )  # fmt: skip
        push = (self.np_random.uniform(-INITIAL_RANDOM, INITIAL_RANDOM),
                self.np_random.uniform(-INITIAL_RANDOM, INITIAL_RANDOM))  # fmt: skip
        lander.ApplyForceToCenter(push, True)
        for side in (-1, +1):
            leg = world.CreateDynamicBody(
                position=(start_x - side * LEG_AWAY / SCALE, start_y), angle=side * 0.05,
                fixtures=b2.fixtureDef(shape=b2.polygonShape(box=(LEG_W / SCALE, LEG_H / SCALE)),
                                       density=1.0, restitution=0.0, categoryBits=0x0020,
                                       maskBits=0x001),
            )  # fmt: skip
            joint = b2.revoluteJointDef(
                bodyA=lander, bodyB=leg, localAnchorA=(0, 0),
                localAnchorB=(side * LEG_AWAY / SCALE, LEG_DOWN / SCALE), enableMotor=True,
                enableLimit=True, maxMotorTorque=LEG_SPRING_TORQUE, motorSpeed=+0.3 * side,
            )  # fmt: skip
            if side == -1:
                joint.lowerAngle, joint.upperAngle = +0.9 - 0.5, +0.9
            else:
                joint.lowerAngle, joint.upperAngle = -0.9, -0.9 + 0.5
            world.CreateJoint(joint)
        self._world, self._lander = world, lander

    def _advance(self, action: np.ndarray) -> np.ndarray:
        """Wind, engines and one Box2D step (LunarLander's order); the new observation."""
        lander = self._lander
        k = self.wind_idx
        wind = math.tanh(math.sin(0.02 * k) + math.sin(math.pi * 0.01 * k)) * self.wind_power
        self.wind_idx += 1
        lander.ApplyForceToCenter((wind, 0.0), True)
        tip = (math.sin(lander.angle), math.cos(lander.angle))
        side = (-tip[1], tip[0])
        dispersion = [self.np_random.uniform(-1.0, +1.0) / SCALE for _ in range(2)]
        if action[0] > 0.0:
            power = (min(max(float(action[0]), 0.0), 1.0) + 1.0) * 0.5  # 0.5 .. 1
            ox = (
                tip[0] * (MAIN_ENGINE_Y_LOCATION / SCALE + 2 * dispersion[0])
                + side[0] * dispersion[1]
            )
            oy = (
                -tip[1] * (MAIN_ENGINE_Y_LOCATION / SCALE + 2 * dispersion[0])
                - side[1] * dispersion[1]
            )
            at = (lander.position[0] + ox, lander.position[1] + oy)
            lander.ApplyLinearImpulse((-ox * MAIN_ENGINE_POWER * power,
                                       -oy * MAIN_ENGINE_POWER * power), at, True)  # fmt: skip
        if abs(float(action[1])) > 0.5:
            direction = float(np.sign(action[1]))
            power = min(max(abs(float(action[1])), 0.5), 1.0)
            ox = tip[0] * dispersion[0] + side[0] * (
                3 * dispersion[1] + direction * SIDE_ENGINE_AWAY / SCALE
            )
            oy = -tip[1] * dispersion[0] - side[1] * (
                3 * dispersion[1] + direction * SIDE_ENGINE_AWAY / SCALE
            )
            # LunarLander's 17 (not SIDE_ENGINE_HEIGHT) sideways: an angle-dependent torque
            at = (lander.position[0] + ox - tip[0] * 17 / SCALE,
                  lander.position[1] + oy + tip[1] * SIDE_ENGINE_HEIGHT / SCALE)  # fmt: skip
            lander.ApplyLinearImpulse((-ox * SIDE_ENGINE_POWER * power,
                                       -oy * SIDE_ENGINE_POWER * power), at, True)  # fmt: skip
        self._world.Step(1.0 / FPS, 6 * 30, 2 * 30)
        pos, vel = lander.position, lander.linearVelocity
        state = [
            (pos.x - VIEWPORT_W / SCALE / 2) / (VIEWPORT_W / SCALE / 2),
            (pos.y - (self.helipad_y + LEG_DOWN / SCALE)) / (VIEWPORT_H / SCALE / 2),
            vel.x * (VIEWPORT_W / SCALE / 2) / FPS,
            vel.y * (VIEWPORT_H / SCALE / 2) / FPS,
            lander.angle,
            20.0 * lander.angularVelocity / FPS,
            wind,
        ]
        return np.array(state, dtype=np.float32)

    def step(self, action: np.ndarray):
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        action = np.clip(np.asarray(action, dtype=np.float32).reshape(2), -1.0, 1.0)
        obs = self._advance(action)
        reward = float(rocket_recovery_reward(self._obs, action, obs))
        terminated = bool(landed(obs))
        self._obs = obs
        return obs.copy(), reward, terminated, False, {"wind": float(obs[6])}
