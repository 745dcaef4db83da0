"""The frame-storing replay buffer (``ReplayBuffer(frames=True)``, rlcore/frames.py): each
frame once, stacks rebuilt on sampling. Checked against a plain ReplayBuffer fed the same
transitions: with the same seed both draw the same rows, so every batch must be equal."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlcore.buffers import ReplayBuffer
from rlcore.frames import bytes_per_transition, ring_frames
from rlcore.observations import IMAGE, ObsPart, ObsSpec


def frame(env: int, k: int, channels: int) -> np.ndarray:
    """A distinct (C, 2, 3) uint8 frame for (env, k)."""
    values = np.array([k & 255, (k >> 8) & 255, env, 7, 11, 13], np.uint8).reshape(2, 3)
    return np.stack([values + c for c in range(channels)])


class StackedEnvs:
    """``num_envs`` envs whose observations are S stacked frames (a shift per step), with
    random episode lengths, each reset stack padded with the reset frame (``repeat``) or
    zeros; ends are terminations or truncations at random. The vector env hands the
    final observation of an ended episode as ``next_obs`` and the reset one as the next
    ``obs``, as rlcore's loops do."""

    def __init__(self, num_envs: int, stack: int, channels: int, seed: int, pad: str,
                 lengths: tuple[int, int] = (1, 9)) -> None:  # fmt: skip
        self.n, self.stack, self.channels, self.pad = num_envs, stack, channels, pad
        self.rng = np.random.default_rng(seed)
        self.lengths = lengths
        self.count = [0] * num_envs
        self.stacks = [self._reset(i) for i in range(num_envs)]

    def _new_frame(self, env: int) -> np.ndarray:
        self.count[env] += 1
        return frame(env, self.count[env], self.channels)

    def _reset(self, env: int) -> list[np.ndarray]:
        self.left = getattr(self, "left", [0] * self.n)
        self.left[env] = int(self.rng.integers(*self.lengths))
        first = self._new_frame(env)
        padding = first if self.pad == "repeat" else np.zeros_like(first)
        return [padding] * (self.stack - 1) + [first]

    def observe(self, env: int) -> np.ndarray:
        return np.concatenate(self.stacks[env])  # (S * C, H, W)

    def step(self) -> tuple[np.ndarray, ...]:
        obs = np.stack([self.observe(i) for i in range(self.n)])
        next_obs, terminated, truncated = [], [], []
        for i in range(self.n):
            self.stacks[i] = self.stacks[i][1:] + [self._new_frame(i)]
            next_obs.append(self.observe(i))
            self.left[i] -= 1
            end = self.left[i] == 0
            cut = end and self.rng.random() < 0.5
            terminated.append(float(end and not cut))
            truncated.append(float(cut))
            if end:
                self.stacks[i] = self._reset(i)
        return obs, np.stack(next_obs), np.array(terminated), np.array(truncated)


def image_spec(stack: int, channels: int, keyed: bool) -> ObsSpec:
    image = ObsPart(
        "pixels" if keyed else "obs", (stack * channels, 2, 3), IMAGE, frame_stack=stack
    )
    if not keyed:
        return ObsSpec((image,))
    return ObsSpec((ObsPart("state", (2,)), image), keyed=True)


def fill(buffers: list[ReplayBuffer], envs: StackedEnvs, steps: int, keyed: bool, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        obs, next_obs, terminated, truncated = envs.step()
        action = rng.normal(size=(envs.n, 2)).astype(np.float32)
        reward = rng.normal(size=envs.n).astype(np.float32)
        if keyed:
            state = rng.normal(size=(envs.n, 2)).astype(np.float32)
            obs = {"state": state, "pixels": obs}
            next_obs = {"state": state + 1, "pixels": next_obs}
        for buffer in buffers:
            buffer.add(obs, action, reward, next_obs, terminated, truncated)


def assert_same_batch(a, b) -> None:
    for name in ("obs", "next_obs"):
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, dict):
            assert list(x) == list(y)
            for part in x:
                assert x[part].dtype == y[part].dtype
                torch.testing.assert_close(x[part], y[part], rtol=0, atol=0)
        else:
            assert x.dtype == y.dtype == torch.uint8
            torch.testing.assert_close(x, y, rtol=0, atol=0)
    for name in ("action", "reward", "terminated", "truncated"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=0, atol=0)
    assert set(a.extras) == set(b.extras)


