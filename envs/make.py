"""``make_vec_env``: gymnasium vector environments with the conventions rlcore relies on.

* Autoreset is SAME_STEP, chosen explicitly: when an episode ends, ``step`` returns the
  first observation of the next episode and ``info["final_obs"]`` holds the last one,
  which the loop stores as ``next_obs`` (see ``final_next_obs``).
* ``info["episode_return"]`` / ``info["episode_length"]`` (NaN where no episode ended)
  report raw, un-normalised episode statistics.
* Observation / reward normalisation wrappers keep their statistics in ``state_dict``
  so checkpoints carry them.
* ``get_vec_env_state`` / ``set_vec_env_state`` capture and restore every sub-env's
  simulator state (MuJoCo integration state, time-limit counter, RNG), which makes a
  resumed run identical to an uninterrupted one.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import os
import pickle
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

from rlcore.envs import (  # noqa: F401  (register ids)
    antmaze,
    atari,
    bitflip,
    env_state,
    neorl2,
    pixels,
    robots,
    safety,
    third_party,
)
from rlcore.envs.backend import AsyncBackend, SyncBackend, backend_of
from rlcore.envs.chunks import ChunkQueue

SHORT_NAMES: dict[str, str] = {
    "hopper": "Hopper-v5",
    "halfcheetah": "HalfCheetah-v5",
    "walker2d": "Walker2d-v5",
    "ant": "Ant-v5",
    "humanoid": "Humanoid-v5",
    "humanoidstandup": "HumanoidStandup-v5",
    "swimmer": "Swimmer-v5",
    "invertedpendulum": "InvertedPendulum-v5",
    "inverteddoublependulum": "InvertedDoublePendulum-v5",
    "reacher": "Reacher-v5",
    "pusher": "Pusher-v5",
    "cartpole": "CartPole-v1",  # discrete actions (algo=ppo or algo=dqn)
    "bitflipping": bitflip.ENV_ID,  # the HER paper's goal task, discrete actions (algo=dqn)
    "antgoal": antmaze.ANT_GOAL_ID,  # the Ant walking to goal points (AntMaze data)
    **{f"antmaze{maze}eval": env_id for maze, env_id in antmaze.EVAL_IDS.items()},
    **{name.lower(): env_id for name, env_id in robots.ROBOT_IDS.items()},  # PandaPush...
    "dmsd": neorl2.DMSD_ID,  # NeoRL-2's tasks (envs/neorl2.py)
    "pipeline": neorl2.PIPELINE_ID,
    "randomfrictionhopper": neorl2.HOPPER_ID,
    "safetyhalfcheetah": neorl2.CHEETAH_ID,
    "simglucose": neorl2.SIMGLUCOSE_ID,
    "rocketrecovery": neorl2.ROCKET_ID,
}
BACKENDS = ("sync", "async", "native", "mjx", "ale", "auto")
# what gym.make itself takes beside the task's constructor arguments
GYM_MAKE_KWARGS = frozenset({"max_episode_steps", "disable_env_checker", "render_mode"})
EPISODE_KEYS = ("episode_return", "episode_length")  # info's raw episode statistics


class UnknownEnvError(ValueError):
    """Raised for an environment name that is neither a short name nor a gymnasium id."""


def resolve_env_id(name: str) -> str:
    """Short name (case-insensitive, e.g. ``hopper``) or full gymnasium id -> gymnasium id;
    ``module:Id`` (a user's env, registered when its module is imported) stays whole."""
    if ":" in name:  # gymnasium's "module:Id": the module registers Id when imported
        module, _, env_id = name.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as error:  # the module, or something it imports, is missing
            raise UnknownEnvError(
                f"env {name}: importing its module '{module}' failed ({error}); install it or "
                "put it on PYTHONPATH (module:Id registers Id when the module is imported)"
            ) from None
        if env_id in gym.registry:
            return name  # kept whole: every process that makes it imports the module
    if atari.is_atari(name):  # ALE/<Game>-v5: registered by ale-py, checked there
        atari.atari_game(name)
        return name
    key = name.lower().replace("-", "").replace("_", "")
    if key in SHORT_NAMES:
        return SHORT_NAMES[key]
    if name in gym.registry and not third_party.from_suite(name):
        return name
    lowered = {env_id.lower(): env_id for env_id in gym.registry}
    if name.lower() in lowered and not third_party.from_suite(lowered[name.lower()]):
        return lowered[name.lower()]
    robotics = third_party.suite_id(name)  # Fetch, Kitchen, AntMaze...: through the adapter
    if robotics is not None:
        return robotics
    # a registered id without its version (SafetyHopperVelocity): the newest version
    versions = sorted(
        (env_id for env_id in gym.registry if env_id.lower().rsplit("-v", 1)[0] == name.lower()),
        key=lambda env_id: (
            int(env_id.rsplit("-v", 1)[1]) if env_id.rsplit("-v", 1)[-1].isdigit() else -1
        ),
    )
    if versions:
        return versions[-1]
    raise UnknownEnvError(
        f"unknown environment '{name}'. Short names: {', '.join(sorted(SHORT_NAMES.values()))} "
        "(case-insensitive, version optional), or any registered gymnasium id "
        "(e.g. Pusher-v5, Pendulum-v1)."
    )


class SimulatorState(gym.Wrapper):
    """Outermost per-env wrapper exposing ``rlcore_get_state`` / ``rlcore_set_state``
    (and ``rlcore_restore``, the same restore as a settable attribute, which gymnasium's
    public ``set_attr`` reaches in every sync or async worker: ``rlcore.envs.backend``).

    The unwrapped env is captured by ``rlcore.envs.env_state``: the whole ``MjData`` of
    every MuJoCo simulation it steps (integration state *and* the derived quantities, e.g.
    body positions of the previous step that reward terms read; restored with
    ``mj_copyData``) with the model's parameters, and the plain data the env holds (a
    goal, a classic-control task's ``state``); a task that declares its state unsaved
    (``env_state.UnsavedState``) is marked not restorable. Every
    state also holds the env's current observation (``"obs"``), which a restart from
    that state hands out (``last_obs``); a rendering env restored from a portable state
    (an S3RL snapshot: the teacher's state observation) hands out that observation with
    the camera's view of the restored state, a new frame stack.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.last_obs: Any = None  # the observation the env returned last

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self.last_obs = obs
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.last_obs = obs
        return obs, reward, terminated, truncated, info

    def _time_limit(self) -> gym.wrappers.TimeLimit | None:
        return self._wrapper(gym.wrappers.TimeLimit)

    def _wrapper(self, kind: type) -> Any:
        env = self.env
        while isinstance(env, gym.Wrapper):
            if isinstance(env, kind):
                return env
            env = env.env
        return None

    def rlcore_get_state(self) -> dict[str, Any]:
        base = self.env.unwrapped
        if isinstance(base, env_state.UnsavedState):  # a resume starts new episodes
            return {"restorable": False, "why": base.unsaved_state}
        state: dict[str, Any] = {"rng": copy.deepcopy(base.np_random.bit_generator.state)}
        limit = self._time_limit()
        if limit is not None:
            state["elapsed_steps"] = limit._elapsed_steps
        state["env"] = env_state.capture(base)
        stack = self._wrapper(pixels.FrameStack)  # rendered observations: the stacked images
        if stack is not None:
            state["frames"] = [image.copy() for image in stack.images]
        state["obs"] = copy.deepcopy(self.last_obs)
        return state

    def rlcore_set_state(self, state: dict[str, Any]) -> None:
        """Restore a state of ``rlcore_get_state`` or a portable simulator state
        (``portable_state``: S3RL snapshots; the env keeps its own RNG then)."""
        base = self.env.unwrapped
        if "rng" in state:
            base.np_random.bit_generator.state = state["rng"]
        limit = self._time_limit()
        if limit is not None and "elapsed_steps" in state:
            limit._elapsed_steps = state["elapsed_steps"]
        if "env" in state:
            env_state.restore(base, state["env"])
        elif "mujoco_data" in state:  # an earlier checkpoint: the MjData alone
            import mujoco

            mujoco.mj_copyData(base.data, base.model, pickle.loads(state["mujoco_data"]))
        elif "integration" in state:
            import mujoco

            mujoco.mj_setState(
                base.model, base.data, state["integration"], mujoco.mjtState.mjSTATE_INTEGRATION
            )
            # the derived positions a task reads as its "before" x (Ant: xpos, Humanoid:
            # xipos) are those the teacher's last substep left, not a function of the state
            base.data.xpos[:] = state["xpos"]
            base.data.xipos[:] = state["xipos"]
            from rlcore.envs.robots.env import PandaEnv

            if isinstance(base, PandaEnv):  # its steps end with mj_forward (the sensors its
                mujoco.mj_forward(base.model, base.data)  # next action reads), as here
        elif "state" in state:
            base.state = copy.deepcopy(state["state"])
        stack = self._wrapper(pixels.FrameStack)
        if stack is not None and "frames" in state:
            stack.images.clear()
            stack.images.extend(image.copy() for image in state["frames"])
        if "obs" in state:
            self.last_obs = copy.deepcopy(state["obs"])
        if stack is not None and "integration" in state:
            # a snapshot (the teacher's state observation, if any): a rendering env starts
            # a new stack from the camera's view of the restored state
            camera = self._wrapper(pixels.PixelObservation)
            image = camera.render_restored(state["integration"])
            stack.start_from(image)
            if "obs" in state:
                self.last_obs = stack.stacked(pixels.observed(state["obs"], camera.mode, image))

    @property
    def rlcore_restore(self) -> None:
        """Write-only: setting a state restores it (None leaves the env as it is)."""
        return None

    @rlcore_restore.setter
    def rlcore_restore(self, state: dict[str, Any] | None) -> None:
        if state is not None:
            self.rlcore_set_state(state)

    def rlcore_portable_state(self) -> dict[str, Any]:
        """``portable_state`` of this env's MuJoCo simulation (S3RL snapshots)."""
        from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

        if not isinstance(self.env.unwrapped, MujocoEnv):
            raise ValueError(
                f"{self.env.spec.id if self.env.spec else self.env} is not a MuJoCo task"
            )
        limit = self._time_limit()
        elapsed = limit._elapsed_steps if limit is not None else 0
        return portable_state(self.env.unwrapped, elapsed)

    def rlcore_model_digest(self) -> str:
        """``env_state.model_digest`` of this env (snapshots refuse a task whose model
        changes between episodes: they do not carry the model)."""
        return env_state.model_digest(self.env.unwrapped)


def portable_state(mujoco_env: Any, elapsed_steps: int) -> dict[str, Any]:
    """A MuJoCo env's state in a form every back end restores exactly (``sync`` / ``async``
    through ``SimulatorState``, ``native`` and ``mjx`` through their ``set_states``): the
    ``mjSTATE_INTEGRATION`` vector (positions, velocities, controls, solver warm start,
    time), the derived body positions that rewards read as "before" values (``xpos``,
    ``xipos``) and the elapsed steps of the time limit. Small (a few hundred floats), so
    thousands of S3RL snapshots fit in a file; no RNG (a restored env keeps its own)."""
    import mujoco

    model, data = mujoco_env.model, mujoco_env.data
    integration = np.empty(mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_INTEGRATION))
    mujoco.mj_getState(model, data, integration, mujoco.mjtState.mjSTATE_INTEGRATION)
    return {
        "integration": integration,
        "xpos": data.xpos.copy(),
        "xipos": data.xipos.copy(),
        "elapsed_steps": int(elapsed_steps),
    }


