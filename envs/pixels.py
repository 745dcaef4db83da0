"""Rendered observations for MuJoCo tasks: ``env.obs=pixels`` (a camera image) or
``env.obs=state+pixels`` (``{"state": the task's vector, "pixels": the image}``; a goal
task's dict keeps its parts and gains ``pixels``: the robot case), frame-stacked, on
gymnasium's sync and async back ends (``PixelObservation``, ``FrameStack`` in each sub-env)
and on the native back ends (``BatchPixels`` over the batch).

    make_vec_env("Hopper-v5", 4, obs="pixels", image_size=84, frame_stack=3)

``PixelObservation`` renders each step through a ``Camera`` (its own OpenGL context, freed
under that context as ``mujoco.Renderer`` frees its own) at ``image_size`` square, from
``camera`` (a camera name of the model; default: ``track`` where the model has it, as
gymnasium's locomotion bodies do, else MuJoCo's free camera), channel-first
uint8 ``(3, H, W)``. ``FrameStack`` stacks the last ``frame_stack`` images along the
channels, oldest first, ``(3 S, H, W)``; a new episode repeats its first image (DrQ-v2's
``FrameStackWrapper``). The vector env then declares ``frame_stack``
(``rlcore.observations.StackedFrames``), so the replay buffer keeps each frame once.

Shadows and reflections are off: on a machine without a GPU, MuJoCo renders through
Mesa's software rasteriser (llvmpipe), where Hopper at 84 x 84 renders 17 frames/s with
them, 148 without shadows, 325 without reflections too (``mujoco.Renderer``, one thread,
2-core AMD EPYC; ``python -m rlcore.benchmarks.render_speed`` measures the env steps/s).
The OpenGL context is made here, of the back end ``MUJOCO_GL`` names (``egl`` when unset,
or ``osmesa``), since ``mujoco.Renderer`` reads ``MUJOCO_GL`` only when ``mujoco`` is first
imported. Beside a goal vector (``state+pixels``), rlcore's robot tasks' cameras leave
their goal markers out (``GoalMarkers``). The MJX back end does not render: refused, naming ``env.backend=sync`` (``auto``
picks sync for rendered observations).
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

OBS_MODES = ("state", "pixels", "state+pixels")
STATE, PIXELS = "state", "pixels"  # the parts of a state+pixels observation


@runtime_checkable
class GoalMarkers(Protocol):
    """A task that draws its desired goal in the scene, as markers in one geom group
    (rlcore's robot tasks). A camera beside the goal vector (``state+pixels``) leaves them
    out: the goal is a part of that observation, and HER's relabelled ``desired_goal``
    must be the only goal it holds (a marker in the image would still show the episode's
    own). A camera alone (``pixels``) keeps them: they are its only sight of the goal."""

    goal_marker_group: int


def hidden_groups(task: Any, mode: str) -> tuple[int, ...]:
    """The geom groups an observation camera of ``task`` (an unwrapped env) leaves out
    when it observes as ``mode``: a ``GoalMarkers`` task's markers beside the state."""
    if mode == "state+pixels" and isinstance(task, GoalMarkers):
        return (task.goal_marker_group,)
    return ()


def gl_context(size: int) -> Any:
    """An offscreen OpenGL context of the back end ``MUJOCO_GL`` names (``egl`` when unset:
    headless), made here rather than by ``mujoco.Renderer``, which reads ``MUJOCO_GL``
    once, when ``mujoco`` is first imported (usually before rlcore could set it)."""
    backend = os.environ.setdefault("MUJOCO_GL", "egl").lower()
    if backend == "osmesa":
        from mujoco.osmesa import GLContext
    elif backend == "egl":
        from mujoco.egl import GLContext
    else:
        from mujoco.glfw import GLContext
    return GLContext(size, size)


class Camera:
    """One camera of a MuJoCo model rendered offscreen at ``size`` square: its own OpenGL
    context, scene (shadows and reflections off) and framebuffers. ``camera``: a camera
    name of the model; None: ``track`` where the model has it, else MuJoCo's free camera.
    ``hidden``: geom groups it does not draw (``hidden_groups``). Used by
    ``PixelObservation`` (one env) and ``BatchPixels`` (the native back ends)."""

    def __init__(
        self, model: Any, camera: str | None, size: int, hidden: tuple[int, ...] = ()
    ) -> None:
        import mujoco

        self.context: Any = None  # until made (``__del__`` reads it)
        self.size = int(size)
        names = [model.camera(i).name for i in range(model.ncam)]
        if camera is not None and camera not in names:
            raise ValueError(f"camera {camera!r} is not in the model (it has {names})")
        camera = camera if camera is not None else ("track" if "track" in names else None)
        self.camera = mujoco.MjvCamera()
        if camera is None:  # MuJoCo's free camera, looking at the model's centre
            mujoco.mjv_defaultFreeCamera(model, self.camera)
        else:
            self.camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
            self.camera.fixedcamid = names.index(camera)
        self.context = gl_context(self.size)
        self.context.make_current()
        self.scene = mujoco.MjvScene(model, maxgeom=10_000)
        self.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
        self.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
        self.options = mujoco.MjvOption()
        for group in hidden:
            self.options.geomgroup[group] = 0
        self.mjr = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self.mjr)
        self.rect = mujoco.MjrRect(0, 0, self.size, self.size)
        self.pixels = np.zeros((self.size, self.size, 3), np.uint8)

    def render(self, model: Any, data: Any) -> np.ndarray:
        """The camera's view of ``data`` (its derived positions as they are), (3, H, W) uint8."""
        import mujoco

        self.context.make_current()
        mujoco.mjv_updateScene(model, data, self.options, None, self.camera,
                               mujoco.mjtCatBit.mjCAT_ALL, self.scene)  # fmt: skip
        mujoco.mjr_render(self.rect, self.scene, self.mjr)
        mujoco.mjr_readPixels(self.pixels, None, self.rect, self.mjr)
        return np.ascontiguousarray(self.pixels[::-1].transpose(2, 0, 1))  # bottom row first

    def render_state(self, model: Any, scratch: Any, integration: np.ndarray) -> np.ndarray:
        """The camera's view of an integration state (``mjSTATE_INTEGRATION``) restored
        into ``scratch`` (an MjData of ``model``), its derived positions computed from it
        (``mj_forward``): how a restored S3RL snapshot looks, on every back end alike."""
        import mujoco

        mujoco.mj_setState(model, scratch, integration, mujoco.mjtState.mjSTATE_INTEGRATION)
        mujoco.mj_forward(model, scratch)
        return self.render(model, scratch)

    def free(self) -> None:
        """Free the framebuffers and the context with this camera's own context current:
        MuJoCo frees them in whichever context is current, and freed under another
        camera's, they would blank that camera's images (two pixel envs in one process,
        e.g. training and evaluation, one closed or dropped first)."""
        if self.context is None:
            return
        context, self.context = self.context, None
        context.make_current()
        self.mjr.free()
        context.free()

    def __del__(self) -> None:  # dropped without free(): free as free() does
        # at exit, MuJoCo's atexit hook may have ended the GL display first: nothing to free
        with contextlib.suppress(Exception):
            self.free()