@pytest.mark.parametrize(
    ("stack", "channels", "num_envs", "keyed", "pad", "capacity"),
    [(4, 1, 3, False, "zeros", 60), (3, 3, 2, True, "repeat", 64), (1, 3, 2, False, "zeros", 30)],
)
def test_frame_buffer_batches_equal_a_plain_buffer(stack, channels, num_envs, keyed, pad, capacity):
    """Same transitions, same seed: identical batches (obs, next_obs, every field), through
    episode ends, truncations, the ring wrapping and both paddings of a reset stack."""
    spec = image_spec(stack, channels, keyed)
    plain = ReplayBuffer(capacity, spec, (2,), num_envs, seed=5)
    frames = ReplayBuffer(capacity, spec, (2,), num_envs, seed=5, frames=True, frame_margin=1.0)
    envs = StackedEnvs(num_envs, stack, channels, seed=1, pad=pad, lengths=(4, 12))
    for _ in range(6):
        fill([plain, frames], envs, 13, keyed, seed=2)
        assert_same_batch(frames.sample(48), plain.sample(48))
    assert plain.size == frames.size == capacity  # wrapped
    assert "obs" not in frames.data and "obs.pixels" not in frames.data
    assert not any(name.startswith("frames") for name in frames.sample(4).extras)


def test_the_ring_holds_each_frame_once() -> None:
    """Atari's layout: 4 grey 84 x 84 frames; 1,000 rows over 4 envs: 250 rows per env, a
    margin of 32 (1/8) and 3 older frames: 285 frames per env, 7,056 bytes each."""
    atari = ObsPart("obs", (4, 84, 84), IMAGE, frame_stack=4)
    assert ring_frames(atari, 250) == 250 + 32 + 3
    buffer = ReplayBuffer(1000, ObsSpec((atari,)), (), 4, action_dtype=torch.int64, frames=True)
    ring = buffer.frame_stores["obs"].frames
    assert tuple(ring.shape) == (4, 285, 1, 84, 84) and ring.dtype == torch.uint8
    assert ring.numel() == 4 * 285 * 7056  # vs 2 x 4 x 7,056 per row stored as stacks
    assert bytes_per_transition(atari) == 7056 * 1.125 + 16
    camera = ObsPart("pixels", (9, 84, 84), IMAGE, frame_stack=3)
    assert bytes_per_transition(camera) == 3 * 7056 * 1.125 + 16


def test_a_stack_that_is_not_the_last_next_obs_is_refused() -> None:
    spec = image_spec(3, 1, keyed=False)
    buffer = ReplayBuffer(20, spec, (2,), 2, frames=True)
    envs = StackedEnvs(2, 3, 1, seed=0, pad="zeros", lengths=(50, 60))
    fill([buffer], envs, 3, keyed=False, seed=0)
    obs, next_obs, terminated, truncated = envs.step()
    obs[1, -1] += 1  # env 1 hands in an obs that is not its last next_obs
    with pytest.raises(ValueError, match="env 1: obs is not the next_obs of its previous"):
        buffer.add(obs, np.zeros((2, 2)), np.zeros(2), next_obs, terminated, truncated)
    with pytest.raises(ValueError, match="stores image parts; this observation has none"):
        ReplayBuffer(20, (3,), (2,), 2, frames=True)