def _like(value: Any, reference: Any) -> Any:
    """``value`` (numpy array or torch tensor) as the array type of ``reference``: a tensor
    on its device (no copy when it is one already), or a numpy array."""
    if isinstance(reference, torch.Tensor):
        return torch.as_tensor(value, device=reference.device)
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else value


def _filled(reference: Any, value: Any, dtype: str) -> Any:
    """A (len(reference),) array of ``value`` of the array type of ``reference``: a tensor on
    its device, or a numpy array; ``dtype`` names a numpy / torch dtype ("bool", "int64")."""
    n = len(reference)
    if isinstance(reference, torch.Tensor):
        return torch.full((n,), value, dtype=getattr(torch, dtype), device=reference.device)
    return np.full(n, value, dtype=dtype)


def _to_numpy(value: Any) -> Any:
    return value.detach().cpu().numpy().copy() if isinstance(value, torch.Tensor) else value.copy()


class RunningMeanStd:
    """Streaming mean / variance (parallel algorithm of Chan et al.), float64. Batches may
    be numpy arrays or torch tensors (device back ends): the statistics then live on the
    batch's device; ``state_dict`` always holds numpy arrays."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        self.mean: Any = np.zeros(shape, np.float64)
        self.var: Any = np.ones(shape, np.float64)
        self.count = epsilon

    def update(self, batch: np.ndarray | torch.Tensor) -> None:
        if isinstance(batch, torch.Tensor):
            batch = batch.detach().to(torch.float64)
            batch_mean, batch_var = batch.mean(dim=0), batch.var(dim=0, correction=0)
        else:
            batch_mean, batch_var = batch.mean(axis=0), batch.var(axis=0)
        n = batch.shape[0]
        mean, var = _like(self.mean, batch), _like(self.var, batch)
        delta = batch_mean - mean
        total = self.count + n
        self.mean = mean + delta * n / total
        m2 = var * self.count + batch_var * n + delta**2 * self.count * n / total
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> dict[str, Any]:
        return {"mean": _to_numpy(self.mean), "var": _to_numpy(self.var), "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean, self.var = state["mean"].copy(), state["var"].copy()
        self.count = state["count"]


def step_info(
    info: dict[str, Any], key: str, num_envs: int, dtype: Any = np.float64
) -> np.ndarray | None:
    """Every sub-env's ``info[key]`` of the step it took, (num_envs,) of ``dtype``, or None
    when the task reports none. gymnasium's vector envs give ``info[key]`` with its mask
    ``info["_" + key]``, and, for an env whose episode just ended (SAME_STEP autoreset),
    the value of its last step in ``info["final_info"]`` (read last, so it wins over the
    reset's); the native back end gives a plain array."""
    final = info.get("final_info") or {}
    if key not in info and key not in final:
        return None
    values = np.zeros(num_envs, dtype)
    for source in (info, final):
        if key in source:
            mask = np.asarray(source.get(f"_{key}", np.ones(num_envs, bool)), bool)
            values[mask] = np.asarray(source[key], dtype)[mask]
    return values


def step_costs(info: dict[str, Any], num_envs: int) -> np.ndarray | torch.Tensor | None:
    """Every sub-env's cost of this step (``step_info`` of ``cost``; a device back end's
    own tensor as it is)."""
    if isinstance(info.get("cost"), torch.Tensor):  # a device back end: every env's cost
        return info["cost"].double()
    return step_info(info, "cost", num_envs)


class EpisodeStats(VectorWrapper):
    """Adds raw ``episode_return`` / ``episode_length`` (NaN where still running) to info;
    on a task that reports costs also ``info["cost"]`` as one plain (num_envs,) array
    (``step_costs``) and ``episode_cost``, the episode's summed cost; on a task that
    reports ``info["is_success"]`` (robot tasks; the mazes' ``info["success"]``)
    ``episode_success``: 1.0 or 0.0, whether
    the episode's last step was a success (gymnasium-robotics' and SB3's convention)."""

    def __init__(self, env: VectorEnv) -> None:
        super().__init__(env)
        self.returns = np.zeros(self.num_envs, np.float64)
        self.lengths = np.zeros(self.num_envs, np.int64)
        self.costs = np.zeros(self.num_envs, np.float64)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
        mask = (options or {}).get("reset_mask")  # read first: gymnasium pops it
        obs, info = self.env.reset(seed=seed, options=options)
        rows = slice(None) if mask is None else np.asarray(_to_numpy(mask), bool)
        self.returns[rows] = 0.0  # a partial reset restarts only its envs' episodes
        self.lengths[rows] = 0
        self.costs[rows] = 0.0
        return obs, info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self.returns += reward
        self.lengths += info.get("chunk_steps", 1)  # ActionChunks: env steps per chunk
        done = terminated | truncated
        info["episode_return"] = np.where(done, self.returns, np.nan)
        info["episode_length"] = np.where(done, self.lengths, np.nan)
        costs = step_costs(info, self.num_envs)
        if costs is not None:
            info["cost"] = costs
            self.costs += costs
            info["episode_cost"] = np.where(done, self.costs, np.nan)
            self.costs[done] = 0.0
        success = step_info(info, "is_success", self.num_envs, bool)
        if success is None:  # gymnasium-robotics' mazes name it "success"
            success = step_info(info, "success", self.num_envs, bool)
        if success is not None:
            info["episode_success"] = np.where(done, success.astype(np.float64), np.nan)
        self.returns[done] = 0.0
        self.lengths[done] = 0
        return obs, reward, terminated, truncated, info

    def state_dict(self) -> dict[str, Any]:
        return {"returns": self.returns.copy(), "lengths": self.lengths.copy(),
                "costs": self.costs.copy()}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.returns, self.lengths = state["returns"].copy(), state["lengths"].copy()
        self.costs = state.get("costs", np.zeros(self.num_envs)).copy()


class ObservationHistory(VectorWrapper):
    """Observations become the last ``length`` observations of the episode, flattened
    (oldest first, ``length * obs_dim``); a new episode's history repeats its first
    observation (as ``OfflineDataset.stack_observations`` builds a dataset's). Final
    observations get the history that ends in them. Partial resets (``reset_mask``) refill
    only the reset envs; the history is part of the env state (``state_dict``). On a device
    back end (torch tensors) the history stays on the device."""

    def __init__(self, env: VectorEnv, length: int) -> None:
        super().__init__(env)
        space = env.single_observation_space
        if length < 1 or not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(
                f"observation history needs length >= 1 (got {length}) and flat Box "
                f"observations (got {space}; a dict observation: env.flatten_obs=true)"
            )
        self.length = length
        low, high = np.tile(space.low, length), np.tile(space.high, length)
        self.single_observation_space = gym.spaces.Box(low, high, dtype=space.dtype)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, env.num_envs
        )
        self.history: np.ndarray | torch.Tensor | None = None  # (N, length, obs_dim)

    def _repeated(self, obs: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """Each env's history of one observation: (N, length, obs_dim)."""
        if isinstance(obs, torch.Tensor):
            return obs[:, None].repeat(1, self.length, 1)
        return np.repeat(np.asarray(obs)[:, None], self.length, axis=1)

    def _flat(self) -> np.ndarray | torch.Tensor:
        flat = self.history.reshape(self.num_envs, -1)
        return flat.clone() if isinstance(flat, torch.Tensor) else flat.copy()

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
        mask = (options or {}).get("reset_mask")  # read first: gymnasium pops it
        obs, info = self.env.reset(seed=seed, options=options)
        fresh = self._repeated(obs)
        if self.history is None or mask is None:
            self.history = fresh
        else:
            history = _like(self.history, obs)
            history[_like(mask, obs)] = fresh[_like(mask, obs)]
            self.history = history
        return self._flat(), info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        history = _like(self.history, obs)
        true_next = final_next_obs(obs, info)[:, None]
        done = terminated | truncated
        if isinstance(obs, torch.Tensor):  # no boolean indexing: no host round trip
            shifted = torch.cat([history[:, 1:], true_next], 1)
            if "final_obs" in info:
                info = {**info, "final_obs": shifted.reshape(self.num_envs, -1).clone()}
            shifted = torch.where(done[:, None, None], self._repeated(obs), shifted)
        else:
            shifted = np.concatenate([history[:, 1:], true_next], 1)
            if "final_obs" in info:
                info = {**info, "final_obs": shifted.reshape(self.num_envs, -1).copy()}
            shifted[done] = self._repeated(obs)[done]
        self.history = shifted
        return self._flat(), reward, terminated, truncated, info

    def state_dict(self) -> dict[str, Any]:
        return {"history": None if self.history is None else _to_numpy(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # numpy here; a device back end's next reset or step moves it to the device
        self.history = None if state["history"] is None else np.array(state["history"])


class ActionChunks(VectorWrapper):
    """Executes an action CHUNK (N, H, *action_shape) as H env steps, open loop.

    The on-policy loop and the agents then see one step per chunk (DPPO's ``MultiStep``
    wrapper, on any back end): the reward is the sum of the rewards the chunk collected,
    ``info["chunk_steps"]`` how many env steps it ran, and a chunk stops at its env's
    episode end. A vector env steps every sub-env together, so a sub-env whose episode
    ended mid-chunk keeps stepping (into the autoreset episode) until the others finish
    theirs; those steps are discarded by resetting that sub-env again (``reset_mask``),
    so every episode starts from an ordinary reset and sees only its own chunks.
    ``final_obs`` / ``cost`` info (and a device back end's episode statistics) are carried
    over from the step where each chunk ended. On a device back end (torch tensors) every
    accumulator stays on the device; the host learns only whether any env is still live.
    """

    def __init__(self, env: VectorEnv, horizon: int) -> None:
        super().__init__(env)
        if horizon < 1:
            raise ValueError(f"action chunk horizon must be >= 1, got {horizon}")
        space = env.single_action_space
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(f"action chunks need a Box action space, got {space}")
        self.horizon = horizon
        low, high = np.stack([space.low] * horizon), np.stack([space.high] * horizon)
        self.single_action_space = gym.spaces.Box(low, high, dtype=space.dtype)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, env.num_envs)

    def step(self, actions):
        if not isinstance(actions, torch.Tensor):
            actions = np.asarray(actions)
        n = self.num_envs
        queue = ChunkQueue()  # every env runs its chunk; an ended env's steps are discarded
        queue.fill(actions, queue.needs(actions))
        out: dict[str, Any] = {}  # per-env accumulators, made like the back end's outputs
        final_obs = cost = None
        for h in range(self.horizon):
            obs, r, term, trunc, info = self.env.step(queue.pop())
            if h == 0:
                where = torch.where if isinstance(r, torch.Tensor) else np.where
                live = _filled(r, True, "bool")
                stepped_after_end = _filled(r, False, "bool")
                terminated, truncated = _filled(r, False, "bool"), _filled(r, False, "bool")
                reward, steps = _filled(r, 0.0, "float64"), _filled(r, 0, "int64")
            stepped_after_end |= ~live
            reward += where(live, r, 0.0)
            step_cost = step_costs(info, n)
            if step_cost is not None:
                cost = (0.0 if cost is None else cost) + where(live, step_cost, 0.0)
            steps += live
            ended = live & (term | trunc)
            terminated |= ended & term
            truncated |= ended & trunc
            for key in EPISODE_KEYS:  # a device back end's own statistics (mjx)
                if key in info:
                    if key not in out:
                        out[key] = _filled(r, np.nan, "float32")
                    out[key] = where(ended, info[key], out[key])
            if isinstance(obs, torch.Tensor):  # no host round trip for the final obs
                true_next = final_next_obs(obs, info)
                final_obs = true_next if final_obs is None else torch.where(
                    ended[:, None], true_next, final_obs
                )  # fmt: skip
            elif ended.any():
                true_next = final_next_obs(obs, info)
                if isinstance(obs, dict):  # one dict per env, as gymnasium hands them out
                    final_obs = np.full(n, None, object) if final_obs is None else final_obs
                    for i in np.flatnonzero(ended):
                        final_obs[i] = {name: part[i].copy() for name, part in true_next.items()}
                else:
                    final_obs = obs.copy() if final_obs is None else final_obs
                    final_obs[ended] = true_next[ended]
            live &= ~ended
            if not live.any():
                break
        if stepped_after_end.any():  # discard the steps taken after an episode end
            fresh, _ = self.env.reset(options={"reset_mask": stepped_after_end})
            if isinstance(obs, torch.Tensor):
                obs = torch.where(stepped_after_end[:, None], fresh, obs)
            elif isinstance(obs, dict):
                obs = {name: part.copy() for name, part in obs.items()}
                for name, part in obs.items():
                    part[stepped_after_end] = fresh[name][stepped_after_end]
            else:
                obs = obs.copy()
                obs[stepped_after_end] = fresh[stepped_after_end]
        done = terminated | truncated
        out_info: dict[str, Any] = {"chunk_steps": steps, **out}
        if final_obs is not None:
            out_info["final_obs"], out_info["_final_obs"] = final_obs, done
        if cost is not None:
            out_info["cost"] = cost
        reward = reward.float() if isinstance(reward, torch.Tensor) else reward.astype(np.float32)
        return obs, reward, terminated, truncated, out_info


def standardise(value: Any, stats: RunningMeanStd, clip: float, epsilon: float) -> Any:
    """``(value - mean) / sqrt(var + epsilon)`` clipped to +-``clip``, float32, in the array
    type of ``value`` (numpy, or a tensor on its device); the arithmetic in float64 with the
    float64 statistics. The one formula of the env-side ``NormalizeObservation`` and of
    ``rlcore.observations.PartNormalizer``."""
    mean, var = _like(stats.mean, value), _like(stats.var, value)
    scaled = (value - mean) / (var + epsilon) ** 0.5
    if isinstance(scaled, torch.Tensor):
        return scaled.clamp(-clip, clip).float()
    return np.clip(scaled, -clip, clip).astype(np.float32)


class NormalizeObservation(VectorWrapper):
    """Standardises observations (and final observations) with running statistics.

    A Box observation is standardised as one vector (``rms``, a ``RunningMeanStd``; its
    ``state_dict`` is the one the checkpoints' ``obs_normalizer`` holds). A Dict of vector
    Boxes is standardised part by part when ``part_statistics`` is given: a function of the
    Dict space naming, for every part to standardise, the part whose statistics do it
    (``rlcore.observations.part_statistics``: ``desired_goal`` with ``achieved_goal``'s, as
    HER practice does; the same maths as ``rlcore.observations.PartNormalizer``, whose
    ``state_dict`` ``{"parts": ...}`` holds). Set ``training = False`` to freeze the
    statistics (evaluation envs).
    """

    def __init__(
        self,
        env: VectorEnv,
        clip: float = 10.0,
        epsilon: float = 1e-8,
        part_statistics: Callable[[gym.spaces.Dict], dict[str, str]] | None = None,
    ) -> None:
        super().__init__(env)
        space = self.single_observation_space
        self.rms: RunningMeanStd | None = None
        self.sources: dict[str, str] = {}  # part -> the part whose statistics standardise it
        self.parts: dict[str, RunningMeanStd] = {}  # a dict's statistics, by part
        if isinstance(space, gym.spaces.Box):
            self.rms = RunningMeanStd(space.shape)
        elif isinstance(space, gym.spaces.Dict) and part_statistics is not None:
            self.sources = dict(part_statistics(space))
            self.parts = {
                source: RunningMeanStd(space[source].shape)
                for source in dict.fromkeys(self.sources.values())
            }
        # another space is refused when the env is first reset (a training run's own
        # checks refuse it first, naming the options to change)
        self.clip, self.epsilon, self.training = clip, epsilon, True

    def _check_space(self) -> None:
        if self.rms is None and not self.parts:
            raise ValueError(
                f"NormalizeObservation standardises Box observations, and dicts of vector "
                f"Boxes given part_statistics; got {self.single_observation_space}: flatten "
                "it first (env.flatten_obs=true)"
            )

    def _update(self, obs: Any) -> None:
        if self.rms is not None:
            self.rms.update(obs)
        for source, stats in self.parts.items():
            stats.update(obs[source])

    def normalize(self, obs: Any) -> Any:
        if self.rms is not None:
            return standardise(obs, self.rms, self.clip, self.epsilon)
        out = dict(obs)
        for part, source in self.sources.items():
            out[part] = standardise(obs[part], self.parts[source], self.clip, self.epsilon)
        return out

    def reset(self, **kwargs):
        self._check_space()
        obs, info = self.env.reset(**kwargs)
        if self.training:
            self._update(obs)
        return self.normalize(obs), info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        if self.training:
            self._update(obs)
        if isinstance(info.get("final_obs"), torch.Tensor):  # device back end: every row
            info["final_obs"] = self.normalize(info["final_obs"])
        elif "final_obs" in info:
            final_obs = info["final_obs"].copy()
            for i in np.flatnonzero(info["_final_obs"]):
                final_obs[i] = self.normalize(final_obs[i])
            info["final_obs"] = final_obs
        return self.normalize(obs), reward, terminated, truncated, info

    def state_dict(self) -> dict[str, Any]:
        if self.rms is None:
            return {"parts": {source: stats.state_dict() for source, stats in self.parts.items()}}
        return self.rms.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.rms is not None:
            self.rms.load_state_dict(state)
            return
        if set(state["parts"]) != set(self.parts):
            raise ValueError(
                f"saved statistics of parts {sorted(state['parts'])}, this normaliser has "
                f"{sorted(self.parts)}"
            )
        for source, stats in self.parts.items():
            stats.load_state_dict(state["parts"][source])


class NormalizeReward(VectorWrapper):
    """Scales rewards by the running std of the discounted return (as in PPO's codebases)."""

    def __init__(
        self, env: VectorEnv, gamma: float = 0.99, clip: float = 10.0, epsilon: float = 1e-8
    ) -> None:
        super().__init__(env)
        self.rms = RunningMeanStd(())
        self.discounted = np.zeros(self.num_envs, np.float64)
        self.gamma, self.clip, self.epsilon, self.training = gamma, clip, epsilon, True

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        if self.training:
            self.discounted = _like(self.discounted, reward) * self.gamma + reward
            self.rms.update(self.discounted)
            self.discounted[terminated | truncated] = 0.0
        scaled = reward / (_like(self.rms.var, reward) + self.epsilon) ** 0.5
        if isinstance(scaled, torch.Tensor):
            return (
                obs,
                scaled.clamp(-self.clip, self.clip).to(reward.dtype),
                terminated,
                truncated,
                info,
            )
        return obs, np.clip(scaled, -self.clip, self.clip), terminated, truncated, info

    def state_dict(self) -> dict[str, Any]:
        return {"rms": self.rms.state_dict(), "discounted": _to_numpy(self.discounted)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rms.load_state_dict(state["rms"])
        self.discounted = state["discounted"].copy()


def make_vec_env(
    name: str,
    num_envs: int = 1,
    seed: int | None = None,
    backend: str = "sync",
    normalize_obs: bool = False,
    normalize_reward: bool = False,
    gamma: float = 0.99,
    clip_obs: float = 10.0,
    clip_reward: float = 10.0,
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    num_threads: int | None = None,
    flatten_obs: bool = False,
    base_wrappers: Sequence[Callable[[VectorEnv], VectorEnv]] = (),
    action_chunk: int = 1,
    obs_history: int = 1,
    device: str | torch.device = "cpu",
    mjx_impl: str = "jax",
    part_statistics: Callable[[gym.spaces.Dict], dict[str, str]] | None = None,
    evaluation: bool = False,
    obs: str = "state",
    camera: str | None = None,
    image_size: int = 84,
    frame_stack: int = 1,
) -> VectorEnv:
    """Vector env for ``name`` (short name or gymnasium id) with same-step autoreset.

    ``seed`` (if given) seeds the action spaces; the loop seeds the physics through
    ``reset(seed=...)``, which gives env ``i`` the seed ``seed + i``. ``backend="native"``
    steps all envs in MuJoCo's C threads (``envs/native.py``, ``num_threads`` of them,
    default all CPUs) and supports the tasks in ``rlcore.envs.native.SUPPORTED_ENVS`` and the
    robot tasks (``rlcore.envs.robots.native``); it needs
    MuJoCo >= 4.0 (``mujoco.batch``) and says so when it is missing. ``backend="auto"``
    (the env configs' default for those tasks) picks native for them when MuJoCo has
    ``mujoco.batch``, and otherwise sync (with one warning if the reason is an old MuJoCo).
    ``flatten_obs`` flattens Dict/Tuple observations (goal-conditioned tasks) into one
    float vector with gymnasium's ``FlattenObservation`` (the native tasks' observations
    are flat already). ``base_wrappers`` wrap the back end first, below the episode
    statistics and normalisation (``rlcore.envs.snapshot.SnapshotReset``: its episodes are
    ordinary episodes to everything above). ``action_chunk`` H > 1 makes the env take
    action chunks (N, H, A), each executed as H env steps by ``ActionChunks`` (right
    above the back end and the base wrappers): episode statistics still count env steps
    and rewards, normalisers see the observations where a chunk starts. ``obs_history``
    T > 1 makes observations the last T env steps' observations (``ObservationHistory``,
    below the chunks: a chunk ends on the history of its last T env steps).
    ``part_statistics`` (a function of a Dict space: part -> the part whose statistics
    standardise it) lets ``normalize_obs`` standardise a dict of vectors part by part.
    ``backend="mjx"`` steps the native tasks in MuJoCo MJX on ``device`` (``envs/mjx.py``;
    ``mjx_impl="warp"`` runs MJX's MuJoCo Warp implementation): observations, rewards and
    flags are torch tensors on that device, the episode statistics are computed there, and the normalisers keep
    their statistics there too. Atari games (``ALE/<Game>-v5``) run on ``backend="ale"``
    (``auto`` picks it; ``envs/atari.py``), ``env_kwargs`` setting its preprocessing
    options; ``evaluation`` makes the task's evaluation form where it has one (Atari:
    whole games and raw scores, where training ends an episode at each lost life and
    clips rewards). ``obs`` ``pixels`` or ``state+pixels`` renders a MuJoCo task's
    ``camera`` at ``image_size`` square, ``frame_stack`` frames stacked (``envs/pixels.py``;
    sync, async and native back ends; ``auto`` picks sync), and the back end declares
    ``frame_stack`` (``rlcore.observations.StackedFrames``).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown env backend '{backend}', choose from {BACKENDS}")
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    env_id = resolve_env_id(name)
    kwargs = dict(env_kwargs or {})
    if not atari.is_atari(env_id):  # ale-py's vector env takes its own options
        check_env_kwargs(env_id, kwargs)
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps

    def make_one() -> gym.Env:
        env = gym.make(env_id, **kwargs)
        env = pixels.pixel_env(env, obs, camera, image_size, frame_stack)
        if flatten_obs:
            env = gym.wrappers.FlattenObservation(env)
        return SimulatorState(env)

    if backend == "auto" and obs != pixels.STATE:
        backend = "sync"  # rendered observations: gymnasium's envs render
    if backend == "auto" and flatten_obs and robots.native_task(env_id):
        backend = "sync"  # the native robot back end keeps a goal task's dict as it is
    if backend == "auto" or (backend == "sync" and atari.is_atari(env_id)):
        backend = _auto_backend(env_id)  # Atari: ale-py's vector env is its one back end
    if obs not in pixels.OBS_MODES:
        raise ValueError(f"env.obs={obs}: one of {', '.join(pixels.OBS_MODES)}")
    if obs != pixels.STATE and flatten_obs:
        raise ValueError(
            f"env.obs={obs} with env.flatten_obs=true would flatten the images into one float "
            "vector: drop env.flatten_obs (the image part goes to algo.encoder, the state "
            "parts beside it)"
        )
    if obs != pixels.STATE and backend not in ("sync", "async", "native"):
        raise ValueError(
            f"env.obs={obs} renders on the sync, async and native back ends, not "
            f"'{backend}' (set env.backend=sync or native)"
        )
    if (backend == "ale") != atari.is_atari(env_id):
        raise ValueError(
            f"env backend 'ale' runs the Atari games (ALE/<Game>-v5) and only them: {env_id} "
            f"on '{backend}' (use env.backend=auto)"
        )
    env: VectorEnv
    if backend == "ale":
        if flatten_obs or obs_history > 1:
            raise ValueError("Atari games stack their own frames: no flatten_obs / obs_history")
        env = atari.AtariVectorBackend(env_id, num_envs, evaluation=evaluation,
                                       num_threads=num_threads, **kwargs)  # fmt: skip
    elif backend == "mjx" and robots.native_task(env_id):
        from rlcore.envs.robots.mjx import RobotMjxVectorEnv

        if flatten_obs:
            raise ValueError(
                "env backend 'mjx' does not flatten a robot task's dict observations "
                "(flatten_obs): the algorithms read them as they are, or use env.backend=sync"
            )
        env = RobotMjxVectorEnv(robots.native_task(env_id), num_envs, device=device, **kwargs)
    elif backend == "mjx":
        if flatten_obs:  # the native tasks' observations are flat already
            raise ValueError(
                "env backend 'mjx' does not support flatten_obs (dict observations): use "
                "env.backend=native"
            )
        from rlcore.envs.mjx import MjxVectorEnv

        env = MjxVectorEnv(env_id, num_envs, device=device, impl=mjx_impl, **kwargs)
    elif backend == "native" and robots.native_task(env_id):
        from rlcore.envs.robots.native import RobotVectorEnv

        if flatten_obs:
            raise ValueError(
                "env backend 'native' does not flatten a robot task's dict observations "
                "(flatten_obs): the algorithms read them as they are, or use env.backend=sync"
            )
        env = RobotVectorEnv(robots.native_task(env_id), num_envs, num_threads=num_threads,
                             **kwargs)  # fmt: skip
    elif backend == "native":
        from rlcore.envs.native import NativeVectorEnv  # needs mujoco.batch; says so without it

        safe = safety.velocity_cost_of(env_id)  # a velocity-constrained task: its inner task
        env = NativeVectorEnv(
            safe[0] if safe else env_id,
            num_envs,
            num_threads=num_threads,
            velocity_cost=safe[1:] if safe else None,
            **kwargs,
        )
    elif backend == "async":
        env = AsyncBackend(
            [partial(_in_worker, make_one, os.getpid()) for _ in range(num_envs)],
            autoreset_mode=AutoresetMode.SAME_STEP,
        )
    else:
        env = SyncBackend(
            [make_one for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP
        )
    if obs != pixels.STATE:
        if backend == "native":  # gymnasium's sub-envs render themselves (make_one)
            env = pixels.BatchPixels(env, obs, camera, image_size, frame_stack)
        env.unwrapped.frame_stack = int(frame_stack)  # rlcore.observations.StackedFrames
    for wrap in base_wrappers:
        env = wrap(env)
    if obs_history > 1:
        env = ObservationHistory(env, obs_history)
    if action_chunk > 1:
        env = ActionChunks(env, action_chunk)
    if env.unwrapped.device is None:  # MjxVectorEnv reports the episode statistics from the device
        env = EpisodeStats(env)
    if normalize_obs:
        env = NormalizeObservation(env, clip=clip_obs, part_statistics=part_statistics)
    if normalize_reward:
        env = NormalizeReward(env, gamma=gamma, clip=clip_reward)
    if seed is not None:
        env.action_space.seed(seed)
        env.observation_space.seed(seed)
    return env


def _in_worker(make_env: Callable[[], gym.Env], parent_pid: int) -> gym.Env:
    """An async back end's sub-env, built in its worker process on one torch thread: a
    worker only steps its env, and a pool of threads per worker would spin against the
    learner's for the same cores (rlcore/threads.py). gymnasium also builds one sub-env
    in the learner's own process (``parent_pid``) to read its spaces: that process keeps
    its threads."""
    if os.getpid() != parent_pid:
        torch.set_num_threads(1)
    return make_env()


def _creator(env_id: str) -> tuple[gym.envs.registration.EnvSpec, Any]:
    """The registered spec of a resolved id and the callable gymnasium makes it with."""
    spec = gym.spec(env_id.partition(":")[2] if ":" in env_id else env_id)
    creator = spec.entry_point
    if isinstance(creator, str):
        creator = gym.envs.registration.load_env_creator(creator)
    return spec, creator


def _parameter_names(creator: Any) -> set[str] | None:
    """The keyword names ``creator`` takes; None when any name may be right. A class whose
    ``__init__`` takes ``**kwargs`` hands them to its bases' (gymnasium's MuJoCo tasks to
    ``MujocoEnv``): their names join until a base takes no ``**kwargs``."""
    chain = (
        [c for c in creator.__mro__ if "__init__" in vars(c)]
        if isinstance(creator, type)
        else [creator]
    )
    names: set[str] = set()
    for init in chain:
        try:
            parameters = inspect.signature(init).parameters
        except (TypeError, ValueError):  # a builtin or C callable: nothing to read
            return None
        names |= {
            n for n, p in parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            return names
    return None


def check_env_kwargs(env_id: str, kwargs: dict[str, Any]) -> None:
    """Refuse an ``env.kwargs`` name the task's constructor does not take, naming the ones
    it does (gymnasium's own TypeError surfaces deep in a back end, as a traceback). A
    constructor with ``**kwargs`` takes any name and passes."""
    spec, creator = _creator(env_id)
    if creator is None:
        return
    taken = _parameter_names(creator)
    if taken is None:
        return
    unknown = sorted(set(kwargs) - taken - set(spec.kwargs) - GYM_MAKE_KWARGS)
    if unknown:
        offered = sorted(taken - set(spec.kwargs) - {"self"})
        raise ValueError(
            f"env.kwargs: {spec.id} takes no {', '.join(map(repr, unknown))}; its options: "
            f"{', '.join(offered) or 'none'}"
        )


def check_renders(name: str) -> None:
    """Refuse a video of a task that cannot draw frames before a run spends its time on it
    (a training run records its first video at an evaluation, maybe hours in): the class
    gymnasium builds for ``name`` must list ``rgb_array`` among its ``render_modes``. A task
    made by a function is not known until made, and passes."""
    spec, creator = _creator(resolve_env_id(name))
    if not (isinstance(creator, type) and issubclass(creator, gym.Env)):
        return
    modes = list(creator.metadata.get("render_modes") or [])
    if "rgb_array" not in modes:
        raise ValueError(
            f"{spec.id} cannot render frames for a video (its render modes: "
            f"{', '.join(modes) or 'none'}); drop the video option for this task"
        )


def _auto_backend(env_id: str) -> str:
    """``native`` for the tasks it implements when MuJoCo has ``mujoco.batch``, else ``sync``."""
    from rlcore.envs import native

    if atari.is_atari(env_id):
        return "ale"
    safe = safety.velocity_cost_of(env_id)
    if (safe[0] if safe else env_id) not in native.SUPPORTED_ENVS and not robots.native_task(
        env_id
    ):
        return "sync"
    if native.batch_available():
        return "native"
    warnings.warn(
        f"env backend 'auto': MuJoCo has no mujoco.batch (needs MuJoCo >= "
        f"{native.REQUIRED_MUJOCO}), so {env_id} runs on gymnasium's sync vector env "
        "(same task, slower). Upgrade MuJoCo to use the native back end.",
        RuntimeWarning,
        stacklevel=3,
    )
    return "sync"


def final_next_obs(
    obs: np.ndarray | torch.Tensor | dict[str, np.ndarray], info: dict[str, Any]
) -> np.ndarray | torch.Tensor | dict[str, np.ndarray]:
    """The true next observation of every env: the final one where an episode just ended
    (device back ends: a ``torch.where`` on the device, no host round trip; dict
    observations: a copy of every part with the ended envs' rows replaced)."""
    if "final_obs" not in info:
        return obs
    if isinstance(obs, dict):  # dict observations: final_obs holds one dict per env
        parts = {name: _to_numpy(value) for name, value in obs.items()}
        for i in np.flatnonzero(info["_final_obs"]):
            for name, value in parts.items():
                value[i] = info["final_obs"][i][name]
        return parts
    if isinstance(obs, torch.Tensor):
        mask = info["_final_obs"].reshape(-1, *([1] * (obs.dim() - 1)))
        return torch.where(mask, info["final_obs"], obs)
    next_obs = obs.copy()
    for i in np.flatnonzero(info["_final_obs"]):
        next_obs[i] = info["final_obs"][i]
    return next_obs


def _wrapper_chain(env: VectorEnv) -> list[VectorEnv]:
    chain = [env]
    while isinstance(chain[-1], VectorWrapper):
        chain.append(chain[-1].env)
    return chain


def find_wrapper(env: VectorEnv, wrapper_type: type) -> Any | None:
    """The first wrapper of ``wrapper_type`` around ``env``, or None."""
    for layer in _wrapper_chain(env):
        if isinstance(layer, wrapper_type):
            return layer
    return None


def wrapper_metrics(env: VectorEnv) -> dict[str, float]:
    """Training-log counters of every wrapper that reports some (``metrics()``)."""
    out: dict[str, float] = {}
    for layer in _wrapper_chain(env):
        if hasattr(layer, "metrics"):
            out.update(layer.metrics())
    return out


def get_vec_env_state(env: VectorEnv) -> dict[str, Any]:
    """Everything needed to continue ``env`` exactly: sub-env simulators and wrapper stats."""
    wrappers = {
        type(layer).__name__: layer.state_dict()
        for layer in _wrapper_chain(env)
        if hasattr(layer, "state_dict")
    }
    return {"envs": backend_of(env).get_states(), "wrappers": wrappers}


def restorable(state: dict[str, Any]) -> bool:
    """Whether ``get_vec_env_state``'s ``state`` holds the sub-envs' simulator states; a
    back end without them (ale-py's vector env: ``{"restorable": False}``) can only start
    new episodes when a run resumes."""
    return all(sub.get("restorable", True) for sub in state["envs"] if isinstance(sub, dict))


def set_vec_env_state(env: VectorEnv, state: dict[str, Any]) -> bool:
    """Restore what ``get_vec_env_state`` captured (the env must have been reset once):
    wrapper statistics (normalisers) always, the simulators where ``restorable``. Returns
    whether the episodes continue (False: the caller resets ``env``, new episodes)."""
    for layer in _wrapper_chain(env):
        name = type(layer).__name__
        if hasattr(layer, "load_state_dict") and name in state["wrappers"]:
            layer.load_state_dict(state["wrappers"][name])
    if not restorable(state):
        return False
    backend_of(env).set_states(state["envs"])
    return True


def set_states(env: VectorEnv, states: list[dict[str, Any]], env_ids: Sequence[int]) -> None:
    """Restore ``states[k]`` into sub-env ``env_ids[k]`` of ``env`` (any wrapper chain; the
    other sub-envs are untouched) on every back end (``SimulatorBackend.set_states``).
    States are those of ``get_vec_env_state(env)["envs"]`` or ``portable_state``."""
    backend_of(env).set_states(list(states), list(env_ids))
