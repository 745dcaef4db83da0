"""The Franka Panda tasks (rlcore.envs.robots): spaces, seeds, rewards, success, experts,
states; every reward and success case below is computed by hand."""

from __future__ import annotations

import gymnasium as gym
import mujoco
import numpy as np
import pytest

import rlcore.envs.make  # noqa: F401  (registers the robot ids)
from rlcore.envs.make import get_vec_env_state, make_vec_env, resolve_env_id, set_vec_env_state
from rlcore.envs.robots import ROBOT_IDS
from rlcore.envs.robots.env import PandaEnv
from rlcore.envs.robots.experts import expert_action
from rlcore.envs.robots.tasks import TASKS, WORKSPACE_HIGH

SPACES = {  # observation, goal and action sizes (panda-gym's, with a quaternion per object)
    "PandaReach": (6, 3, 3),
    "PandaPush": (19, 3, 3),
    "PandaSlide": (19, 3, 3),
    "PandaPickAndPlace": (20, 3, 4),
    "PandaStack": (33, 6, 4),
    "PandaLift": (23, 0, 4),
    "PandaPegInsertion": (6, 3, 3),
}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_spaces_and_short_names(name: str) -> None:
    assert resolve_env_id(name.lower()) == f"{name}-v1" == ROBOT_IDS[name]
    env = gym.make(f"{name}-v1")
    obs_dim, goal_dim, action_dim = SPACES[name]
    assert env.action_space.shape == (action_dim,)
    assert env.spec.max_episode_steps == (100 if name in ("PandaStack", "PandaLift",
                                                           "PandaPegInsertion") else 50)  # fmt: skip
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    if goal_dim:
        assert obs["observation"].shape == (obs_dim,)
        assert obs["achieved_goal"].shape == obs["desired_goal"].shape == (goal_dim,)
    else:
        assert obs.shape == (obs_dim,)
    assert info == {"is_success": False}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_seeded_resets_repeat_and_differ(name: str) -> None:
    env = gym.make(f"{name}-v1")

    def flat(obs):
        return np.concatenate(list(obs.values())) if isinstance(obs, dict) else obs

    first = flat(env.reset(seed=7)[0])
    env.step(env.action_space.sample())
    np.testing.assert_array_equal(flat(env.reset(seed=7)[0]), first)
    assert not np.array_equal(flat(env.reset(seed=8)[0]), first)


def test_reward_and_success_by_hand() -> None:
    push = PandaEnv("PandaPush")
    achieved = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.3, 0.4, 0.0]])
    desired = np.array([[0.0, 0.0, 0.04], [0.0, 0.0, 0.06], [0.0, 0.0, 0.0]])
    # distances 0.04, 0.06, 0.5 against panda-gym's 0.05
    np.testing.assert_array_equal(push.compute_reward(achieved, desired, None), [0.0, -1.0, -1.0])
    np.testing.assert_array_equal(push.task.is_success(achieved, desired), [True, False, False])
    dense = PandaEnv("PandaPush", reward_type="dense")
    np.testing.assert_allclose(dense.compute_reward(achieved, desired, None), [-0.04, -0.06, -0.5],
                               rtol=1e-6)  # fmt: skip
    stack = PandaEnv("PandaStack")  # one distance over both cubes, threshold 0.1
    a = np.array([[0.0, 0.0, 0.02, 0.0, 0.0, 0.06], [0.0, 0.0, 0.02, 0.09, 0.0, 0.06]])
    g = np.array([[0.06, 0.0, 0.02, 0.0, 0.0, 0.06], [0.0, 0.06, 0.02, 0.0, 0.0, 0.06]])
    np.testing.assert_array_equal(stack.compute_reward(a, g, None), [0.0, -1.0])  # 0.06; 0.108
    lift = PandaEnv("PandaLift").task  # 4 cm above the table: the cube's centre above 0.06
    cubes = np.array([[0.0, 0.0, 0.02], [0.0, 0.0, 0.059], [0.0, 0.0, 0.061]])
    np.testing.assert_array_equal(lift.compute_reward(cubes, None, False), [0.0, 0.0, 1.0])
    ee = np.array([[0.0, 0.0, 0.12], [0.0, 0.0, 0.059], [0.0, 0.0, 0.061]])
    np.testing.assert_allclose(lift.compute_reward(cubes, None, True, ee),
                               [1 - np.tanh(1.0), 1.0, 2.25], rtol=1e-6)  # fmt: skip
    peg = PandaEnv("PandaPegInsertion").task  # 5 mm
    np.testing.assert_array_equal(
        peg.is_success(np.array([[0.0, 0.0, 0.009], [0.0, 0.0, 0.011]]), np.array([0.0, 0.0, 0.005])),
        [True, False],
    )


