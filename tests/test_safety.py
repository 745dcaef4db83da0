"""Velocity-constrained safe tasks (envs/safety.py): cost values against hand-computed
velocities and the task's own reported velocity; ``Safety<Task>Velocity-v1`` against
Safety-Gymnasium's recorded rollouts (v4 bodies) and ``...VelocityV5-v1`` on v5 bodies."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlcore.envs.make import make_vec_env, resolve_env_id, step_costs
from rlcore.envs.safety import (
    PLANAR_SPEED,
    SAFETY_VELOCITY_IDS,
    SAFETY_VELOCITY_V5_IDS,
    VELOCITY_THRESHOLDS,
    VelocityCost,
    make_velocity_task,
    velocity_cost_of,
)

GOLDEN = Path(__file__).parent / "golden" / "safety_velocity.json"


class _Reporting(gym.Env):
    """Reports a given velocity in info, nothing else."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,))
    action_space = gym.spaces.Box(-1.0, 1.0, (1,))

    def __init__(self, info: dict) -> None:
        self.info = info

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, dict(self.info)


@pytest.mark.parametrize(
    ("info", "planar", "cost"),
    [
        ({"x_velocity": 0.7403}, False, 1.0),  # Hopper's threshold 0.7402: just above
        ({"x_velocity": 0.7402}, False, 0.0),  # at the threshold: no cost (strict >)
        ({"x_velocity": -5.0}, False, 0.0),  # fast backwards: x-velocity, not speed
        ({"x_velocity": 2.0, "y_velocity": 2.0}, True, 1.0),  # speed 2.83 > 2.6222 (Ant)
        ({"x_velocity": 2.0, "y_velocity": 1.0}, True, 0.0),  # speed 2.24
        ({"x_velocity": 0.0, "y_velocity": -2.7}, True, 1.0),  # sideways counts (planar)
    ],
)
def test_cost_is_one_above_the_threshold(info, planar, cost):
    threshold = VELOCITY_THRESHOLDS["Ant" if planar else "Hopper"]
    env = VelocityCost(_Reporting(info), threshold, planar=planar)
    env.reset()
    assert env.step(np.zeros(1))[4]["cost"] == cost


def test_missing_velocity_is_a_clear_error():
    env = VelocityCost(_Reporting({}), 1.0)
    env.reset()
    with pytest.raises(KeyError, match="x_velocity"):
        env.step(np.zeros(1))


@pytest.mark.parametrize("ids", [SAFETY_VELOCITY_IDS, SAFETY_VELOCITY_V5_IDS])
@pytest.mark.parametrize("task", sorted(VELOCITY_THRESHOLDS))
def test_registered_task_costs_follow_its_velocity(task, ids):
    """Cost = 1[x-velocity > threshold], planar speed for Ant and Humanoid only (Swimmer's
    v1 cost is on x-velocity, as Safety-Gymnasium's v1; its v0 used the speed)."""
    env = gym.make(ids[task])
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    costs = []
    for _ in range(20):
        _, _, terminated, truncated, info = env.step(rng.uniform(-1, 1, env.action_space.shape))
        speed = info["x_velocity"]
        if task in ("Ant", "Humanoid"):
            speed = float(np.hypot(info["x_velocity"], info["y_velocity"]))
        assert info["cost"] == float(speed > VELOCITY_THRESHOLDS[task])
        costs.append(info["cost"])
        if terminated or truncated:
            break
    env.close()
    assert set(costs) <= {0.0, 1.0}


# Safety-Gymnasium's observation sizes (v4 bodies) and gymnasium v5's
OBS_DIMS = {"Hopper": 11, "HalfCheetah": 17, "Walker2d": 17, "Swimmer": 8, "Ant": 27,
            "Humanoid": 376}  # fmt: skip
OBS_DIMS_V5 = {**OBS_DIMS, "Ant": 105, "Humanoid": 348}


