"""The observation seam (rlcore.observations): one spec says what an observation is, and
buffers, networks, normalisers, checkpoints, ``load_policy`` and export read it. Exact,
hand-computed values throughout; the one-vector path is the golden one (every other test
file, and ``python -m rlcore.benchmarks.equivalence --compare``)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.buffers import FlatObs, ReplayBuffer, RolloutBuffer
from rlcore.envs.make import NormalizeObservation, final_next_obs, make_vec_env
from rlcore.nets import ObsEncoder
from rlcore.observations import (
    FLAT,
    GOAL_PARTS,
    IMAGE,
    VECTOR,
    ObsPart,
    ObsSpec,
    PartNormalizer,
    part_statistics,
)
from rlcore.types import Batch
from tests.conftest import FAST, make_config
from tests.goal_env import ENV_ID

IMAGE_ERROR = "image parts need an image encoder: pass one"
BOX1 = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
GOAL_SPACE = gym.spaces.Dict(
    {"observation": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "achieved_goal": BOX1,
     "desired_goal": BOX1}
)  # fmt: skip
GOAL = ObsSpec.from_space(GOAL_SPACE)
# a state part, a goal and a small stacked image: what the pixel issue stores
MIXED = ObsSpec(
    (ObsPart("observation", (2,)), ObsPart("desired_goal", (1,)),
     ObsPart("pixels", (2, 2, 2), IMAGE, frame_stack=2)),
    keyed=True,
)  # fmt: skip


# ----------------------------------------------------------------------------- the spec


def test_a_box_is_the_one_vector_part_of_every_run_before_the_seam():
    spec = ObsSpec.from_space(gym.spaces.Box(-np.inf, np.inf, (3,), np.float64))
    assert spec == ObsSpec.vector((3,)) == ObsSpec.of((3,))
    assert spec.parts == (ObsPart(FLAT, (3,), VECTOR, "float32", True, 1, None),)
    assert not spec.keyed and spec.flat_dim == 3 and spec.all_vector
    # load_agent rebuilt exactly this space from a checkpoint before the seam
    assert spec.to_space() == gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    # a uint8 vector (not three axes) stays a float vector, as buffers stored it before
    assert ObsSpec.from_space(gym.spaces.Box(0, 255, (4,), np.uint8)).parts[0].kind == VECTOR


def test_a_uint8_channel_first_box_is_an_image_with_its_frame_stack():
    spec = ObsSpec.from_space(gym.spaces.Box(0, 255, (12, 84, 84), np.uint8), frame_stack=4)
    (part,) = spec.parts
    assert (part.kind, part.dtype, part.channels, part.frame_stack) == (IMAGE, "uint8", 3, 4)
    assert part.normalize is False and part.torch_dtype == torch.uint8
    with pytest.raises(ValueError, match="dividing the first axis"):
        ObsSpec.from_space(gym.spaces.Box(0, 255, (12, 84, 84), np.uint8), frame_stack=5)
    with pytest.raises(ValueError, match=IMAGE_ERROR):
        spec.flat_dim  # noqa: B018
    with pytest.raises(ValueError, match="images are never standardised"):
        ObsPart("pixels", (3, 8, 8), IMAGE, normalize=True)
    with pytest.raises(ValueError, match="frame_stack is for images"):
        ObsPart("state", (3,), frame_stack=2)


def test_dict_parts_in_goal_order_then_the_space_order_goals_share_statistics():
    # gymnasium sorts a Dict's keys (achieved_goal, desired_goal, observation): the spec
    # puts the goal parts in the one stated order
    assert list(GOAL_SPACE.spaces) == ["achieved_goal", "desired_goal", "observation"]
    assert GOAL.names == GOAL_PARTS == ("observation", "achieved_goal", "desired_goal")
    assert GOAL.keyed and GOAL.flat_dim == 4
    assert [p.statistics for p in GOAL.parts] == [None, None, "achieved_goal"]
    mixed = ObsSpec.from_space(
        gym.spaces.Dict({"state": gym.spaces.Box(-1, 1, (5,)), "extra": gym.spaces.Box(-1, 1, (2, 3)),
                         "pixels": gym.spaces.Box(0, 255, (3, 8, 8), np.uint8)}),
        frame_stack={"pixels": 3},
    )  # fmt: skip
    assert mixed.names == ("extra", "pixels", "state")  # the space's (sorted) order
    assert [p.kind for p in mixed.parts] == [VECTOR, IMAGE, VECTOR]
    assert mixed.part("extra").size == 6 and mixed.part("pixels").channels == 1
    assert not mixed.all_vector and mixed.images == (mixed.part("pixels"),)
    with pytest.raises(ValueError, match="flatten_obs"):
        ObsSpec.from_space(gym.spaces.Dict({"a": BOX1, "b": gym.spaces.Discrete(3)}))
    with pytest.raises(ValueError, match="flatten_obs"):
        ObsSpec.from_space(gym.spaces.Tuple((BOX1, BOX1)))
    with pytest.raises(ValueError, match="statistics of 'achieved_goal'"):
        ObsSpec((ObsPart("desired_goal", (2,), statistics="achieved_goal"),
                 ObsPart("achieved_goal", (1,))), keyed=True)  # fmt: skip


def test_records_round_trip_and_an_old_record_is_the_one_vector():
    for spec in (ObsSpec.vector((3,)), GOAL, MIXED):
        assert ObsSpec.from_record(spec.spaces_record()) == spec
    # a checkpoint written before the seam: obs_shape only
    old = {"obs_shape": [3], "action_low": np.zeros(1), "action_high": np.ones(1)}
    assert ObsSpec.from_record(old) == ObsSpec.vector((3,))
    assert ObsSpec.vector((3,)).spaces_record()["obs_shape"] == [3]
    assert GOAL.spaces_record()["obs_shape"] == [4]  # an old reader's flat vector
    assert MIXED.spaces_record()["obs_shape"] is None
    assert ObsSpec.from_space(GOAL.to_space()) == GOAL
    # a gym Box cannot hold an image's frame stack: the caller states it again
    assert ObsSpec.from_space(MIXED.to_space(), frame_stack={"pixels": 2}) == MIXED


def test_dict_observations_become_tensors_and_the_flat_vector_in_part_order():
    single = {"desired_goal": [9.0], "observation": [1.0, 2.0], "achieved_goal": [5.0]}
    flat, is_single = GOAL.flat_batch(single, "cpu")
    assert flat.tolist() == [[1.0, 2.0, 5.0, 9.0]] and is_single
    batch = {"observation": np.array([[1.0, 2.0], [3.0, 4.0]]),
             "achieved_goal": np.array([[5.0], [6.0]]), "desired_goal": np.array([[9.0], [10.0]])}  # fmt: skip
    flat, is_single = GOAL.flat_batch(batch, "cpu")
    assert flat.tolist() == [[1, 2, 5, 9], [3, 4, 6, 10]] and not is_single
    assert flat.dtype == torch.float32
    assert {k: v.tolist() for k, v in GOAL.split(flat).items()} == {
        k: v.tolist() for k, v in batch.items()
    }
    with pytest.raises(KeyError, match="desired_goal"):
        GOAL.tensors({"observation": [1.0, 2.0], "achieved_goal": [5.0]}, "cpu")
    with pytest.raises(ValueError, match="has shape"):
        GOAL.tensors({**single, "observation": [1.0, 2.0, 3.0]}, "cpu")
    with pytest.raises(TypeError, match="pass a dict"):
        GOAL.tensors(np.zeros(4), "cpu")
    parts, _ = MIXED.tensors({"observation": [[0, 0]], "desired_goal": [[0]],
                              "pixels": np.full((1, 2, 2, 2), 255, np.uint8)}, "cpu")  # fmt: skip
    assert parts["pixels"].dtype == torch.uint8 and int(parts["pixels"].max()) == 255
    with pytest.raises(ValueError, match=IMAGE_ERROR):
        MIXED.concat(parts)


# ----------------------------------------------------------------------------- buffers


def _mixed_step(buffer: ReplayBuffer, t: int) -> None:
    """Step t of 2 envs; env i's values encode id = 10 t + i: observation [id, -id],
    desired goal [id + 0.25], pixels all 200 + id; the next observation adds 0.5 (pixels
    201 + id); reward id."""
    ids = np.array([10 * t, 10 * t + 1], np.float32)

    def obs(shift: float) -> dict[str, np.ndarray]:
        return {
            "observation": np.stack([ids, -ids], 1) + shift,
            "desired_goal": ids[:, None] + 0.25 + shift,
            "pixels": np.broadcast_to((200 + ids + 2 * shift).astype(np.uint8)[:, None, None, None],
                                      (2, 2, 2, 2)).copy(),
        }  # fmt: skip

    buffer.add(obs(0.0), ids[:, None], ids, obs(0.5), np.zeros(2), np.zeros(2))


def test_replay_buffer_stores_each_part_in_its_dtype_with_exact_rows():
    buffer = ReplayBuffer(4, MIXED, (1,), num_envs=2)
    assert list(buffer.specs) == [
        "obs.observation", "obs.desired_goal", "obs.pixels", "action", "reward",
        "next_obs.observation", "next_obs.desired_goal", "next_obs.pixels", "terminated",
        "truncated",
    ]  # fmt: skip
    assert buffer.data["obs.pixels"].dtype == torch.uint8
    assert buffer.data["next_obs.observation"].dtype == torch.float32
    assert buffer.extra_channels == ()
    for t in range(3):  # rows 0,1 then 2,3 then 0,1 again (wrapped)
        _mixed_step(buffer, t)
    assert buffer.reward.tolist() == [20, 21, 10, 11]
    assert buffer.obs["observation"][0].tolist() == [20, -20]
    assert buffer.next_obs["desired_goal"][3].tolist() == [11.75]
    assert buffer.obs["pixels"][1].unique().tolist() == [221]
    assert buffer.next_obs["pixels"][1].unique().tolist() == [222]
    batch = buffer.batch(torch.tensor([2, 0]))
    assert set(batch.obs) == {"observation", "desired_goal", "pixels"} and len(batch) == 2
    assert batch.obs["observation"].tolist() == [[10, -10], [20, -20]]
    assert batch.next_obs["observation"].tolist() == [[10.5, -9.5], [20.5, -19.5]]
    assert batch.obs["desired_goal"].tolist() == [[10.25], [20.25]]
    assert batch.obs["pixels"].dtype == torch.uint8
    assert batch.obs["pixels"].flatten(1)[:, 0].tolist() == [210, 220]
    assert batch.reward.tolist() == [10, 20]
    with pytest.raises(ValueError, match="must be a dict of the parts"):
        buffer.add(np.zeros((2, 7)), np.zeros((2, 1)), np.zeros(2), np.zeros((2, 7)),
                   np.zeros(2), np.zeros(2))  # fmt: skip


def test_next_obs_at_a_truncation_is_the_final_dict_observation_not_the_reset_one():
    """GoalPoint moves by its action; 3 steps of +0.5 then the time limit truncates. The
    stored next observation of the last step is the episode's final one: its position
    moved 3 x 0.5 from the start and its desired goal is the episode's own; the reset
    observation the env hands out instead has a new goal (the mutation to catch)."""
    env = make_vec_env(ENV_ID, 1, seed=0, max_episode_steps=3)
    buffer = ReplayBuffer(8, ObsSpec.from_space(env.single_observation_space), (1,))
    obs, _ = env.reset(seed=0)
    start, goal = obs["observation"][0, 0], obs["desired_goal"][0, 0]
    position = start
    action = np.full((1, 1), 0.5, np.float32)
    for _ in range(3):
        next_obs, reward, terminated, truncated, info = env.step(action)
        buffer.add(obs, action, reward, final_next_obs(next_obs, info), terminated, truncated)
        obs = next_obs
        position = np.float32(position + np.float32(0.5))
    env.close()
    assert buffer.truncated[:3].tolist() == [0, 0, 1]
    assert (
        buffer.next_obs["observation"][2].item()
        == position
        == buffer.next_obs["achieved_goal"][2].item()
    )
    assert buffer.next_obs["desired_goal"][2].item() == goal
    assert buffer.next_obs["observation"][0].item() == buffer.obs["observation"][1].item()
    reset_goal = obs["desired_goal"][0, 0]
    assert reset_goal != goal and obs["observation"][0, 0] != position  # what not to store
    assert buffer.reward[2].item() == pytest.approx(-abs(goal - position))


def test_a_dict_buffer_state_round_trips_and_grows_in_order():
    a = ReplayBuffer(4, MIXED, (1,), num_envs=2, seed=3)
    for t in range(3):
        _mixed_step(a, t)
    a.sample(2)
    b = ReplayBuffer(4, MIXED, (1,), num_envs=2, seed=99)
    b.load_state_dict(a.state_dict())
    assert all(torch.equal(a.data[name], b.data[name]) for name in a.data)
    first, second = a.sample(5), b.sample(5)
    assert torch.equal(first.reward, second.reward)
    assert all(torch.equal(first.obs[k], second.obs[k]) for k in MIXED.names)
    grown = ReplayBuffer(8, MIXED, (1,), num_envs=2)  # a resumed run with more steps
    grown.load_state_dict(a.state_dict())
    assert grown.reward[:4].tolist() == [10, 11, 20, 21]  # oldest first: rows 2, 3, 0, 1
    assert grown.obs["observation"][:4, 0].tolist() == [10, 11, 20, 21]
    assert grown.obs["pixels"][:4].flatten(1)[:, 0].tolist() == [210, 211, 220, 221]
    with pytest.raises(ValueError, match="channels"):
        ReplayBuffer(4, (5,), (1,), num_envs=2).load_state_dict(a.state_dict())


def test_flat_obs_concatenates_the_parts_in_spec_order_for_vector_networks():
    buffer = ReplayBuffer(4, GOAL, (1,))
    obs = {"observation": [[1.0, 2.0]], "achieved_goal": [[5.0]], "desired_goal": [[9.0]]}
    nxt = {"observation": [[3.0, 4.0]], "achieved_goal": [[6.0]], "desired_goal": [[10.0]]}
    buffer.add(obs, [[0.0]], [1.0], nxt, [0.0], [0.0])
    view = FlatObs(buffer, GOAL)
    batch = view.sample(3)
    assert batch.obs.tolist() == [[1, 2, 5, 9]] * 3
    assert batch.next_obs.tolist() == [[3, 4, 6, 10]] * 3
    assert view.state_dict()["size"] == 1  # the buffer's own state: nothing of its own
    with pytest.raises(ValueError, match=IMAGE_ERROR):
        FlatObs(ReplayBuffer(4, MIXED, (1,)), MIXED)
    dict_batch = buffer.sample(2)
    both = Batch.cat([dict_batch, dict_batch])
    assert both.obs["desired_goal"].tolist() == [[9.0]] * 4 and len(both) == 4
    with pytest.raises(ValueError, match="mixes observations"):
        Batch.cat([dict_batch, batch])


def test_rollout_buffer_stores_parts_and_returns_them_flattened_in_step_order():
    rollout = RolloutBuffer(2, 2, MIXED, (1,))
    assert rollout.obs["pixels"].dtype == torch.uint8
    for t in range(2):
        ids = np.array([10 * t, 10 * t + 1], np.float32)
        obs = {"observation": np.stack([ids, -ids], 1), "desired_goal": ids[:, None],
               "pixels": np.full((2, 2, 2, 2), 100 + t, np.uint8)}  # fmt: skip
        zeros = np.zeros(2)
        rollout.add(obs, ids[:, None], zeros, zeros, zeros, zeros, zeros, zeros)
    batch = rollout.compute(np.zeros(2), gamma=0.99, gae_lambda=0.95)
    assert len(batch) == 4
    assert batch.obs["observation"].tolist() == [[0, 0], [1, -1], [10, -10], [11, -11]]
    assert batch.obs["pixels"].flatten(1)[:, 0].tolist() == [100, 100, 101, 101]
    assert batch.index(torch.tensor([3])).obs["desired_goal"].tolist() == [[11.0]]


# ----------------------------------------------------------------------------- networks


class _Pixels(nn.Module):
    """A stand-in image encoder: the mean pixel of each frame / 255 (out_dim 2)."""

    out_dim = 2

    def __init__(self, part: ObsPart) -> None:
        super().__init__()
        self.frames, self.seen = part.frame_stack, []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.dtype)
        return x.float().reshape(len(x), self.frames, -1).mean(-1) / 255


def test_obs_encoder_is_the_identity_for_one_vector_and_concatenates_parts():
    one = ObsEncoder(ObsSpec.vector((3,)))
    x = torch.randn(4, 3)
    assert one(x) is x and one.out_dim == 3
    goal = ObsEncoder(GOAL)
    parts = {"observation": torch.tensor([[1.0, 2.0]]), "achieved_goal": torch.tensor([[5.0]]),
             "desired_goal": torch.tensor([[9.0]])}  # fmt: skip
    assert goal.out_dim == 4 and goal(parts).tolist() == [[1, 2, 5, 9]]
    with pytest.raises(ValueError, match=IMAGE_ERROR):
        ObsEncoder(MIXED)
    encoder = ObsEncoder(MIXED, image_encoder=_Pixels)
    assert encoder.out_dim == 2 + 1 + 2
    pixels = torch.tensor([[[[0, 0], [0, 0]], [[255, 255], [255, 255]]]], dtype=torch.uint8)
    out = encoder({"observation": torch.tensor([[1.0, 2.0]]), "desired_goal": torch.tensor([[9.0]]),
                   "pixels": pixels})  # fmt: skip
    assert out.tolist() == [[1, 2, 9, 0, 1]]
    assert encoder.images["pixels"].seen == [torch.uint8]  # the encoder scales its pixels

    class NoSize(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    with pytest.raises(TypeError, match="out_dim"):
        ObsEncoder(MIXED, image_encoder=lambda part: NoSize())


class _Echo:
    """An agent whose policy returns its network input (the flat observation)."""

    def __init__(self, observation_space: gym.Space, obs_parts: bool = False) -> None:
        self.plumbing = Plumbing(observation_space, BOX1, "cpu", obs_parts=obs_parts)
        self.device = self.plumbing.device

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        return obs


def test_plumbing_sizes_flattens_and_batches_through_the_spec():
    agent = _Echo(GOAL_SPACE)
    assert agent.plumbing.obs == GOAL and agent.plumbing.obs_dim == 4
    single = {"observation": [1.0, 2.0], "achieved_goal": [5.0], "desired_goal": [9.0]}
    assert agent.act(single).tolist() == [1, 2, 5, 9]  # one observation: no batch axis
    batch = {k: np.array([v, v]) for k, v in single.items()}
    assert agent.act(batch).shape == (2, 4)
    assert agent.act(np.array([7.0, 8.0])).tolist() == [7.0, 8.0]  # arrays: as before
    buffer = ReplayBuffer(4, GOAL, (1,))
    assert isinstance(agent.plumbing.batches(buffer), FlatObs)
    assert _Echo(GOAL_SPACE, obs_parts=True).plumbing.batches(buffer) is buffer
    flat = ReplayBuffer(4, (3,), (1,))
    assert _Echo(gym.spaces.Box(-1, 1, (3,))).plumbing.batches(flat) is flat
    image = Plumbing(gym.spaces.Box(0, 255, (3, 8, 8), np.uint8), BOX1, "cpu")
    with pytest.raises(ValueError, match=IMAGE_ERROR):
        image.obs_dim  # noqa: B018


# ----------------------------------------------------------------------------- normalisers

NORM_SPEC = ObsSpec(
    (ObsPart("observation", (2,)), ObsPart("achieved_goal", (1,)),
     ObsPart("desired_goal", (1,), statistics="achieved_goal"),
     ObsPart("pixels", (1, 2, 2), IMAGE)),
    keyed=True,
)  # fmt: skip
NORM_STATE = {
    "observation": {"mean": np.array([1.0, -1.0]), "var": np.array([4.0, 0.25]), "count": 2.0},
    "achieved_goal": {"mean": np.array([2.0]), "var": np.array([1.0]), "count": 2.0},
}


def test_part_normalizer_standardises_marked_parts_and_goals_with_achieved_statistics():
    norm = PartNormalizer(NORM_SPEC, clip=10.0, epsilon=0.0)
    assert set(norm.state_dict()) == {"observation", "achieved_goal"}  # no goal, no image stats
    norm.load_state_dict(NORM_STATE)
    pixels = np.full((1, 1, 2, 2), 7, np.uint8)
    obs = {"observation": np.array([[3.0, 0.0]]), "achieved_goal": np.array([[4.0]]),
           "desired_goal": np.array([[5.0]]), "pixels": pixels}  # fmt: skip
    out = norm.normalize(obs)
    assert out["observation"].tolist() == [[1.0, 2.0]]  # (3 - 1) / 2, (0 + 1) / 0.5
    assert out["achieved_goal"].tolist() == [[2.0]]  # (4 - 2) / 1
    assert out["desired_goal"].tolist() == [[3.0]]  # (5 - 2) / 1: achieved_goal's statistics
    assert out["pixels"] is pixels  # never standardised
    assert (
        norm.normalize({**obs, "desired_goal": np.array([[40.0]])})["desired_goal"].item() == 10.0
    )
    torch_out = norm.normalize({k: torch.as_tensor(v) for k, v in obs.items()})
    assert (
        torch_out["desired_goal"].tolist() == [[3.0]]
        and torch_out["observation"].dtype == torch.float32
    )
    # Chan's update by hand. achieved_goal: count 2, mean 2, var 1, batch [4, 4] (mean 4,
    # var 0): delta 2, total 4, mean 2 + 2 * 2 / 4 = 3, M2 = 1 * 2 + 0 * 2 + 2^2 * 2 * 2 / 4
    # = 6, var 6 / 4 = 1.5; the desired goals (100) do not count. observation: batch
    # [[1, -1], [1, -1]] (its mean): mean unchanged, var [4 * 2 / 4, 0.25 * 2 / 4].
    norm.update({"observation": np.array([[1.0, -1.0], [1.0, -1.0]]),
                 "achieved_goal": np.array([[4.0], [4.0]]),
                 "desired_goal": np.array([[100.0], [100.0]]), "pixels": np.zeros((2, 1, 2, 2))})  # fmt: skip
    state = norm.state_dict()
    assert (state["achieved_goal"]["mean"].tolist(), state["achieved_goal"]["var"].tolist(),
            state["achieved_goal"]["count"]) == ([3.0], [1.5], 4.0)  # fmt: skip
    assert state["observation"]["mean"].tolist() == [1.0, -1.0]
    assert state["observation"]["var"].tolist() == [2.0, 0.125]
    with pytest.raises(ValueError, match="saved statistics"):
        norm.load_state_dict({"observation": NORM_STATE["observation"]})


def test_part_normalizer_of_one_vector_is_the_env_side_normaliser():
    env = make_vec_env(ENV_ID, 2, flatten_obs=True, normalize_obs=True)
    wrapper = env  # the outermost wrapper
    assert isinstance(wrapper, NormalizeObservation)
    norm = PartNormalizer(ObsSpec.vector((3,)))
    rng = np.random.default_rng(0)
    for _ in range(3):
        rows = rng.normal(2.0, 3.0, (5, 3))
        wrapper.rms.update(rows)
        norm.update(rows)
    raw = rng.normal(2.0, 30.0, (4, 3))  # some clipped at 10
    assert np.array_equal(norm.normalize(raw), wrapper.normalize(raw))
    assert np.array_equal(norm.state_dict()[FLAT]["var"], wrapper.rms.state_dict()["var"])
    env.close()
    unnamed = make_vec_env(ENV_ID, 1, normalize_obs=True)  # a dict: which statistics?
    with pytest.raises(ValueError, match="part_statistics"):
        unnamed.reset(seed=0)
    unnamed.close()
    # a dict observation: part by part, the desired goal with the achieved goal's moments
    dict_env = make_vec_env(ENV_ID, 2, normalize_obs=True, part_statistics=part_statistics)
    assert isinstance(dict_env, NormalizeObservation) and dict_env.rms is None
    raw_rows = []
    obs, _ = dict_env.reset(seed=0)
    raw_rows.append(final_raw(dict_env))
    for t in range(4):
        obs, *_ = dict_env.step(np.full((2, 1), 0.3 * (t - 1), np.float32))
        raw_rows.append(final_raw(dict_env))
    seen = {name: np.concatenate([row[name] for row in raw_rows]) for name in GOAL_PARTS}
    state = dict_env.state_dict()["parts"]
    assert set(state) == {"observation", "achieved_goal"}  # no statistic of its own
    assert state["achieved_goal"]["count"] == pytest.approx(10 + 1e-4)
    for name, source in (("observation", "observation"), ("desired_goal", "achieved_goal")):
        values = seen[source][:, 0].astype(np.float64)
        prior = 1e-4  # RunningMeanStd's prior: mean 0, var 1, count 1e-4
        mean = values.sum() / (len(values) + prior)
        var = (values.var() * len(values) + prior + values.mean() ** 2 * prior * len(values)
               / (len(values) + prior)) / (len(values) + prior)  # fmt: skip
        assert state[source]["mean"][0] == pytest.approx(mean, rel=1e-6)
        assert state[source]["var"][0] == pytest.approx(var, rel=1e-6)
        last = raw_rows[-1][name][:, 0].astype(np.float64)
        expected = np.clip((last - mean) / np.sqrt(var + 1e-8), -10, 10).astype(np.float32)
        np.testing.assert_allclose(obs[name][:, 0], expected, rtol=1e-6)
    dict_env.close()


def final_raw(env: NormalizeObservation) -> dict[str, np.ndarray]:
    """The raw dict observation the wrapper standardised last (its inner env's)."""
    inner = env.env
    while not hasattr(inner, "envs"):
        inner = inner.env
    return {
        name: np.stack([sub.unwrapped._obs()[name] for sub in inner.envs]) for name in GOAL_PARTS
    }


def test_standardize_flat_is_normalize_on_the_parts_then_concatenated():
    """The in-agent path (flat vectors, what an MLP agent reads) standardises exactly as
    ``normalize`` does part by part: the desired goal with the achieved goal's statistics,
    clipped, float32; ``update_flat`` feeds the statistics as ``update`` does."""
    norm = PartNormalizer(GOAL, clip=5.0)
    other = PartNormalizer(GOAL, clip=5.0)
    rng = np.random.default_rng(0)
    rows = rng.normal(1.0, 2.0, (6, 4)).astype(np.float32)  # observation 2, goals 1 + 1
    norm.update_flat(torch.as_tensor(rows))
    other.update(GOAL.split(torch.as_tensor(rows)))
    assert str(norm.state_dict()) == str(other.state_dict())
    flat = torch.as_tensor(rng.normal(1.0, 8.0, (5, 4)).astype(np.float32))
    parts = norm.normalize(GOAL.split(flat))
    assert torch.equal(norm.standardize_flat(flat), GOAL.concat(parts))
    # by hand: the desired goal (column 3) with the achieved goal's (column 2) moments
    stats = norm.state_dict()["achieved_goal"]
    by_hand = (flat[:, 3].double() - stats["mean"][0]) / np.sqrt(stats["var"][0] + 1e-8)
    assert torch.equal(norm.standardize_flat(flat)[:, 3], by_hand.clamp(-5, 5).float())
    assert norm.standardize_flat(flat).abs().max() <= 5.0
    assert stats["count"] == 6 + 1e-4  # only the achieved goals' 6 rows, not the desired
    unmarked = ObsSpec((ObsPart("observation", (2,)), ObsPart("extra", (1,), normalize=False)),
                       keyed=True)  # fmt: skip
    keep = PartNormalizer(unmarked)
    keep.update_flat(torch.ones(2, 3))
    assert torch.equal(keep.standardize_flat(torch.full((1, 3), 9.0))[:, 2], torch.tensor([9.0]))


# ----------------------------------------------------------------------------- runs

GOAL_RUN = [
    "algo=sac", f"env={ENV_ID}", "total_steps=300", "algo.learning_starts=100",
    "algo.batch_size=16", "algo.hidden=[16,16]", "env.num_envs=2", "eval_every=150", *FAST,
]  # fmt: skip


@pytest.fixture(scope="module", params=["raw", "normalized"])
def goal_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SAC on the goal task's dict observations, no env.flatten_obs (300 steps); with
    ``algo.normalize_obs=true`` the agent standardises them inside (its statistics are a
    part of the agent, so load_policy, evaluate and export must carry them)."""
    from rlcore.train import train

    run_dir = tmp_path_factory.mktemp("goal") / f"sac_{request.param}"
    extra = ["algo.normalize_obs=true"] if request.param == "normalized" else []
    result = train(make_config(*GOAL_RUN, *extra), run_dir)
    assert np.isfinite(result["eval/return"]) and result["run/step"] == 300
    return run_dir


def test_in_agent_normaliser_learns_from_update_batches_and_acts_with_them(tmp_path: Path):
    """algo.normalize_obs=true: the statistics saw every update batch's observations (16
    rows per update, the goals' with the achieved goals only), the buffer holds raw
    observations (HER recomputes rewards from them), and acting standardises with the
    saved statistics, as computed here by hand."""
    import rlcore
    from rlcore.checkpoint import load_checkpoint
    from rlcore.train import train

    train(make_config(*GOAL_RUN, "algo.normalize_obs=true", "algo.clip_obs=3"), tmp_path)
    state = load_checkpoint(tmp_path)
    stats = state["agent"]["obs_statistics"]
    assert set(stats) == {"observation", "achieved_goal"}
    assert stats["observation"]["count"] == pytest.approx(16 * state["agent"]["updates"] + 1e-4)
    assert state["agent"]["updates"] > 0
    buffer = state["loop"]["stateful"]["buffer"]["data"]
    # raw task values: standardised ones could not leave the clip's +-3
    assert buffer["obs.observation"].abs().max() > 3.0
    agent = rlcore.load_agent(tmp_path)
    raw = np.array([[0.3, 0.3, -0.8]], np.float32)
    mean = np.concatenate([stats["observation"]["mean"], stats["achieved_goal"]["mean"],
                           stats["achieved_goal"]["mean"]])  # fmt: skip
    var = np.concatenate([stats["observation"]["var"], stats["achieved_goal"]["var"],
                          stats["achieved_goal"]["var"]])  # fmt: skip
    standardized = np.clip((raw - mean) / np.sqrt(var + 1e-8), -3, 3).astype(np.float32)
    with torch.no_grad():
        by_hand, _ = agent.actor(torch.as_tensor(standardized), deterministic=True,
                                 with_log_prob=False)  # fmt: skip
    np.testing.assert_allclose(agent.act(raw, True), by_hand.numpy(), rtol=0, atol=1e-6)
    assert not np.allclose(agent.act(raw, True), agent.actor(torch.as_tensor(raw), True,
                                                            False)[0].detach().numpy())  # fmt: skip


def test_sac_trains_on_dict_observations_and_saves_the_spec(goal_run: Path):
    from rlcore.checkpoint import load_checkpoint

    state = load_checkpoint(goal_run)
    spec = ObsSpec.from_record(state["spaces"])
    assert spec.names == GOAL_PARTS and [p.shape for p in spec.parts] == [(1,)] * 3
    assert spec.part("desired_goal").statistics == "achieved_goal"
    assert state["spaces"]["obs_shape"] == [3]
    buffer = state["loop"]["stateful"]["buffer"]["data"]
    assert {name for name in buffer if "obs" in name} == {
        f"{field}.{part}" for field in ("obs", "next_obs") for part in GOAL_PARTS
    }
    assert state["agent"]["actor"]["net.0.weight"].shape == (16, 3)  # the parts, flat


def test_load_policy_acts_on_a_dict_observation_as_on_its_flat_vector(goal_run: Path):
    import rlcore

    policy, agent = rlcore.load_policy(goal_run), rlcore.load_agent(goal_run)
    obs = {"observation": np.array([0.3], np.float32), "achieved_goal": np.array([0.3], np.float32),
           "desired_goal": np.array([-0.8], np.float32)}  # fmt: skip
    action = policy(obs)
    assert action.shape == (1,)
    assert np.array_equal(action, agent.act(np.array([0.3, 0.3, -0.8], np.float32), True))
    # the order matters: goal first would be another observation
    assert not np.array_equal(action, agent.act(np.array([-0.8, 0.3, 0.3], np.float32), True))
    batch = {k: np.stack([v, v + 0.5]) for k, v in obs.items()}
    flat = np.array([[0.3, 0.3, -0.8], [0.8, 0.8, -0.3]], np.float32)
    assert np.array_equal(policy(batch), agent.act(flat, True)) and policy(batch).shape == (2, 1)
    with pytest.raises(TypeError, match="dict observations"):
        policy(np.zeros(3, np.float32))


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_export_takes_one_input_per_part(goal_run: Path, tmp_path: Path, fmt: str):
    import rlcore
    from rlcore.export import main

    out = tmp_path / f"policy.{fmt}"
    assert main([str(goal_run), "--format", fmt, "--out", str(out)]) == 0
    obs = {"observation": np.array([[0.3], [-0.2]], np.float32),
           "achieved_goal": np.array([[0.3], [-0.2]], np.float32),
           "desired_goal": np.array([[-0.8], [0.9]], np.float32)}  # fmt: skip
    expected = rlcore.load_policy(goal_run)(obs)
    if fmt == "onnx":
        onnxruntime = pytest.importorskip("onnxruntime")
        session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == list(GOAL_PARTS)
        (got,) = session.run(None, obs)
    else:
        module = torch.jit.load(str(out))
        got = module(*(torch.as_tensor(obs[name]) for name in GOAL_PARTS)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_export_refuses_image_observations_of_an_agent_without_encoder_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    from rlcore.checkpoint import FORMAT_VERSION, save_checkpoint
    from rlcore.export import main
    from rlcore.spaces import describe_action_space

    spaces = {**MIXED.spaces_record(), **describe_action_space(BOX1)}
    save_checkpoint({"format": FORMAT_VERSION, "algo": "td3", "config": {}, "spaces": spaces,
                     "agent": {}}, tmp_path / "checkpoints" / "latest.pt")  # fmt: skip
    assert main([str(tmp_path), "--format", "onnx"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: algo=td3 has no image encoder")
    assert err.count("\n") == 1


def test_evaluate_a_dict_observation_run(goal_run: Path):
    from rlcore.evaluate import main

    assert main([str(goal_run), "episodes=2"]) == 0


def test_td3_trains_on_dict_observations_too(tmp_path: Path):
    from rlcore.checkpoint import load_checkpoint
    from rlcore.train import train

    args = ["algo=td3", *GOAL_RUN[1:], "algo.learning_starts=100"]
    result = train(make_config(*args), tmp_path)
    assert np.isfinite(result["eval/return"]) and result["run/step"] == 300
    assert load_checkpoint(tmp_path)["agent"]["critic"]["net.hidden_layers.0.weight"].shape == (
        2,
        3 + 1,
        16,
    )  # two critics on the 3 flat observation values and the action


def test_runs_that_still_read_flat_observations_refuse_dicts_naming_why():
    from rlcore.train import train

    # a BC policy cloned from a flattened dataset, on the task's dict observations
    bc = Path(__file__).parents[1] / "benchmarks/assets/pandapeginsertion_diffusion_bc.pt"
    with pytest.raises(ValueError, match=r"learned from observations \{'obs': \(12,\)\}.*"
                       r"'observation': \(6,\).*env.flatten_obs=true"):  # fmt: skip
        train(make_config("algo=dppo", f"algo.pretrained={bc}", "env=PandaPegInsertion",
                          "total_steps=1000", *FAST), "/nonexistent/d")  # fmt: skip
    with pytest.raises(ValueError, match=r"observation history needs .*env.flatten_obs=true"):
        train(make_config("algo=diffusion_bc", "dataset=local/none/none-v0",
                          "algo.obs_history=2", f"env={ENV_ID}", "total_steps=256", *FAST),
              "/nonexistent/r")  # fmt: skip


def _ppo_goal_args(steps: int = 256) -> list[str]:
    return [
        "algo=ppo", f"env={ENV_ID}", f"total_steps={steps}", "algo.rollout_steps=32",
        "env.num_envs=2", "algo.hidden=[16,16]", "eval_every=128", *FAST,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def ppo_goal_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PPO on the goal task's dict observations (no env.flatten_obs), with its env-side
    normaliser (on by default), standardising part by part (its exact resume:
    tests/test_resume.py, case ppo_dict)."""
    from rlcore.train import train

    run_dir = tmp_path_factory.mktemp("ppo_goal") / "ppo"
    result = train(make_config(*_ppo_goal_args()), run_dir)
    assert np.isfinite(result["eval/return"]) and result["run/step"] == 256
    return run_dir


def test_ppo_trains_on_dict_observations_and_deploys_them_standardised(
    ppo_goal_run: Path, tmp_path: Path
):
    """The checkpoint keeps the env-side statistics part by part (the desired goal has none:
    it uses the achieved goal's), the policy reads the parts flattened in the spec's order,
    and load_policy and an ONNX export standardise a raw dict as computed here by hand."""
    import rlcore
    from rlcore.checkpoint import load_checkpoint
    from rlcore.export import main as export_main

    state = load_checkpoint(ppo_goal_run)
    stats = state["obs_normalizer"]["parts"]
    assert set(stats) == {"observation", "achieved_goal"}
    # every env observation joined the statistics: 2 resets + 2 envs x 256 steps
    assert stats["observation"]["count"] == pytest.approx(2 + 256 + 1e-4)
    assert state["agent"]["actor"]["mean.0.weight"].shape[1] == 3
    raw = {"observation": np.array([[0.3]], np.float32),
           "achieved_goal": np.array([[0.3]], np.float32),
           "desired_goal": np.array([[-0.8]], np.float32)}  # fmt: skip
    moments = [stats["observation"], stats["achieved_goal"], stats["achieved_goal"]]
    flat = np.array([[0.3, 0.3, -0.8]])
    mean = np.array([m["mean"][0] for m in moments])
    std = np.sqrt(np.array([m["var"][0] for m in moments]) + 1e-8)
    standardized = np.clip((flat - mean) / std, -10, 10).astype(np.float32)
    policy, agent = rlcore.load_policy(ppo_goal_run), rlcore.load_agent(ppo_goal_run)
    np.testing.assert_allclose(policy(raw), agent.act(standardized, True), rtol=0, atol=1e-6)
    assert not np.allclose(policy(raw), agent.act(flat.astype(np.float32), True))
    onnxruntime = pytest.importorskip("onnxruntime")
    out = tmp_path / "ppo.onnx"
    assert export_main([str(ppo_goal_run), "--format", "onnx", "--out", str(out)]) == 0
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == list(GOAL_PARTS)
    np.testing.assert_allclose(session.run(None, raw)[0], policy(raw), rtol=1e-6, atol=1e-6)
