"""``MjxVectorEnv``: N copies of a gymnasium v5 MuJoCo task stepped by MuJoCo MJX (JAX).

All envs advance in one jitted, ``vmap``-ed JAX call on the accelerator (or on JAX's CPU
device), and observations, rewards, termination, truncation and the episode statistics
reach torch on the same device through DLPack without a copy (``torch.from_dlpack`` of the
JAX output buffers); actions go the other way the same way. Nothing in ``step`` touches
numpy or the host.

The tasks are the native back end's (``rlcore.envs.native.TASKS``: same XML, frame skip, reward
weights, health ranges and observation blocks), so the formulas are those listed in
``envs/native.py``'s docstring, evaluated in float32 on MJX's data:

* physics: ``frame_skip`` calls of ``mjx.step`` (RK4 or Euler, as the XML says). MJX's
  RK4 leaves its fourth stage's derived fields in the data, as MuJoCo's C step does, so
  body / mass-centre positions and ``cinert`` / ``cvel`` / ``qfrc_actuator`` are read
  exactly where gymnasium reads them; tasks that read ``cfrc_ext`` (Ant, Humanoid) run
  ``mjx.rne_postconstraint`` after the step, as gymnasium does.
* same-step autoreset on device: every env computes a fresh reset next to its step and
  keeps it where the episode ended (``jnp.where`` on the integration state and the
  state's observation; no host round trip). ``info`` always
  holds ``final_obs`` (the observation before the reset, every row) and ``_final_obs``
  (the done mask), as torch tensors.
* episode statistics on device: ``info["episode_return"]`` / ``info["episode_length"]``
  (NaN where no episode ended), so ``make_vec_env`` puts no ``EpisodeStats`` wrapper on
  this back end.
* reset noise: qpos = init_qpos + U(-s, s), qvel = init_qvel + U(-s, s) (s * N(0, 1) for
  HalfCheetah and Ant), drawn from each env's own JAX key (env i seeded with seed + i).

Solver iterations. Under ``vmap`` MJX's solver loop runs until the slowest env has
converged (or its iteration cap) and its line search is a fixed-length scan of
``ls_iterations`` steps, and in float32 the XML's tolerance (1e-8) is never met, so the
tasks' own caps (100 Newton iterations, 50 line-search steps) are paid in full every
physics step. The back end caps them at 4 and 4 (``solver_iterations`` /
``ls_iterations``; None keeps the XML's): measured on CPU against the native back end over
30-step rollouts, Hopper, HalfCheetah and Walker2d agree as closely as with 100 / 50
(Hopper: 1e-5 either way) and step 3-5x faster; at 1 / 4 Hopper drifts by 0.5.

Departures from the CPU back ends (besides float32): the reset noise comes from JAX's
generator, not numpy's, so the same seed gives other (equally distributed) starts;
Humanoid's XML asks for the PGS solver, which MJX does not implement, so it runs MJX's
Newton solver (same constraints, a different solver converging to the same solution within
its tolerance); ``info`` holds no per-term rewards.

``impl="warp"`` runs the same functions on MJX's MuJoCo Warp implementation (needs
``warp-lang``; mujoco-mjx bundles the MuJoCo Warp it calls): Warp's forward passes compute
``cfrc_ext`` themselves (``run_rne_postconstraint``), and an env switches episodes through
its integration state (``select``), because ``jnp.where`` over a whole Warp data raises
JAX's UnexpectedTracerError inside mujoco-mjx 3.17's bridge. Measured on CPU against the
native back end (mujoco-mjx 3.17, warp-lang 1.19): the first step agrees to 1e-7..5e-5
on every task, like the JAX implementation.

jaxlib 0.10.0 to 0.11.0 on JAX's CPU device: their LAPACK kernels split a batched
Cholesky (MJX factors the mass matrix and the Newton Hessian with one) over XLA's CPU
thread pool and wait for the pieces inside that pool; when several such calls run at
once, every pool thread waits and none runs the pieces. Measured with jaxlib 0.10.2 on 2
cores: Hopper at 4,096 envs hung in its first step every time (gdb: all workers in
``ParallelBatchMap``'s ``BlockingCounter::Wait``), while jaxlib 0.9.2 steps it (by
jaxlib's source history the splitting came with 0.10.0 and is compiled out from 0.11.1).
The ``mjx`` extra excludes those versions, and the env warns when it meets one on the CPU.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
import torch
from gymnasium.envs.mujoco.mujoco_env import expand_model_path
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rlcore.envs.backend import checked_ids
from rlcore.envs.native import _OBS_BLOCK_START, TaskSpec, task_spec

IMPLS = ("jax", "warp")
# Newton iterations and line-search iterations of MJX's constraint solver (module docstring)
SOLVER_ITERATIONS, LS_ITERATIONS = 4, 4

# JAX would otherwise take 75% of the GPU's memory when its backend starts, leaving little
# to torch, which shares the device here; a user's own setting wins.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


class MjxUnavailableError(ValueError):
    """JAX or mujoco-mjx (or, for ``impl="warp"``, NVIDIA Warp) is not installed, or the
    requested device has no JAX backend (a ValueError: the CLI prints it as one line)."""


def mjx_available() -> bool:
    """Whether ``jax`` and ``mujoco.mjx`` import (the ``mjx`` extra installs both)."""
    return importlib.util.find_spec("jax") is not None and _find("mujoco.mjx")


def _find(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _jax_device(device: str | torch.device) -> Any:
    """The JAX device that holds the same memory as torch's ``device``."""
    import jax

    device = torch.device(device)
    kind = {"cpu": "cpu", "cuda": "gpu"}.get(device.type)
    if kind is None:
        raise MjxUnavailableError(f"env backend 'mjx' runs on cpu or cuda devices, not {device}")
    try:
        devices = jax.devices(kind)
    except RuntimeError as error:
        raise MjxUnavailableError(
            f"env backend 'mjx' on {device}: JAX has no {kind} backend ({error}). Install "
            "JAX with CUDA (pip install 'jax[cuda12]') or use device=cpu."
        ) from error
    index = device.index or 0
    if index >= len(devices):
        raise MjxUnavailableError(f"JAX sees {len(devices)} {kind} devices, not {device}")
    return devices[index]


