import numpy as np
import pytest

from rlcore.envs.make import (
    NormalizeObservation,
    NormalizeReward,
    UnknownEnvError,
    final_next_obs,
    find_wrapper,
    get_vec_env_state,
    make_vec_env,
    resolve_env_id,
    set_vec_env_state,
)


@pytest.mark.parametrize(
    "name,expected",
    [
        ("Hopper", "Hopper-v5"),
        ("hopper", "Hopper-v5"),
        ("HALFCHEETAH", "HalfCheetah-v5"),
        ("inverted_double_pendulum", "InvertedDoublePendulum-v5"),
        ("Walker2d-v5", "Walker2d-v5"),
        ("Hopper-v4", "Hopper-v4"),
        ("pendulum-v1", "Pendulum-v1"),
    ],
)
def test_resolve_env_id(name, expected):
    assert resolve_env_id(name) == expected


def test_unknown_env_lists_choices():
    with pytest.raises(UnknownEnvError, match="Hopper-v5.*Walker2d-v5"):
        resolve_env_id("Hoppr")


def test_same_step_autoreset_gives_final_obs_and_episode_stats():
    env = make_vec_env("InvertedPendulum", num_envs=2, seed=0)
    obs, _ = env.reset(seed=0)
    total = np.zeros(2)
    for _ in range(200):
        next_obs, reward, terminated, truncated, info = env.step(np.full((2, 1), 3.0))
        total += reward
        done = terminated | truncated
        if done.any():
            real_next = final_next_obs(next_obs, info)
            i = int(np.flatnonzero(done)[0])
            # the stored next obs is the terminal one (pole fallen), not the reset one
            assert not np.allclose(real_next[i], next_obs[i])
            assert abs(real_next[i][1]) > 0.2  # pole angle beyond the termination bound
            assert np.abs(next_obs[i]).max() < 0.02  # fresh reset state
            assert info["episode_return"][i] == total[i]
            assert np.isnan(info["episode_return"][~done]).all()
            break
    else:
        pytest.fail("no episode ended")
    env.close()


def test_a_partial_reset_restarts_only_its_envs_episode_statistics():
    env = make_vec_env("Hopper", num_envs=2, seed=0, max_episode_steps=5)
    env.reset(seed=0)
    action = np.zeros((2, 3), np.float32)
    rewards = [env.step(action)[1] for _ in range(2)]
    env.reset(options={"reset_mask": np.array([True, False])})  # env 0 starts over
    for _ in range(3):  # env 1's steps 3 to 5 (its time limit), env 0's 1 to 3
        _, reward, _, truncated, info = env.step(action)
        rewards.append(reward)
    assert truncated.tolist() == [False, True]
    assert info["episode_length"][1] == 5 and np.isnan(info["episode_length"][0])
    assert info["episode_return"][1] == pytest.approx(sum(r[1] for r in rewards))
    env.close()


def test_normalizers_state_round_trip():
    env = make_vec_env("Hopper", num_envs=2, seed=0, normalize_obs=True, normalize_reward=True)
    env.reset(seed=0)
    for _ in range(20):
        env.step(env.action_space.sample())
    norm = find_wrapper(env, NormalizeObservation)
    assert norm.rms.count > 20 and not np.allclose(norm.rms.mean, 0)
    state = get_vec_env_state(env)
    other = make_vec_env("Hopper", num_envs=2, seed=0, normalize_obs=True, normalize_reward=True)
    other.reset(seed=1)
    set_vec_env_state(other, state)
    assert np.allclose(find_wrapper(other, NormalizeObservation).rms.mean, norm.rms.mean)
    assert (
        find_wrapper(other, NormalizeReward).rms.var == find_wrapper(env, NormalizeReward).rms.var
    )


@pytest.mark.parametrize(
    "name,backend", [("Hopper", "sync"), ("Ant", "sync"), ("Humanoid", "sync"), ("Hopper", "async")]
)
def test_state_restore_continues_exactly(name, backend):
    """Restoring a captured state reproduces the original continuation bit for bit,
    across resets (the reset noise RNG and the time-limit counter are restored too)."""
    env = make_vec_env(name, num_envs=2, seed=0, backend=backend, max_episode_steps=30)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(17):
        obs, *_ = env.step(rng.uniform(-0.4, 0.4, env.action_space.shape))
    state = get_vec_env_state(env)
    actions = [rng.uniform(-0.4, 0.4, env.action_space.shape) for _ in range(40)]
    original = [env.step(a) for a in actions]

    copy = make_vec_env(name, num_envs=2, seed=0, backend=backend, max_episode_steps=30)
    copy.reset(seed=123)
    set_vec_env_state(copy, state)
    replay = [copy.step(a) for a in actions]
    for (o1, r1, te1, tr1, _), (o2, r2, te2, tr2, _) in zip(original, replay):
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(r1, r2)
        np.testing.assert_array_equal(te1, te2)
        np.testing.assert_array_equal(tr1, tr2)
    assert any(tr.any() or te.any() for _, _, te, tr, _ in original)  # crossed a reset
    env.close()
    copy.close()


def test_bad_backend_and_num_envs():
    with pytest.raises(ValueError, match="backend"):
        make_vec_env("Hopper", backend="gpu-magic")
    with pytest.raises(ValueError, match="num_envs"):
        make_vec_env("Hopper", num_envs=0)
