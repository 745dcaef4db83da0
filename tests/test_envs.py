import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from rlcore.envs.backend import SyncBackend
from rlcore.envs.make import (
    EpisodeStats,
    NormalizeObservation,
    NormalizeReward,
    RunningMeanStd,
    SimulatorState,
    UnknownEnvError,
    final_next_obs,
    find_wrapper,
    get_vec_env_state,
    make_vec_env,
    resolve_env_id,
    set_vec_env_state,
)


class ScriptedEnv(gym.Env):
    """A one-number observation known in advance: ``base + 100 * episode + t`` (t steps into
    the episode), reward 0, truncated after ``limit`` steps; or, with ``values``, the
    next of ``values`` at every reset and step. Actions are ignored."""

    def __init__(self, base: float = 0.0, limit: int = 1000, values=None) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.base, self.limit, self.values = base, limit, values
        self.episode, self.t, self.calls = -1, 0, 0

    def _obs(self) -> np.ndarray:
        if self.values is not None:
            self.calls += 1
            return np.array([self.values[self.calls - 1]], np.float32)
        return np.array([self.base + 100 * self.episode + self.t], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode, self.t = self.episode + 1, 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 0.0, False, self.t >= self.limit, {}


def scripted_vec_env(*envs: ScriptedEnv) -> gym.vector.VectorEnv:
    """The sub-envs side by side as ``make_vec_env`` builds them: the sync back end with
    same-step autoreset (``info["final_obs"]``), episode statistics."""
    return EpisodeStats(
        SyncBackend(
            [lambda env=env: SimulatorState(env) for env in envs],
            autoreset_mode=AutoresetMode.SAME_STEP,
        )
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


def test_a_module_id_whose_module_does_not_import_is_one_error():
    with pytest.raises(UnknownEnvError, match="importing its module 'no_such.tasks' failed"):
        resolve_env_id("no_such.tasks:Arm-v0")


def test_an_env_kwarg_the_task_does_not_take_is_refused_with_its_options():
    """Checked against the task's constructor before any back end builds it: its own
    names (PandaPush), the names its ``**kwargs`` reach in its bases (Hopper's
    ``MujocoEnv``); a constructor that takes any name lets every name through."""
    from rlcore.envs.make import make_vec_env

    cases = [("PandaPush", "sync"), ("PandaPush", "native"), ("Hopper", "sync"),
             ("Hopper", "native"), ("BitFlipping", "sync")]  # fmt: skip
    for name, backend in cases:
        with pytest.raises(ValueError, match=r"env.kwargs: \S+ takes no 'colour'; its options: "):
            make_vec_env(name, 1, backend=backend, env_kwargs={"colour": 1})
    with pytest.raises(ValueError, match="its options: .*reward_type"):
        make_vec_env("PandaPush", 1, env_kwargs={"rewards": "dense"})
    with pytest.raises(ValueError, match="its options: .*forward_reward_weight.*xml_file"):
        make_vec_env("Hopper", 1, backend="sync", env_kwargs={"forward_weight": 2.0})
    hopper = make_vec_env("Hopper", 1, backend="sync", env_kwargs={"forward_reward_weight": 2.0})
    assert hopper.unwrapped.envs[0].unwrapped._forward_reward_weight == 2.0
    hopper.close()
    gym.register(id="rlcore-test/AnyKwargs-v0", entry_point=lambda **kw: gym.make("CartPole-v1"))
    try:
        make_vec_env("rlcore-test/AnyKwargs-v0", 1, env_kwargs={"colour": 1}).close()
    finally:
        gym.registry.pop("rlcore-test/AnyKwargs-v0")


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


@pytest.mark.parametrize("as_tensor", [False, True])
def test_running_mean_std_update_hand_computed(as_tensor):
    """Chan et al.'s parallel update, batch by batch: the mean and the population variance
    of every sample seen, the cross term delta^2 n_a n_b / n included. No prior count here
    (epsilon 0), so the first batch's statistics are its own."""
    # column 0: A = [1, 3] (mean 2, var 1), B = [6, 8, 10] (mean 8, var 8/3); together
    # mean 28/5 = 5.6, M2 = 1 * 2 + 8/3 * 3 + (8 - 2)^2 * 2 * 3 / 5 = 2 + 8 + 43.2 = 53.2,
    # var 53.2 / 5 = 10.64 (= np.var([1, 3, 6, 8, 10]); without the cross term 10 / 5 = 2).
    # column 1: A = [0, 0] (mean 0, var 0), B = [-3, 0, 3] (mean 0, var 6): equal means,
    # no cross term, var (0 * 2 + 6 * 3) / 5 = 3.6
    a = np.array([[1.0, 0.0], [3.0, 0.0]])
    b = np.array([[6.0, -3.0], [8.0, 0.0], [10.0, 3.0]])
    rms = RunningMeanStd((2,), epsilon=0.0)
    convert = (lambda x: torch.as_tensor(x)) if as_tensor else (lambda x: x)
    rms.update(convert(a))
    state = rms.state_dict()
    np.testing.assert_allclose(state["mean"], [2.0, 0.0], rtol=1e-12)
    np.testing.assert_allclose(state["var"], [1.0, 0.0], rtol=1e-12)
    rms.update(convert(b))
    state = rms.state_dict()
    assert state["count"] == 5
    np.testing.assert_allclose(state["mean"], [5.6, 0.0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(state["var"], [10.64, 3.6], rtol=1e-12)


def test_normalize_observation_standardises_with_every_observation_seen():
    """The wrapper's statistics after a reset ([1], [3]) and a step ([6], [8]) of two envs
    are those of all four observations: mean 4.5, var (1 + 9 + 36 + 64) / 4 - 4.5^2 =
    7.25 (the batches' own variances are 1 and 1: without the cross term var 1). The step's
    observations come back as (6 - 4.5) / sqrt(7.25) = 0.5571 and (8 - 4.5) / sqrt(7.25) =
    1.2999. The prior count of 1e-4 (mean 0, var 1) moves these by < 1e-4 relative."""
    env = NormalizeObservation(
        scripted_vec_env(ScriptedEnv(values=[1.0, 6.0]), ScriptedEnv(values=[3.0, 8.0]))
    )
    first, _ = env.reset(seed=0)
    obs, *_ = env.step(np.zeros((2, 1), np.float32))
    np.testing.assert_allclose(env.rms.mean, [4.5], rtol=1e-4)
    np.testing.assert_allclose(env.rms.var, [7.25], rtol=1e-4)
    np.testing.assert_allclose(obs[:, 0], [1.5 / 7.25**0.5, 3.5 / 7.25**0.5], rtol=1e-4)
    # the reset's observations were standardised by their own statistics: mean 2, var 1
    np.testing.assert_allclose(first[:, 0], [-1.0, 1.0], rtol=1e-3)


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