@pytest.mark.parametrize("name", ["PandaPush", "PandaStack", "PandaPegInsertion", "PandaReach"])
def test_compute_reward_matches_the_steps(name: str) -> None:
    """HER recomputes rewards with compute_reward: over a batch of recorded goals it gives
    exactly the rewards the steps gave (sparse and dense)."""
    for reward_type in ("sparse", "dense"):
        env = gym.make(f"{name}-v1", reward_type=reward_type)
        obs, _ = env.reset(seed=1)
        achieved, desired, rewards = [], [], []
        rng = np.random.default_rng(0)
        for _ in range(30):
            action = expert_action(name, obs, rng, noise=0.3)
            obs, reward, *_ = env.step(action)
            achieved.append(obs["achieved_goal"])
            desired.append(obs["desired_goal"])
            rewards.append(reward)
        batch = env.unwrapped.compute_reward(np.array(achieved), np.array(desired), None)
        assert batch.shape == (30,)
        np.testing.assert_allclose(batch, rewards, rtol=1e-6, atol=1e-7)
        if reward_type == "sparse":
            assert set(np.unique(batch)) <= {0.0, -1.0}


@pytest.mark.parametrize(
    "name", ["PandaReach", "PandaPush", "PandaPickAndPlace", "PandaStack", "PandaLift",
             "PandaPegInsertion"],
)  # fmt: skip
def test_scripted_experts_solve_their_tasks(name: str) -> None:
    """The tasks are solvable as built (contacts, grip, clearance): the scripted expert
    ends at least 9 of 10 seeded episodes in success."""
    env = gym.make(f"{name}-v1")
    wins = 0
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(expert_action(name, obs))
            done = terminated or truncated
        wins += info["is_success"]
    assert wins >= 9, f"{name}: {wins}/10"


def test_success_is_reported_where_the_goal_is_reached() -> None:
    env = PandaEnv("PandaPush")
    env.reset(seed=0)
    adr = env.layout.object_qpos["object"]
    goal = env.data.mocap_pos[env.layout.goal_mocap[0]].copy()
    env.data.qpos[adr : adr + 3] = goal + np.array([0.03, 0.0, 0.0])
    mujoco.mj_forward(env.model, env.data)
    _, reward, _, _, info = env.step(np.zeros(3, dtype=np.float32))
    assert info["is_success"] and reward == 0.0
    env.data.qpos[adr : adr + 3] = goal + np.array([0.08, 0.0, 0.0])
    mujoco.mj_forward(env.model, env.data)
    _, reward, _, _, info = env.step(np.zeros(3, dtype=np.float32))
    assert not info["is_success"] and reward == -1.0


def test_end_effector_control_moves_by_the_step_and_stays_in_the_workspace() -> None:
    """Each full +x action moves the hand 0.6-1.0 of panda-gym's 5 cm (the weld lags the
    target by a fraction of a step), nothing sideways, and it stops when the action does;
    the target never leaves the workspace box."""
    env = PandaEnv("PandaReach")
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        start = obs["observation"][:3].copy()
        obs, *_ = env.step(np.array([1.0, 0.0, 0.0], dtype=np.float32))
        moved = obs["observation"][:3] - start
        assert 0.03 <= moved[0] <= 0.05 and np.abs(moved[1:]).max() < 2e-3, moved
    for _ in range(4):
        obs, *_ = env.step(np.zeros(3, dtype=np.float32))
    still = obs["observation"][:3].copy()
    obs, *_ = env.step(np.zeros(3, dtype=np.float32))
    assert np.abs(obs["observation"][:3] - still).max() < 2e-3
    for _ in range(30):
        obs, *_ = env.step(np.array([1.0, 1.0, 1.0], dtype=np.float32))
    np.testing.assert_array_equal(env.data.mocap_pos[env.layout.target_mocap], WORKSPACE_HIGH)
    np.testing.assert_allclose(obs["observation"][:3], WORKSPACE_HIGH, atol=0.025)


def test_joint_control_moves_the_joints_by_the_step() -> None:
    """Joint control: each full action raises joint 1's target 0.05 rad above where it
    is; the position servo follows at 0.5-1.0 of that per step, and the weld is off."""
    env = PandaEnv("PandaPickAndPlace", control="joints")
    assert env.action_space.shape == (8,)
    env.reset(seed=0)
    assert not env.data.eq_active[0]
    action = np.zeros(8, dtype=np.float32)
    action[0] = 1.0
    for _ in range(4):
        q = env.data.qpos[env.layout.arm_qpos].copy()
        env.step(action)
        moved = env.data.qpos[env.layout.arm_qpos] - q
        assert 0.025 <= moved[0] <= 0.05 and np.abs(moved[1:]).max() < 0.01, moved


def test_bad_options_are_named() -> None:
    with pytest.raises(ValueError, match="unknown robot task 'PandaFly'"):
        PandaEnv("PandaFly")
    with pytest.raises(ValueError, match="reward_type='shaped': choose sparse or dense"):
        PandaEnv("PandaPush", reward_type="shaped")
    with pytest.raises(ValueError, match="control='torque'"):
        PandaEnv("PandaPush", control="torque")


