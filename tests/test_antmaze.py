"""AntMaze from rlcore's own data: the goal-reaching Ant (envs/antmaze.py), the waypoint
planner and the D4RL-style recorder (offline/antmaze.py), checked by hand."""

from __future__ import annotations

import importlib.util
import math

import gymnasium as gym
import numpy as np
import pytest

from rlcore.envs.antmaze import (
    ANT_GOAL_ID,
    ANT_GOAL_SYMMETRIC_ID,
    ANT_GOAL_TURNED_ID,
    EVAL_MAPS,
    heading,
    policy_input,
    quarter_turned,
    quarter_turned_action,
    steered_direction,
    symmetric_view,
    world_turned,
)
from rlcore.envs.make import get_vec_env_state, make_vec_env, resolve_env_id, set_vec_env_state


def test_heading_and_the_policy_input_by_hand() -> None:
    quarter = [math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4)]  # yaw +90 degrees
    assert heading(np.array([1.0, 0.0, 0.0, 0.0])) == 0.0
    assert heading(np.array(quarter)) == pytest.approx(math.pi / 2)
    proprio = np.zeros(27)
    proprio[1:5] = quarter
    # facing +y, a goal 1 m along +x is on the Ant's right: local (0, -1)
    out = policy_input(proprio, np.array([2.0, 3.0]), np.array([3.0, 3.0]))
    assert out.shape == (29,)
    np.testing.assert_allclose(out[27:], [0.0, -1.0], atol=1e-12)
    np.testing.assert_array_equal(out[:27], proprio)
    # batched: leading axes broadcast; yaw 0 leaves the world offset as it is
    batch = np.zeros((2, 27))
    batch[:, 1] = 1.0
    out = policy_input(batch, np.zeros((2, 2)), np.array([[1.0, 2.0], [-3.0, 0.5]]))
    np.testing.assert_allclose(out[:, 27:], [[1.0, 2.0], [-3.0, 0.5]])