def cpu_lapack_may_deadlock(jaxlib_version: str) -> bool:
    """Whether this jaxlib's CPU LAPACK kernels can deadlock MJX's solver (module
    docstring): releases 0.10.0 up to and including 0.11.0 (and their dev builds)."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", jaxlib_version)
    if match is None:
        return False
    release = tuple(int(part or 0) for part in match.groups())
    return (0, 10, 0) <= release <= (0, 11, 0)


def host_cpu_tag(cpuinfo: str | None = None) -> str:
    """A short hash of this host's CPU model and instruction-set flags (``/proc/cpuinfo``,
    else ``platform``), naming the default compilation-cache folder: JAX's CPU executables
    are built for the CPU that compiled them, and a home directory shared by different
    machines must not hand one CPU's code to another."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():  # the first processor's lines (all cores alike)
        name, _, value = (part.strip() for part in line.partition(":"))
        if name in ("model name", "flags", "Features"):
            fields.setdefault(name, " ".join(sorted(value.split())))
    text = repr(sorted(fields.items())) if fields else platform.machine() + platform.processor()
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def enable_compilation_cache(path: str | None = None) -> None:
    """Keep JAX's compiled step functions on disk (``RLCORE_JAX_CACHE``, else
    ~/.cache/rlcore/jax/<host_cpu_tag>): compiling a task's step takes tens of seconds on
    CPU, and the next run (or the next env of the same shapes) loads it instead. A cache
    directory the user configured in JAX already is left alone."""
    import jax

    if jax.config.jax_compilation_cache_dir:
        return
    path = (
        path
        or os.environ.get("RLCORE_JAX_CACHE")
        or str(Path.home() / ".cache/rlcore/jax" / host_cpu_tag())
    )
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def to_torch(array: Any) -> torch.Tensor:
    """A JAX array as a torch tensor on the same device, sharing its memory (DLPack)."""
    return torch.from_dlpack(array)


def _field(data: Any, name: str) -> Any:
    """An MJX data field (the JAX implementation keeps the derived ones in ``_impl``)."""
    impl = getattr(data, "_impl", None)
    if impl is not None and hasattr(impl, name):
        return getattr(impl, name)
    return getattr(data, name)


