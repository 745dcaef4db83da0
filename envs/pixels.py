"""Rendered observations for MuJoCo tasks: ``env.obs=pixels`` (a camera image) or
``env.obs=state+pixels`` (``{"state": the task's vector, "pixels": the image}``; a goal
task's dict keeps its parts and gains ``pixels``: the robot case), frame-stacked, on
gymnasium's sync and async back ends.

    make_vec_env("Hopper-v5", 4, obs="pixels", image_size=84, frame_stack=3)

``PixelObservation`` renders each step in its own OpenGL context (freed under that context,
as ``mujoco.Renderer`` frees its own) at ``image_size`` square, from ``camera`` (a camera name of the model; default: ``track`` where the model
has it, as gymnasium's locomotion bodies do, else MuJoCo's free camera), channel-first
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
imported. The native and MJX back ends do not render: refused, naming
``env.backend=sync`` (``auto`` picks sync for rendered observations).
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

OBS_MODES = ("state", "pixels", "state+pixels")
STATE, PIXELS = "state", "pixels"  # the parts of a state+pixels observation


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


class PixelObservation(gym.ObservationWrapper):
    """A MuJoCo env observed through a camera (see the module docstring)."""

    def __init__(
        self, env: gym.Env, mode: str = "pixels", camera: str | None = None, image_size: int = 84
    ) -> None:
        self.context: Any = None  # until made (``__del__`` reads it)
        super().__init__(env)
        import mujoco
        from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

        if mode not in OBS_MODES[1:]:
            raise ValueError(f"obs={mode!r}: one of {OBS_MODES}")
        base = env.unwrapped
        if not isinstance(base, MujocoEnv):  # gymnasium's MuJoCo tasks and rlcore's robots
            raise ValueError(f"obs={mode} renders MuJoCo tasks; {type(base).__name__} is not one")
        model = base.model
        self.mode, self.size = mode, int(image_size)
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
        self.mjr = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self.mjr)
        self.rect = mujoco.MjrRect(0, 0, self.size, self.size)
        self.pixels = np.zeros((self.size, self.size, 3), np.uint8)
        image = gym.spaces.Box(0, 255, (3, self.size, self.size), np.uint8)
        if mode == PIXELS:
            self.observation_space = image
        elif isinstance(env.observation_space, gym.spaces.Dict):  # a goal task: its parts too
            self.observation_space = gym.spaces.Dict(
                {**env.observation_space.spaces, PIXELS: image}
            )
        else:
            state = gym.spaces.Box(-np.inf, np.inf, env.observation_space.shape, np.float32)
            self.observation_space = gym.spaces.Dict({STATE: state, PIXELS: image})

    def render_image(self) -> np.ndarray:
        """The camera's view now, (3, H, W) uint8."""
        import mujoco

        base = self.unwrapped
        self.context.make_current()
        mujoco.mjv_updateScene(base.model, base.data, self.options, None, self.camera,
                               mujoco.mjtCatBit.mjCAT_ALL, self.scene)  # fmt: skip
        mujoco.mjr_render(self.rect, self.scene, self.mjr)
        mujoco.mjr_readPixels(self.pixels, None, self.rect, self.mjr)
        return np.ascontiguousarray(self.pixels[::-1].transpose(2, 0, 1))  # bottom row first

    def observation(self, observation: Any) -> Any:
        image = self.render_image()
        if self.mode == PIXELS:
            return image
        if isinstance(observation, dict):
            return {**observation, PIXELS: image}
        return {STATE: np.asarray(observation, np.float32), PIXELS: image}

    def close(self) -> None:
        self.free_gl()
        super().close()

    def free_gl(self) -> None:
        """Free the framebuffers and the context with this env's own context current:
        MuJoCo frees them in whichever context is current, and freed under another env's,
        they would blank that env's images (two pixel envs in one process, e.g. training
        and evaluation, one closed or dropped first)."""
        if self.context is None:
            return
        context, self.context = self.context, None
        context.make_current()
        self.mjr.free()
        context.free()

    def __del__(self) -> None:  # dropped without close(): free as close() does
        # at exit, MuJoCo's atexit hook may have ended the GL display first: nothing to free
        with contextlib.suppress(Exception):
            self.free_gl()


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

    def _stacked(self, observation: Any) -> Any:
        images = np.concatenate(list(self.images), axis=0)
        if isinstance(observation, dict):
            return {**observation, PIXELS: images}
        return images

    def _image(self, observation: Any) -> np.ndarray:
        return observation[PIXELS] if isinstance(observation, dict) else observation

    def reset(self, **kwargs: Any):
        observation, info = self.env.reset(**kwargs)
        first = self._image(observation)
        self.images.clear()
        self.images.extend([first] * self.frames)
        return self._stacked(observation), info

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.images.append(self._image(observation))
        return self._stacked(observation), reward, terminated, truncated, info


def pixel_env(
    env: gym.Env, mode: str, camera: str | None, image_size: int, frame_stack: int
) -> gym.Env:
    """``env`` observed as ``mode`` (``state``: unchanged) and frame-stacked."""
    if mode == STATE:
        return env
    return FrameStack(PixelObservation(env, mode, camera, image_size), frame_stack)