def test_the_world_turned_under_a_running_ant_by_hand() -> None:
    """Turning the world by -90 degrees: a torso heading +y now heads +x (identity
    quaternion), a world velocity (0, 2) becomes (2, 0); height, joints and the body-frame
    angular velocity stay."""
    proprio = np.arange(27, dtype=np.float64)
    proprio[1:5] = [math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4)]  # yaw +90
    proprio[13:15] = [0.0, 2.0]
    out = world_turned(proprio, math.pi / 2)
    np.testing.assert_allclose(out[1:5], [1.0, 0.0, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(out[13:15], [2.0, 0.0], atol=1e-12)
    keep = [0, *range(5, 13), *range(15, 27)]
    np.testing.assert_array_equal(out[keep], proprio[keep])
    assert proprio[13] == 0.0  # the input is not modified
    tilted = np.zeros((3, 27))  # tilted torsos: the heading moves by -direction, norm kept
    tilted[:, 1:5] = [[0.9, 0.3, -0.2, 0.1], [0.7, 0.1, 0.2, 0.68], [0.2, 0.1, -0.05, -0.95]]
    tilted[:, 1:5] /= np.linalg.norm(tilted[:, 1:5], axis=1, keepdims=True)
    turns = np.array([0.4, -1.0, 2.5])
    out = world_turned(tilted, turns)
    np.testing.assert_allclose(np.linalg.norm(out[:, 1:5], axis=1), 1.0)
    change = np.angle(np.exp(1j * (heading(out[:, 1:5]) - heading(tilted[:, 1:5]) + turns)))
    np.testing.assert_allclose(change, 0.0, atol=1e-12)


def test_ant_goal_reward_goals_and_state() -> None:
    env = gym.make(resolve_env_id("antgoal"))
    assert env.spec.id == ANT_GOAL_ID and env.spec.max_episode_steps == 1000
    obs, _ = env.reset(seed=3)
    base = env.unwrapped
    assert obs.shape == (29,)
    distance = np.linalg.norm(base.goal - base.data.qpos[:2])
    assert 1.0 - 0.2 <= distance <= 5.0 + 0.2  # drawn from (1, 5) around the noisy start
    before = np.linalg.norm(base.goal - base.data.qpos[:2])
    action = np.full(8, 0.3)
    obs, reward, terminated, _, info = env.step(action)
    after = np.linalg.norm(base.goal - base.data.qpos[:2])
    assert info["reward_to_goal"] == pytest.approx((before - after) / 0.05)
    ctrl = 0.5 * float(np.sum(action**2))
    assert info["reward_ctrl"] == pytest.approx(-ctrl)
    assert reward == pytest.approx((before - after) / 0.05 + 1.0 - ctrl + info["reward_contact"])
    np.testing.assert_allclose(obs, policy_input(obs[:27], base.data.qpos[:2], base.goal))
    # a goal under the torso is reached at the next step and replaced by a new one
    base.data.mocap_pos[0, :2] = base.data.qpos[:2]
    old_goal = base.goal.copy()
    _, _, _, _, info = env.step(np.zeros(8))
    assert info["goal_reached"] and not np.allclose(base.goal, old_goal)
    assert 1.0 - 0.1 <= np.linalg.norm(base.goal - base.data.qpos[:2]) <= 5.0 + 0.1


def test_steered_direction_by_hand() -> None:
    """Slower than 0.5 m/s: the point's own direction; faster: at most max_turn from the
    velocity's, on the short side (a point behind-left of an Ant running +x: +max_turn)."""
    assert steered_direction(np.array([0.3, 0.3]), np.array([0.0, -2.0]), 0.5) == pytest.approx(
        -math.pi / 2
    )
    assert steered_direction(np.array([2.0, 0.0]), np.array([1.0, 0.2]), 1.0) == pytest.approx(
        math.atan2(0.2, 1.0)
    )
    assert steered_direction(np.array([2.0, 0.0]), np.array([-1.0, 0.1]), 0.5) == pytest.approx(0.5)
    running_up = np.array([0.0, 3.0])  # heading +90; a point along -x is +90 further: capped
    assert steered_direction(running_up, np.array([-4.0, -0.1]), 1.0) == pytest.approx(
        math.pi / 2 + 1.0
    )


def test_ant_goal_turned_shows_a_runner_the_world_turned_towards_its_goal() -> None:
    env = gym.make(resolve_env_id("antgoalturned"))
    assert env.spec.id == ANT_GOAL_TURNED_ID and env.observation_space.shape == (27,)
    obs, _ = env.reset(seed=1)
    base = env.unwrapped
    for t in range(12):
        qpos, qvel = base.data.qpos, base.data.qvel
        proprio = np.concatenate([qpos[2:], qvel])
        direction = steered_direction(qvel[:2], base.goal - qpos[:2], 1.0)
        np.testing.assert_allclose(obs, world_turned(proprio, direction), atol=1e-12)
        if t == 5:  # fast: the direction shown is capped at max_turn from the velocity's
            base.data.qvel[:2] = [3.0, 0.0]
            base.data.mocap_pos[0, :2] = qpos[:2] + [-3.0, 0.5]
            obs = base._get_obs()
            expected = world_turned(np.concatenate([qpos[2:], base.data.qvel]), 1.0)
            np.testing.assert_allclose(obs, expected, atol=1e-12)
            continue
        obs, reward, *_ = env.step(np.sin(np.arange(8) + t))
    with pytest.raises(ValueError, match="frame"):
        gym.make(ANT_GOAL_ID, frame="body")
    with pytest.raises(ValueError, match="max_turn"):
        gym.make(ANT_GOAL_TURNED_ID, max_turn=0.0)


def test_a_quarter_turn_relabels_the_ant_by_hand() -> None:
    """Yaw +90 degrees: the quaternion q * q_z(90); leg 2's hip and ankle become leg 1's
    with the ankle's sign flipped (its hinge axis is leg 1's reversed), leg 3's become leg
    2's, leg 4's leg 3's (flipped), leg 1's leg 4's; the body-frame angular velocity (wx,
    wy) -> (wy, -wx); height and world velocity stay. Four turns are the identity."""
    proprio = np.arange(27, dtype=np.float64)
    proprio[1:5] = [1.0, 0.0, 0.0, 0.0]
    out = quarter_turned(proprio)
    np.testing.assert_allclose(out[1:5], [math.sqrt(0.5), 0.0, 0.0, math.sqrt(0.5)])
    assert heading(out[1:5]) == pytest.approx(math.pi / 2)
    # joints (hip_1, ankle_1, ..., hip_4, ankle_4) = 5..12, their velocities 19..26
    np.testing.assert_array_equal(out[5:13], [7, -8, 9, 10, 11, -12, 5, 6])
    np.testing.assert_array_equal(out[19:27], [21, -22, 23, 24, 25, -26, 19, 20])
    np.testing.assert_array_equal(out[16:19], [17, -16, 18])
    np.testing.assert_array_equal(out[[0, 13, 14, 15]], proprio[[0, 13, 14, 15]])
    batch = np.random.default_rng(0).normal(size=(3, 27))
    np.testing.assert_allclose(quarter_turned(batch, 4), batch)
    full = quarter_turned(quarter_turned(batch, 3))  # 360 degrees: the quaternion's -q
    np.testing.assert_allclose(full[:, 1:5], -batch[:, 1:5], atol=1e-12)
    np.testing.assert_allclose(np.delete(full, range(1, 5), 1), np.delete(batch, range(1, 5), 1))
    # actions, in the motors' order (hip_4, ankle_4, hip_1, ankle_1, ..., hip_3, ankle_3):
    # the torque for relabelled leg 1 drives old leg 2 (ankle flipped), and so on
    action = np.arange(1.0, 9.0)  # relabelled legs 4, 1, 2, 3 as (hip, ankle)
    np.testing.assert_array_equal(quarter_turned_action(action), [7, -8, 1, 2, 3, -4, 5, 6])
    np.testing.assert_allclose(quarter_turned_action(np.stack([action] * 2), 4), [action] * 2)


def test_the_relabelled_ant_is_the_same_body_with_the_same_dynamics() -> None:
    """In MuJoCo: the relabelled state puts every geom where the original does, and 30
    random actions (mapped back by quarter_turned_action) keep the two simulations equal,
    for 1, 2 and 3 quarter turns."""
    import mujoco

    from rlcore.envs.antmaze import _ant_xml

    model = mujoco.MjModel.from_xml_path(_ant_xml())
    rng = np.random.default_rng(4)
    for turns in (1, 2, 3):
        ours, relabelled = mujoco.MjData(model), mujoco.MjData(model)
        ours.qpos[:] = model.qpos0
        ours.qpos[2] = 0.6
        quaternion = rng.normal(size=4)
        ours.qpos[3:7] = quaternion / np.linalg.norm(quaternion)
        ours.qpos[7:] = [0.1, 0.6, -0.2, -0.5, 0.15, -0.8, 0.05, 0.9]
        ours.qvel[:] = rng.normal(size=14) * 0.5

        def proprio(data: mujoco.MjData) -> np.ndarray:
            return np.concatenate([data.qpos[2:], data.qvel])

        state = quarter_turned(proprio(ours), turns)
        relabelled.qpos[:2], relabelled.qpos[2:], relabelled.qvel[:] = (
            ours.qpos[:2],
            state[:13],
            state[13:],
        )
        mujoco.mj_forward(model, ours)
        mujoco.mj_forward(model, relabelled)
        np.testing.assert_allclose(
            np.sort(relabelled.geom_xpos[1:], axis=0), np.sort(ours.geom_xpos[1:], axis=0),
            atol=1e-12,
        )  # fmt: skip
        for _ in range(30):
            action = rng.uniform(-1, 1, 8)
            relabelled.ctrl[:] = action
            ours.ctrl[:] = quarter_turned_action(action, turns)
            mujoco.mj_step(model, ours)
            mujoco.mj_step(model, relabelled)
        np.testing.assert_allclose(
            proprio(relabelled), quarter_turned(proprio(ours), turns), atol=1e-9
        )


def test_the_symmetric_view_picks_the_quarter_turn_nearest_the_direction() -> None:
    """An Ant at heading 0 shown a point along +y (at rest): one quarter turn (heading 90
    = the direction), then the world turned by 90: heading 0 again; at heading 30 and a
    point along -x: two turns (210 is 30 from 180)."""
    proprio = np.random.default_rng(2).normal(size=27)
    proprio[1:5] = [1.0, 0.0, 0.0, 0.0]
    proprio[13:15] = 0.0
    seen, turns = symmetric_view(proprio, np.zeros(2), np.array([0.0, 3.0]), 1.0)
    assert turns == 1
    np.testing.assert_allclose(seen, world_turned(quarter_turned(proprio, 1), math.pi / 2))
    assert heading(seen[1:5]) == pytest.approx(0.0, abs=1e-12)
    yaw = math.radians(30)
    proprio[1:5] = [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]
    seen, turns = symmetric_view(proprio, np.zeros(2), np.array([-2.0, 0.0]), 1.0)
    assert turns == 2 and heading(seen[1:5]) == pytest.approx(yaw)


def test_ant_goal_symmetric_relabels_observation_and_action() -> None:
    """AntGoalSymmetric-v0 shows the symmetric view and applies the action mapped back: it
    steps as AntGoal-v0 does with the mapped action (same seed, same states)."""
    env = gym.make(resolve_env_id("antgoalsymmetric"))
    plain = gym.make(ANT_GOAL_ID)
    assert env.spec.id == ANT_GOAL_SYMMETRIC_ID and env.observation_space.shape == (27,)
    obs, _ = env.reset(seed=5)
    plain.reset(seed=5)
    base, other = env.unwrapped, plain.unwrapped
    used = set()
    for t in range(40):
        qpos, qvel = base.data.qpos, base.data.qvel
        proprio = np.concatenate([qpos[2:], qvel])
        expected, turns = symmetric_view(proprio, qvel[:2], base.goal - qpos[:2], 1.0)
        np.testing.assert_allclose(obs, expected, atol=1e-12)
        used.add(turns)
        action = np.sin(np.arange(8) * 0.7 + t)
        obs, reward, *_ = env.step(action)
        _, plain_reward, *_ = plain.step(quarter_turned_action(action, turns))
        np.testing.assert_allclose(base.data.qpos, other.data.qpos, atol=1e-12)
        assert reward == pytest.approx(plain_reward - 0.0)
        if t == 10:  # a goal behind: other quarter turns
            for data in (base.data, other.data):
                data.mocap_pos[0, :2] = data.qpos[:2] + [-3.0, -1.0]
            obs = base._get_obs()
    assert len(used) > 1


def test_ant_goal_is_deterministic_and_its_goal_is_part_of_the_saved_state() -> None:
    def run(seed: int) -> np.ndarray:
        env = gym.make(ANT_GOAL_ID)
        obs, _ = env.reset(seed=seed)
        trace = [obs]
        for t in range(20):
            trace.append(env.step(np.sin(np.arange(8) + t))[0])
        return np.array(trace)

    np.testing.assert_array_equal(run(5), run(5))
    envs = make_vec_env("antgoal", num_envs=2, seed=0, backend="sync")
    envs.reset(seed=0)
    state = get_vec_env_state(envs)
    subs = [env.unwrapped for env in envs.unwrapped.envs]
    goals = [sub.goal for sub in subs]
    first = [envs.step(np.full((2, 8), 0.2))[0] for _ in range(3)]
    for sub in subs:  # move the goals: a restore must bring them back
        sub.data.mocap_pos[0, :2] += 7.0
    set_vec_env_state(envs, state)
    np.testing.assert_array_equal([sub.goal for sub in subs], goals)
    again = [envs.step(np.full((2, 8), 0.2))[0] for _ in range(3)]
    np.testing.assert_array_equal(first, again)
    envs.close()


def test_goal_distance_and_radius_are_checked() -> None:
    with pytest.raises(ValueError, match="goal_distance"):
        gym.make(ANT_GOAL_ID, goal_distance=(3.0, 1.0))
    with pytest.raises(ValueError, match="goal_radius"):
        gym.make(ANT_GOAL_ID, goal_radius=0.0)


# --- the planner (no gymnasium-robotics needed) ---


def test_next_cell_follows_shortest_paths_by_hand() -> None:
    from rlcore.offline.antmaze import marked_cell, next_cell, open_cells

    umaze = EVAL_MAPS["umaze"]
    assert marked_cell(umaze, "r") == (1, 1) and marked_cell(umaze, "g") == (3, 1)
    assert open_cells(umaze) == [(1, 1), (1, 2), (1, 3), (2, 3), (3, 1), (3, 2), (3, 3)]
    # the U: (1,1) -> (1,2) -> (1,3) -> (2,3) -> (3,3) -> (3,2) -> (3,1)
    path, cell = [], (1, 1)
    while cell != (3, 1):
        cell = next_cell(umaze, cell, (3, 1))
        path.append(cell)
    assert path == [(1, 2), (1, 3), (2, 3), (3, 3), (3, 2), (3, 1)]
    assert next_cell(umaze, (3, 1), (3, 1)) == (3, 1)
    assert next_cell(umaze, (2, 2), (3, 1)) == (3, 2)  # a torso over a wall: nearest way on
    medium = EVAL_MAPS["medium"]
    # two shortest ways from (1,1) to (2,2): up/down/left/right order picks down first
    assert next_cell(medium, (1, 1), (2, 2)) == (2, 1)
    # (4,1) to (6,6): 9 moves through (4,2), (3,2)...; 11 down through (5,1), (6,1)...
    assert next_cell(medium, (4, 1), (6, 6)) == (4, 2)
    walled = [[1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1], [1, 1, 1, 1]]
    with pytest.raises(ValueError, match="no path"):
        next_cell(walled, (1, 1), (2, 2))
    with pytest.raises(ValueError, match="expected 1"):
        marked_cell(walled, "g")


# --- recording in gymnasium-robotics' maze ---

needs_robotics = pytest.mark.skipif(
    importlib.util.find_spec("gymnasium_robotics") is None, reason="gymnasium-robotics"
)


@needs_robotics
def test_eval_mazes_from_env_names() -> None:
    from rlcore.envs.third_party import adapt

    adapt()
    assert resolve_env_id("antmazeumazeeval") == "AntMazeUMazeEval-v0"
    env = gym.make(resolve_env_id("AntMazeMediumEval"))
    obs, _ = env.reset(seed=0)
    assert env.spec.max_episode_steps == 1000 and obs["observation"].shape == (27,)
    maze = env.unwrapped.maze
    # start (1, 1) and goal (6, 6), each within the maze's +-1 m position noise
    assert np.abs(obs["achieved_goal"] - maze.cell_rowcol_to_xy(np.array([1, 1]))).max() <= 1.0
    assert np.abs(obs["desired_goal"] - maze.cell_rowcol_to_xy(np.array([6, 6]))).max() <= 1.0
    env.unwrapped.ant_env.data.qpos[:2] = obs["desired_goal"]  # at the goal: the episode ends
    _, reward, terminated, _, info = env.step(np.zeros(8))
    assert reward == 1.0 and terminated and info["success"]
    env.close()


@needs_robotics
def test_waypoints_and_the_driver_by_hand() -> None:
    from rlcore.offline.antmaze import VARIANTS, driver, make_recording_env, waypoint

    env, commanded = make_recording_env(VARIANTS["umaze"])
    obs, _ = env.reset(seed=1)
    maze = commanded.maze
    # 5 x 5 cells of 4 m centred on 0: cell (r, c) -> ((c + .5) 4 - 10, 10 - (r + .5) 4)
    np.testing.assert_allclose(maze.cell_rowcol_to_xy(np.array([1, 2])), [0.0, 4.0])
    goal = commanded.commanded_goal
    np.testing.assert_allclose(goal, commanded.env.unwrapped.goal)  # umaze: the eval goal
    assert waypoint(maze, commanded.maze_map, np.array([-4.2, 4.3]), goal).tolist() == [0.0, 4.0]
    assert waypoint(maze, commanded.maze_map, np.array([4.0, 0.0]), goal).tolist() == [4.0, -4.0]
    inside = goal + 0.3  # in the goal's cell: the goal itself
    np.testing.assert_allclose(waypoint(maze, commanded.maze_map, inside, goal), goal)
    seen = []

    def goal_reacher(x: np.ndarray) -> np.ndarray:
        seen.append(x)
        return np.zeros(8, np.float32)

    act = driver(commanded, commanded.observation_space, goal_reacher)
    act(obs)
    parts = gym.spaces.unflatten(commanded.observation_space, obs)  # flat: achieved, desired, obs
    np.testing.assert_allclose(obs[:2], parts["achieved_goal"])
    expected = policy_input(parts["observation"], parts["achieved_goal"], np.array([0.0, 4.0]))
    np.testing.assert_allclose(seen[0], expected, rtol=1e-6)
    # a policy that runs along +x sees the world turned towards the waypoint (at rest)...
    runner = driver(commanded, commanded.observation_space, goal_reacher, "turned", 0.5)
    runner(obs)
    offset = np.array([0.0, 4.0]) - parts["achieved_goal"]
    turned = world_turned(parts["observation"], np.arctan2(offset[1], offset[0]))
    np.testing.assert_allclose(seen[1], turned, rtol=1e-6)
    # ... and, running south (velocity (0, -2)), at most max_turn from south: -pi/2 + 0.5
    moving = obs.copy()
    moving[4 + 13 : 4 + 15] = [0.0, -2.0]  # the flat layout: achieved, desired, the 27
    runner(moving)
    south = gym.spaces.unflatten(commanded.observation_space, moving)["observation"]
    np.testing.assert_allclose(seen[2], world_turned(south, -np.pi / 2 + 0.5), rtol=1e-6)
    with pytest.raises(ValueError, match="frame='body'"):
        driver(commanded, commanded.observation_space, goal_reacher, frame="body")
    env.close()


@needs_robotics
def test_diverse_commands_change_when_reached_and_starts_vary() -> None:
    from rlcore.offline.antmaze import VARIANTS, make_recording_env

    env, commanded = make_recording_env(VARIANTS["umaze-diverse"])
    starts = []
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        starts.append(tuple(commanded.maze.cell_xy_to_rowcol(obs[:2])))
    assert len(set(starts)) > 1
    command = commanded.commanded_goal.copy()
    commanded.env.unwrapped.ant_env.data.qpos[:2] = command  # on the command: a new one
    _, _, terminated, _, info = env.step(np.zeros(8))
    assert not terminated  # recording is continuing
    assert not np.allclose(commanded.commanded_goal, command)
    np.testing.assert_allclose(info["commanded_goal"], commanded.commanded_goal)
    # at the evaluation goal: reward 1 (the command plays no part in it), still continuing
    commanded.env.unwrapped.ant_env.data.qpos[:2] = commanded.env.unwrapped.goal
    _, reward, terminated, _, _ = env.step(np.zeros(8))
    assert reward == 1.0 and not terminated
    env.close()


def _walker(x: np.ndarray) -> np.ndarray:
    """A deterministic stand-in for a trained goal reacher (no learning in this test)."""
    return np.tanh(np.concatenate([x[27:], x[27:], -x[27:], x[1:3]])).astype(np.float32)


@needs_robotics
def test_record_writes_a_d4rl_style_dataset(tmp_path, monkeypatch) -> None:
    import minari

    from rlcore.offline import antmaze
    from rlcore.offline.datasets import load_dataset

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    first = antmaze.record("umaze", _walker, 800, "local/antmaze/umaze-test-v0", seed=4)
    assert first["episodes"] == 2 and first["steps"] == 800  # 700-step episodes
    again = antmaze.record("umaze", _walker, 800, "local/antmaze/umaze-again-v0", seed=4)
    a = minari.load_dataset("local/antmaze/umaze-test-v0")
    b = minari.load_dataset("local/antmaze/umaze-again-v0")
    for x, y in zip(a.iterate_episodes(), b.iterate_episodes(), strict=True):
        np.testing.assert_array_equal(x.observations, y.observations)
        np.testing.assert_array_equal(x.actions, y.actions)
    assert again["reward_rate"] == first["reward_rate"]
    episode = next(a.iterate_episodes())
    assert episode.observations.shape == (701, 31) and episode.truncations[-1]
    # the maze's per-step success flags, as Minari's AntMaze datasets keep them
    np.testing.assert_array_equal(episode.infos["success"][1:], episode.rewards > 0)
    assert not episode.terminations.any()  # recorded continuing, as Minari's AntMaze
    # the reward is the evaluation goal's: 1 within 0.45 m of the desired goal, else 0
    distance = np.linalg.norm(episode.observations[1:, :2] - episode.observations[1:, 2:4], axis=1)
    np.testing.assert_array_equal(episode.rewards, (distance <= 0.45).astype(float))
    umaze_goal = np.array([-4.0, -4.0])  # cell (3, 1), within +-1 m noise
    assert np.abs(episode.observations[:, 2:4] - umaze_goal).max() <= 1.0
    assert np.abs(episode.observations[0, :2] - np.array([-4.0, 4.0])).max() <= 1.0
    data = load_dataset("local/antmaze/umaze-test-v0")  # the offline loaders read it
    assert tuple(data.obs.shape) == (800, 31) and data.env_id == "AntMazeUMazeEval-v0"
    env = gym.wrappers.FlattenObservation(gym.make("AntMazeUMazeEval-v0"))
    assert env.observation_space.shape == (31,)  # online: the same layout
    env.close()


@needs_robotics
def test_trial_counts_the_episodes_that_reach_the_goal(monkeypatch, capsys) -> None:
    """``trial``: the real path drives one 700-step U-maze episode (the stand-in walker
    does not reach the goal); the count, by hand on given episodes: rewards 1 first at
    steps 2 and 4 in two of three episodes -> 2/3, 3 steps on average."""
    from types import SimpleNamespace

    from rlcore.offline import antmaze, recording
    from rlcore.offline.cli import UsageError

    summary = antmaze.trial("umaze", _walker, 1, seed=3)
    assert summary == {"maze": "umaze", "episodes": 1, "success_rate": 0.0,
                       "mean_steps_to_goal": None}  # fmt: skip
    seen = {}

    def rolled(env, act, steps, seed=0, noise=0.0):  # noqa: ANN001, ANN202
        seen.update(steps=steps, seed=seed)
        rewards = ([0, 0, 1, 1, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1])
        return [SimpleNamespace(rewards=np.array(r, float)) for r in rewards]

    monkeypatch.setattr(recording, "rollout", rolled)
    summary = antmaze.trial("medium", _walker, 3, seed=5)
    assert seen == {"steps": 3 * 1000, "seed": 5}  # the medium maze: 1,000-step episodes
    assert summary["success_rate"] == pytest.approx(2 / 3)
    assert summary["mean_steps_to_goal"] == 3.0
    with pytest.raises(UsageError, match="maze=large"):
        antmaze.trial("large", _walker, 1)
    with pytest.raises(UsageError, match="episodes"):
        antmaze.trial("umaze", _walker, 0)
    with pytest.raises(SystemExit):
        antmaze.main(["trial=umaze", "policy=x"])
    assert "episodes" in capsys.readouterr().err


@needs_robotics
def test_the_policy_frame_is_read_from_the_run(tmp_path) -> None:
    from rlcore.checkpoint import FORMAT_VERSION, save_checkpoint
    from rlcore.offline.antmaze import policy_frame
    from rlcore.offline.cli import UsageError

    def saved(name: str, env: dict) -> str:
        path = tmp_path / name
        save_checkpoint({"format": FORMAT_VERSION, "algo": "sac", "config": {"env": env},
                         "spaces": {}, "agent": {}}, path)  # fmt: skip
        return str(path)

    assert policy_frame(saved("g.pt", {"id": "AntGoal-v0"})) == "goal"
    assert policy_frame(saved("gt.pt", {"id": "AntGoalTurned-v0"})) == "turned"
    turned = {"id": "Ant-v5", "kwargs": {"include_cfrc_ext_in_observation": False}}
    assert policy_frame(saved("t.pt", turned)) == "symmetric"  # a runner: the default
    assert policy_frame(saved("t.pt", turned), "turned") == "turned"
    assert policy_frame(saved("gs.pt", {"id": "AntGoalSymmetric-v0"}), "turned") == "symmetric"
    with pytest.raises(UsageError, match="frame=goal: one of symmetric, turned"):
        policy_frame(saved("t.pt", turned), "goal")
    with pytest.raises(UsageError, match="include_cfrc_ext_in_observation=false"):
        policy_frame(saved("a.pt", {"id": "Ant-v5", "kwargs": {}}))


def test_the_command_line_checks_its_input(capsys) -> None:
    from rlcore.offline import antmaze

    with pytest.raises(SystemExit) as exit_info:
        antmaze.main(["variant=large", "policy=x", "steps=10", "dataset_id=local/a/b-v0"])
    assert exit_info.value.code == 2
    assert "variant=large: one of umaze, umaze-diverse, medium-play, medium-diverse" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        antmaze.main(["variant=umaze", "policy=x", "steps=0", "dataset_id=local/a/b-v0"])
    assert "steps=<n> (n >= 1)" in capsys.readouterr().err
