"""``NativeVectorEnv``: N copies of one MuJoCo task stepped in C threads, no per-env Python.

The physics of all environments advances in one call to ``mujoco.batch.Batch.step``
(MuJoCo 4.0's persistent threaded batch: one MjModel, each simulation's
``mjSTATE_INTEGRATION`` row loaded into a per-thread MjData, ``nstep = frame_skip``).
Observations, rewards, termination and truncation are then computed in numpy from the
batch's ``qpos`` / ``qvel`` views. Per-env Python runs only at resets, to draw the reset
noise from each env's own ``np.random.Generator`` exactly as gymnasium does.

Why ``mujoco.batch`` rather than ``mujoco.rollout``: ``rollout`` takes an initial solver
warm start (``qacc_warmstart``) but returns only ``mjSTATE_FULLPHYSICS`` states, so a
per-env warm start cannot be carried from one env step to the next (envs sharing a
thread's MjData would inherit each other's), and results would match gymnasium (one
MjData per env) only to solver tolerance, not bit for bit. ``Batch`` is MuJoCo 4.0's
persistent threaded API: it keeps each simulation's whole ``mjSTATE_INTEGRATION`` row,
is documented bit-identical to a loop over one MjData per simulation at any thread
count, and is faster (DEPS.md).

Task definitions reproduced from gymnasium 1.4's v5 sources
(``gymnasium/envs/mujoco/{hopper,half_cheetah,walker2d,inverted_pendulum,swimmer}_v5.py``
and ``mujoco_env.py``):

* obs = concat(qpos[skip:], qvel), qvel clipped to [-10, 10] for Hopper and Walker2d;
  ``skip`` is 1 (x) for Hopper/HalfCheetah/Walker2d, 2 (x, y) for Swimmer, 0 for
  InvertedPendulum; float64.
* reward = w_fwd * (qpos[0]_after - qpos[0]_before) / dt + healthy_reward * is_healthy
  - w_ctrl * sum(action**2), with x read from ``data.qpos`` (not a body position) and
  the control cost computed on the action as given (unclipped, its own dtype).
* is_healthy: Hopper: all(-100 < state[2:] < 100), 0.7 < z, -0.2 < angle < 0.2;
  Walker2d: 0.8 < z < 2, -1 < angle < 1 (z, angle = qpos[1], qpos[2]);
  InvertedPendulum: obs finite and |qpos[1]| <= 0.2 (its reward is 1 while healthy).
  terminated = not is_healthy (when ``terminate_when_unhealthy``).
* reset: ``mj_resetData``; qpos = init_qpos + U(-s, s, nq), then qvel = init_qvel +
  U(-s, s, nv) (HalfCheetah: s * N(0, 1, nv)), drawn from the env's generator in that
  order; then ``mj_forward``. Env i is seeded with seed + i (gymnasium's seeding).
* frame_skip, dt = timestep * frame_skip, TimeLimit truncation at the registered
  ``max_episode_steps`` (1000), SAME_STEP autoreset with ``info["final_obs"]`` /
  ``info["_final_obs"]`` as gymnasium's SyncVectorEnv gives them.

Departures: ``info`` holds only ``final_obs`` / ``_final_obs`` (no per-env reward terms
and no ``final_info``); ``mj_rnePostConstraint`` (only ``cfrc_*`` fields, which none of
these tasks reads) is not run; ``render`` is not supported.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.envs.mujoco.mujoco_env import expand_model_path
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from mujoco.batch import Batch


@dataclass(frozen=True)
class TaskSpec:
    """A gymnasium v5 MuJoCo locomotion/balance task, as data (field names = v5 kwargs)."""

    xml_file: str
    frame_skip: int
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.0
    healthy_reward: float = 0.0
    terminate_when_unhealthy: bool = False
    reset_noise_scale: float = 0.0
    skipped_qpos: int = 0  # leading qpos entries left out of the observation
    qvel_clip: float | None = None
    qvel_noise: Literal["uniform", "normal"] = "uniform"
    health: Literal["none", "hopper", "walker2d", "pendulum"] = "none"
    healthy_state_range: tuple[float, float] = (-100.0, 100.0)
    healthy_z_range: tuple[float, float] = (0.7, float("inf"))
    healthy_angle_range: tuple[float, float] = (-0.2, 0.2)


TASKS: dict[str, TaskSpec] = {
    "Hopper-v5": TaskSpec(
        "hopper.xml",
        4,
        ctrl_cost_weight=1e-3,
        healthy_reward=1.0,
        terminate_when_unhealthy=True,
        reset_noise_scale=5e-3,
        skipped_qpos=1,
        qvel_clip=10.0,
        health="hopper",
    ),
    "HalfCheetah-v5": TaskSpec(
        "half_cheetah.xml",
        5,
        ctrl_cost_weight=0.1,
        reset_noise_scale=0.1,
        skipped_qpos=1,
        qvel_noise="normal",
    ),
    "Walker2d-v5": TaskSpec(
        "walker2d_v5.xml",
        4,
        ctrl_cost_weight=1e-3,
        healthy_reward=1.0,
        terminate_when_unhealthy=True,
        reset_noise_scale=5e-3,
        skipped_qpos=1,
        qvel_clip=10.0,
        health="walker2d",
        healthy_z_range=(0.8, 2.0),
        healthy_angle_range=(-1.0, 1.0),
    ),
    "InvertedPendulum-v5": TaskSpec(
        "inverted_pendulum.xml",
        2,
        forward_reward_weight=0.0,
        healthy_reward=1.0,
        terminate_when_unhealthy=True,
        reset_noise_scale=0.01,
        health="pendulum",
    ),
    "Swimmer-v5": TaskSpec(
        "swimmer.xml",
        4,
        ctrl_cost_weight=1e-4,
        reset_noise_scale=0.1,
        skipped_qpos=2,
    ),
}
SUPPORTED_ENVS = tuple(TASKS)

# v5 keyword arguments a caller may override (they map onto TaskSpec fields).
_OVERRIDABLE = frozenset(
    {
        "frame_skip",
        "forward_reward_weight",
        "ctrl_cost_weight",
        "healthy_reward",
        "terminate_when_unhealthy",
        "reset_noise_scale",
        "healthy_state_range",
        "healthy_z_range",
        "healthy_angle_range",
    }
)


def task_spec(env_id: str, **overrides: Any) -> TaskSpec:
    """The TaskSpec of a supported gymnasium id, with v5 keyword overrides applied."""
    if env_id not in TASKS:
        raise ValueError(
            f"backend 'native' does not support '{env_id}'; supported: {', '.join(TASKS)}"
        )
    spec = TASKS[env_id]
    if "exclude_current_positions_from_observation" in overrides:
        exclude = overrides.pop("exclude_current_positions_from_observation")
        overrides["skipped_qpos"] = spec.skipped_qpos if exclude else 0
    unknown = set(overrides) - _OVERRIDABLE - {"skipped_qpos"}
    if unknown:
        raise ValueError(
            f"backend 'native' does not accept env kwargs {sorted(unknown)}; "
            f"accepted: {sorted(_OVERRIDABLE | {'exclude_current_positions_from_observation'})}"
        )
    return dataclasses.replace(spec, **overrides)


class NativeVectorEnv(VectorEnv):
    """``num_envs`` copies of a gymnasium v5 MuJoCo task, stepped together in C threads.

    Same spaces, seeding, SAME_STEP autoreset and ``final_obs`` info as
    ``make_vec_env(..., backend="sync")``; see the module docstring for the task details.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        max_episode_steps: int | None = None,
        num_threads: int | None = None,
        **task_kwargs: Any,
    ) -> None:
        self.spec_task = task_spec(env_id, **task_kwargs)
        if max_episode_steps is None:
            max_episode_steps = gym.spec(env_id).max_episode_steps
        self.max_episode_steps = max_episode_steps
        self.num_envs = num_envs
        self.num_threads = (os.cpu_count() or 1) if num_threads is None else num_threads
        self.model = mujoco.MjModel.from_xml_path(expand_model_path(self.spec_task.xml_file))
        self.batch = Batch(self.model, nsim=num_envs, nthread=self.num_threads)
        self.qpos, self.qvel = self.batch.bind("qpos"), self.batch.bind("qvel")
        self.ctrl = self.batch.bind("ctrl")
        data = mujoco.MjData(self.model)  # gymnasium's init_qpos / init_qvel
        self.init_qpos, self.init_qvel = data.qpos.copy(), data.qvel.copy()
        self.dt = self.model.opt.timestep * self.spec_task.frame_skip

        low, high = self.model.actuator_ctrlrange.copy().astype(np.float32).T
        self.single_action_space = gym.spaces.Box(low, high, dtype=np.float32)
        obs_dim = self.model.nq + self.model.nv - self.spec_task.skipped_qpos
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float64)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.spec = None
        self.render_mode = None

        self.elapsed = np.zeros(num_envs, np.int64)
        self.rngs: list[np.random.Generator | None] = [None] * num_envs

    # --- task quantities, vectorised over envs -------------------------------------
    def _obs(self, ids: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Observations of envs ``ids`` from the current qpos / qvel."""
        spec = self.spec_task
        qvel = self.qvel[ids]
        if spec.qvel_clip is not None:
            qvel = np.clip(qvel, -spec.qvel_clip, spec.qvel_clip)
        return np.concatenate((self.qpos[ids, spec.skipped_qpos :], qvel), axis=1)

    def _healthy(self) -> np.ndarray:
        """gymnasium's ``is_healthy`` of every env (True for tasks without one)."""
        spec, qpos, qvel = self.spec_task, self.qpos, self.qvel
        if spec.health in ("hopper", "walker2d"):
            ok = _inside(qpos[:, 1], spec.healthy_z_range)  # z
            ok &= _inside(qpos[:, 2], spec.healthy_angle_range)  # torso angle
            if spec.health == "hopper":  # Hopper also bounds state_vector()[2:]
                state = np.concatenate((qpos, qvel), axis=1)[:, 2:]
                ok &= np.all(_inside(state, spec.healthy_state_range), axis=1)
            return ok
        if spec.health == "pendulum":
            finite = np.isfinite(qpos).all(axis=1) & np.isfinite(qvel).all(axis=1)
            return finite & ~(np.abs(qpos[:, 1]) > 0.2)
        return np.ones(self.num_envs, bool)

    def _reset_envs(self, ids: np.ndarray) -> None:
        """gymnasium's ``MujocoEnv.reset`` for envs ``ids``: resetData, noise, mj_forward."""
        spec, scale = self.spec_task, self.spec_task.reset_noise_scale
        nq, nv = self.model.nq, self.model.nv
        self.batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        for i in ids:  # per-env generators: the only per-env Python, and only at resets
            rng = self.rngs[i]
            qpos = self.init_qpos + rng.uniform(low=-scale, high=scale, size=nq)
            if spec.qvel_noise == "normal":
                qvel = self.init_qvel + scale * rng.standard_normal(nv)
            else:
                qvel = self.init_qvel + rng.uniform(low=-scale, high=scale, size=nv)
            self.qpos[i], self.qvel[i] = qpos, qvel
        self.batch.forward(ids)
        self.elapsed[ids] = 0

    # --- gymnasium VectorEnv API -----------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env; env i gets ``seed + i`` (or ``seed[i]``), as SyncVectorEnv does."""
        if seed is None or isinstance(seed, int):
            seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"got {len(seeds)} seeds for {self.num_envs} envs")
        for i, s in enumerate(seeds):
            if s is not None or self.rngs[i] is None:
                self.rngs[i], _ = seeding.np_random(s)
        self._reset_envs(np.arange(self.num_envs))
        return self._obs(), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Advance every env by ``frame_skip`` physics steps; SAME_STEP autoreset."""
        spec = self.spec_task
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs, self.model.nu):
            raise ValueError(
                f"actions must have shape {(self.num_envs, self.model.nu)}, got {actions.shape}"
            )
        x_before = self.qpos[:, 0].copy()
        self.ctrl[:] = actions
        self.batch.step(nstep=spec.frame_skip)
        x_velocity = (self.qpos[:, 0] - x_before) / self.dt
        obs = self._obs()
        healthy = self._healthy()
        ctrl_cost = spec.ctrl_cost_weight * np.sum(np.square(actions), axis=1)
        reward = spec.forward_reward_weight * x_velocity + spec.healthy_reward * healthy - ctrl_cost
        terminated = ~healthy if spec.terminate_when_unhealthy else np.zeros_like(healthy)
        self.elapsed += 1
        truncated = self.elapsed >= self.max_episode_steps
        info: dict[str, Any] = {}
        done = np.flatnonzero(terminated | truncated)
        if done.size:
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in done:
                final_obs[i] = obs[i].copy()
            info["final_obs"] = final_obs
            info["_final_obs"] = terminated | truncated
            self._reset_envs(done)
            obs[done] = self._obs(done)
        return obs, reward.astype(np.float64), terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        """Drop the batch (its thread pool)."""
        self.batch = None

    # --- state capture for checkpoints (used by get/set_vec_env_state) --------------
    def rlcore_get_states(self) -> list[dict[str, Any]]:
        """Per-env integration state (incl. solver warm start), step counter and RNG."""
        return [
            {
                "native_state": self.batch.state[i].copy(),
                "elapsed_steps": int(self.elapsed[i]),
                "rng": None if rng is None else copy.deepcopy(rng.bit_generator.state),
            }
            for i, rng in enumerate(self.rngs)
        ]

    def rlcore_set_states(self, states: list[dict[str, Any]]) -> None:
        """Restore what ``rlcore_get_states`` captured."""
        if len(states) != self.num_envs:
            raise ValueError(f"saved state has {len(states)} envs, this env has {self.num_envs}")
        for i, state in enumerate(states):
            if "native_state" not in state:
                raise ValueError("state was not captured from a native-backend env")
            self.batch.state[i] = state["native_state"]
            self.elapsed[i] = state["elapsed_steps"]
            if state["rng"] is not None:
                self.rngs[i] = np.random.Generator(np.random.PCG64())
                self.rngs[i].bit_generator.state = state["rng"]

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Only ``rlcore_get_state`` (per env), for code written against SyncVectorEnv."""
        if name == "rlcore_get_state":
            return tuple(self.rlcore_get_states())
        raise AttributeError(f"NativeVectorEnv does not support call('{name}')")


def _inside(values: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """Strictly inside the open interval, as gymnasium's ``lo < v < hi``."""
    lo, hi = bounds
    return (lo < values) & (values < hi)