def test_rows_whose_oldest_frame_is_overwritten_are_never_sampled() -> None:
    """Episodes of 1-2 steps with a stack of 4 and no margin to speak of: each episode
    writes 3 extra reset frames, so the ring wraps well before the rows do. sample()
    draws again for those rows and still matches the plain buffer's contents row by row;
    batch() refuses them."""
    spec = image_spec(4, 1, keyed=False)
    plain = ReplayBuffer(40, spec, (2,), 2, seed=3, track_episodes=True)
    frames = ReplayBuffer(40, spec, (2,), 2, seed=3, frames=True, frame_margin=0.0,
                          track_episodes=True)  # fmt: skip
    envs = StackedEnvs(2, 4, 1, seed=4, pad="zeros", lengths=(1, 3))
    fill([plain, frames], envs, 60, keyed=False, seed=5)
    rows = torch.arange(frames.size)
    valid = frames.frames_valid(rows)
    assert 0 < int(valid.sum()) < frames.size  # some rows lost their frames, not all
    batch = frames.sample(200)
    # find each sampled row by its unique action and compare it with the plain buffer's
    match = (batch.action[:, None, :] == plain.data["action"][None]).all(-1)
    row = match.float().argmax(1)
    assert bool(match.any(1).all()) and bool(valid[row].all())
    torch.testing.assert_close(batch.obs, plain.data["obs"][row], rtol=0, atol=0)
    torch.testing.assert_close(batch.next_obs, plain.data["next_obs"][row], rtol=0, atol=0)
    with pytest.raises(ValueError, match="lost their oldest frames"):
        frames.batch(rows[~valid][:1])


def test_resume_continues_exactly_and_into_a_larger_buffer() -> None:
    """A buffer restored from state_dict adds and samples as the uninterrupted one does; a
    larger buffer (a resumed run whose total_steps grew) keeps every row and its frames."""
    spec = image_spec(3, 3, keyed=True)
    whole = ReplayBuffer(48, spec, (2,), 2, seed=8, frames=True)
    envs = StackedEnvs(2, 3, 3, seed=6, pad="repeat", lengths=(3, 9))
    fill([whole], envs, 40, keyed=True, seed=1)
    state = whole.state_dict()
    restored = ReplayBuffer(48, spec, (2,), 2, seed=0, frames=True)
    restored.load_state_dict(state)
    larger = ReplayBuffer(200, spec, (2,), 2, seed=0, frames=True)
    larger.load_state_dict(state)
    reference = ReplayBuffer(200, spec, (2,), 2, seed=0)  # the rows as they were written
    envs_copy = StackedEnvs(2, 3, 3, seed=6, pad="repeat", lengths=(3, 9))
    fill([reference], envs_copy, 40, keyed=True, seed=1)
    order = torch.arange(larger.size)
    # whole wrapped at row 32: its rows in time order, and which still have their frames
    valid = whole.frames_valid(torch.cat([torch.arange(32, 48), torch.arange(32)]))
    assert not bool(valid.all())  # short episodes: some rows lost frames to the ring
    torch.testing.assert_close(larger.frames_valid(order), valid)
    assert_same_batch(larger.batch(order[valid]), reference.batch(order[valid] + 32))
    state_envs = envs  # both continue from the same env state
    rng_state = np.random.default_rng(9)
    for _ in range(10):
        obs, next_obs, terminated, truncated = state_envs.step()
        action = rng_state.normal(size=(2, 2)).astype(np.float32)
        parts = {"state": np.zeros((2, 2), np.float32), "pixels": obs}
        next_parts = {"state": np.ones((2, 2), np.float32), "pixels": next_obs}
        for buffer in (whole, restored):
            buffer.add(parts, action, np.zeros(2), next_parts, terminated, truncated)
        assert_same_batch(restored.sample(16), whole.sample(16))
    smaller = ReplayBuffer(8, spec, (2,), 2, frames=True)
    with pytest.raises(ValueError, match="capacity 8"):
        smaller.load_state_dict(state)
