"""``RobotVectorEnv``: N copies of a robot task stepped together in MuJoCo's C threads.

The native back end of the Panda tasks (``env.backend=native``, the tasks' default through
``auto``): one ``mujoco.batch.Batch`` steps every simulation (20 substeps, then
``mj_forward`` for the sensors, exactly what ``PandaEnv.step`` does on its one MjData), and
the task's own functions (``rlcore.envs.robots.tasks``) read and write the batch's
(N, ...) arrays: actions, observations, rewards and success are the same code as the
gymnasium env's, vectorised. Resets run per env in Python (``reset_state`` on a scratch
MjData with the env's own generator, seeded ``seed + i`` as gymnasium's vector envs seed
them), and the reset's integration state is copied into the batch; so every observation,
reward and success flag equals ``backend=sync``'s bit for bit (tests/test_robot_native.py).

Observations are a dict of (N, dim) float32 arrays (goal tasks) or one (N, dim) array
(Lift); ``info["is_success"]`` is a (N,) bool array of the step's outcome (for an env
whose episode ended, its last step's); SAME_STEP autoreset with ``info["final_obs"]``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import mujoco
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rlcore.envs.backend import checked_ids, restart_on_host
from rlcore.envs.native import require_batch, reseed
from rlcore.envs.robots.env import PandaEnv, build_model, layout_of, reset_state
from rlcore.envs.robots.scene import GOAL_MARKER_GROUP, SUBSTEPS
from rlcore.envs.robots.tasks import TASKS, SimArrays

_INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION


class RobotVectorEnv(VectorEnv):
    """``num_envs`` copies of robot task ``task`` (``PandaPush`` ...) in one MuJoCo batch."""

    goal_marker_group = GOAL_MARKER_GROUP  # envs/pixels.py's GoalMarkers

    def __init__(
        self,
        task: str,
        num_envs: int,
        max_episode_steps: int | None = None,
        num_threads: int | None = None,
        reward_type: str = "sparse",
        control: str = "ee",
    ) -> None:
        require_batch()
        from mujoco.batch import Batch

        probe = PandaEnv(task, reward_type, control)  # checks the options; gives the spaces
        self.task, self.control, self.dense = TASKS[task], control, probe.dense
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps or self.task.max_episode_steps
        self.model = build_model(self.task, control)
        self.layout = layout_of(self.model, self.task)
        self.batch = Batch(self.model, nsim=num_envs, nthread=num_threads or 0)
        self.sim = SimArrays(*(self.batch.bind(name) for name in
                               ("qpos", "qvel", "ctrl", "mocap_pos", "sensordata")))  # fmt: skip
        self.ee = self.batch.bind("site_xpos")[:, self.model.site("ee").id]
        self._scratch = mujoco.MjData(self.model)
        self._state = np.empty(mujoco.mj_stateSize(self.model, _INTEGRATION))
        self.single_observation_space = probe.observation_space
        self.single_action_space = probe.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.spec = None
        self.render_mode = None
        # called with the ids of the envs whose episodes ended, on their final states,
        # before they reset (envs/pixels.py's BatchPixels renders them there)
        self.on_episode_end: Callable[[np.ndarray], None] | None = None
        self.elapsed = np.zeros(num_envs, np.int64)
        self.rngs: list[np.random.Generator | None] = [None] * num_envs
        probe.close()

    # --- the task over every env ----------------------------------------------------
    def _obs(self, ids: np.ndarray | slice = slice(None)) -> Any:
        sim = SimArrays(*(getattr(self.sim, f)[ids] for f in SimArrays.__dataclass_fields__))
        observation = self.task.observation(sim, self.layout).astype(np.float32)
        if not self.task.goal_conditioned:
            return observation
        return {
            "observation": observation,
            "achieved_goal": self.task.achieved_goal(sim, self.layout).astype(np.float32),
            "desired_goal": self.task.desired_goal(sim, self.layout).astype(np.float32),
        }

    def _reset_envs(self, ids: np.ndarray) -> None:
        """``PandaEnv``'s reset for envs ``ids`` (each from its own generator), then the
        batch's forward pass (derived fields and sensors of the new states)."""
        data = self._scratch
        for i in ids:
            reset_state(self.task, self.model, data, self.layout, self.rngs[i], self.control)
            mujoco.mj_getState(self.model, data, self._state, _INTEGRATION)
            self.batch.state[i] = self._state
        self.batch.forward(ids)
        self.elapsed[ids] = 0

    # --- gymnasium VectorEnv API ------------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every env (env i seeded ``seed + i``), or those of ``options["reset_mask"]``."""
        self._reset_envs(reseed(self.rngs, seed, options))
        return self._obs(), {}

    def step(self, actions: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """One control step of every env (20 substeps); SAME_STEP autoreset."""
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs, *self.single_action_space.shape):
            raise ValueError(
                f"actions must have shape {(self.num_envs, *self.single_action_space.shape)}, "
                f"got {actions.shape}"
            )
        self.task.apply_action(self.sim, self.layout, actions, self.control)
        self.batch.step(nstep=SUBSTEPS, stage=mujoco.mjtStage.mjSTAGE_ACC)
        obs = self._obs()
        achieved = self.task.achieved_goal(self.sim, self.layout)
        desired = self.task.desired_goal(self.sim, self.layout)
        success = self.task.is_success(achieved, desired)
        reward = self.task.compute_reward(achieved, desired, self.dense, self.ee)
        self.elapsed += 1
        terminated = np.zeros(self.num_envs, bool)  # the tasks end by their time limit only
        truncated = self.elapsed >= self.max_episode_steps
        info: dict[str, Any] = {"is_success": success}
        done = np.flatnonzero(truncated)
        if done.size:
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in done:
                final_obs[i] = (
                    {k: v[i].copy() for k, v in obs.items()} if isinstance(obs, dict)
                    else obs[i].copy()
                )  # fmt: skip
            info["final_obs"], info["_final_obs"] = final_obs, truncated.copy()
            if self.on_episode_end is not None:
                self.on_episode_end(done)
            self._reset_envs(done)
            fresh = self._obs(done)
            if isinstance(obs, dict):
                for key in obs:
                    obs[key][done] = fresh[key]
            else:
                obs[done] = fresh
        return obs, reward.astype(np.float64), terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        self.batch = None

    # --- SimulatorBackend (rlcore.envs.backend) ---------------------------------------
    device = None  # numpy arrays on the host

    def get_states(self, env_ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
        """Per-env integration state (goals and ee target included: they are mocap
        bodies), step counter, RNG and current observation."""
        ids = range(self.num_envs) if env_ids is None else [int(i) for i in env_ids]
        obs = self._obs()
        return [
            {
                "native_state": self.batch.state[i].copy(),
                "elapsed_steps": int(self.elapsed[i]),
                "rng": None if self.rngs[i] is None
                else copy.deepcopy(self.rngs[i].bit_generator.state),
                "obs": {k: v[i].copy() for k, v in obs.items()} if isinstance(obs, dict)
                else obs[i].copy(),
            }  # fmt: skip
            for i in ids
        ]

    def set_states(
        self, states: Sequence[dict[str, Any]], env_ids: Sequence[int] | None = None
    ) -> None:
        """Restore ``get_states`` states, or ``portable_state`` ones (S3RL snapshots,
        captured on the gymnasium env: their RNG is left alone)."""
        ids = checked_ids(self.num_envs, states, env_ids)
        rows = read_states(states, ids, self.batch.nstate, self.elapsed, self.rngs)
        for i, row in zip(ids, rows):
            self.batch.state[i] = row
        self.batch.forward(np.asarray(ids))

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
        raise AttributeError(f"RobotVectorEnv does not support call('{name}')")


def read_states(
    states: Sequence[dict[str, Any]],
    ids: Sequence[int],
    size: int,
    elapsed: np.ndarray,
    rngs: list[np.random.Generator | None],
) -> np.ndarray:
    """The integration rows (len(ids), size) of robot-task states (``get_states``' of the
    native or MJX back end, or ``portable_state``'s), each checked against ``size``; the
    envs' step counters and generators (where a state has one) are restored in place."""
    rows = np.empty((len(ids), size))
    for k, (i, state) in enumerate(zip(ids, states)):
        key = "integration" if "integration" in state else "native_state"
        if key not in state:
            raise ValueError("state was not captured from a robot task's env")
        values = np.asarray(state[key], dtype=np.float64)
        if values.shape != (size,):
            raise ValueError(
                f"state has {values.size} values, this task's integration state has "
                f"{size}: it was captured on another task or control"
            )
        rows[k] = values
        elapsed[i] = state["elapsed_steps"]
        if state.get("rng") is not None:
            rngs[i] = np.random.Generator(np.random.PCG64())
            rngs[i].bit_generator.state = state["rng"]
    return rows
