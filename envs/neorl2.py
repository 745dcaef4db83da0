"""NeoRL-2's near-real-world tasks that need no third-party simulator: DMSD, Pipeline,
RandomFrictionHopper and SafetyHalfCheetah (and the registration of Simglucose, whose
patient model is envs/simglucose.py, and RocketRecovery, envs/rocketrecovery.py).

Paper: S. Gao et al., "NeoRL-2: Near Real-World Benchmarks for Offline Reinforcement
Learning with Extended Realistic Scenarios", 2025 (arXiv:2503.19267). Reference:
github.com/polixir/NeoRL2 @ b50d91d (``neorl2/envs/dmsd.py``, ``pipline.py``,
``randomfrictionhopper.py``, ``safetyhalfcheetah.py`` and their ``envs/reward/*_reward.py``
/ ``envs/terminated/*_terminated.py``; the ``neorl2`` 0.0.1 wheel lacks those modules, so
its envs do not run as installed). Reimplemented here step for step, checked against the
reference envs on the same seeds and actions (tests/test_neorl2.py,
tests/golden/neorl2.json). Registered as ``neorl2/DMSD-v0`` (100 steps),
``neorl2/Pipeline-v0``, ``neorl2/RandomFrictionHopper-v0`` and
``neorl2/SafetyHalfCheetah-v0`` (1,000 steps each); ``env=DMSD`` / ``env=Pipeline`` /
``env=RandomFrictionHopper`` / ``env=SafetyHalfCheetah`` on the command line.

* DMSD (double mass-spring-damper, its "train" mode): two masses of 20 between three
  spring-dampers (damping 4, stiffness 2), explicit Euler with dt 0.2; action a in
  [-1, 1]^2 -> force (a + 1) / 2 * 60 - 30 on each mass. Per episode, each mass has 1 or 2
  piecewise-constant targets ~U(-1.5, 1.5) (the second from step 50); start positions
  ~U(-0.25, 0.25), velocities ~U(-0.1, 0.1). Observation [x1, x2, v1, v2, t1, t2], the
  targets of the step reached; reward sum_i -log(|x_i - t_i| + 0.01). Never terminates.
* Pipeline: a gate's flow g (start ~U(80, 120)) moves by the action a in [-1, 1], clipped
  to [0, 200]; the downstream flow is g delayed by 20 steps; the target flow is drawn
  from {50, 80, 110, 140} at reset and, at each step, redrawn with probability 0.003.
  Observation [downstream, target, the 25 previous downstream flows, the 25 latest
  actions] (float32 arithmetic, as the reference); reward ((200 - |downstream - target|)
  * 0.01)^2 - 3. Never terminates.
* RandomFrictionHopper: gymnasium's Hopper-v5 model (dt 0.008) whose foot's sliding
  friction is drawn from U(1.5, 2.5) at every reset (the model takes it rounded to 2
  decimals, as the reference's 101 XML files, the observation unrounded;
  ``reset(options={"friction": f})`` fixes it for an episode, ``random_friction=False``
  keeps 2.0). Observation
  [qpos with x (6), clip(qvel, -10, 10) (6), friction] (13); reward (x' - x) / 0.008 -
  0.001 |a|^2 (no healthy bonus); terminates when z = o'[1] <= 0.7, |o'[2]| >= 0.2 or an
  entry of o'[3:12] leaves (-100, 100) (read from the observation, as the reference).
* SafetyHalfCheetah: gymnasium's HalfCheetah-v5 model (dt 0.05), observation [qpos with
  x (9), qvel (9)] (18); reward v - 0.1 |a|^2 with v = (x' - x) / 0.05, but -100 when
  v > 3.2096 (the speed limit); ``info["cost"]`` is 1 on those steps (the reference's
  ``info["safe"]``), so the constrained algorithms can read it. Never terminates.

Normalised scores: NeoRL-2's (random, expert) returns, DMSD (30.60, 849.51), Pipeline
(-296, 751), RandomFrictionHopper (-3, 503), SafetyHalfCheetah (-283, 2507)
(``rlcore.evaluation.D4RL_REF_SCORES``, with D4RL's).

Departures: ``reset()`` without a seed continues the env's random stream (the reference
draws a fresh seed from numpy's global state, or the OS: runs were not reproducible);
Pipeline's first target is drawn from the first seeded reset (the reference's constructor
resets once unseeded and its target carries over, so its first episode's target did not
follow the seed; later episodes carry the last target over in both); DMSD returns float32
observations (the reference float64; its state stays float64 here); Pipeline takes the
action as float32. RandomFrictionHopper draws its friction from the env's seeded
generator after the start state's noise (the reference from Python's unseeded global
``random``, and it builds a new MuJoCo env from a new XML file at every reset, seeded only
when ``reset`` gets a seed), and changes the friction in the loaded model.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv
from gymnasium.envs.mujoco.hopper_v5 import HopperEnv

DMSD_ID, PIPELINE_ID = "neorl2/DMSD-v0", "neorl2/Pipeline-v0"
HOPPER_ID, CHEETAH_ID = "neorl2/RandomFrictionHopper-v0", "neorl2/SafetyHalfCheetah-v0"
SIMGLUCOSE_ID = "neorl2/Simglucose-v0"  # envs/simglucose.py
ROCKET_ID = "neorl2/RocketRecovery-v0"  # envs/rocketrecovery.py


class DMSDEnv(gym.Env):
    """NeoRL-2's double mass-spring-damper, "train" mode (module docstring)."""

    metadata: dict[str, Any] = {"render_modes": []}
    DT, DAMPING, STIFFNESS, MASS, FORCE = 0.2, 4.0, 2.0, 20.0, 30.0
    EPISODE = 100

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.rng = np.random.RandomState()
        d, k, m, dt = self.DAMPING, self.STIFFNESS, self.MASS, self.DT
        self.dynamics = np.array([
            [1, 0, dt, 0], [0, 1, 0, dt],
            [-dt * 2 * k / m, dt * k / m, 1 - dt * 2 * d / m, dt * d / m],
            [dt * k / m, -dt * 2 * k / m, dt * d / m, 1 - dt * 2 * d / m],
        ])  # fmt: skip
        self.state = np.zeros(4)
        self.targets = np.zeros((self.EPISODE, 2))
        self.t = 0

    def _target(self) -> np.ndarray:
        return self.targets[min(self.t, self.EPISODE - 1)]

    def _obs(self) -> np.ndarray:
        return np.concatenate([self.state[:2], self.state[2:], self._target()]).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.rng = np.random.RandomState(seed)
        rng = self.rng
        for _ in range(8):  # the reference draws the (fixed) task's 8 constants
            rng.uniform(0.0, 0.0)
        columns = []
        for _ in range(2):
            count = rng.randint(1, 3)
            values: list[float] = []
            for i in range(count):
                length = self.EPISODE - len(values) if i == count - 1 else self.EPISODE // count
                values.extend([rng.uniform(-1.5, 1.5)] * length)
            columns.append(values)
        self.targets = np.array(columns).T
        position = [rng.uniform(-0.25, 0.25) for _ in range(2)]
        velocity = [rng.uniform(-0.1, 0.1) for _ in range(2)]
        self.state = np.array(position + velocity)
        self.t = 0
        return self._obs(), {}

    def step(self, action: np.ndarray):
        self.t += 1
        # the reference's operations in its order (the force stays in the action's dtype)
        force = (np.clip(action, -1, 1) + 1) / 2
        force = force * (2 * self.FORCE)
        force += -self.FORCE
        self.state = (self.dynamics @ self.state.reshape(-1, 1)).flatten()
        self.state[2:] += self.DT * np.array([1 / self.MASS, 1 / self.MASS]) * force
        obs = self._obs()
        reward = float(np.sum(-np.log(np.abs(obs[:2] - obs[4:]) + 0.01)))
        return obs, reward, False, False, {"target": self._target()}