@dataclasses.dataclass
class _Task:
    """What the jitted functions close over: the task, the MJX model, constants."""

    spec: TaskSpec
    model: Any  # mjx.Model
    data0: Any  # mjx.Data after make_data (one env)
    init_qpos: Any
    init_qvel: Any
    dt: float
    main_body: int
    body_mass: Any
    max_episode_steps: int
    uses_contacts: bool
    state_spec: int  # mjSTATE_INTEGRATION less the elements MJX lacks (all empty here)
    impl: str = "jax"
    # a reset's observation or "before" x reads derived fields (a forward pass): Ant and
    # Humanoid; the other tasks read qpos / qvel only
    reset_reads_derived: bool = True


def _integration_spec(model: mujoco.MjModel) -> int:
    """``mjSTATE_INTEGRATION`` without the elements MJX's ``get_state`` does not know
    (MuJoCo 4.0's history / plugin / plastic state). Refused unless those are empty in
    ``model``, so the row keeps MuJoCo's layout and native / portable states restore."""
    from mujoco.mjx._src.io import _STATE_MAP

    spec = int(mujoco.mjtState.mjSTATE_INTEGRATION)
    for bit in range(int(mujoco.mjtState.mjNSTATE)):
        element = mujoco.mjtState(1 << bit)
        if element & spec and element not in _STATE_MAP:
            if mujoco.mj_stateSize(model, element):
                raise MjxUnavailableError(f"MJX cannot capture {element.name} of this model")
            spec &= ~int(element)
    return spec