def image_space(size: int, frames: int = 1) -> gym.spaces.Box:
    """A (3 frames, size, size) uint8 image Box."""
    return gym.spaces.Box(0, 255, (3 * frames, size, size), np.uint8)


def observed_space(state: gym.Space, mode: str, image: gym.spaces.Box) -> gym.Space:
    """The observation space of a task whose state observations are ``state``, observed
    as ``mode`` with images ``image``: the image; a goal task's dict plus ``pixels``; or
    ``{"state": float32 vector, "pixels": image}``."""
    if mode == PIXELS:
        return image
    if isinstance(state, gym.spaces.Dict):  # a goal task: its parts too
        return gym.spaces.Dict({**state.spaces, PIXELS: image})
    return gym.spaces.Dict(
        {STATE: gym.spaces.Box(-np.inf, np.inf, state.shape, np.float32), PIXELS: image}
    )


def observed(observation: Any, mode: str, image: np.ndarray) -> Any:
    """``observation`` (a task's state observation) with ``image``, as ``observed_space``
    lays it out."""
    if mode == PIXELS:
        return image
    if isinstance(observation, dict):
        return {**observation, PIXELS: image}
    return {STATE: np.asarray(observation, np.float32), PIXELS: image}


class PixelObservation(gym.ObservationWrapper):
    """A MuJoCo env observed through a camera (see the module docstring)."""

    def __init__(
        self, env: gym.Env, mode: str = "pixels", camera: str | None = None, image_size: int = 84
    ) -> None:
        super().__init__(env)
        from rlcore.envs.env_state import simulations

        if mode not in OBS_MODES[1:]:
            raise ValueError(f"obs={mode!r}: one of {OBS_MODES}")
        base = env.unwrapped
        # the simulation it steps: its own (gymnasium's MuJoCo tasks, rlcore's robots,
        # Fetch, Adroit) or a held env's (the mazes' point / ant env, Kitchen's robot)
        sims = simulations(base)
        if not sims:
            raise ValueError(f"obs={mode} renders MuJoCo tasks; {type(base).__name__} is not one")
        self.sim = sims.get("", next(iter(sims.values())))
        self.mode, self.size = mode, int(image_size)
        self.view = Camera(self.sim.model, camera, self.size, hidden_groups(base, mode))
        self.scratch: Any = None  # an MjData to render restored states in (made on first use)
        self.observation_space = observed_space(env.observation_space, mode, image_space(self.size))

    def render_image(self) -> np.ndarray:
        """The camera's view now, (3, H, W) uint8."""
        return self.view.render(self.sim.model, self.sim.data)

    def observation(self, observation: Any) -> Any:
        return observed(observation, self.mode, self.render_image())

    def render_restored(self, integration: np.ndarray) -> np.ndarray:
        """The camera's view of a restored snapshot's ``integration`` state
        (``Camera.render_state``), (3, H, W) uint8."""
        import mujoco

        if self.scratch is None:
            self.scratch = mujoco.MjData(self.sim.model)
        return self.view.render_state(self.sim.model, self.scratch, integration)

    def close(self) -> None:
        self.view.free()
        super().close()


