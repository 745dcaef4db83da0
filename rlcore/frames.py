"""Each frame stored once: the replay store of a stacked image part (``ReplayBuffer(...,
frames=True)``).

A stacked image observation ``(S * C, H, W)`` (S frames of C channels, oldest first, as
Atari's 4 grey frames or a robot camera's 3 RGB frames) shares S - 1 frames with the next
observation of its episode, and ``next_obs`` repeats them once more: a buffer that stores
``obs`` and ``next_obs`` as they are keeps every frame 2 S times. ``FrameStore`` keeps it
once, in a ring of frames per env written in time order:

* the first transition of an episode writes all S frames of its ``obs`` (the stack the env
  made at reset, whatever its padding: repeated reset frames, zeros), then every
  transition writes the newest frame of its ``next_obs`` (the episode's final observation
  at its end, as the loop hands it in);
* a transition keeps one counter, the ring position of its ``obs``'s newest frame; its
  ``obs`` is the S frames ending there, its ``next_obs`` the S frames ending one later;
* a transition that does not start an episode must hand in as ``obs`` the ``next_obs`` of
  its env's previous transition (what every loop does), and every ``next_obs`` must be
  its ``obs`` shifted by one frame: both checked on every ``add`` (a ``ValueError`` names
  the env), so a stack that is not a shift of the last one (an env that stacks
  otherwise, a wrong final observation) cannot be stored wrongly;
* the ring holds ``rows_per_env + margin`` frames per env. A transition whose oldest frame
  has been overwritten (the ring filled faster than the rows because many short episodes
  each wrote S - 1 extra reset frames) is no longer valid: ``ReplayBuffer.sample`` draws
  again in its place. ``margin`` (default 1/8 of the rows, at least S) makes that rare
  unless episodes are shorter than 8 (S - 1) steps.

Bytes per transition: ``C * H * W * (1 + margin)`` plus 16 for the counter and env (vs
``2 * S * C * H * W`` stored as stacks): Atari (S 4, C 1, 84 x 84) 7,954 vs 56,448; an
84 x 84 RGB camera with S 3: 23,830 vs 127,008 (``bytes_per_transition``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from rlcore.observations import ObsPart

DEFAULT_MARGIN = 0.125  # spare ring frames per env, as a share of its rows


def ring_frames(part: ObsPart, rows_per_env: int, margin: float = DEFAULT_MARGIN) -> int:
    """Frames the ring keeps per env: every row's newest frame, the margin (at least the
    S frames of one episode start) and the S - 1 older frames of the oldest row."""
    spare = max(part.frame_stack, math.ceil(margin * rows_per_env))
    return rows_per_env + spare + part.frame_stack - 1


def bytes_per_transition(part: ObsPart, margin: float = DEFAULT_MARGIN) -> float:
    """Bytes a transition costs in a large frame store: its share of the ring plus its
    counter and env (int64 each)."""
    frame = part.channels * part.shape[1] * part.shape[2]
    return frame * (1.0 + margin) + 16.0


class FrameStore:
    """The frames of one stacked image part for ``num_envs`` envs (see the module
    docstring). ``write`` stores a vector step and returns each env's counter; ``stacks``
    rebuilds ``obs`` and ``next_obs`` of rows from their env and counter; ``valid`` says
    which rows still have all their frames."""

    def __init__(
        self,
        part: ObsPart,
        num_envs: int,
        rows_per_env: int,
        device: torch.device | str = "cpu",
        margin: float = DEFAULT_MARGIN,
    ) -> None:
        if margin < 0:
            raise ValueError(f"the frame margin must be >= 0, got {margin}")
        self.part, self.num_envs = part, int(num_envs)
        self.stack, self.channels = part.frame_stack, part.channels
        self.margin = float(margin)
        self.size = ring_frames(part, rows_per_env, margin)
        self.device = torch.device(device)
        shape = (self.num_envs, self.size, self.channels, *part.shape[1:])
        self.frames = torch.zeros(shape, dtype=torch.uint8, device=self.device)
        self.written = np.zeros(self.num_envs, np.int64)  # frames written per env, ever
        self.oldest = np.zeros(self.num_envs, np.int64)  # first counter kept (a resize drops)
        self.starting = np.ones(self.num_envs, bool)  # the next transition starts an episode

    def _frames_of(self, stacked: torch.Tensor) -> torch.Tensor:
        """(n, S * C, H, W) -> (n, S, C, H, W)."""
        return stacked.reshape(stacked.shape[0], self.stack, self.channels, *stacked.shape[2:])

    def _gather(self, envs: torch.Tensor, newest: torch.Tensor, count: int) -> torch.Tensor:
        """(n, count, C, H, W): the ``count`` frames of each env ending at counter
        ``newest``, oldest first."""
        back = torch.arange(count - 1, -1, -1, device=self.device)
        slots = (newest.reshape(-1, 1) - back) % self.size
        return self.frames[envs.reshape(-1, 1), slots]

    def write(self, obs: torch.Tensor, next_obs: torch.Tensor) -> np.ndarray:
        """Store one vector step (``obs`` / ``next_obs`` uint8 ``(num_envs, S * C, H, W)``);
        returns the counter of each env's ``obs`` newest frame."""
        obs = obs.to(self.device, torch.uint8)
        next_obs = next_obs.to(self.device, torch.uint8)
        expected = (self.num_envs, *self.part.shape)
        if tuple(obs.shape) != expected or tuple(next_obs.shape) != expected:
            raise ValueError(
                f"image part {self.part.name!r}: obs and next_obs must be {expected}, got "
                f"{tuple(obs.shape)} and {tuple(next_obs.shape)}"
            )
        continuing = np.flatnonzero(~self.starting)
        if len(continuing):
            envs = torch.as_tensor(continuing, device=self.device)
            newest = torch.as_tensor(self.written[continuing] - 1, device=self.device)
            stored = self._gather(envs, newest, self.stack)
            handed = self._frames_of(obs[envs])
            same = (stored == handed).flatten(1).all(dim=1).cpu().numpy()
            if not same.all():
                env = int(continuing[np.flatnonzero(~same)[0]])
                raise ValueError(
                    f"image part {self.part.name!r}, env {env}: obs is not the next_obs of its "
                    "previous transition (the episode did not end there): a frame store needs "
                    "each env's transitions in order, with stacks that shift by one frame"
                )
        frames, next_frames = self._frames_of(obs), self._frames_of(next_obs)
        shifted = (next_frames[:, :-1] == frames[:, 1:]).flatten(1).all(dim=1).cpu().numpy()
        if not shifted.all():
            env = int(np.flatnonzero(~shifted)[0])
            raise ValueError(
                f"image part {self.part.name!r}, env {env}: next_obs is not obs shifted by one "
                "frame (its older frames differ from obs's newer ones): a frame store needs "
                "stacks that shift by one frame a step, and the true final observation where "
                "an episode ended"
            )
        for env in np.flatnonzero(self.starting):  # an episode's first stack, whole
            slots = (self.written[env] + np.arange(self.stack)) % self.size
            self.frames[env, torch.as_tensor(slots, device=self.device)] = frames[env]
            self.written[env] += self.stack
        counters = self.written - 1
        all_envs = torch.arange(self.num_envs, device=self.device)
        slots = torch.as_tensor(self.written % self.size, device=self.device)
        self.frames[all_envs, slots] = next_frames[:, -1]
        self.written += 1
        self.starting[:] = False
        return counters

    def end_episodes(self, done: np.ndarray) -> None:
        """The envs whose episode ended in the step just written: their next transition
        writes its whole ``obs``."""
        self.starting |= np.asarray(done, bool)

    def valid(self, envs: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
        """True where the row's oldest ``obs`` frame is still in its env's ring."""
        first = torch.as_tensor(np.maximum(self.written - self.size, self.oldest))
        return counters - (self.stack - 1) >= first.to(counters.device)[envs]

    def stacks(self, envs: torch.Tensor, counters: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(``obs``, ``next_obs``) of rows, each uint8 ``(B, S * C, H, W)``."""
        newest = counters.to(self.device) + 1  # next_obs's newest frame
        frames = self._gather(envs.to(self.device), newest, self.stack + 1)
        shape = (frames.shape[0], *self.part.shape)
        return frames[:, :-1].reshape(shape), frames[:, 1:].reshape(shape)

    def state_dict(self) -> dict:
        """The ring and counters: enough to continue exactly."""
        return {
            "frames": self.frames,
            "written": self.written.copy(),
            "starting": self.starting.copy(),
            "oldest": self.oldest.copy(),
            "size": self.size,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a saved store; into a larger ring (a resumed run whose buffer grew) each
        saved frame moves to its counter's slot in the new ring."""
        written = np.asarray(state["written"], np.int64)
        saved_size = int(state["size"])
        # frames older than the saved ring held are gone, whatever the new ring's size
        self.oldest = np.maximum(np.asarray(state["oldest"], np.int64), written - saved_size)
        if saved_size == self.size:
            self.frames.copy_(state["frames"].to(self.device))
        else:
            if saved_size > self.size:
                raise ValueError(
                    f"the saved frame store keeps {saved_size} frames per env, this one "
                    f"{self.size}: resume with a buffer at least as large"
                )
            for env in range(self.num_envs):
                counters = np.arange(max(0, written[env] - saved_size), written[env])
                old = torch.as_tensor(counters % saved_size)
                new = torch.as_tensor(counters % self.size, device=self.device)
                self.frames[env, new] = state["frames"][env, old].to(self.device)
        self.written = written.copy()
        self.starting = np.asarray(state["starting"], bool).copy()