def _build_functions(task: _Task) -> dict[str, Any]:
    """The jitted reset / step / state functions of ``task``, batched over envs."""
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    spec, model = task.spec, task.model

    def inside(values: Any, bounds: tuple[float, float]) -> Any:
        lo, hi = bounds
        return (lo < values) & (values < hi)

    def contact_forces(data: Any) -> Any:
        forces = _field(data, "cfrc_ext")
        if spec.contact_force_range is not None:
            forces = jnp.clip(forces, *spec.contact_force_range)
        return forces

    def x_of(data: Any) -> Any:
        if spec.x_source == "body":
            return data.xpos[task.main_body, 0]
        if spec.x_source == "mass_centre":
            xipos = data.xipos
            return (task.body_mass @ xipos / task.body_mass.sum())[0]
        return data.qpos[0]

    def obs_of(data: Any) -> Any:
        qvel = data.qvel
        if spec.qvel_clip is not None:
            qvel = jnp.clip(qvel, -spec.qvel_clip, spec.qvel_clip)
        parts = [data.qpos[spec.skipped_qpos :], qvel]
        for block in spec.obs_blocks:
            values = contact_forces(data) if block == "cfrc_ext" else _field(data, block)
            parts.append(values[_OBS_BLOCK_START[block] :].reshape(-1))
        return jnp.concatenate(parts)

    def healthy_of(data: Any) -> Any:
        qpos, qvel = data.qpos, data.qvel
        if spec.health in ("hopper", "walker2d"):
            ok = inside(qpos[1], spec.healthy_z_range) & inside(qpos[2], spec.healthy_angle_range)
            if spec.health == "hopper":
                state = jnp.concatenate((qpos, qvel))[2:]
                ok &= jnp.all(inside(state, spec.healthy_state_range))
            return ok
        finite = jnp.isfinite(qpos).all() & jnp.isfinite(qvel).all()
        if spec.health == "pendulum":
            return finite & ~(jnp.abs(qpos[1]) > 0.2)
        if spec.health == "ant":
            lo, hi = spec.healthy_z_range
            return finite & (lo <= qpos[2]) & (qpos[2] <= hi)
        if spec.health == "humanoid":
            return inside(qpos[2], spec.healthy_z_range)
        return jnp.array(True)

    def reset_one(key: Any) -> tuple[Any, Any]:
        key, k_pos, k_vel = jax.random.split(key, 3)
        scale = spec.reset_noise_scale
        nq, nv = task.init_qpos.shape[0], task.init_qvel.shape[0]
        qpos = task.init_qpos + jax.random.uniform(k_pos, (nq,), minval=-scale, maxval=scale)
        if spec.qvel_noise == "normal":
            qvel = task.init_qvel + scale * jax.random.normal(k_vel, (nv,))
        else:
            qvel = task.init_qvel + jax.random.uniform(k_vel, (nv,), minval=-scale, maxval=scale)
        data = task.data0.replace(qpos=qpos, qvel=qvel)
        if task.reset_reads_derived:  # else only its state, observation and x are used
            data = mjx.forward(model, data)
        return data, key

    def fresh_state(key: Any) -> dict[str, Any]:
        data, key = reset_one(key)
        return {"data": data, "obs": obs_of(data), "x": x_of(data), "elapsed": jnp.int32(0),
                "key": key, "ep_return": jnp.float32(0.0), "ep_length": jnp.int32(0)}  # fmt: skip

    def get_integration(data: Any) -> Any:
        return mjx.get_state(model, data, task.state_spec)

    def set_integration(data: Any, row: Any) -> Any:
        return mjx.forward(model, mjx.set_state(model, data, row, task.state_spec))

    def select(switch: Any, chosen: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
        """One env's state: ``chosen`` where ``switch``, else ``current``. The simulation
        switches through its integration state (``jnp.where`` over a whole MJX Warp data
        raises JAX's UnexpectedTracerError in mujoco-mjx 3.17); the derived fields of a
        switched env stay stale until its next step's forward pass recomputes them, which
        is why the state keeps the observation itself."""
        row = jnp.where(switch, get_integration(chosen["data"]), get_integration(current["data"]))
        out = {k: jnp.where(switch, chosen[k], current[k]) for k in current if k != "data"}
        out["data"] = mjx.set_state(model, current["data"], row, task.state_spec)
        return out

    def step_one(state: dict[str, Any], action: Any) -> tuple[dict[str, Any], tuple]:
        data = state["data"].replace(ctrl=action)
        data = jax.lax.fori_loop(0, spec.frame_skip, lambda _, d: mjx.step(model, d), data)
        if task.uses_contacts and task.impl == "jax":  # Warp's forward passes ran it
            data = mjx.rne_postconstraint(model, data)
        x_after = x_of(data)
        obs = obs_of(data)
        healthy = healthy_of(data)
        controls = action if spec.ctrl_cost_of == "action" else data.ctrl
        cost = spec.ctrl_cost_weight * jnp.sum(jnp.square(controls))
        if task.uses_contacts:
            contact = spec.contact_cost_weight * jnp.sum(jnp.square(contact_forces(data)))
            if spec.contact_cost_range is not None:
                contact = jnp.clip(contact, *spec.contact_cost_range)
            cost = cost + contact
        velocity = (x_after - state["x"]) / task.dt
        reward = spec.forward_reward_weight * velocity + spec.healthy_reward * healthy - cost
        reward = reward.astype(jnp.float32)
        terminated = ~healthy if spec.terminate_when_unhealthy else jnp.array(False)
        elapsed = state["elapsed"] + 1
        truncated = elapsed >= task.max_episode_steps
        done = terminated | truncated
        ep_return, ep_length = state["ep_return"] + reward, state["ep_length"] + 1
        stepped = {"data": data, "obs": obs, "x": x_after, "elapsed": elapsed,
                   "key": state["key"], "ep_return": ep_return, "ep_length": ep_length}  # fmt: skip
        new = select(done, fresh_state(state["key"]), stepped)
        nan = jnp.float32(jnp.nan)
        outputs = (
            new["obs"], reward, terminated, truncated, obs,
            jnp.where(done, ep_return, nan), jnp.where(done, ep_length.astype(jnp.float32), nan),
        )  # fmt: skip
        return new, outputs

    def reset_where(state: dict[str, Any], key: Any, switch: Any) -> tuple[Any, ...]:
        """A fresh episode (from ``key``) where ``switch``; also the episode return /
        length reached before."""
        new = select(switch, fresh_state(key), state)
        return new, new["obs"], state["ep_return"], state["ep_length"]

    def restore_where(
        state: dict[str, Any], switch: Any, row: Any, x: Any, elapsed: Any
    ) -> tuple[Any, ...]:
        """Where ``switch``, a new episode continuing from integration ``row`` (with its
        "before" x and time-limit counter); like ``reset_where`` otherwise."""
        data = set_integration(state["data"], row)
        restored = {**state, "data": data, "obs": obs_of(data), "x": x, "elapsed": elapsed,
                    "ep_return": jnp.float32(0.0), "ep_length": jnp.int32(0)}  # fmt: skip
        new = select(switch, restored, state)
        return new, new["obs"], state["ep_return"], state["ep_length"]

    return {
        "init": jax.jit(jax.vmap(fresh_state)),
        # no buffer donation: the observation handed to torch without a copy is part of
        # the state, so a donated state would let the next step overwrite tensors the
        # caller still holds. It costs one extra copy of the state's memory per step. (A
        # hang seen with donation, Ant at 1,024 envs on the CPU, had the symptoms of
        # jaxlib 0.10's LAPACK deadlock in the module docstring.)
        "step": jax.jit(jax.vmap(step_one)),
        "reset_masked": jax.jit(jax.vmap(reset_where)),
        "restore_masked": jax.jit(jax.vmap(restore_where)),
        "get_integration": jax.jit(jax.vmap(get_integration)),
        "set_integration": jax.jit(jax.vmap(set_integration)),
        "obs": jax.jit(jax.vmap(obs_of)),
        "x": jax.jit(jax.vmap(x_of)),
    }


class MjxVectorEnv(VectorEnv):
    """``num_envs`` copies of a gymnasium v5 MuJoCo task in MJX on ``device``.

    Observations, rewards, terminated / truncated flags and ``info`` entries are torch
    tensors on ``device`` (float32 observations and rewards, bool flags). Actions may be
    torch tensors (zero-copy through DLPack) or arrays. See the module docstring.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        max_episode_steps: int | None = None,
        device: str | torch.device = "cpu",
        impl: str = "jax",
        solver_iterations: int | None = SOLVER_ITERATIONS,
        ls_iterations: int | None = LS_ITERATIONS,
        **task_kwargs: Any,
    ) -> None:
        if not mjx_available():
            raise MjxUnavailableError(
                "env backend 'mjx' needs JAX and MuJoCo MJX: pip install 'rlcore[mjx]' (or "
                "pip install mujoco-mjx jax)"
            )
        if impl not in IMPLS:
            raise MjxUnavailableError(f"unknown mjx impl '{impl}', choose from {IMPLS}")
        if impl == "warp" and not _find("warp"):
            raise MjxUnavailableError(
                "env.mjx_impl=warp needs NVIDIA Warp: pip install 'rlcore[warp]' (or pip "
                "install warp-lang), or use env.mjx_impl=jax"
            )
        import jax
        import jax.numpy as jnp
        from mujoco import mjx

        enable_compilation_cache()
        spec = self.spec_task = task_spec(env_id, backend="mjx", **task_kwargs)
        if max_episode_steps is None:
            max_episode_steps = gym.spec(env_id).max_episode_steps
        self.max_episode_steps = int(max_episode_steps)
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.jax_device = _jax_device(self.device)
        jaxlib_version = importlib.metadata.version("jaxlib")
        if self.jax_device.platform == "cpu" and cpu_lapack_may_deadlock(jaxlib_version):
            warnings.warn(
                f"jaxlib {jaxlib_version} can deadlock MJX on JAX's CPU device at large "
                "batches (its batched Cholesky waits on XLA's own thread pool; see "
                "envs/mjx.py): pip install 'jaxlib!=0.10.*,!=0.11.0' 'jax!=0.10.*,!=0.11.0'",
                stacklevel=2,
            )
        self.impl = impl
        model = mujoco.MjModel.from_xml_path(expand_model_path(spec.xml_file))
        if model.opt.solver == mujoco.mjtSolver.mjSOL_PGS:  # not in MJX (module docstring)
            model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
        if solver_iterations is not None:  # None: the XML's (100 / 50 here)
            model.opt.iterations = min(model.opt.iterations, solver_iterations)
        if ls_iterations is not None:
            model.opt.ls_iterations = min(model.opt.ls_iterations, ls_iterations)
        self.model = model
        data = mujoco.MjData(model)
        put = jax.device_put
        with jax.default_device(self.jax_device):
            mjx_model = mjx.put_model(model, device=self.jax_device, impl=impl)
            if impl == "warp":  # cfrc_ext at the end of every forward pass (no separate call)
                option = mjx_model.opt.replace(
                    _impl=mjx_model.opt._impl.replace(run_rne_postconstraint=True)
                )
                mjx_model = mjx_model.replace(opt=option)
            task = _Task(
                spec=spec,
                model=mjx_model,
                data0=mjx.make_data(model, device=self.jax_device, impl=impl),
                init_qpos=put(jnp.asarray(data.qpos, jnp.float32), self.jax_device),
                init_qvel=put(jnp.asarray(data.qvel, jnp.float32), self.jax_device),
                dt=float(model.opt.timestep * spec.frame_skip),
                main_body=model.body(spec.main_body).id,
                body_mass=put(jnp.asarray(model.body_mass, jnp.float32), self.jax_device),
                max_episode_steps=self.max_episode_steps,
                uses_contacts=spec.contact_cost_weight != 0 or "cfrc_ext" in spec.obs_blocks,
                state_spec=_integration_spec(model),
                impl=impl,
                reset_reads_derived=spec.x_source != "qpos" or bool(spec.obs_blocks),
            )
        self._fns = _build_functions(task)
        self._state_spec = task.state_spec
        self.dt = task.dt

        low, high = model.actuator_ctrlrange.copy().astype(np.float32).T
        self.single_action_space = gym.spaces.Box(low, high, dtype=np.float32)
        obs_dim = model.nq + model.nv - spec.skipped_qpos
        for block in spec.obs_blocks:
            obs_dim += getattr(data, block)[_OBS_BLOCK_START[block] :].size
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.spec = None
        self.render_mode = None
        self.state: dict[str, Any] | None = None  # JAX pytree, one row per env

    # --- helpers -------------------------------------------------------------------
    def _keys(self, seeds: list[int]) -> Any:
        import jax
        import jax.numpy as jnp

        seeds_array = jax.device_put(jnp.asarray(seeds, jnp.uint32), self.jax_device)
        return jax.vmap(jax.random.PRNGKey)(seeds_array)

    def _seeds(self, seed: int | list[int | None] | None) -> list[int]:
        if seed is None:
            base = int(np.random.SeedSequence().generate_state(1)[0] >> 1)
            return [base + i for i in range(self.num_envs)]
        if isinstance(seed, int):
            return [seed + i for i in range(self.num_envs)]
        if len(seed) != self.num_envs:
            raise ValueError(f"got {len(seed)} seeds for {self.num_envs} envs")
        fallback = self._seeds(None)
        return [fallback[i] if s is None else int(s) for i, s in enumerate(seed)]

    def _jax_actions(self, actions: Any) -> Any:
        import jax
        import jax.numpy as jnp

        if isinstance(actions, torch.Tensor):
            tensor = actions.detach().to(self.device, torch.float32).contiguous()
            array = jax.dlpack.from_dlpack(tensor)
        else:
            array = jax.device_put(jnp.asarray(np.asarray(actions), jnp.float32), self.jax_device)
        if array.shape != (self.num_envs, self.model.nu):
            raise ValueError(
                f"actions must have shape {(self.num_envs, self.model.nu)}, got {array.shape}"
            )
        return array

    def _require_reset(self) -> dict[str, Any]:
        if self.state is None:
            raise RuntimeError("call reset() before step() or state access")
        return self.state

    # --- gymnasium VectorEnv API ---------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Reset every env (env i seeded with ``seed + i``); ``options={"reset_mask": m}``
        resets only the envs where ``m`` is True (with ``seed``, those envs are reseeded)."""
        import jax.numpy as jnp

        mask = (options or {}).get("reset_mask")
        if mask is None or self.state is None:
            self.state = self._fns["init"](self._keys(self._seeds(seed)))
            return to_torch(self.state["obs"]), {}
        mask_np = np.asarray(mask.cpu() if isinstance(mask, torch.Tensor) else mask)
        if mask_np.shape != (self.num_envs,) or mask_np.dtype != np.bool_ or not mask_np.any():
            raise ValueError(
                f"reset_mask must be a bool array of shape ({self.num_envs},) with at least "
                f"one True, got {mask!r}"
            )
        keys = self.state["key"] if seed is None else self._keys(self._seeds(seed))
        self.state, obs, *_ = self._fns["reset_masked"](self.state, keys, jnp.asarray(mask_np))
        return to_torch(obs), {}

    def restart(
        self,
        mask: torch.Tensor,
        obs: torch.Tensor | None = None,
        table: dict[str, torch.Tensor] | None = None,
        rows: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """New episodes in the envs where ``mask`` (a bool tensor on the device; no host
        round trip, an all-False mask changes nothing): fresh resets, or with ``table``
        (as ``state_table`` makes) continued from row ``rows[i]`` for env ``i``. Every
        env's observation comes from the device state (``obs`` is not needed). Returns
        it and, in the info, the return / length each env's episode had reached before
        (what a wrapper that ends episodes reports)."""
        state = self._require_reset()
        mask = self._jax_input(mask, torch.bool, (self.num_envs,), "restart mask")
        if table is None:
            outputs = self._fns["reset_masked"](state, state["key"], mask)
        else:
            chosen = {k: table[k][rows] for k in ("integration", "x", "elapsed")}
            integration = self._jax_input(chosen["integration"], torch.float32,
                                          (self.num_envs, self.state_size), "integration rows")  # fmt: skip
            x = self._jax_input(chosen["x"], torch.float32, (self.num_envs,), "x")
            elapsed = self._jax_input(chosen["elapsed"], torch.int32, (self.num_envs,),
                                      "elapsed steps")  # fmt: skip
            outputs = self._fns["restore_masked"](state, mask, integration, x, elapsed)
        self.state, *returned = outputs
        obs, ep_return, ep_length = map(to_torch, returned)
        return obs, {"episode_return": ep_return, "episode_length": ep_length.float()}

    def state_table(self, states: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """States (this back end's, the native one's or ``rlcore.envs.make.portable_state``
        snapshots) as device tensors, one row per state, for ``restart``: the float32
        integration rows, the "before" x of each and its time-limit counter."""
        rows = np.stack([self._integration_row(saved) for saved in states])
        # mjSTATE_INTEGRATION starts with the time, then qpos: qpos[0] is rows[:, 1]
        x = [self._saved_x(saved, float(row[1])) for saved, row in zip(states, rows)]
        elapsed = [int(saved["elapsed_steps"]) for saved in states]
        return {
            "integration": torch.as_tensor(rows, dtype=torch.float32, device=self.device),
            "x": torch.as_tensor(x, dtype=torch.float32, device=self.device),
            "elapsed": torch.as_tensor(elapsed, dtype=torch.int32, device=self.device),
        }

    @property
    def state_size(self) -> int:
        """Length of an integration row (``mjSTATE_INTEGRATION`` as MJX captures it)."""
        return int(mujoco.mj_stateSize(self.model, self._state_spec))

    def _integration_row(self, saved: dict[str, Any]) -> np.ndarray:
        row = saved.get("integration", saved.get("native_state"))
        if row is None:
            raise ValueError("state was not captured from an mjx, native or portable env")
        row = np.asarray(row, np.float64)
        if row.shape != (self.state_size,):
            raise ValueError(
                f"state has {row.size} values, this model's integration state has "
                f"{self.state_size}: it was captured on another model"
            )
        return row

    def _jax_input(self, tensor: torch.Tensor, dtype: torch.dtype, shape: tuple, what: str) -> Any:
        """A device tensor handed to JAX without a copy (checked shape, cast dtype)."""
        import jax

        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != shape:
            raise ValueError(f"{what} must be a tensor of shape {shape}, got {tensor!r}")
        tensor = tensor.to(self.device, dtype).contiguous()
        if dtype == torch.bool:  # DLPack's bool hand-off varies between versions: as bytes
            return jax.dlpack.from_dlpack(tensor.to(torch.uint8)).astype(bool)
        return jax.dlpack.from_dlpack(tensor)

    def step(
        self, actions: torch.Tensor | np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Advance every env by ``frame_skip`` physics steps; same-step autoreset."""
        state = self._require_reset()
        self.state, outputs = self._fns["step"](state, self._jax_actions(actions))
        self.last_outputs = outputs  # the JAX buffers the returned tensors share
        obs, reward, terminated, truncated, final_obs, ep_return, ep_length = map(to_torch, outputs)
        info = {
            "final_obs": final_obs,
            "_final_obs": terminated | truncated,
            "episode_return": ep_return,
            "episode_length": ep_length,
        }
        return obs, reward, terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        self.state = None

    # --- state capture (resume, snapshot resets) ---------------------------------
    device: torch.device  # SimulatorBackend: tensors on this device

    def get_states(self, env_ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
        """Per env (``env_ids``, default every env): the ``mjSTATE_INTEGRATION`` row
        (float64 copy of MJX's float32), the "before" x, the time-limit counter, the JAX
        key and the running episode stats."""
        state = self._require_reset()
        rows = np.asarray(self._fns["get_integration"](state["data"]), np.float64)
        host = {k: np.asarray(state[k]) for k in ("x", "elapsed", "key", "ep_return", "ep_length")}
        ids = range(self.num_envs) if env_ids is None else [int(i) for i in env_ids]
        return [
            {
                "integration": rows[i],
                "x_position": float(host["x"][i]),
                "elapsed_steps": int(host["elapsed"][i]),
                "key": host["key"][i].copy(),
                "episode_return": float(host["ep_return"][i]),
                "episode_length": int(host["ep_length"][i]),
            }
            for i in ids
        ]

    def set_states(
        self, states: Sequence[dict[str, Any]], env_ids: Sequence[int] | None = None
    ) -> None:
        """Restore states into every env (``env_ids=None``) or into envs ``env_ids``.

        Accepts this back end's states, the native back end's (``native_state``) and
        ``rlcore.envs.make.portable_state`` snapshots (their "before" x is recomputed from the
        saved body positions, as the native back end does); those two keep the env's key
        and episode statistics.
        """
        import jax
        import jax.numpy as jnp

        state = self._require_reset()
        ids = np.asarray(checked_ids(self.num_envs, states, env_ids), np.int64)
        rows = np.asarray(self._fns["get_integration"](state["data"]), np.float64)
        host = {k: np.array(state[k]) for k in ("x", "elapsed", "key", "ep_return", "ep_length")}
        for i, saved in zip(ids, states):
            rows[i] = self._integration_row(saved)
            host["elapsed"][i] = saved["elapsed_steps"]
            if "key" in saved:
                host["key"][i] = saved["key"]
                host["ep_return"][i] = saved["episode_return"]
                host["ep_length"][i] = saved["episode_length"]
        put = lambda a, dtype=None: jax.device_put(jnp.asarray(a, dtype), self.jax_device)  # noqa: E731
        data = self._fns["set_integration"](state["data"], put(rows, jnp.float32))
        x_now = np.asarray(self._fns["x"](data))
        for i, saved in zip(ids, states):
            host["x"][i] = self._saved_x(saved, x_now[i])
        obs = self._fns["obs"](data)
        self.state = {"data": data, "obs": obs, **{k: put(v) for k, v in host.items()}}

    def _saved_x(self, saved: dict[str, Any], x_now: float) -> float:
        """The "before" x of a restored env: saved, from a portable state's body
        positions, or (for qpos[0] tasks) the restored position itself."""
        if "x_position" in saved:
            return float(saved["x_position"])
        source = self.spec_task.x_source
        if source == "body" and "xpos" in saved:
            return float(np.asarray(saved["xpos"])[self.model.body(self.spec_task.main_body).id, 0])
        if source == "mass_centre" and "xipos" in saved:
            mass = self.model.body_mass
            return float((mass @ np.asarray(saved["xipos"]) / mass.sum())[0])
        if source == "qpos":
            return x_now
        raise ValueError("state lacks x_position (or body positions), which this task needs")

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Only ``rlcore_get_state`` (per env), for code written against SyncVectorEnv."""
        if name == "rlcore_get_state":
            return tuple(self.get_states())
        raise AttributeError(f"MjxVectorEnv does not support call('{name}')")
