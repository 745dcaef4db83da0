"""The robot tasks' native back end (rlcore.envs.robots.native) equals gymnasium's sync
vector env bit for bit, and saves, restores and resets like the other back ends."""

from __future__ import annotations

import numpy as np
import pytest

from rlcore.envs.backend import backend_of
from rlcore.envs.make import (
    _auto_backend,
    get_vec_env_state,
    make_vec_env,
    portable_state,
    set_vec_env_state,
)
from rlcore.envs.robots.native import RobotVectorEnv
from rlcore.envs.robots.tasks import TASKS


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return all(np.array_equal(a[k], b[k]) for k in a)
    return np.array_equal(a, b)


def _roll(env, actions):
    out = []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs, reward, terminated, truncated, info["episode_success"]))
    return out


@pytest.mark.parametrize("name", sorted(TASKS))
def test_native_equals_sync_through_resets(name: str) -> None:
    """Observations, rewards, flags and episode successes over 55 steps: every env crosses
    a time-limit reset (Stack, Lift and PegInsertion: a shorter limit makes them)."""
    kwargs = {"reward_type": "dense"} if name == "PandaLift" else {}
    runs = []
    for backend in ("sync", "native"):
        env = make_vec_env(f"{name}-v1", 3, seed=0, backend=backend, max_episode_steps=40,
                           env_kwargs=kwargs)  # fmt: skip
        env.reset(seed=11)
        rng = np.random.default_rng(1)
        actions = rng.uniform(-1, 1, (55, 3, *env.single_action_space.shape)).astype(np.float32)
        runs.append(_roll(env, actions))
    for (o1, r1, t1, u1, s1), (o2, r2, t2, u2, s2) in zip(*runs, strict=True):
        assert _same(o1, o2)
        np.testing.assert_array_equal(r1, r2)
        np.testing.assert_array_equal(t1, t2)
        np.testing.assert_array_equal(u1, u2)
        np.testing.assert_array_equal(s1, s2)
    assert any(u.any() for _, _, _, u, _ in runs[0])


def test_auto_picks_native_for_robot_tasks() -> None:
    assert _auto_backend("PandaPush-v1") == "native"
    assert isinstance(backend_of(make_vec_env("PandaReach", 2, backend="auto")), RobotVectorEnv)


def test_states_restore_exactly_and_portable_states_cross_back_ends() -> None:
    env = make_vec_env("PandaStack-v1", 2, seed=0, backend="native")
    env.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (20, 2, 4)).astype(np.float32)
    _roll(env, actions[:5])
    state = get_vec_env_state(env)
    first = _roll(env, actions[5:])
    env.reset(seed=9)
    set_vec_env_state(env, state)
    for a, b in zip(first, _roll(env, actions[5:]), strict=True):
        assert _same(a[0], b[0]) and np.array_equal(a[1], b[1])
    # an S3RL snapshot taken on gymnasium's env continues identically on the native one
    sync = make_vec_env("PandaStack-v1", 1, seed=0, backend="sync")
    sync.reset(seed=4)
    _roll(sync, actions[:5, :1])
    snapshot = portable_state(backend_of(sync).envs[0].unwrapped, 5)
    native = backend_of(make_vec_env("PandaStack-v1", 1, seed=0, backend="native"))
    native.reset(seed=0)
    native.set_states([snapshot])
    for action in actions[5:, :1]:
        o1, r1, *_ = sync.step(action)
        o2, r2, *_ = native.step(action)
        assert _same(o1, o2) and np.array_equal(r1, r2)


def test_partial_reset_and_errors() -> None:
    env = RobotVectorEnv("PandaPush", 3)
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        obs, *_ = env.step(np.ones((3, 3), np.float32))
    fresh, _ = env.reset(options={"reset_mask": np.array([False, True, False])})
    assert np.array_equal(fresh["observation"][0], obs["observation"][0])  # untouched
    assert not np.array_equal(fresh["observation"][1], obs["observation"][1])
    with pytest.raises(ValueError, match=r"actions must have shape \(3, 3\)"):
        env.step(np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="captured on another task"):
        env.set_states([{"native_state": np.zeros(5), "elapsed_steps": 0}], [0])
    with pytest.raises(ValueError, match="does not flatten"):
        make_vec_env("PandaPush", 1, backend="native", flatten_obs=True)
    flat = make_vec_env("PandaPush", 1, flatten_obs=True)  # auto: the sync back end flattens
    assert flat.single_observation_space.shape == (25,)
    assert type(flat.unwrapped).__name__ == "SyncBackend"