@pytest.mark.parametrize("task", sorted(VELOCITY_THRESHOLDS))
def test_velocity_ids_wrap_v4_bodies_and_v5_variants_their_own(task):
    """``Safety<Task>Velocity-v1`` is gymnasium's <Task>-v4 (Safety-Gymnasium's body:
    observation, reward, termination, 1000 steps), ``...VelocityV5-v1`` the v5 task: same
    steps as the bare task under the same seed and actions."""
    assert velocity_cost_of(SAFETY_VELOCITY_IDS[task])[0] == f"{task}-v4"
    assert velocity_cost_of(SAFETY_VELOCITY_V5_IDS[task])[0] == f"{task}-v5"
    for ids, body, dims in ((SAFETY_VELOCITY_IDS, "v4", OBS_DIMS),
                            (SAFETY_VELOCITY_V5_IDS, "v5", OBS_DIMS_V5)):  # fmt: skip
        safe, bare = gym.make(ids[task]), gym.make(f"{task}-{body}")
        assert safe.observation_space.shape == (dims[task],)
        assert bare.spec.max_episode_steps == 1000
        rng = np.random.default_rng(1)
        first = [env.reset(seed=4)[0] for env in (safe, bare)]
        np.testing.assert_array_equal(*first)
        for _ in range(30):
            action = rng.uniform(-1, 1, safe.action_space.shape)
            (o1, r1, t1, u1, _), (o2, r2, t2, u2, _) = safe.step(action), bare.step(action)
            np.testing.assert_array_equal(o1, o2)
            assert (r1, t1, u1) == (r2, t2, u2)
            if t1 or u1:
                break


def test_v5_hopper_differs_from_safety_gymnasiums_on_the_terminating_step():
    """What the v4 body means in numbers: v4 pays the healthy reward (1) on the step that
    terminates, v5 does not (the same physics otherwise)."""
    rewards = {}
    for ids in (SAFETY_VELOCITY_IDS, SAFETY_VELOCITY_V5_IDS):
        env = gym.make(ids["Hopper"])
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        while True:
            _, reward, terminated, truncated, _ = env.step(rng.uniform(-1, 1, 3))
            if terminated or truncated:
                break
        assert terminated
        rewards[ids is SAFETY_VELOCITY_IDS] = reward
    assert rewards[True] - rewards[False] == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("task", ["Hopper", "HalfCheetah", "Walker2d", "Swimmer"])
def test_velocity_task_reproduces_safety_gymnasiums_rollout(task):
    """Safety-Gymnasium 1.0.0's own rollout (tests/golden/safety_velocity.json, recorded
    with its pinned gymnasium 0.28.1 / mujoco 2.3.3 by benchmarks/parity/safety_velocity.py):
    observations, rewards, costs and terminations, through resets. Kept as far as MuJoCo 4
    reproduces MuJoCo 2.3.3 (on the reference's own simulator all six tasks match exactly
    over 400 steps; Ant and Humanoid differ from the reset under MuJoCo 4)."""
    golden = json.loads(GOLDEN.read_text())["tasks"][task]
    env = gym.make(SAFETY_VELOCITY_IDS[task])
    obs, _ = env.reset(seed=0)
    np.testing.assert_allclose(obs, golden["obs"][0], rtol=0, atol=1e-9)
    for i, action in enumerate(golden["actions"]):
        obs, reward, terminated, truncated, info = env.step(np.asarray(action))
        if terminated or truncated:
            obs, _ = env.reset()
        np.testing.assert_allclose(obs, golden["obs"][i + 1], rtol=0, atol=1e-9)
        assert reward == pytest.approx(golden["reward"][i], abs=1e-9)
        assert (info["cost"], float(terminated)) == (golden["cost"][i], golden["terminated"][i])
    if task == "Swimmer":  # the recording's costs are Swimmer's: 8 of its 52 steps
        assert sum(golden["cost"]) == 8.0


def test_unknown_task_or_body_is_refused():
    with pytest.raises(ValueError, match="no velocity-constrained version of 'Reacher'"):
        make_velocity_task("Reacher")
    with pytest.raises(ValueError, match="body='v3'"):
        make_velocity_task("Hopper", body="v3")