class FrameStack(gym.Wrapper):
    """The last ``frames`` images stacked along the channels, oldest first; a new
    episode repeats its first image. For a dict observation, its ``pixels`` part only."""

    def __init__(self, env: gym.Env, frames: int) -> None:
        super().__init__(env)
        if frames < 1:
            raise ValueError(f"frame_stack must be >= 1, got {frames}")
        self.frames = int(frames)
        self.images: deque[np.ndarray] = deque(maxlen=self.frames)
        space = env.observation_space
        image = space[PIXELS] if isinstance(space, gym.spaces.Dict) else space
        channels, height, width = image.shape
        stacked = gym.spaces.Box(0, 255, (channels * self.frames, height, width), np.uint8)
        if isinstance(space, gym.spaces.Dict):
            self.observation_space = gym.spaces.Dict({**space.spaces, PIXELS: stacked})
        else:
            self.observation_space = stacked

    def stacked(self, observation: Any) -> Any:
        """``observation`` with its image part replaced by the stack."""
        images = np.concatenate(list(self.images), axis=0)
        if isinstance(observation, dict):
            return {**observation, PIXELS: images}
        return images

    def _image(self, observation: Any) -> np.ndarray:
        return observation[PIXELS] if isinstance(observation, dict) else observation

    def start_from(self, image: np.ndarray) -> None:
        """A new stack: ``image`` in every slot (a new episode, a restored snapshot)."""
        self.images.clear()
        self.images.extend([image] * self.frames)

    def reset(self, **kwargs: Any):
        observation, info = self.env.reset(**kwargs)
        self.start_from(self._image(observation))
        return self.stacked(observation), info

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.images.append(self._image(observation))
        return self.stacked(observation), reward, terminated, truncated, info