class PipelineEnv(gym.Env):
    """NeoRL-2's water pipeline with a delayed outflow (module docstring)."""

    metadata: dict[str, Any] = {"render_modes": []}
    DELAY, HISTORY, MAX_FLOW, TARGETS = 20, 25, 200.0, (50, 80, 110, 140)

    def __init__(self) -> None:
        low = np.array([0.0] * (2 + self.HISTORY) + [-1.0] * self.HISTORY, np.float32)
        high = np.array([self.MAX_FLOW] * (2 + self.HISTORY) + [1.0] * self.HISTORY, np.float32)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.target: float | None = None

    def _next_target(self) -> None:
        """The reference's order: one uniform draw, then a choice when it falls below
        0.003 (or at reset)."""
        if self.np_random.random() < 0.003 or self.target is None:
            self.target = self.np_random.choice(self.TARGETS)

    def _obs(self) -> np.ndarray:
        values = [self.channel[-1], self.target, *self.outflows[1 : self.HISTORY + 1],
                  *self.actions[: self.HISTORY]]  # fmt: skip
        return np.array(values).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        start = self.np_random.uniform(80, 120)
        self.channel = list(np.full(self.DELAY, start, np.float32))  # gate ... outflow
        self.outflows = list(np.full(self.HISTORY + 1, start, np.float32))  # newest first
        self.actions = list(np.zeros(self.HISTORY + 1, np.float32))
        self._next_target()  # the last episode's target carries over (as the reference)
        self.gate = self.channel[0]
        return self._obs(), {}

    def step(self, action: np.ndarray):
        action = np.clip(np.asarray(action, np.float32), self.action_space.low,
                         self.action_space.high)  # fmt: skip
        self._next_target()
        self.gate = np.clip(self.gate + action, 0, self.MAX_FLOW)[0]
        self.channel = [self.gate, *self.channel[:-1]]
        self.actions.insert(0, action[0])
        self.outflows.insert(0, self.channel[-1])
        obs = self._obs()
        reward = float(np.square((200 - np.abs(obs[0] - obs[1])) * 0.01) - 3)
        return obs, reward, False, False, {}


