"""The native batched MuJoCo back end reproduces gymnasium's v5 tasks step for step."""

from __future__ import annotations

import numpy as np
import pytest

from rlcore.envs.make import EpisodeStats, get_vec_env_state, make_vec_env, set_vec_env_state
from rlcore.envs.native import SUPPORTED_ENVS, NativeVectorEnv

NUM_ENVS, MAX_STEPS, SEED = 3, 30, 7
Transition = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]


def random_actions(env, steps: int, seed: int, scale: float = 1.0) -> np.ndarray:
    """A fixed float32 action sequence within the action bounds."""
    space = env.single_action_space
    rng = np.random.default_rng(seed)
    u = rng.uniform(-1.0, 1.0, (steps, env.num_envs, space.shape[0])) * scale
    return (space.low + (u + 1.0) * 0.5 * (space.high - space.low)).astype(np.float32)


def run(env, actions: np.ndarray) -> list[Transition]:
    return [env.step(a) for a in actions]


def assert_same(got: list[Transition], want: list[Transition], atol: float = 0.0) -> None:
    """Observations, rewards, flags and final observations agree at every step."""
    for t, ((o1, r1, te1, tr1, i1), (o2, r2, te2, tr2, i2)) in enumerate(zip(got, want)):
        np.testing.assert_allclose(o1, o2, rtol=0, atol=atol, err_msg=f"obs, step {t}")
        np.testing.assert_allclose(r1, r2, rtol=0, atol=atol, err_msg=f"reward, step {t}")
        np.testing.assert_array_equal(te1, te2, err_msg=f"terminated, step {t}")
        np.testing.assert_array_equal(tr1, tr2, err_msg=f"truncated, step {t}")
        assert ("final_obs" in i1) == ("final_obs" in i2), f"step {t}"
        if "final_obs" in i2:
            np.testing.assert_array_equal(i1["_final_obs"], i2["_final_obs"])
            for i in np.flatnonzero(i2["_final_obs"]):
                np.testing.assert_allclose(i1["final_obs"][i], i2["final_obs"][i], atol=atol)


@pytest.mark.parametrize("env_id", SUPPORTED_ENVS)
def test_matches_gymnasium_over_episodes(env_id: str) -> None:
    native = make_vec_env(env_id, NUM_ENVS, backend="native", max_episode_steps=MAX_STEPS)
    sync = make_vec_env(env_id, NUM_ENVS, backend="sync", max_episode_steps=MAX_STEPS)
    assert native.single_observation_space == sync.single_observation_space
    assert native.single_action_space == sync.single_action_space
    obs_n, _ = native.reset(seed=SEED)
    obs_s, _ = sync.reset(seed=SEED)
    np.testing.assert_array_equal(obs_n, obs_s)
    # zero actions in half the steps so that terminating tasks also reach the time limit
    actions = random_actions(native, 240, seed=1)
    actions[120:] *= 0.0
    want = run(sync, actions)
    assert_same(run(native, actions), want)  # bit for bit
    truncated = sum(step[3].sum() for step in want)
    assert truncated >= NUM_ENVS, "the comparison must cross time-limit truncations"
    task = native.unwrapped.spec_task
    if task.terminate_when_unhealthy:
        assert sum(step[2].sum() for step in want) > 0, "and terminations"
    if "cfrc_ext" in task.obs_blocks:  # the observation ends with cfrc_ext[1:]
        forces = (native.unwrapped.model.nbody - 1) * 6
        assert any(step[0][:, -forces:].any() for step in want), "and contact forces"


@pytest.mark.parametrize("env_id", ["Hopper-v5", "HalfCheetah-v5", "Ant-v5", "Humanoid-v5"])
def test_thread_count_does_not_change_results(env_id: str) -> None:
    envs = [NativeVectorEnv(env_id, 5, max_episode_steps=MAX_STEPS, num_threads=k) for k in (1, 2)]
    actions = random_actions(envs[0], 100, seed=2)
    runs = []
    for env in envs:
        env.reset(seed=SEED)
        runs.append(run(env, actions))
    assert_same(runs[0], runs[1], atol=0.0)


