"""rlcore.envs.env_state: what an env's state holds (MuJoCo data, the model's placements,
plain Python data, a held env's generator) and that it restores into a fresh env."""

from __future__ import annotations

import gymnasium as gym
import mujoco
import numpy as np
import pytest

from rlcore.envs import env_state

XML = """<mujoco><worldbody>
  <body name="door" pos="0 0 0"><joint name="slide" type="slide"/><geom size="0.1"/></body>
  <site name="target" pos="0 0 1" size="0.05"/>
</worldbody></mujoco>"""


class Inner(gym.Env):
    """A held simulation (as the mazes' point / ant env, Kitchen's robot)."""

    def __init__(self) -> None:
        self.model = mujoco.MjModel.from_xml_string(XML)
        self.data = mujoco.MjData(self.model)
        self.noise = 0.0


class Outer(gym.Env):
    """A task as gymnasium-robotics writes them: its own simulation whose model moves at
    reset (Adroit's door), a goal and a task list in Python (Fetch, Kitchen), a view of
    its data (skipped: the data restores it), and a held simulation drawing from its own
    generator."""

    def __init__(self) -> None:
        self.model = mujoco.MjModel.from_xml_string(XML)
        self.data = mujoco.MjData(self.model)
        self.qpos_view = self.data.qpos  # a view: belongs to the data
        self.inner = Inner()
        self.goal = np.zeros(3)
        self.tasks = ["kettle", "microwave"]
        self.done: dict[str, float] = {}
        self.log = self.tasks  # one object under two names

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.inner.reset(seed=seed)
        self.model.body_pos[1] = self.np_random.uniform(-1, 1, 3)
        self.model.site_pos[0] = self.np_random.uniform(-1, 1, 3)
        self.model.geom_friction[0, 0] = self.np_random.uniform(0.5, 1.5)  # randomised
        self.model.opt.gravity[2] = -self.np_random.uniform(5, 15)  # physics
        self.goal = self.np_random.uniform(-1, 1, 3)
        self.data.qpos[:] = self.np_random.uniform(-1, 1, 1)
        self.inner.data.qvel[:] = self.inner.np_random.uniform(-1, 1, 1)
        mujoco.mj_forward(self.model, self.data)
        return self.goal.copy(), {}

    def advance(self) -> None:
        self.tasks.pop(0)
        self.done["kettle"] = 1.5
        self.inner.noise = float(self.inner.np_random.normal())
        mujoco.mj_step(self.model, self.data)


def test_plain_data_by_hand() -> None:
    owner = np.arange(6.0)
    assert env_state.plain(owner) and env_state.plain(3) and env_state.plain(None)
    assert env_state.plain(np.float32(1.5)) and env_state.plain("kettle")
    assert env_state.plain(owner[:3].reshape(3, 1))  # a view of numpy's memory: copied
    data = mujoco.MjData(mujoco.MjModel.from_xml_string(XML))
    assert not env_state.plain(data.qpos)  # MuJoCo's memory: the MjData restores it
    assert env_state.plain(np.random.default_rng(0)) and env_state.plain(np.random.RandomState(0))
    assert not env_state.plain(np.array([object()]))
    assert env_state.plain({"a": [1, (2.0, "b")], 3: np.zeros(2)})
    assert not env_state.plain({"a": [1, object()]})
    assert not env_state.plain({(1, 2): 3.0})  # keys: plain scalars only
    assert not env_state.plain({"x": gym.spaces.Discrete(2)})
    assert not env_state.plain([[[[[1]]]]])  # deeper than 4 levels
    assert env_state.plain([[[[1]]]])


def test_simulations_are_the_env_and_the_envs_it_holds() -> None:
    env = Outer()
    sims = env_state.simulations(env)
    assert set(sims) == {"", "inner"} and sims[""] is env and sims["inner"] is env.inner
    assert env_state.simulations(gym.make("CartPole-v1").unwrapped) == {}


def test_a_restored_env_holds_every_part_of_the_state() -> None:
    source, target = Outer(), Outer()
    source.reset(seed=0)
    source.advance()
    target.reset(seed=5)
    state = env_state.capture(source)
    env_state.restore(target, state)
    np.testing.assert_array_equal(target.data.qpos, source.data.qpos)
    assert target.data.time == source.data.time > 0
    np.testing.assert_array_equal(target.model.body_pos, source.model.body_pos)
    np.testing.assert_array_equal(target.model.site_pos, source.model.site_pos)
    np.testing.assert_array_equal(target.model.geom_friction, source.model.geom_friction)
    np.testing.assert_array_equal(target.model.opt.gravity, source.model.opt.gravity)
    np.testing.assert_array_equal(target.goal, source.goal)
    assert target.tasks == ["microwave"] and target.done == {"kettle": 1.5}
    assert target.log is target.tasks  # still one object
    assert target.inner.noise == source.inner.noise
    np.testing.assert_array_equal(target.inner.data.qvel, source.inner.data.qvel)
    assert np.shares_memory(target.qpos_view, target.data.qpos)  # still the data's view
    # the held env's generator continues as the source's, the env's own is the caller's
    assert target.inner.np_random.normal() == source.inner.np_random.normal()
    # restored copies: changing the source afterwards leaves the target as it was
    source.goal[:] = 9.0
    source.tasks.append("burner")
    assert not np.any(target.goal == 9.0) and target.tasks == ["microwave"]