class RandomFrictionHopperEnv(HopperEnv):
    """NeoRL-2's Hopper with a random foot friction per episode (module docstring)."""

    DT, CTRL_COST, FRICTION_RANGE = 0.008, 1e-3, (1.5, 2.5)

    def __init__(self, random_friction: bool = True, **kwargs: Any) -> None:
        self.random_friction = random_friction  # False: the XML's 2.0 (the reference's too)
        self.friction = 2.0  # the XML's, until a reset draws one
        self.next_friction: float | None = None
        super().__init__(exclude_current_positions_from_observation=False, **kwargs)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (13,), np.float64)
        self.foot = self.model.geom("foot_geom").id

    def set_friction(self, friction: float) -> None:
        """The foot's sliding friction: the model rounds it to 2 decimals (the
        reference's XML files), the observation keeps it whole."""
        self.friction = float(friction)
        self.model.geom_friction[self.foot, 0] = float(f"{self.friction:.2f}")

    def _get_obs(self) -> np.ndarray:
        return np.append(super()._get_obs(), self.friction)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """``options={"friction": f}`` sets this episode's friction (no draw)."""
        self.next_friction = None if options is None else options.get("friction")
        return super().reset(seed=seed, options=options)

    def reset_model(self) -> np.ndarray:
        super().reset_model()  # the start state's noise first (the reference's order)
        if self.next_friction is not None:
            self.set_friction(self.next_friction)
        elif self.random_friction:
            self.set_friction(self.np_random.uniform(*self.FRICTION_RANGE))
        return self._get_obs()

    def step(self, action: np.ndarray):
        before = self._get_obs()
        self.do_simulation(action, self.frame_skip)
        obs = self._get_obs()
        reward = (obs[0] - before[0]) / self.DT - self.CTRL_COST * float(np.sum(np.square(action)))
        state = obs[3:12]
        healthy = (obs[1] > 0.7) and (-0.2 < obs[2] < 0.2)
        healthy = healthy and bool(np.all((state > -100.0) & (state < 100.0)))
        info = {"x_position": obs[0], "friction": self.friction}
        return obs, float(reward), not healthy, False, info


class SafetyHalfCheetahEnv(HalfCheetahEnv):
    """NeoRL-2's HalfCheetah with a speed limit (module docstring)."""

    DT, CTRL_COST, SPEED_LIMIT, PENALTY = 0.05, 0.1, 3.2096, -100.0

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(exclude_current_positions_from_observation=False, **kwargs)

    def step(self, action: np.ndarray):
        x_before = self.data.qpos[0]
        self.do_simulation(action, self.frame_skip)
        obs = self._get_obs()
        velocity = (obs[0] - x_before) / self.DT
        over = bool(velocity > self.SPEED_LIMIT)
        reward = (
            self.PENALTY if over else velocity - self.CTRL_COST * float(np.sum(np.square(action)))
        )
        info = {"x_position": obs[0], "x_velocity": velocity, "cost": float(over)}
        return obs, float(reward), False, False, info


def register() -> None:
    """Register the tasks with their episode lengths (idempotent)."""
    for env_id, entry, steps in (
        (DMSD_ID, "neorl2:DMSDEnv", 100), (PIPELINE_ID, "neorl2:PipelineEnv", 1000),
        (HOPPER_ID, "neorl2:RandomFrictionHopperEnv", 1000),
        (CHEETAH_ID, "neorl2:SafetyHalfCheetahEnv", 1000),
        (SIMGLUCOSE_ID, "simglucose:SimglucoseEnv", 480),
        (ROCKET_ID, "rocketrecovery:RocketRecoveryEnv", 500),
    ):  # fmt: skip
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=f"rlcore.envs.{entry}",
                         max_episode_steps=steps)  # fmt: skip


register()