# the derived fields a scene of bodies, geoms, sites, cameras and lights reads
# (mjv_updateScene); spatial tendons' paths too, where a model has tendons
RENDER_FIELDS = ("xpos", "xmat", "xquat", "xipos", "ximat", "subtree_com", "geom_xpos",
                 "geom_xmat", "site_xpos", "site_xmat", "cam_xpos", "cam_xmat", "light_xpos",
                 "light_xdir")  # fmt: skip
TENDON_FIELDS = ("ten_wrapadr", "ten_wrapnum", "ten_length", "wrap_obj", "wrap_xpos")


class BatchPixels(gym.vector.VectorWrapper):
    """A native back end's envs (``NativeVectorEnv``, ``RobotVectorEnv``) observed through
    a camera, ``frame_stack`` images stacked, as ``PixelObservation`` + ``FrameStack`` do
    for one gymnasium env.

    Each env's image is rendered from one scratch MjData holding its integration state
    (``batch.state``) and the derived positions the scene reads (``RENDER_FIELDS``, bound
    from the batch, which copies out what its last call left, as gymnasium's MjData holds
    them after ``mj_step``), so the images equal gymnasium's bit for bit
    (tests/test_rendered.py). Envs whose episodes end are rendered on their final states
    (the back end's ``on_episode_end``, before it resets them) for ``info["final_obs"]``.
    The stacks are this wrapper's ``state_dict`` (checkpoints and exact resume).

    It is the ``SimulatorBackend`` S3RL snapshot resets drive (``backend_of`` finds it
    first): states and tables are the back end's, and a ``restart`` from a table starts
    the restarted envs' stacks from the camera's view of the restored states
    (``Camera.render_state``, as gymnasium's sub-envs do), beside the teacher's state
    observations the back end hands out."""

    device = None  # numpy arrays on the host

    def __init__(
        self, env: Any, mode: str, camera: str | None, image_size: int, frame_stack: int
    ) -> None:
        super().__init__(env)
        import mujoco

        if mode not in OBS_MODES[1:]:
            raise ValueError(f"obs={mode!r}: one of {OBS_MODES}")
        if frame_stack < 1:
            raise ValueError(f"frame_stack must be >= 1, got {frame_stack}")
        base = env.unwrapped
        self.mode, self.frames = mode, int(frame_stack)
        self.view = Camera(base.model, camera, image_size, hidden_groups(base, mode))
        self.scratch = mujoco.MjData(base.model)
        fields = RENDER_FIELDS + (TENDON_FIELDS if base.model.ntendon else ())
        self.derived = {name: base.batch.bind(name) for name in fields}  # filled from the reset
        size = self.view.size
        self.stacks = np.zeros((self.num_envs, 3 * self.frames, size, size), np.uint8)
        self.finals: dict[int, np.ndarray] = {}
        self.inner_obs: Any = None  # the back end's own observations of the last call
        base.on_episode_end = self._render_finals
        self.single_observation_space = observed_space(
            env.single_observation_space, mode, image_space(size, self.frames)
        )
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )

    def _render(self, i: int) -> np.ndarray:
        import mujoco

        base = self.env.unwrapped
        mujoco.mj_setState(base.model, self.scratch, base.batch.state[i],
                           mujoco.mjtState.mjSTATE_INTEGRATION)  # fmt: skip
        for name, values in self.derived.items():
            getattr(self.scratch, name)[:] = values[i]
        return self.view.render(base.model, self.scratch)

    def _render_finals(self, ids: np.ndarray) -> None:
        self.finals = {int(i): self._render(int(i)) for i in ids}

    def _push(self, i: int, image: np.ndarray) -> None:
        """The newest image last, the oldest dropped."""
        self.stacks[i, :-3] = self.stacks[i, 3:]
        self.stacks[i, -3:] = image

    def _observe(self, obs: Any) -> Any:
        return observed(obs, self.mode, self.stacks.copy())

    def reset(self, *, seed: Any = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset as the back end does; a reset env's stack repeats its first image."""
        mask = (options or {}).get("reset_mask")  # read first: gymnasium pops it
        obs, info = self.env.reset(seed=seed, options=options)
        self.inner_obs = obs
        for i in range(self.num_envs) if mask is None else np.flatnonzero(mask):
            self.stacks[i] = np.tile(self._render(int(i)), (self.frames, 1, 1))
        return self._observe(obs), info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        self.finals = {}
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self.inner_obs = obs
        for i in range(self.num_envs):
            if i in self.finals:  # its episode ended: the final stack, then a new episode
                self._push(i, self.finals[i])
                info["final_obs"][i] = observed(info["final_obs"][i], self.mode,
                                                self.stacks[i].copy())  # fmt: skip
                self.stacks[i] = np.tile(self._render(i), (self.frames, 1, 1))
            else:
                self._push(i, self._render(i))
        return self._observe(obs), reward, terminated, truncated, info

    def get_states(self, env_ids: Any = None) -> list[dict[str, Any]]:
        """The back end's states (the stacks are ``state_dict``'s)."""
        return self.env.get_states(env_ids)

    def set_states(self, states: Any, env_ids: Any = None) -> None:
        """The back end's ``set_states``. An env given a portable state (an S3RL snapshot,
        ``portable_state``) starts a new stack from its camera view, as gymnasium's
        sub-envs do; the back end's own states (checkpoints) leave the stacks to
        ``load_state_dict``."""
        self.env.set_states(states, env_ids)
        ids = range(self.num_envs) if env_ids is None else env_ids
        self._start_restored([int(i) for i, state in zip(ids, states) if "integration" in state])

    def _start_restored(self, ids: Any) -> None:
        """New stacks of envs ``ids`` from the camera's view of their restored states."""
        base = self.env.unwrapped
        for i in ids:
            image = self.view.render_state(base.model, self.scratch, base.batch.state[i])
            self.stacks[i] = np.tile(image, (self.frames, 1, 1))

    def state_table(self, states: Any) -> Any:
        return self.env.state_table(states)

    def restart(
        self, mask: Any, obs: Any, table: Any = None, rows: Any = None
    ) -> tuple[Any, dict[str, Any]]:
        """The back end's restart of the envs where ``mask``, their stacks started anew:
        from the restored states (``table``) or the fresh resets. ``obs`` (as this
        wrapper observes) keeps its other rows."""
        ids = np.flatnonzero(np.asarray(mask, bool))
        if not ids.size:
            return obs, {}
        self.inner_obs, info = self.env.restart(mask, self.inner_obs, table, rows)
        if table is None:  # fresh resets: their derived positions are the batch's
            for i in ids:
                self.stacks[i] = np.tile(self._render(int(i)), (self.frames, 1, 1))
        else:
            self._start_restored(ids)
        fresh = self._observe(self.inner_obs)
        if not isinstance(obs, dict):
            out = obs.copy()
            out[ids] = fresh[ids]
            return out, info
        out = {name: part.copy() for name, part in obs.items()}
        for name, part in out.items():
            part[ids] = fresh[name][ids]
        return out, info

    def state_dict(self) -> dict[str, Any]:
        return {"stacks": self.stacks.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stacks[:] = state["stacks"]

    def close(self, **kwargs: Any) -> None:
        self.view.free()
        self.env.unwrapped.on_episode_end = None
        super().close(**kwargs)


def pixel_env(
    env: gym.Env, mode: str, camera: str | None, image_size: int, frame_stack: int
) -> gym.Env:
    """``env`` observed as ``mode`` (``state``: unchanged) and frame-stacked."""
    if mode == STATE:
        return env
    return FrameStack(PixelObservation(env, mode, camera, image_size), frame_stack)
