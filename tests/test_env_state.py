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
    assert not env_state.plain(owner[:3])  # a view: its owner is what is saved
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


def test_a_state_of_another_layout_is_refused() -> None:
    outer = Outer()
    outer.reset(seed=0)
    with pytest.raises(ValueError, match="not the same task"):
        env_state.restore(Inner(), env_state.capture(outer))