@pytest.mark.parametrize("env_id", ["Walker2d", "Ant", "Humanoid"])
def test_state_round_trip_continues_identically(env_id: str) -> None:
    env = make_vec_env(env_id, NUM_ENVS, backend="native", max_episode_steps=MAX_STEPS)
    env.reset(seed=SEED)
    actions = random_actions(env, 120, seed=3, scale=0.5)
    run(env, actions[:37])
    state = get_vec_env_state(env)
    assert len(env.unwrapped.call("rlcore_get_state")) == NUM_ENVS
    first = run(env, actions[37:])

    fresh = make_vec_env(env_id, NUM_ENVS, backend="native", max_episode_steps=MAX_STEPS)
    fresh.reset(seed=SEED + 100)
    set_vec_env_state(fresh, state)
    assert_same(run(fresh, actions[37:]), first, atol=0.0)


def test_episode_stats_on_top_report_returns() -> None:
    env = make_vec_env("Hopper", NUM_ENVS, backend="native", max_episode_steps=MAX_STEPS)
    assert isinstance(env, EpisodeStats)
    env.reset(seed=SEED)
    totals, seen = np.zeros(NUM_ENVS), []
    for action in random_actions(env, 2 * MAX_STEPS, seed=4, scale=0.1):
        _, reward, terminated, truncated, info = env.step(action)
        totals += reward
        for i in np.flatnonzero(terminated | truncated):
            assert info["episode_return"][i] == pytest.approx(totals[i])
            seen.append(info["episode_length"][i])
            totals[i] = 0.0
        assert np.isnan(info["episode_return"][~(terminated | truncated)]).all()
    assert seen and all(0 < length <= MAX_STEPS for length in seen)


def test_unsupported_env_and_kwargs_raise() -> None:
    with pytest.raises(ValueError, match="supported: Hopper-v5") as refused:
        make_vec_env("Reacher", 2, backend="native")
    assert "PandaPickAndPlace-v1" in str(refused.value)  # the robot tasks run there too
    with pytest.raises(ValueError, match="does not accept env kwargs"):
        make_vec_env("Hopper", 2, backend="native", env_kwargs={"xml_file": "x.xml"})
    with pytest.raises(ValueError, match="include_cfrc_ext_in_observation"):  # Ant has no cvel
        make_vec_env("Ant", 2, backend="native", env_kwargs={"include_cvel_in_observation": 0})
    with pytest.raises(ValueError, match="Hopper-v5 takes no 'contact_cost_weight'"):  # not a Hopper-v5 keyword either
        make_vec_env("Hopper", 2, backend="native", env_kwargs={"contact_cost_weight": 1.0})


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("Hopper", {"ctrl_cost_weight": 0.5, "reset_noise_scale": 0.05, "healthy_reward": 2.0}),
        (
            "Ant",
            {
                "include_cfrc_ext_in_observation": False,
                "contact_force_range": (-0.5, 0.5),
                "main_body": "torso",
                "healthy_z_range": (0.3, 1.0),
            },
        ),
        (
            "Humanoid",
            {
                "include_cinert_in_observation": False,
                "include_qfrc_actuator_in_observation": False,
                "contact_cost_weight": 1e-5,
                "contact_cost_range": (-np.inf, 1.0),
                "exclude_current_positions_from_observation": False,
            },
        ),
    ],
)
def test_env_kwargs_match_gymnasium(env_id: str, kwargs: dict) -> None:
    native = make_vec_env(env_id, 2, backend="native", env_kwargs=kwargs)
    sync = make_vec_env(env_id, 2, backend="sync", env_kwargs=kwargs)
    assert native.single_observation_space == sync.single_observation_space
    native.reset(seed=SEED)
    sync.reset(seed=SEED)
    actions = random_actions(native, 20, seed=5)
    assert_same(run(native, actions), run(sync, actions))
