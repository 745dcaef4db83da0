"""``NativeVectorEnv``: N copies of one MuJoCo task stepped together in C threads.

The physics of all environments advances in one call to ``mujoco.batch.Batch.step``
(MuJoCo 4.0's threaded batch: one MjModel, each simulation's ``mjSTATE_INTEGRATION``
row loaded into an MjData, ``nstep = frame_skip``). Observations, rewards, termination
and truncation are then computed in numpy from the batch's ``qpos`` / ``qvel`` views and
the derived fields it copies out after every call (``Batch.bind``: ``xpos``, ``xipos``,
``cinert``, ``cvel``, ``qfrc_actuator``, ``ncon``). Per-env Python runs at resets, to
draw the reset noise from each env's own ``np.random.Generator`` exactly as gymnasium
does, and for ``cfrc_ext`` (below).

Why ``mujoco.batch`` rather than ``mujoco.rollout``: ``rollout`` takes an initial solver
warm start (``qacc_warmstart``) but returns only ``mjSTATE_FULLPHYSICS`` states, so a
per-env warm start cannot be carried from one env step to the next (envs sharing a
thread's MjData would inherit each other's), and results would match gymnasium (one
MjData per env) only to solver tolerance, not bit for bit. ``Batch`` is MuJoCo 4.0's
persistent threaded API: it keeps each simulation's whole ``mjSTATE_INTEGRATION`` row,
is documented bit-identical to a loop over one MjData per simulation at any thread
count, and is faster (Hopper, 2 threads: ~145k physics steps/s vs ~85k for ``rollout``).

Derived fields. gymnasium reads them after ``mj_step(nstep=frame_skip)``, i.e. whatever
the last substep left in MjData; Ant and Humanoid use RK4, whose last forward pass is
at its fourth stage, not at the state before or after the substep. The batch copies
exactly those values out (bit-identical; ``mujoco.batch``: "as with mj_step"), so they
are read from the bound arrays. The "before" x of the forward reward is the previous
call's derived x, not a function of the state, so it is kept (``x_position``) and saved
with the env state. ``cfrc_ext`` is different: gymnasium calls ``mj_rnePostConstraint``
after ``mj_step``, on that last stage's contacts and constraint forces, which are arena
data the batch does not copy out, and no MuJoCo option makes ``mj_step`` compute it
there (acceleration sensors run ``mj_rnePostConstraint`` only in the substep's first
forward pass, which RK4 then overwrites). So tasks that read ``cfrc_ext`` use a
persistent batch (one MjData per simulation), and after the step each env in contact
is copied out (``Batch.get_data``) and ``mj_rnePostConstraint`` run on it: the same
function on the same inputs as gymnasium, so bit-identical. It costs ~10 us per env in
contact (mostly the copy; a step of Ant or Humanoid physics is a few hundred us), serial
on the calling thread: ``mujoco.batch``'s Python API has no way to run a function on
each simulation in its threads (the C API's ``mjb_apply`` is not exposed).
Envs without contacts are skipped: with no equality constraints, flexes or
``xfrc_applied`` their ``cfrc_ext`` is exactly zero. After a reset ``cfrc_ext`` is zero,
as ``mj_resetData`` leaves it (``mj_forward`` does not compute it).

Task definitions reproduced from gymnasium 1.4's v5 sources
(``gymnasium/envs/mujoco/{hopper,half_cheetah,walker2d,inverted_pendulum,swimmer,ant,
humanoid}_v5.py`` and ``mujoco_env.py``):

* obs = concat(qpos[skip:], qvel, blocks), qvel clipped to [-10, 10] for Hopper and
  Walker2d; ``skip`` is 1 (x) for Hopper/HalfCheetah/Walker2d, 2 (x, y) for
  Swimmer/Ant/Humanoid, 0 for InvertedPendulum; float64. Blocks: Ant
  clip(cfrc_ext, -1, 1)[1:]; Humanoid cinert[1:], cvel[1:], qfrc_actuator[6:],
  cfrc_ext[1:] (world body / free joint left out; each block switched by its v5
  ``include_*_in_observation`` flag).
* reward = (w_fwd * (x_after - x_before) / dt + healthy_reward * is_healthy)
  - (w_ctrl * sum(u**2) + contact_cost). x is ``data.qpos[0]`` for the first five
  tasks, ``data.xpos[main_body, 0]`` for Ant, the body_mass-weighted ``xipos`` mean
  (gymnasium's ``mass_center``, same einsum) for Humanoid. u is the action as given
  (unclipped, its own dtype), ``data.ctrl`` (float64) for Humanoid. contact_cost: Ant
  w * sum(clip(cfrc_ext, -1, 1)**2); Humanoid clip(w * sum(cfrc_ext**2), -inf, 10);
  0 elsewhere. Sums are over whole arrays (world body included), as in v5.
* is_healthy: Hopper: all(-100 < state[2:] < 100), 0.7 < z, -0.2 < angle < 0.2;
  Walker2d: 0.8 < z < 2, -1 < angle < 1 (z, angle = qpos[1], qpos[2]);
  InvertedPendulum: obs finite and |qpos[1]| <= 0.2 (its reward is 1 while healthy);
  Ant: finite qpos and qvel, 0.2 <= qpos[2] <= 1 (closed); Humanoid: 1 < qpos[2] < 2.
  terminated = not is_healthy (when ``terminate_when_unhealthy``).
* reset: ``mj_resetData``; qpos = init_qpos + U(-s, s, nq), then qvel = init_qvel +
  U(-s, s, nv) (HalfCheetah and Ant: s * N(0, 1, nv)), drawn from the env's generator in
  that order; then ``mj_forward``. Env i is seeded with seed + i (gymnasium's seeding).
* frame_skip, dt = timestep * frame_skip, TimeLimit truncation at the registered
  ``max_episode_steps`` (1000), SAME_STEP autoreset with ``info["final_obs"]`` /
  ``info["_final_obs"]`` as gymnasium's SyncVectorEnv gives them.

Departures: ``info`` holds only ``final_obs`` / ``_final_obs`` (no per-env reward terms
and no ``final_info``); ``mj_rnePostConstraint`` is run only for tasks that read
``cfrc_ext`` (its ``cacc`` / ``cfrc_int`` are not exposed); ``render`` is not supported
(rendered observations: ``envs/pixels.py``'s ``BatchPixels`` wraps this back end).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.envs.mujoco.mujoco_env import expand_model_path
from gymnasium.envs.registration import load_env_creator
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rlcore.envs.backend import checked_ids, restart_on_host

try:
    from mujoco.batch import Batch
except ImportError:  # MuJoCo < 4.0: the task tables stay importable, the back end refuses
    Batch = None

# The first MuJoCo release with ``mujoco.batch`` (pyproject.toml requires it too; an
# older MuJoCo installed anyway makes ``backend="auto"`` fall back to sync).
REQUIRED_MUJOCO = "4.0"


class NativeBackendUnavailableError(ValueError):
    """The installed MuJoCo has no ``mujoco.batch``, which the native back end needs (a
    ValueError, like an unknown back end name: the CLI prints it as one line)."""


def batch_available() -> bool:
    """Whether the installed MuJoCo provides ``mujoco.batch`` (MuJoCo >= 4.0)."""
    return Batch is not None


def require_batch() -> None:
    """Raise NativeBackendUnavailableError, naming the fix, unless ``batch_available()``."""
    if not batch_available():
        raise NativeBackendUnavailableError(
            f"env backend 'native' needs MuJoCo >= {REQUIRED_MUJOCO} (mujoco.batch); "
            f"installed: mujoco {getattr(mujoco, '__version__', '?')}. Upgrade with "
            f"pip install 'mujoco>={REQUIRED_MUJOCO}', or use env.backend=sync "
            "(or env.backend=auto, which picks native only where it is available)."
        )


@dataclass(frozen=True)
class TaskSpec:
    """A gymnasium v5 MuJoCo locomotion/balance task, as data (field names = v5 kwargs)."""

    xml_file: str
    frame_skip: int
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.0
    contact_cost_weight: float = 0.0
    healthy_reward: float = 0.0
    terminate_when_unhealthy: bool = False
    reset_noise_scale: float = 0.0
    skipped_qpos: int = 0  # leading qpos entries left out of the observation
    qvel_clip: float | None = None
    qvel_noise: Literal["uniform", "normal"] = "uniform"
    health: Literal["none", "hopper", "walker2d", "pendulum", "ant", "humanoid"] = "none"
    healthy_state_range: tuple[float, float] = (-100.0, 100.0)
    healthy_z_range: tuple[float, float] = (0.7, float("inf"))
    healthy_angle_range: tuple[float, float] = (-0.2, 0.2)
    # x whose change over a step is the forward velocity: qpos[0], the x of main_body's
    # frame (xpos), or the x of the mass centre (body_mass-weighted xipos)
    x_source: Literal["qpos", "body", "mass_centre"] = "qpos"
    main_body: int | str = 1
    ctrl_cost_of: Literal["action", "ctrl"] = "action"  # the action as given, or data.ctrl
    obs_blocks: tuple[str, ...] = ()  # derived MjData fields appended, see _OBS_BLOCK_START
    contact_force_range: tuple[float, float] | None = None  # Ant: clip of cfrc_ext
    contact_cost_range: tuple[float, float] | None = None  # Humanoid: clip of the cost


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
    "Ant-v5": TaskSpec(
        "ant.xml",
        5,
        ctrl_cost_weight=0.5,
        contact_cost_weight=5e-4,
        healthy_reward=1.0,
        terminate_when_unhealthy=True,
        reset_noise_scale=0.1,
        skipped_qpos=2,
        qvel_noise="normal",
        health="ant",
        healthy_z_range=(0.2, 1.0),
        x_source="body",
        obs_blocks=("cfrc_ext",),
        contact_force_range=(-1.0, 1.0),
    ),
    "Humanoid-v5": TaskSpec(
        "humanoid.xml",
        5,
        forward_reward_weight=1.25,
        ctrl_cost_weight=0.1,
        contact_cost_weight=5e-7,
        healthy_reward=5.0,
        terminate_when_unhealthy=True,
        reset_noise_scale=1e-2,
        skipped_qpos=2,
        health="humanoid",
        healthy_z_range=(1.0, 2.0),
        x_source="mass_centre",
        ctrl_cost_of="ctrl",
        obs_blocks=("cinert", "cvel", "qfrc_actuator", "cfrc_ext"),
        contact_cost_range=(-float("inf"), 10.0),
    ),
}
SUPPORTED_ENVS = tuple(TASKS)

# Derived MjData fields an observation may append, and the leading rows v5 leaves out:
# the world body (cinert, cvel, cfrc_ext), the free joint's 6 dofs (qfrc_actuator).
_OBS_BLOCK_START = {"cinert": 1, "cvel": 1, "qfrc_actuator": 6, "cfrc_ext": 1}

# v5 keyword arguments a caller may override (they map onto TaskSpec fields).
_OVERRIDABLE = frozenset(
    {
        "frame_skip",
        "forward_reward_weight",
        "ctrl_cost_weight",
        "contact_cost_weight",
        "healthy_reward",
        "terminate_when_unhealthy",
        "reset_noise_scale",
        "healthy_state_range",
        "healthy_z_range",
        "healthy_angle_range",
        "main_body",
        "contact_force_range",
        "contact_cost_range",
    }
)


def task_spec(env_id: str, backend: str = "native", **overrides: Any) -> TaskSpec:
    """The TaskSpec of a supported gymnasium id, with v5 keyword overrides applied.

    Accepts the keywords of the task's v5 constructor that the back ends implement
    (``backend`` only names the back end in error messages).
    """
    if env_id not in TASKS:
        from rlcore.envs.robots import ROBOT_IDS

        raise ValueError(
            f"backend '{backend}' does not support '{env_id}'; supported: {', '.join(TASKS)}, "
            f"the Safety<Task>Velocity tasks and the robot tasks "
            f"{', '.join(ROBOT_IDS.values())} (env.backend=sync runs any gymnasium task)"
        )
    spec = TASKS[env_id]
    # include_<block>_in_observation, for the blocks the task's observation has
    flags = {f"include_{block}_in_observation": block for block in spec.obs_blocks}
    accepted = _OVERRIDABLE | {"exclude_current_positions_from_observation"} | set(flags)
    accepted &= _v5_kwargs(env_id)
    unknown = set(overrides) - accepted
    if unknown:
        raise ValueError(
            f"backend '{backend}' does not accept env kwargs {sorted(unknown)} for {env_id}; "
            f"accepted: {sorted(accepted)}"
        )
    if "exclude_current_positions_from_observation" in overrides:
        exclude = overrides.pop("exclude_current_positions_from_observation")
        overrides["skipped_qpos"] = spec.skipped_qpos if exclude else 0
    included = {flags[k]: bool(overrides.pop(k)) for k in list(overrides) if k in flags}
    if included:
        overrides["obs_blocks"] = tuple(b for b in spec.obs_blocks if included.get(b, True))
    return dataclasses.replace(spec, **overrides)


def _v5_kwargs(env_id: str) -> set[str]:
    """Keyword arguments of the gymnasium env class's constructor."""
    env_class = load_env_creator(gym.spec(env_id).entry_point)
    return set(inspect.signature(env_class.__init__).parameters) - {"self", "kwargs"}


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
        velocity_cost: tuple[float, bool] | None = None,
        **task_kwargs: Any,
    ) -> None:
        """``velocity_cost=(threshold, planar)`` adds ``info["cost"] = 1[speed > threshold]``
        every step (``rlcore.envs.safety``'s velocity-constrained tasks): the forward x-velocity, or
        the xy speed with ``planar`` (Ant, Humanoid), as the cost wrapper reads them from the
        v5 task's ``info``."""
        require_batch()
        spec = self.spec_task = task_spec(env_id, **task_kwargs)
        if max_episode_steps is None:
            max_episode_steps = gym.spec(env_id).max_episode_steps
        self.max_episode_steps = max_episode_steps
        self.num_envs = num_envs
        self.num_threads = (os.cpu_count() or 1) if num_threads is None else num_threads
        self.model = mujoco.MjModel.from_xml_path(expand_model_path(spec.xml_file))
        # cfrc_ext needs each simulation's own contacts after the step: a persistent batch
        self.uses_contacts = spec.contact_cost_weight != 0 or "cfrc_ext" in spec.obs_blocks
        self.batch = Batch(
            self.model, nsim=num_envs, nthread=self.num_threads, persistent=self.uses_contacts
        )
        self.qpos, self.qvel = self.batch.bind("qpos"), self.batch.bind("qvel")
        self.ctrl = self.batch.bind("ctrl")
        # derived fields the task reads, copied out by the batch after every call
        outputs = {b for b in spec.obs_blocks if b != "cfrc_ext"}
        outputs |= {"body": {"xpos"}, "mass_centre": {"xipos"}, "qpos": set()}[spec.x_source]
        self.outputs = {name: self.batch.bind(name) for name in sorted(outputs)}
        self.main_body = self.model.body(spec.main_body).id
        self.body_mass, self.total_mass = self.model.body_mass, self.model.body_mass.sum()
        data = mujoco.MjData(self.model)  # gymnasium's init_qpos / init_qvel
        self.init_qpos, self.init_qvel = data.qpos.copy(), data.qvel.copy()
        self.dt = self.model.opt.timestep * spec.frame_skip

        low, high = self.model.actuator_ctrlrange.copy().astype(np.float32).T
        self.single_action_space = gym.spaces.Box(low, high, dtype=np.float32)
        obs_dim = self.model.nq + self.model.nv - spec.skipped_qpos
        for block in spec.obs_blocks:
            obs_dim += getattr(data, block)[_OBS_BLOCK_START[block] :].size
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float64)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.spec = None
        self.render_mode = None

        # called with the ids of the envs whose episodes ended, on their final states,
        # before they reset (envs/pixels.py's BatchPixels renders them there)
        self.on_episode_end: Callable[[np.ndarray], None] | None = None
        self.elapsed = np.zeros(num_envs, np.int64)
        self.rngs: list[np.random.Generator | None] = [None] * num_envs
        self.x_position = np.zeros(num_envs)  # x of the last call, the next step's "before"
        self.cost_threshold, self.cost_planar = velocity_cost or (None, False)
        if self.cost_planar and spec.x_source == "qpos":
            raise ValueError(f"{env_id} has no planar position for a planar-speed cost")
        self.y_position = np.zeros(num_envs)  # planar cost only: the "before" y
        self.cfrc_ext = np.zeros((num_envs, self.model.nbody, 6))
        if self.uses_contacts:
            self._post_data = mujoco.MjData(self.model)
            self.ncon = self.batch.bind("ncon")
            self.xfrc_applied = self.batch.bind("xfrc_applied")
            # without equality constraints and flexes, cfrc_ext holds only contact forces
            # and xfrc_applied: exactly zero in a simulation that has neither
            self._skip_free = self.model.neq == 0 and self.model.nflex == 0

    # --- task quantities, vectorised over envs -------------------------------------
    def _contact_forces(self, ids: np.ndarray | slice = slice(None)) -> np.ndarray:
        """cfrc_ext of envs ``ids`` as v5 uses it (Ant clips it to contact_force_range)."""
        forces = self.cfrc_ext[ids]
        if self.spec_task.contact_force_range is not None:
            forces = np.clip(forces, *self.spec_task.contact_force_range)
        return forces

    def _obs(self, ids: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Observations of envs ``ids`` from the current state and derived fields."""
        spec = self.spec_task
        qvel = self.qvel[ids]
        if spec.qvel_clip is not None:
            qvel = np.clip(qvel, -spec.qvel_clip, spec.qvel_clip)
        parts = [self.qpos[ids, spec.skipped_qpos :], qvel]
        for block in spec.obs_blocks:
            values = self._contact_forces(ids) if block == "cfrc_ext" else self.outputs[block][ids]
            values = values[:, _OBS_BLOCK_START[block] :]
            parts.append(values.reshape(len(values), -1))
        return np.concatenate(parts, axis=1)

    def _x(self, ids: np.ndarray | slice = slice(None), axis: int = 0) -> np.ndarray:
        """The x whose change is the forward velocity, from envs ``ids``' last call (the y of
        the same point with ``axis=1``: body and mass-centre sources only)."""
        source = self.spec_task.x_source
        if source == "body":
            return self.outputs["xpos"][ids, self.main_body, axis].copy()
        if source == "mass_centre":  # gymnasium's mass_center, over envs
            xipos = self.outputs["xipos"][ids]
            return (np.einsum("b,nbj->nj", self.body_mass, xipos) / self.total_mass)[:, axis]
        return self.qpos[ids, 0].copy()

    def _update_contact_forces(self) -> None:
        """gymnasium's ``mj_rnePostConstraint`` after the step, into ``self.cfrc_ext``.

        Needs each simulation's contacts and constraint forces (arena data the batch does
        not copy out), so envs in contact are copied out of the persistent batch one by one.
        """
        if self._skip_free:
            pushed = self.xfrc_applied.reshape(self.num_envs, -1).any(axis=1)
            ids = np.flatnonzero((self.ncon > 0) | pushed)
            self.cfrc_ext[:] = 0.0
        else:
            ids = range(self.num_envs)
        data = self._post_data
        for i in ids:
            self.batch.get_data(i, data)
            mujoco.mj_rnePostConstraint(self.model, data)
            self.cfrc_ext[i] = data.cfrc_ext

    def _contact_cost(self) -> np.ndarray | float:
        """v5's contact cost of every env (0.0 for tasks without one)."""
        spec = self.spec_task
        if not self.uses_contacts:
            return 0.0
        forces = self._contact_forces().reshape(self.num_envs, -1)
        cost = spec.contact_cost_weight * np.sum(np.square(forces), axis=1)
        if spec.contact_cost_range is not None:
            cost = np.clip(cost, *spec.contact_cost_range)
        return cost

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
        if spec.health == "ant":  # finite state, min_z <= z <= max_z (closed)
            finite = np.isfinite(qpos).all(axis=1) & np.isfinite(qvel).all(axis=1)
            lo, hi = spec.healthy_z_range
            return finite & (lo <= qpos[:, 2]) & (qpos[:, 2] <= hi)
        if spec.health == "humanoid":
            return _inside(qpos[:, 2], spec.healthy_z_range)
        return np.ones(self.num_envs, bool)

    def _reset_envs(self, ids: np.ndarray) -> None:
        """gymnasium's ``MujocoEnv.reset`` for envs ``ids``: resetData, noise, mj_forward."""
        spec, scale = self.spec_task, self.spec_task.reset_noise_scale
        nq, nv = self.model.nq, self.model.nv
        self.batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        for i in ids:  # per-env generators, as gymnasium draws them
            rng = self.rngs[i]
            qpos = self.init_qpos + rng.uniform(low=-scale, high=scale, size=nq)
            if spec.qvel_noise == "normal":
                qvel = self.init_qvel + scale * rng.standard_normal(nv)
            else:
                qvel = self.init_qvel + rng.uniform(low=-scale, high=scale, size=nv)
            self.qpos[i], self.qvel[i] = qpos, qvel
        self.batch.forward(ids)
        self.elapsed[ids] = 0
        self.x_position[ids] = self._x(ids)
        if self.cost_planar:
            self.y_position[ids] = self._x(ids, axis=1)
        self.cfrc_ext[ids] = 0.0  # zeroed by mj_resetData; mj_forward does not compute it

    # --- gymnasium VectorEnv API -----------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env; env i gets ``seed + i`` (or ``seed[i]``), as SyncVectorEnv does.
        ``options={"reset_mask": mask}`` resets only the envs where ``mask`` is True (the
        others keep running; their rows of the returned observations are current)."""
        self._reset_envs(reseed(self.rngs, seed, options))
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
        x_before = self.x_position
        self.ctrl[:] = actions
        self.batch.step(nstep=spec.frame_skip)
        if self.uses_contacts:
            self._update_contact_forces()
        self.x_position = self._x()
        x_velocity = (self.x_position - x_before) / self.dt
        obs = self._obs()
        healthy = self._healthy()
        controls = actions if spec.ctrl_cost_of == "action" else self.ctrl
        ctrl_cost = spec.ctrl_cost_weight * np.sum(np.square(controls), axis=1)
        rewards = spec.forward_reward_weight * x_velocity + spec.healthy_reward * healthy
        reward = rewards - (ctrl_cost + self._contact_cost())
        terminated = ~healthy if spec.terminate_when_unhealthy else np.zeros_like(healthy)
        self.elapsed += 1
        truncated = self.elapsed >= self.max_episode_steps
        info: dict[str, Any] = {}
        if self.cost_threshold is not None:
            speed = x_velocity
            if self.cost_planar:
                y_before, self.y_position = self.y_position, self._x(axis=1)
                speed = np.hypot(x_velocity, (self.y_position - y_before) / self.dt)
            info["cost"] = (speed > self.cost_threshold).astype(np.float64)
        done = np.flatnonzero(terminated | truncated)
        if done.size:
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in done:
                final_obs[i] = obs[i].copy()
            info["final_obs"] = final_obs
            info["_final_obs"] = terminated | truncated
            if self.on_episode_end is not None:
                self.on_episode_end(done)
            self._reset_envs(done)
            obs[done] = self._obs(done)
        return obs, reward.astype(np.float64), terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        """Drop the batch (its thread pool)."""
        self.batch = None

    # --- SimulatorBackend (rlcore.envs.backend): checkpoints, snapshot resets ---------
    device = None  # numpy arrays on the host

    def get_states(self, env_ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
        """Per-env integration state (incl. solver warm start), step counter, RNG and
        current observation, for envs ``env_ids`` (default: every env).

        Also the x of the last call (the next step's "before" position): for body and mass
        centre positions it is a derived quantity of the last substep, not of the state.
        """
        ids = range(self.num_envs) if env_ids is None else [int(i) for i in env_ids]
        obs = self._obs()
        return [
            {
                "native_state": self.batch.state[i].copy(),
                "x_position": float(self.x_position[i]),
                "y_position": float(self.y_position[i]),
                "elapsed_steps": int(self.elapsed[i]),
                "rng": None
                if self.rngs[i] is None
                else copy.deepcopy(self.rngs[i].bit_generator.state),
                "obs": obs[i].copy(),
            }
            for i in ids
        ]

    def set_states(
        self, states: Sequence[dict[str, Any]], env_ids: Sequence[int] | None = None
    ) -> None:
        """Restore what ``get_states`` captured (every env), or states into envs
        ``env_ids`` only; ``rlcore.envs.make.portable_state`` states (S3RL snapshots, captured on
        gymnasium's env) restore exactly too, and leave the env's RNG alone."""
        for i, state in zip(checked_ids(self.num_envs, states, env_ids), states):
            if "integration" in state:
                self._set_portable(i, state)
                continue
            if "native_state" not in state:
                raise ValueError("state was not captured from a native-backend env")
            self.batch.state[i] = state["native_state"]
            if "x_position" in state:
                self.x_position[i] = state["x_position"]
            elif self.spec_task.x_source == "qpos":  # captured before x_position was kept
                self.x_position[i] = self.qpos[i, 0]
            else:
                raise ValueError("state lacks x_position, which this task needs")
            self.y_position[i] = state.get("y_position", 0.0)
            self.elapsed[i] = state["elapsed_steps"]
            if state["rng"] is not None:
                self.rngs[i] = np.random.Generator(np.random.PCG64())
                self.rngs[i].bit_generator.state = state["rng"]

    def state_table(self, states: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """``states`` as ``restart`` reads them (a list)."""
        return list(states)

    def restart(
        self, mask: Any, obs: Any, table: Any = None, rows: Any = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """New episodes where ``mask``: from ``table[rows[i]]`` or fresh resets
        (``rlcore.envs.backend.SimulatorBackend``)."""
        return restart_on_host(self, mask, obs, table, rows)

    def _set_portable(self, i: int, state: dict[str, Any]) -> None:
        """Env ``i`` from a ``portable_state``: integration state, the "before" x from the
        saved derived positions, elapsed steps; cfrc_ext as a reset leaves it (zero; the
        step recomputes it before anything reads it)."""
        integration = np.asarray(state["integration"], dtype=np.float64)
        if integration.shape != (self.batch.nstate,):
            raise ValueError(
                f"snapshot state has {integration.size} values, this model's integration "
                f"state has {self.batch.nstate}: it was captured on another model"
            )
        self.batch.state[i] = integration
        source = self.spec_task.x_source
        if source == "body":
            self.x_position[i], self.y_position[i] = state["xpos"][self.main_body, :2]
        elif source == "mass_centre":
            xipos = np.asarray(state["xipos"])[None]  # the same einsum as _x
            centre = np.einsum("b,nbj->nj", self.body_mass, xipos) / self.total_mass
            self.x_position[i], self.y_position[i] = centre[0, :2]
        else:
            self.x_position[i] = self.qpos[i, 0]
        self.elapsed[i] = state["elapsed_steps"]
        self.cfrc_ext[i] = 0.0

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Only ``rlcore_get_state`` (per env), for code written against SyncVectorEnv."""
        if name == "rlcore_get_state":
            return tuple(self.get_states())
        raise AttributeError(f"NativeVectorEnv does not support call('{name}')")


def reseed(
    rngs: list[np.random.Generator | None],
    seed: int | list[int | None] | None,
    options: dict | None,
) -> np.ndarray:
    """The envs a host vector env's ``reset`` restarts, their generators seeded as
    SyncVectorEnv seeds them: env i gets ``seed + i`` (or ``seed[i]``); without a seed an
    env keeps its generator (a fresh unseeded one the first time). ``options={"reset_mask":
    mask}`` restarts only the envs where ``mask`` is True."""
    num_envs = len(rngs)
    mask = (options or {}).get("reset_mask")
    if mask is not None:
        mask = np.asarray(mask)
        if mask.shape != (num_envs,) or mask.dtype != np.bool_ or not mask.any():
            raise ValueError(
                f"reset_mask must be a bool array of shape ({num_envs},) with at "
                f"least one True, got {mask!r}"
            )
        ids = np.flatnonzero(mask)
        if seed is not None:
            seeds = [seed + i for i in range(num_envs)] if isinstance(seed, int) else seed
            for i in ids:
                if seeds[i] is not None:
                    rngs[i], _ = seeding.np_random(seeds[i])
        return ids
    if seed is None or isinstance(seed, int):
        seeds = [None if seed is None else seed + i for i in range(num_envs)]
    else:
        seeds = list(seed)
        if len(seeds) != num_envs:
            raise ValueError(f"got {len(seeds)} seeds for {num_envs} envs")
    for i, s in enumerate(seeds):
        if s is not None or rngs[i] is None:
            rngs[i], _ = seeding.np_random(s)
    return np.arange(num_envs)


def _inside(values: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """Strictly inside the open interval, as gymnasium's ``lo < v < hi``."""
    lo, hi = bounds
    return (lo < values) & (values < hi)