def test_states_restore_exactly_through_the_vector_env() -> None:
    """A checkpoint's env state (goal markers included) continues bit for bit."""
    env = make_vec_env("PandaPickAndPlace-v1", 2, seed=0, backend="sync")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (12, 2, 4)).astype(np.float32)
    for a in actions[:4]:
        env.step(a)
    state = get_vec_env_state(env)
    first = [env.step(a) for a in actions[4:]]
    env.reset(seed=5)  # somewhere else entirely
    set_vec_env_state(env, state)
    second = [env.step(a) for a in actions[4:]]
    for (o1, r1, *_), (o2, r2, *_) in zip(first, second, strict=True):
        for key in o1:
            np.testing.assert_array_equal(o1[key], o2[key])
        np.testing.assert_array_equal(r1, r2)


class _Coin(gym.Env):
    """Three-step episodes whose last step succeeds when the action is positive; the
    steps before report is_success=True, so only the last step's flag may count."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {"is_success": False}

    def step(self, action):
        self.t += 1
        last = self.t == 3
        success = bool(action[0] > 0) if last else True
        return np.zeros(1, np.float32), 0.0, last, False, {"is_success": success}


def test_episode_success_is_the_last_steps_flag_and_evaluate_averages_it() -> None:
    from rlcore.evaluation import evaluate

    gym.register(id="rlcore-test/Coin-v0", entry_point=_Coin)
    try:
        env = make_vec_env("rlcore-test/Coin-v0", 2, seed=0, backend="sync")
        env.reset(seed=0)
        for _ in range(2):  # mid-episode: no episode ended, no success value
            _, _, _, _, info = env.step(np.ones((2, 1), np.float32))
            assert np.isnan(info["episode_success"]).all()
        _, _, _, _, info = env.step(np.array([[1.0], [-1.0]], np.float32))
        np.testing.assert_array_equal(info["episode_success"], [1.0, 0.0])
        # env 0 always succeeds, env 1 never: 3 + 2 episodes -> 3/5
        result = evaluate(lambda obs: np.array([[1.0], [-1.0]], np.float32), env, 5, seed=0)
        assert result["success_rate"] == 3 / 5
    finally:
        gym.registry.pop("rlcore-test/Coin-v0")


def test_a_task_without_success_reports_none() -> None:
    from rlcore.evaluation import evaluate

    env = make_vec_env("Pendulum-v1", 1, seed=0, backend="sync")
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.zeros((1, 1), np.float32))
    assert "episode_success" not in info
    assert "success_rate" not in evaluate(lambda obs: np.zeros((1, 1), np.float32), env, 1, 0)


class _Solved(gym.Env):
    """Every 5-step episode ends in success (a stand-in for a solved task)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {"is_success": False}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 0.0, False, self.t == 5, {"is_success": self.t == 5}


def test_stop_at_success_stops_at_the_first_evaluation_that_reaches_it(tmp_path) -> None:
    from rlcore.config import ConfigError
    from rlcore.train import train
    from tests.conftest import make_config

    gym.register(id="rlcore-test/Solved-v0", entry_point=_Solved)
    try:
        args = ("algo=sac", "env=rlcore-test/Solved-v0", "total_steps=400", "eval_every=100",
                "eval_episodes=2", "eval_envs=1", "algo.learning_starts=50",
                "algo.batch_size=16", "algo.hidden=[16,16]", "logger=quiet", "threads=1")  # fmt: skip
        result = train(make_config(*args, "stop_at_success=0.9"), tmp_path / "run")
        assert result["run/step"] == 100 and result["eval/success_rate"] == 1.0
        log = (tmp_path / "run" / "train.log").read_text()
        assert "stop_at_success=0.9 reached at step 100" in log
        assert f"resume={tmp_path / 'run'} stop_at_success=<higher or null>" in log
        # resumed with its target met: no step taken, the checkpoint unchanged
        before = (tmp_path / "run" / "checkpoints" / "latest.pt").read_bytes()
        again = train(make_config(*args, "stop_at_success=0.9", f"resume={tmp_path / 'run'}"),
                      tmp_path / "run")  # fmt: skip
        assert again["run/step"] == 100 and again["run/reached_stop_at_return"] == 1.0
        assert (tmp_path / "run" / "checkpoints" / "latest.pt").read_bytes() == before
        higher = train(make_config(*args, "stop_at_success=null", f"resume={tmp_path / 'run'}"),
                       tmp_path / "run")  # fmt: skip
        assert higher["run/step"] == 400
        assert train(make_config(*args), tmp_path / "all")["run/step"] == 400
    finally:
        gym.registry.pop("rlcore-test/Solved-v0")
    with pytest.raises(ConfigError, match=r"Hopper-v5 reports no info\['is_success'\]"):
        train(make_config("algo=sac", "env=Hopper", "stop_at_success=0.9"), tmp_path / "no")
