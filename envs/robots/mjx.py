"""``RobotMjxVectorEnv``: N copies of a robot task whose physics MuJoCo MJX steps (JAX).

The MJX back end of the Panda tasks (``env.backend=mjx``, ``device=cuda`` for a GPU):
the control step (the action's mocap target and finger controls, 20 MJX substeps, a
forward pass for the sensors, observation, reward and success) is one jitted call
``vmap``-ed over the envs, from the task's own functions (``rlcore.envs.robots.tasks``,
evaluated with ``jax.numpy``), so the formulas are the native back end's.

Everything else is the native back end's too, on the host: the env hands out numpy arrays
(dict observations of goal tasks, success in ``info["is_success"]``, SAME_STEP autoreset
with ``info["final_obs"]``), resets are ``reset_state`` on a host MjData with each env's
own generator (seeded ``seed + i``), uploaded as integration states, so a seed starts the
same episodes as on the native and sync back ends, and states (checkpoints, S3RL
snapshots) are MuJoCo integration states that restore on either back end. The tasks end
by their time limit only, so the host knows which envs end without reading the device.

Departures from the native back end: MJX computes in float32 (the native one in
float64), so trajectories drift apart over steps (measured in tests/test_robot_mjx.py:
agreement at the first step, the scripted experts' success); the step hands the
observation to the host every step (the tasks' HER reads goals there); ``PandaSlide``
is refused (MJX's JAX implementation has no cylinder-box collision).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rlcore.envs.backend import checked_ids, restart_on_host
from rlcore.envs.mjx import (
    MjxUnavailableError,
    _integration_spec,
    _jax_device,
    enable_compilation_cache,
    mjx_available,
)
from rlcore.envs.native import reseed
from rlcore.envs.robots.env import PandaEnv, build_model, layout_of, reset_state
from rlcore.envs.robots.native import read_states
from rlcore.envs.robots.scene import SUBSTEPS
from rlcore.envs.robots.tasks import TASKS, SimArrays

# MJX's JAX implementation has no collision function for these geom pairs
UNSUPPORTED = {"PandaSlide": "MJX has no cylinder-box collision (the puck on the table)"}


class RobotMjxVectorEnv(VectorEnv):
    """``num_envs`` copies of robot task ``task`` (``PandaPush`` ...) stepped by MJX on
    ``device``. ``solver_iterations`` / ``ls_iterations`` cap MJX's constraint solver
    (None: the scene's own, 100 / 50)."""

    device = None  # numpy arrays on the host (rlcore.envs.backend.SimulatorBackend)

    def __init__(
        self,
        task: str,
        num_envs: int,
        max_episode_steps: int | None = None,
        reward_type: str = "sparse",
        control: str = "ee",
        device: str | torch.device = "cpu",
        solver_iterations: int | None = None,
        ls_iterations: int | None = None,
    ) -> None:
        if not mjx_available():
            raise MjxUnavailableError(
                "env backend 'mjx' needs JAX and MuJoCo MJX: pip install 'rlcore[mjx]'"
            )
        if task in UNSUPPORTED:
            raise MjxUnavailableError(
                f"{task} does not run on env backend 'mjx': {UNSUPPORTED[task]}; use "
                "env.backend=native"
            )
        import jax
        from mujoco import mjx

        enable_compilation_cache()
        probe = PandaEnv(task, reward_type, control)  # checks the options; gives the spaces
        self.task, self.control, self.dense = TASKS[task], control, probe.dense
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps or self.task.max_episode_steps
        self.model = model = build_model(self.task, control)
        if solver_iterations is not None:
            model.opt.iterations = solver_iterations
        if ls_iterations is not None:
            model.opt.ls_iterations = ls_iterations
        self.layout = layout_of(model, self.task)
        self.jax_device = _jax_device(device)
        self._spec = _integration_spec(model)
        self._scratch = mujoco.MjData(model)
        self._state_size = mujoco.mj_stateSize(model, self._spec)
        with jax.default_device(self.jax_device):
            self._mx = mjx.put_model(model, device=self.jax_device)
            data0 = mjx.make_data(model, device=self.jax_device)
            self.data = jax.vmap(lambda _: data0)(np.arange(num_envs))
        self._fns = self._functions()
        self.single_observation_space = probe.observation_space
        self.single_action_space = probe.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.spec = None
        self.render_mode = None
        self.elapsed = np.zeros(num_envs, np.int64)
        self.rngs: list[np.random.Generator | None] = [None] * num_envs
        self._obs: Any = None  # the current observation (numpy), for get_states
        probe.close()

    # --- the jitted functions ---------------------------------------------------------
    def _functions(self) -> dict[str, Any]:
        import jax
        import jax.numpy as jnp
        from mujoco import mjx

        task, layout, control, dense, model = self.task, self.layout, self.control, self.dense, self._mx
        spec, ee_site = self._spec, self.model.site("ee").id

        def sim_of(data: Any) -> SimArrays:  # a batch of one (the task functions' layout)
            return SimArrays(*(getattr(data, f)[None] for f in
                               ("qpos", "qvel", "ctrl", "mocap_pos", "sensordata")))  # fmt: skip

        def outputs(data: Any) -> tuple[Any, ...]:
            sim = sim_of(data)
            observation = task.observation(sim, layout, jnp)[0].astype(jnp.float32)
            achieved = task.achieved_goal(sim, layout, jnp)[0]
            desired = task.desired_goal(sim, layout)[0]
            success = task.is_success(achieved, desired, jnp)
            reward = task.compute_reward(achieved, desired, dense, data.site_xpos[ee_site], jnp)
            goals = (achieved.astype(jnp.float32), desired.astype(jnp.float32))
            return observation, *goals, reward, success

        def step_one(data: Any, action: Any) -> tuple[Any, tuple[Any, ...]]:
            targets, half = task.action_targets(sim_of(data), layout, action[None], control, jnp)
            if control == "ee":
                data = data.replace(mocap_pos=data.mocap_pos.at[layout.target_mocap].set(targets[0]))
            else:
                data = data.replace(ctrl=data.ctrl.at[:7].set(targets[0]))
            data = data.replace(ctrl=data.ctrl.at[-2:].set(half[0]))
            data = jax.lax.fori_loop(0, SUBSTEPS, lambda _, d: mjx.step(model, d), data)
            data = mjx.forward(model, data)  # sensors at the state the step reached
            return data, outputs(data)

        def restore_one(data: Any, switch: Any, row: Any) -> tuple[Any, tuple[Any, ...]]:
            row = jnp.where(switch, row, mjx.get_state(model, data, spec))
            data = mjx.forward(model, mjx.set_state(model, data, row, spec))
            return data, outputs(data)

        return {
            "step": jax.jit(jax.vmap(step_one)),
            "restore": jax.jit(jax.vmap(restore_one)),
            "get_state": jax.jit(jax.vmap(lambda data: mjx.get_state(model, data, spec))),
        }

    # --- host side --------------------------------------------------------------------
    def _observation(self, values: tuple[Any, ...]) -> Any:
        observation, achieved, desired = (np.asarray(v) for v in values[:3])
        if not self.task.goal_conditioned:
            return observation
        return {"observation": observation, "achieved_goal": achieved, "desired_goal": desired}

    def _restore(self, ids: np.ndarray, rows: np.ndarray) -> Any:
        """Integration states ``rows`` into envs ``ids`` (on the device, with a forward
        pass); returns every env's observation then."""
        import jax

        switch = np.zeros(self.num_envs, bool)
        switch[ids] = True
        table = np.zeros((self.num_envs, self._state_size), np.float32)
        table[ids] = rows
        put = jax.device_put
        self.data, values = self._fns["restore"](
            self.data, put(switch, self.jax_device), put(table, self.jax_device)
        )
        return self._observation(values)

    def _reset_envs(self, ids: np.ndarray) -> Any:
        """``PandaEnv``'s reset for envs ``ids`` (each from its own generator) on the host,
        uploaded; returns every env's observation then."""
        data, rows = self._scratch, np.empty((len(ids), self._state_size))
        for k, i in enumerate(ids):
            reset_state(self.task, self.model, data, self.layout, self.rngs[i], self.control)
            mujoco.mj_getState(self.model, data, rows[k], self._spec)
        self.elapsed[ids] = 0
        return self._restore(ids, rows)

    # --- gymnasium VectorEnv API ------------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every env (env i seeded ``seed + i``), or those of ``options["reset_mask"]``."""
        self._obs = _copied(self._reset_envs(reseed(self.rngs, seed, options)))
        return _copied(self._obs), {}

    def step(self, actions: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """One control step of every env (20 MJX substeps); SAME_STEP autoreset."""
        import jax

        actions = np.asarray(actions, dtype=np.float32)
        if actions.shape != (self.num_envs, *self.single_action_space.shape):
            raise ValueError(
                f"actions must have shape {(self.num_envs, *self.single_action_space.shape)}, "
                f"got {actions.shape}"
            )
        self.data, values = self._fns["step"](self.data, jax.device_put(actions, self.jax_device))
        obs = _copied(self._observation(values))
        reward = np.asarray(values[3], dtype=np.float64)
        info: dict[str, Any] = {"is_success": np.asarray(values[4])}
        self.elapsed += 1
        terminated = np.zeros(self.num_envs, bool)  # the tasks end by their time limit only
        truncated = self.elapsed >= self.max_episode_steps
        done = np.flatnonzero(truncated)
        if done.size:
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in done:
                final_obs[i] = _row(obs, i)
            info["final_obs"], info["_final_obs"] = final_obs, truncated.copy()
            fresh = self._reset_envs(done)
            for target, source in _parts(obs, fresh):
                target[done] = source[done]
        self._obs = obs
        return _copied(obs), reward, terminated, truncated, info

    # --- SimulatorBackend (rlcore.envs.backend) ---------------------------------------
    def get_states(self, env_ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
        """Per-env integration state (MuJoCo's layout: it restores on the native back
        end too), step counter, RNG and current observation."""
        if self._obs is None:
            raise RuntimeError("reset the env before reading its states")
        ids = range(self.num_envs) if env_ids is None else [int(i) for i in env_ids]
        rows = np.asarray(self._fns["get_state"](self.data), dtype=np.float64)
        return [
            {
                "native_state": rows[i].copy(),
                "elapsed_steps": int(self.elapsed[i]),
                "rng": None if self.rngs[i] is None
                else copy.deepcopy(self.rngs[i].bit_generator.state),
                "obs": _row(self._obs, i),
            }  # fmt: skip
            for i in ids
        ]

    def set_states(
        self, states: Sequence[dict[str, Any]], env_ids: Sequence[int] | None = None
    ) -> None:
        """Restore ``get_states`` states of this or the native back end, or
        ``portable_state`` ones (S3RL snapshots: their RNG is left alone)."""
        if self._obs is None:
            raise RuntimeError("reset the env before restoring states into it")
        ids = checked_ids(self.num_envs, states, env_ids)
        rows = read_states(states, ids, self._state_size, self.elapsed, self.rngs)
        fresh = self._restore(np.asarray(ids), rows)
        for target, source in _parts(self._obs, fresh):
            target[ids] = source[ids]

    def state_table(self, states: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return list(states)

    def restart(
        self, mask: Any, obs: Any, table: Any = None, rows: Any = None
    ) -> tuple[Any, dict[str, Any]]:
        return restart_on_host(self, mask, obs, table, rows)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Only ``rlcore_get_state`` (per env), for code written against SyncVectorEnv."""
        if name == "rlcore_get_state":
            return tuple(self.get_states())
        raise AttributeError(f"RobotMjxVectorEnv does not support call('{name}')")


def _parts(target: Any, source: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """(target array, source array) per observation part (one pair for a vector)."""
    if isinstance(target, dict):
        return [(target[key], source[key]) for key in target]
    return [(target, source)]


def _row(obs: Any, i: int) -> Any:
    return {k: v[i].copy() for k, v in obs.items()} if isinstance(obs, dict) else obs[i].copy()


def _copied(obs: Any) -> Any:
    """Writable host copies (JAX's arrays are read-only views)."""
    if isinstance(obs, dict):
        return {key: np.array(value) for key, value in obs.items()}
    return np.array(obs)
