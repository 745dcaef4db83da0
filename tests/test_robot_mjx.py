"""The robot tasks on the MJX back end (``envs/robots/mjx.py``), on JAX's CPU device, next
to the native back end: the same starts from a seed, the first step within float32's
drift, time-limit autoreset to the native back end's next episode, states that move
between the two back ends, and refusals. One env of each kind (PandaPush, 2 envs) is
compiled once for the module; JAX's compiled functions are cached on disk."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="needs the mjx extra (jax, mujoco-mjx)"
)

N, LIMIT = 2, 3  # envs; a short time limit, so the autoreset comes soon


@pytest.fixture(scope="module")
def pair():
    from rlcore.envs.robots.mjx import RobotMjxVectorEnv
    from rlcore.envs.robots.native import RobotVectorEnv

    mjx_env = RobotMjxVectorEnv("PandaPush", N, max_episode_steps=LIMIT)
    native = RobotVectorEnv("PandaPush", N, max_episode_steps=LIMIT, num_threads=1)
    yield mjx_env, native
    mjx_env.close()
    native.close()


def _close(a: dict, b: dict, atol: float) -> None:
    for key in ("observation", "achieved_goal", "desired_goal"):
        np.testing.assert_allclose(a[key], b[key], atol=atol, err_msg=key)


def test_same_seed_same_starts_and_the_first_step_agrees(pair):
    mjx_env, native = pair
    obs_mjx, _ = mjx_env.reset(seed=5)
    obs_native, _ = native.reset(seed=5)
    _close(obs_mjx, obs_native, atol=1e-6)  # the same host reset, read in float32
    assert obs_mjx["observation"].dtype == np.float32
    actions = np.array([[0.6, -0.4, 0.3], [-1.0, 1.0, -0.2]], np.float32)
    out_mjx, out_native = mjx_env.step(actions), native.step(actions)
    # positions (the first 3 numbers, the goals) within 1 mm; velocities drift more in
    # float32 (measured: 0.014 m/s at most)
    np.testing.assert_allclose(out_mjx[0]["observation"][:, :3],
                               out_native[0]["observation"][:, :3], atol=1e-3)  # fmt: skip
    _close({**out_mjx[0], "observation": out_native[0]["observation"]}, out_native[0], 1e-3)
    np.testing.assert_allclose(out_mjx[0]["observation"], out_native[0]["observation"], atol=0.05)
    np.testing.assert_array_equal(out_mjx[1], out_native[1])  # sparse rewards
    assert out_mjx[1].dtype == np.float64
    np.testing.assert_array_equal(out_mjx[4]["is_success"], out_native[4]["is_success"])


def test_time_limit_autoreset_starts_the_native_back_ends_next_episode(pair):
    mjx_env, native = pair
    mjx_env.reset(seed=11)
    native.reset(seed=11)
    actions = np.zeros((N, 3), np.float32)
    for step in range(LIMIT):
        obs_mjx, _, terminated, truncated, info = mjx_env.step(actions)
        obs_native, *_ = native.step(actions)
        assert not terminated.any()
        assert truncated.all() == (step == LIMIT - 1)
    assert info["_final_obs"].all() and set(info["final_obs"][0]) == set(obs_mjx)
    _close(obs_mjx, obs_native, atol=1e-6)  # each env's generator drew the same start
    assert mjx_env.elapsed.tolist() == [0] * N


def test_states_move_between_the_mjx_and_native_back_ends(pair):
    mjx_env, native = pair
    mjx_env.reset(seed=2)
    mjx_env.step(np.full((N, 3), 0.5, np.float32))
    states = mjx_env.get_states()
    native.reset(seed=9)
    native.set_states(states)
    obs_native = native.get_states()
    for i in range(N):  # the MJX state (float32) restored and forwarded in float64
        _close(states[i]["obs"], obs_native[i]["obs"], atol=1e-5)
    assert [s["elapsed_steps"] for s in obs_native] == [1] * N
    # and back: a native state into env 1 only
    mjx_env.set_states([native.get_states()[0]], env_ids=[1])
    after = mjx_env.get_states()
    _close(after[1]["obs"], obs_native[0]["obs"], atol=1e-5)
    np.testing.assert_array_equal(after[0]["native_state"], states[0]["native_state"])
    mjx_env.reset(seed=4)  # right after a reset, every env from its own saved state
    mjx_env.set_states(states)
    for i, state in enumerate(mjx_env.get_states()):
        _close(state["obs"], states[i]["obs"], atol=1e-6)
        assert state["elapsed_steps"] == 1
    with pytest.raises(ValueError, match="another task or control"):
        mjx_env.set_states([{"native_state": np.zeros(3), "elapsed_steps": 0}], env_ids=[0])


def test_make_vec_env_builds_it_and_refuses_what_it_lacks():
    from rlcore.envs.make import make_vec_env
    from rlcore.envs.mjx import MjxUnavailableError

    with pytest.raises(MjxUnavailableError, match="cylinder-box collision.*env.backend=native"):
        make_vec_env("PandaSlide", 2, backend="mjx")
    with pytest.raises(ValueError, match="does not flatten a robot task's dict observations"):
        make_vec_env("PandaPush", 2, backend="mjx", flatten_obs=True)
