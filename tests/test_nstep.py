"""n-step returns (rlcore.buffers.NStepReturns): hand-computed windows through
terminations, truncations, the newest rows and the ring's wrap-around; frame-stored
images; resumed draws; the refusals of combinations that would be wrong."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlcore.buffers import NStepReturns, ReplayBuffer
from rlcore.observations import IMAGE, ObsPart, ObsSpec

GAMMA = 0.5


def two_env_buffer(capacity: int = 64) -> ReplayBuffer:
    """Two envs, five vector steps, obs = 10 * step + env, reward = 2 ** step (+ 100 for
    env 1). Env 0 terminates at step 2 and starts again; env 1 is truncated at step 1."""
    buffer = ReplayBuffer(capacity, (1,), (1,), num_envs=2, seed=0)
    for t in range(5):
        obs = np.array([[10.0 * t], [10.0 * t + 1]], np.float32)
        terminated = np.array([t == 2, False])
        truncated = np.array([False, t == 1])
        buffer.add(obs, np.zeros((2, 1)), np.array([2.0**t, 2.0**t + 100]), obs + 10,
                   terminated, truncated)  # fmt: skip
    return buffer


def window(sampler: NStepReturns, row: int) -> tuple[float, float, float, float, float]:
    b = sampler.batch(torch.tensor([row]))
    return (b.reward.item(), b.discount.item(), b.next_obs.item(), b.terminated.item(),
            b.truncated.item())  # fmt: skip


def test_three_step_windows_by_hand() -> None:
    """Row of env i at step t is 2t + i. Rewards r_t = 2^t (env 1: + 100)."""
    n3 = NStepReturns(two_env_buffer(), 3, GAMMA)
    # env 0, step 0: the whole window, ending on the termination at step 2
    assert window(n3, 0) == (1 + 0.5 * 2 + 0.25 * 4, 0.125, 30.0, 1.0, 0.0)
    # env 0, step 1: cut at the termination after two steps
    assert window(n3, 2) == (2 + 0.5 * 4, 0.25, 30.0, 1.0, 0.0)
    # env 0, step 3: a new episode; step 4 is the newest row: a 2-step return
    assert window(n3, 6) == (8 + 0.5 * 16, 0.25, 50.0, 0.0, 0.0)
    # env 1, step 0: cut at the truncation (its flag kept, the termination's not set)
    assert window(n3, 1) == (101 + 0.5 * 102, 0.25, 21.0, 0.0, 1.0)
    # env 1, step 2: a full window in the second episode
    assert window(n3, 5) == (104 + 0.5 * 108 + 0.25 * 116, 0.125, 51.0, 0.0, 0.0)
    # obs and action stay the first step's
    assert n3.batch(torch.tensor([5])).obs.item() == 21.0


def test_one_step_is_the_buffer_itself_and_draws_are_the_buffers() -> None:
    buffer = two_env_buffer()
    one = NStepReturns(buffer, 1, GAMMA).batch(torch.arange(10))
    plain = buffer.batch(torch.arange(10))
    assert torch.equal(one.reward, plain.reward) and torch.equal(one.next_obs, plain.next_obs)
    assert torch.equal(one.discount, torch.full((10,), GAMMA))
    a, b = two_env_buffer(), two_env_buffer()  # the rows come from the buffer's generator
    drawn = NStepReturns(a, 3, GAMMA).sample(32).reward
    assert torch.equal(drawn, NStepReturns(b, 3, GAMMA).batch(b.sample_rows(32)).reward)


def test_windows_cross_the_rings_end() -> None:
    """Capacity 6 after 5 vector steps of 2 envs: steps 2-4 are stored, step 2's rows at
    4, 5 and step 3's at 0, 1 (written over steps 0); env 1's window from step 2 runs over
    the wrap."""
    n3 = NStepReturns(two_env_buffer(capacity=6), 3, GAMMA)
    assert window(n3, 5) == (104 + 0.5 * 108 + 0.25 * 116, 0.125, 51.0, 0.0, 0.0)
    assert window(n3, 4) == (4.0, 0.5, 30.0, 1.0, 0.0)  # env 0's terminal step alone


def test_resumed_buffer_draws_the_same_windows() -> None:
    buffer = two_env_buffer()
    n3 = NStepReturns(buffer, 3, GAMMA)
    n3.sample(16)
    restored = ReplayBuffer(64, (1,), (1,), num_envs=2, seed=5)
    restored.load_state_dict(buffer.state_dict())
    again = NStepReturns(restored, 3, GAMMA)
    first, second = n3.sample(16), again.sample(16)
    assert torch.equal(first.reward, second.reward) and torch.equal(first.discount, second.discount)


def test_frame_stored_images_give_the_last_steps_stack() -> None:
    """One env, 2-frame stacks of 1x2x2 images whose pixels are the step number: the
    3-step next_obs of step t is the stack of steps t+2, t+3."""
    spec = ObsSpec((ObsPart("obs", (2, 2, 2), IMAGE, frame_stack=2),))
    buffer = ReplayBuffer(32, spec, (1,), num_envs=1, seed=0, frames=True)
    stack = np.zeros((1, 2, 2, 2), np.uint8)  # the reset's image is frame 0, repeated
    for t in range(6):
        following = np.concatenate([stack[:, 1:], np.full((1, 1, 2, 2), t + 1, np.uint8)], 1)
        buffer.add(stack, np.zeros((1, 1)), np.ones(1), following, np.zeros(1), np.zeros(1))
        stack = following
    batch = NStepReturns(buffer, 3, GAMMA).batch(torch.tensor([1]))
    assert batch.obs[0, :, 0, 0].tolist() == [0, 1]
    assert batch.next_obs[0, :, 0, 0].tolist() == [3, 4]
    assert batch.reward.item() == 1.75


def test_refusals() -> None:
    from rlcore.build import n_step_refusal

    with pytest.raises(ValueError, match="n >= 1"):
        NStepReturns(two_env_buffer(), 0, GAMMA)
    assert "her=future" in n_step_refusal("future", "drop", False)
    assert "offline_data=mix" in n_step_refusal("none", "mix", False)
    assert "cost" in n_step_refusal("none", "drop", True)
    assert n_step_refusal("none", "drop", False) is None