def test_vector_env_and_short_names_carry_the_cost():
    assert resolve_env_id("SafetyHopperVelocity") == "SafetyHopperVelocity-v1"
    assert resolve_env_id("safetyantvelocity") == "SafetyAntVelocity-v1"
    assert resolve_env_id("SafetyAntVelocityV5") == "SafetyAntVelocityV5-v1"
    env = make_vec_env("SafetyHopperVelocity", 2, seed=0)
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.ones((2, 3), np.float32))
    assert info["cost"].shape == (2,) and set(info["cost"].tolist()) <= {0.0, 1.0}
    env.close()


@pytest.mark.parametrize("task", sorted(VELOCITY_THRESHOLDS))
def test_native_backend_costs_equal_gymnasiums(task):
    """The native back end (v5 bodies) computes the same per-step costs and episode costs
    as the gymnasium task with the cost wrapper (same seeds, same actions); "auto" picks it
    for the V5 ids and gymnasium's vector env for Safety-Gymnasium's (v4) ids."""
    env_id = SAFETY_VELOCITY_V5_IDS[task]
    v4 = make_vec_env(SAFETY_VELOCITY_IDS[task], 1)
    assert isinstance(v4.unwrapped, gym.vector.SyncVectorEnv)  # gymnasium's, not native
    v4.close()
    envs = {b: make_vec_env(env_id, 3, seed=0, backend=b) for b in ("sync", "native")}
    assert type(envs["native"].unwrapped).__name__ == "NativeVectorEnv"
    rng = np.random.default_rng(0)
    space = envs["sync"].single_action_space
    for env in envs.values():
        env.reset(seed=7)
    total = 0.0
    for _ in range(150):
        action = rng.uniform(space.low, space.high, (3, *space.shape)).astype(np.float32)
        infos = {b: env.step(action)[4] for b, env in envs.items()}
        np.testing.assert_array_equal(infos["native"]["cost"], infos["sync"]["cost"])
        np.testing.assert_array_equal(
            infos["native"]["episode_cost"], infos["sync"]["episode_cost"]
        )
        total += infos["sync"]["cost"].sum()
    # low thresholds (x-velocity 0, a small planar speed): both outcomes occur
    low = _native_vs_wrapper_costs(task, 0.05 * VELOCITY_THRESHOLDS[task] * (task in PLANAR_SPEED))
    assert 0 < low.mean() < 1


def _native_vs_wrapper_costs(task: str, threshold: float) -> np.ndarray:
    """Costs of ``threshold`` from NativeVectorEnv and from VelocityCost on the v5 task under
    the same actions (asserted equal); returns them."""
    from rlcore.envs.native import NativeVectorEnv

    planar = task in PLANAR_SPEED
    native = NativeVectorEnv(f"{task}-v5", 2, velocity_cost=(threshold, planar))
    sync = gym.vector.SyncVectorEnv(
        [lambda: VelocityCost(gym.make(f"{task}-v5"), threshold, planar)] * 2,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    native.reset(seed=3)
    sync.reset(seed=3)
    rng = np.random.default_rng(3)
    space = native.single_action_space
    costs = []
    for _ in range(60):
        action = rng.uniform(space.low, space.high, (2, *space.shape)).astype(np.float32)
        native_cost = native.step(action)[4]["cost"]
        sync_cost = step_costs(sync.step(action)[4], 2)
        np.testing.assert_array_equal(native_cost, sync_cost)
        costs.append(native_cost)
    return np.array(costs)


def test_native_velocity_cost_state_round_trip():
    """The planar cost's "before" position is part of the saved env state."""
    env = make_vec_env("SafetyAntVelocityV5", 2, seed=0, backend="native")
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    for _ in range(5):
        env.step(rng.uniform(-1, 1, (2, 8)).astype(np.float32))
    states = env.unwrapped.get_states()
    actions = [rng.uniform(-1, 1, (2, 8)).astype(np.float32) for _ in range(20)]
    first = [env.step(a)[4]["cost"].copy() for a in actions]
    env.unwrapped.set_states(states)
    second = [env.step(a)[4]["cost"].copy() for a in actions]
    np.testing.assert_array_equal(first, second)
