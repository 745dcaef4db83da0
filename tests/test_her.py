"""Hindsight experience replay (rlcore.her): relabelling by hand-built episodes, against
SB3's HerReplayBuffer on the same episodes, through resume, and from the command line."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.buffers import ReplayBuffer
from rlcore.config import ConfigError
from rlcore.her import HerOptions, HindsightSampler
from rlcore.observations import ObsSpec
from tests.conftest import make_config

SPACE = gym.spaces.Dict({
    "observation": gym.spaces.Box(-1e9, 1e9, (1,)),
    "achieved_goal": gym.spaces.Box(-1e9, 1e9, (1,)),
    "desired_goal": gym.spaces.Box(-1e9, 1e9, (1,)),
})  # fmt: skip


def _reward(achieved, desired, info):
    """-1 unless the goals are within 0.5 (the test goals are integers)."""
    return -(np.abs(achieved - desired) > 0.5).astype(np.float32)[..., 0]


def _fill(buffer: ReplayBuffer, ends: list[tuple[bool, ...]]) -> None:
    """One vector step per entry of ``ends`` (which envs' episodes end there): env e's
    observation at step t is t, its achieved goal 100 * (e + 1) + t (next: + 1), its
    desired goal 0."""
    n = buffer.num_envs
    code = 100.0 * np.arange(1, n + 1, dtype=np.float32)[:, None]
    for t, done in enumerate(ends):
        zero, step = np.zeros((n, 1), np.float32), np.full((n, 1), t, np.float32)
        obs = {"observation": step, "achieved_goal": code + t, "desired_goal": zero}
        nxt = {"observation": step + 1, "achieved_goal": code + t + 1, "desired_goal": zero}
        buffer.add(obs, np.zeros((n, 1)), np.full(n, -1.0), nxt, np.zeros(n), np.array(done))


def _buffer(capacity: int = 40, num_envs: int = 2) -> ReplayBuffer:
    return ReplayBuffer(capacity, ObsSpec.from_space(SPACE), (1,), num_envs, track_episodes=True)


def test_episode_record_by_hand() -> None:
    """env 0: one episode of 3 steps; env 1: one of 2 steps, then one still running."""
    buffer = _buffer()
    _fill(buffer, [(False, False), (False, True), (True, False), (False, False)])
    data = {k: buffer.data[k][:8].tolist() for k in
            ("episode_step", "episode_env", "episode_start", "episode_length")}  # fmt: skip
    assert data == {
        "episode_step": [0, 0, 1, 1, 2, 2, 3, 3],
        "episode_env": [0, 1, 0, 1, 0, 1, 0, 1],
        "episode_start": [0, 0, 0, 0, 0, 2, 3, 2],
        "episode_length": [3, 2, 3, 2, 3, 0, 0, 0],
    }


@pytest.mark.parametrize("strategy", ["final", "future", "episode"])
def test_relabelled_goals_come_from_the_right_transitions(strategy: str) -> None:
    """Only the two complete episodes are drawn (rows 0-4 of env 0 / env 1's first two);
    each relabelled goal is a next achieved goal of the same episode: the last one
    (final), one at or after the transition (future), any (episode); rewards follow."""
    buffer = _buffer()
    _fill(buffer, [(False, False), (False, True), (True, False), (False, False)])
    sampler = HindsightSampler(buffer, _reward, HerOptions(strategy, k=4), seed=0)
    seen: dict[tuple[int, int], set[int]] = {}
    for _ in range(200):
        batch = sampler.sample(10)  # 8 relabelled, 2 real
        env = (batch.next_obs["achieved_goal"][:, 0] // 100 - 1).long()
        step = batch.obs["observation"][:, 0].long()
        assert set(zip(env.tolist(), step.tolist(), strict=True)) <= {(0, 0), (0, 1), (0, 2),
                                                                      (1, 0), (1, 1)}  # fmt: skip
        goal = batch.obs["desired_goal"][:, 0]
        assert torch.equal(goal, batch.next_obs["desired_goal"][:, 0])
        goal_step = (goal[:8] - 100 * (env[:8] + 1)).long() - 1  # the goal's transition
        for e, s, g in zip(env[:8].tolist(), step[:8].tolist(), goal_step.tolist(), strict=True):
            seen.setdefault((e, s), set()).add(g)
        assert torch.all(goal[8:] == 0)  # the real ones keep their goal
        expected = -(torch.abs(batch.next_obs["achieved_goal"][:, 0] - goal) > 0.5).float()
        assert torch.equal(batch.reward[:8], expected[:8])
        assert torch.all(batch.reward[8:] == -1.0)
        assert not any(name.startswith("episode_") for name in batch.extras)
    last = {0: 2, 1: 1}
    for (e, s), goals in seen.items():
        want = {"final": {last[e]}, "future": set(range(s, last[e] + 1)),
                "episode": set(range(last[e] + 1))}[strategy]  # fmt: skip
        assert goals == want, (e, s, goals)


def test_overwritten_episodes_are_not_drawn_and_lengths_skip_foreign_rows() -> None:
    """Capacity 6, one env: a 4-step episode, then a 5-step one overwrites its start; the
    first episode's surviving rows are never drawn, the second is whole."""
    buffer = _buffer(capacity=6, num_envs=1)
    _fill(buffer, [(False,), (False,), (False,), (True,), (False,), (False,), (False,),
                   (False,), (True,)])  # fmt: skip
    assert buffer.data["episode_length"].tolist() == [5, 5, 5, 4, 5, 5]
    sampler = HindsightSampler(buffer, _reward, HerOptions("final", k=1), seed=0)
    steps = set()
    for _ in range(50):
        steps |= set(sampler.sample(8).obs["observation"][:, 0].long().tolist())
    assert steps == {4, 5, 6, 7, 8}


def test_refusals() -> None:
    buffer = _buffer()
    _fill(buffer, [(False, False)])
    with pytest.raises(ConfigError, match="holds none yet.*learning_starts"):
        HindsightSampler(buffer, _reward, HerOptions()).sample(4)
    with pytest.raises(ValueError, match="track_episodes=True"):
        HindsightSampler(ReplayBuffer(4, ObsSpec.from_space(SPACE), (1,)), _reward, HerOptions())
    flat = ReplayBuffer(4, (3,), (1,), track_episodes=True)
    with pytest.raises(ValueError, match="achieved_goal and desired_goal"):
        HindsightSampler(flat, _reward, HerOptions())
    with pytest.raises(ValueError, match="her.strategy='past'"):
        HerOptions("past")
    with pytest.raises(ValueError, match="her.k=0"):
        HerOptions("future", 0)


def test_resume_with_a_larger_buffer_draws_the_same_episodes() -> None:
    """A resumed run whose buffer grew: rows are reordered oldest first, and the episode
    record still finds each transition's episode (the goals come from the same one)."""
    buffer = _buffer(capacity=8, num_envs=2)
    ends = [(False, False), (True, False), (False, True), (False, False), (True, False),
            (False, True)]  # fmt: skip
    _fill(buffer, ends)
    grown = _buffer(capacity=30, num_envs=2)
    grown.load_state_dict(buffer.state_dict())
    assert grown.steps == buffer.steps == 6
    for source in (buffer, grown):
        sampler = HindsightSampler(source, _reward, HerOptions("episode", k=4), seed=3)
        for _ in range(30):
            batch = sampler.sample(10)
            env = (batch.next_obs["achieved_goal"][:8, 0] // 100 - 1).long()
            goal_step = (batch.obs["desired_goal"][:8, 0] - 100 * (env + 1)).long() - 1
            step = batch.obs["observation"][:8, 0].long()
            start = torch.where(
                env == 0, torch.where(step >= 2, 2, 0), torch.where(step >= 3, 3, 0)
            )
            end = torch.where(env == 0, torch.where(step >= 2, 4, 1), torch.where(step >= 3, 5, 2))
            assert torch.all((goal_step >= start) & (goal_step <= end))
    # the episode still running when saved goes on, and its end is recorded in the new rows
    _fill(grown, [(True, True)])
    sampler = HindsightSampler(grown, _reward, HerOptions("final", k=1), seed=0)
    steps = set()
    for _ in range(40):
        steps |= set(sampler.sample(8).obs["observation"][:, 0].long().tolist())
    assert 0 in steps  # the new step's observation is 0 (the _fill counter restarted)


def test_future_goals_match_sb3_her_replay_buffer() -> None:
    """The same 40 episodes (lengths 3-12, two envs) in SB3's HerReplayBuffer and in ours:
    the distribution of (goal step - current step) of relabelled 'future' goals agrees
    (100,000 draws each: every frequency within 0.01, the standard error is ~0.0015)."""
    sb3_her = pytest.importorskip("stable_baselines3.her.her_replay_buffer")
    from stable_baselines3.common.vec_env import DummyVecEnv

    from rlcore.envs.robots.env import PandaEnv

    rng = np.random.default_rng(0)
    lengths = [rng.integers(3, 13, size=20) for _ in range(2)]
    space = PandaEnv("PandaReach").observation_space
    vec = DummyVecEnv([lambda: PandaEnv("PandaReach")] * 2)
    theirs = sb3_her.HerReplayBuffer(
        2000, space, gym.spaces.Box(-1, 1, (3,)), vec, n_envs=2, n_sampled_goal=4,
        goal_selection_strategy="future",
    )  # fmt: skip
    ours = ReplayBuffer(2000, ObsSpec.from_space(space), (3,), 2, track_episodes=True)
    ep, pos = [0, 0], [0, 0]
    for _ in range(int(max(map(sum, lengths)))):
        if all(ep[e] >= len(lengths[e]) for e in range(2)):
            break
        rows = []
        for e in range(2):
            step = pos[e]
            code = np.array([ep[e] * 1000 + e * 100 + step + 1, step, 0], np.float32)
            obs = {
                "observation": np.array([step, ep[e], e, 0, 0, 0], np.float32),
                "achieved_goal": code - [1, 0, 0],
                "desired_goal": np.zeros(3, np.float32),
            }
            nxt = {**obs, "achieved_goal": code}
            done = ep[e] < len(lengths[e]) and step + 1 == lengths[e][ep[e]]
            rows.append((obs, nxt, done))
            pos[e] = 0 if done else step + 1
            ep[e] += int(done)
        stack = {k: np.stack([r[0][k] for r in rows]) for k in rows[0][0]}
        nstack = {k: np.stack([r[1][k] for r in rows]) for k in rows[0][1]}
        done = np.array([r[2] for r in rows])
        theirs.add(stack, nstack, np.zeros((2, 3)), np.zeros(2), done,
                   [{"TimeLimit.truncated": False}] * 2)  # fmt: skip
        ours.add(stack, np.zeros((2, 3)), np.zeros(2), nstack, done.astype(float), np.zeros(2))

    def offsets(goals: np.ndarray, obs: np.ndarray) -> np.ndarray:
        return (goals[:, 1] - obs[:, 0]).astype(int)  # goal's step index - current step

    np.random.seed(0)
    mine = HindsightSampler(ours, lambda a, g, i: np.zeros(len(a)), HerOptions("future", 4), 0)
    a, b = [], []
    for _ in range(100):
        s = theirs.sample(1250)  # 1,000 relabelled
        relabelled = s.observations["desired_goal"][:, 2] == 0  # every goal's z is 0
        moved = (s.observations["desired_goal"] != 0).any(dim=1)
        keep = (relabelled & moved).numpy()
        a.append(offsets(s.observations["desired_goal"].numpy()[keep],
                         s.observations["observation"].numpy()[keep]))  # fmt: skip
        m = mine.sample(1250)
        b.append(offsets(m.obs["desired_goal"][:1000].numpy(), m.obs["observation"][:1000].numpy()))
    a, b = np.concatenate(a), np.concatenate(b)
    assert a.min() == b.min() == 0 and a.max() == b.max() == 11
    fa = np.bincount(a, minlength=12) / len(a)
    fb = np.bincount(b, minlength=12) / len(b)
    assert np.abs(fa - fb).max() < 0.01, (fa.round(3), fb.round(3))


@pytest.mark.parametrize("normalize", [False, True])
def test_her_runs_from_the_command_line_and_resumes_exactly(
    tmp_path: Path, normalize: bool
) -> None:
    """SAC + HER on PandaReach: a run stopped at 180 steps and resumed to 240 ends with the
    same agent, to the bit, as one run of 240 (the sampler's generator and the episode
    record are in the checkpoint; with ``algo.normalize_obs=true`` the agent's observation
    statistics too)."""
    from rlcore.checkpoint import load_checkpoint
    from rlcore.train import train

    args = ("algo=sac", "env=PandaReach", "her=future", "algo.learning_starts=120",
            "algo.batch_size=32", "algo.hidden=[32,32]", "eval_every=120", "eval_episodes=2",
            "eval_envs=1", "logger=quiet", "threads=1",
            f"algo.normalize_obs={str(normalize).lower()}")  # fmt: skip
    whole = train(make_config(*args, "total_steps=240"), tmp_path / "whole")
    assert 0.0 <= whole["eval/success_rate"] <= 1.0
    part = train(make_config(*args, "total_steps=180", "checkpoint_every=180"), tmp_path / "p")
    assert part["run/step"] == 180
    resumed = train(make_config(*args, "total_steps=240", f"resume={tmp_path / 'p'}"),
                    tmp_path / "p")  # fmt: skip
    assert resumed["eval/return"] == whole["eval/return"]
    agents = [load_checkpoint(tmp_path / d)["agent"] for d in ("whole", "p")]
    for name, tensor in agents[0]["actor"].items():
        assert torch.equal(tensor, agents[1]["actor"][name]), name
    assert ("obs_statistics" in agents[0]) == normalize
    if normalize:
        assert str(agents[0]["obs_statistics"]) == str(agents[1]["obs_statistics"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("algo=ppo", "env=PandaReach", "her=future"), "no online replay phase"),
        (("algo=sac", "env=Hopper", "her=final"), "achieved_goal and desired_goal"),
        (
            (
                "algo=sac",
                "env=PandaReach",
                "her=future",
                "env.flatten_obs=true",
                "env.backend=sync",
            ),
            "flatten_obs=true flattened them",
        ),  # fmt: skip
    ],
)
def test_her_refusals_name_the_fix(overrides: tuple[str, ...], message: str) -> None:
    from rlcore.train import train

    with pytest.raises(ConfigError, match=message):
        train(make_config(*overrides, "total_steps=200"), "/nonexistent/her")


def test_relabelling_a_camera_task_says_the_image_keeps_its_goal() -> None:
    """HER changes desired_goal, not the rendered image, which may show the goal: a
    third-party goal task's settled run notes say so; a state-only run's do not, nor do
    rlcore's robot tasks', whose cameras beside the goal vector leave the goal markers
    out (tests/test_rendered.py)."""
    from omegaconf import OmegaConf

    from rlcore.algos.sac import SACConfig
    from rlcore.settings import settle

    def notes(*overrides: str) -> tuple[str, ...]:
        cfg = make_config("algo=sac", "her=future", *overrides)
        return settle(OmegaConf.to_container(cfg, resolve=True), SACConfig).notes

    maze = "env=PointMaze_UMaze-v3"
    assert any("not the image" in note for note in notes(maze, "env.obs=state+pixels"))
    assert not any("not the image" in note for note in notes(maze))
    assert not any(
        "not the image" in note for note in notes("env=PandaReach", "env.obs=state+pixels")
    )