def test_the_data_is_saved_without_its_model_and_restores_every_field() -> None:
    """A pickled MjData carries its model; the state keeps the data alone (Hopper's: 680 KB
    pickled, under 20 KB here) and rebuilds it around the restoring env's model: every
    array of the data (derived quantities, contacts, the solver's) equals the source's.
    Given a model whose bytes the pickle does not hold, the whole pickle is kept; a
    checkpoint's whole pickled MjData (before this format) still loads."""
    import pickle

    env = gym.make("Hopper-v5")
    env.reset(seed=0)
    for _ in range(30):  # zero torques: the foot is on the floor (2 contacts) from step 20
        env.step(np.zeros(3))
    source = env.unwrapped
    saved = env_state.data_state(source.data, source.model)
    assert set(saved) == {"before", "after"}
    assert len(pickle.dumps(saved)) < 20_000 < 500_000 < len(pickle.dumps(source.data))
    other = gym.make("Hopper-v5").unwrapped
    other.reset(seed=7)
    whole = env_state.data_state(source.data, mujoco.MjModel.from_xml_string(XML))
    for loaded in (env_state.load_data(saved, other.model), env_state.load_data(whole, other.model),
                   env_state.load_data(pickle.dumps(source.data), other.model)):  # fmt: skip
        assert loaded.ncon == source.data.ncon > 0 and loaded.nefc == source.data.nefc
        for name in ("time", "qpos", "qvel", "qacc_warmstart", "xpos", "cfrc_ext", "efc_force"):
            np.testing.assert_array_equal(getattr(loaded, name), getattr(source.data, name))
        np.testing.assert_array_equal(loaded.contact.dist, source.data.contact.dist)
    assert set(whole) == {"pickle"}


def test_a_state_of_another_layout_is_refused() -> None:
    outer = Outer()
    outer.reset(seed=0)
    with pytest.raises(ValueError, match="not the same task"):
        env_state.restore(Inner(), env_state.capture(outer))


def test_a_task_whose_state_cannot_be_saved_says_so_and_resumes_with_new_episodes(
    tmp_path,
) -> None:
    """Simglucose's patient lives in scipy's ODE solver: its env states are marked not
    restorable with the reason, restoring them reports new episodes, and a resumed run
    starts them (seeded by the step) and notes why in train.log."""
    from rlcore.envs.make import get_vec_env_state, make_vec_env, set_vec_env_state
    from rlcore.envs.neorl2 import SIMGLUCOSE_ID
    from rlcore.envs.simglucose import SimglucoseEnv
    from rlcore.train import train
    from tests.conftest import make_config

    assert isinstance(SimglucoseEnv(), env_state.UnsavedState)
    env = make_vec_env(SIMGLUCOSE_ID, 2, backend="sync")
    env.reset(seed=0)
    state = get_vec_env_state(env)
    why = SimglucoseEnv.unsaved_state
    assert state["envs"] == [{"restorable": False, "why": why}] * 2
    assert set_vec_env_state(env, state) is False
    args = ["algo=sac", f"env={SIMGLUCOSE_ID}", "algo.learning_starts=50",
            "algo.batch_size=16", "algo.hidden=[16]", "eval_every=0", "threads=1",
            "logger=quiet"]  # fmt: skip
    run = tmp_path / "run"
    train(make_config(*args, "total_steps=100"), run)
    train(make_config(*args, "total_steps=150", f"resume={run}"), run)
    assert f"resumed at step 100 with new episodes: {why}" in (run / "train.log").read_text()


def assert_continues(env_id: str, **options) -> int:
    """``env_id`` restored after 20 steps into an env reset from another seed continues
    as the source does for 40 steps (25-step episodes: through a reset), bit for bit.
    Returns the pickled state's size in bytes."""
    import pickle

    from rlcore.envs.make import get_vec_env_state, make_vec_env, set_vec_env_state

    options = {"backend": "sync", "max_episode_steps": 25, **options}
    source, target = make_vec_env(env_id, 1, **options), make_vec_env(env_id, 1, **options)
    source.reset(seed=0)
    target.reset(seed=7)
    source.single_action_space.seed(0)

    def actions(n: int) -> list[np.ndarray]:
        return [np.stack([source.single_action_space.sample()]) for _ in range(n)]

    for action in actions(20):
        source.step(action)
    state = get_vec_env_state(source)
    set_vec_env_state(target, state)
    ends = 0
    for action in actions(40):
        ours, theirs = source.step(action), target.step(action)
        for mine, want in zip(ours[:4], theirs[:4], strict=True):
            for part in mine if isinstance(mine, dict) else [None]:
                np.testing.assert_array_equal(
                    mine[part] if part else mine, want[part] if part else want
                )
        ends += int(ours[2][0] or ours[3][0])
    assert ends >= 1  # the comparison crossed a reset
    return len(pickle.dumps(state))


@pytest.mark.parametrize("name", ["DMSD", "RandomFrictionHopper"])
def test_rlcore_tasks_with_state_outside_mjdata_continue_exactly(name: str) -> None:
    """NeoRL2's DMSD keeps a legacy numpy generator and its target track (a view) in
    Python; RandomFrictionHopper draws the model's friction at each reset. Before
    env_state saved them, both went off within 30 steps (3.5 and 0.25)."""
    assert_continues(f"neorl2/{name}-v0")


def test_the_model_digest_tells_models_apart() -> None:
    """Equal after the same reset, different after another (the door moved)."""
    envs = [Outer(), Outer(), Outer()]
    for env, seed in zip(envs, (0, 0, 1), strict=True):
        env.reset(seed=seed)
    digests = [env_state.model_digest(env) for env in envs]
    assert digests[0] == digests[1] != digests[2]
