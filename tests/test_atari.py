"""Atari on ale-py's vector env (envs/atari.py): the preprocessing CleanRL's envpool
scripts use, same-step autoreset, training vs evaluation, the config mapping, and the
frame-storing replay buffer on real Atari frames."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")

from rlcore.buffers import ReplayBuffer  # noqa: E402
from rlcore.envs.atari import AtariVectorBackend, atari_game  # noqa: E402
from rlcore.envs.make import make_vec_env, resolve_env_id  # noqa: E402
from rlcore.observations import IMAGE, ObsPart, ObsSpec  # noqa: E402


def test_game_names_and_the_preprocessing_of_each_form() -> None:
    assert atari_game("ALE/SpaceInvaders-v5") == "space_invaders"
    assert resolve_env_id("ALE/Pong-v5") == "ALE/Pong-v5"
    with pytest.raises(ValueError, match="unknown Atari game 'ALE/Pongg-v5'"):
        atari_game("ALE/Pongg-v5")
    env = make_vec_env("ALE/Pong-v5", 2, seed=0)
    base = env.unwrapped
    assert isinstance(base, AtariVectorBackend) and base.frame_stack == 4
    assert base.settings["life_loss_info"] and base.settings["reward_clipping"]
    assert base.settings["repeat_action_probability"] == 0.0 and base.settings["noop_max"] == 30
    assert env.single_observation_space.shape == (4, 84, 84)
    assert env.single_observation_space.dtype == np.uint8
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    assert not obs[:, :3].any() and obs[:, 3].any()  # a reset stack: zero frames, then one
    env.close()
    evaluation = make_vec_env("ALE/Pong-v5", 1, seed=0, evaluation=True).unwrapped
    assert not evaluation.settings["life_loss_info"]
    assert not evaluation.settings["reward_clipping"]
    with pytest.raises(ValueError, match=r"unknown Atari option\(s\) \['stack'\]"):
        make_vec_env("ALE/Pong-v5", 1, env_kwargs={"stack": 2})
    with pytest.raises(ValueError, match="only them: ALE/Pong-v5 on 'async'"):
        make_vec_env("ALE/Pong-v5", 1, backend="async")
    with pytest.raises(ValueError, match="only them: Hopper-v5 on 'ale'"):
        make_vec_env("Hopper-v5", 1, backend="ale")


def play(env, steps: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    trace = []
    for _ in range(steps):
        action = rng.integers(0, env.single_action_space.n, env.num_envs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        trace.append((obs, action, reward, next_obs, terminated, truncated, info))
        obs = next_obs
    return trace


def test_training_ends_an_episode_at_each_lost_life_and_clips_rewards() -> None:
    """Same seed and actions: the training and evaluation forms play the same game (a lost
    life does not reset it), training says ``terminated`` where a life is lost and its
    rewards are the evaluation rewards' signs; the stack shifts by one frame a step."""
    training = AtariVectorBackend("ALE/Breakout-v5", 1, num_threads=1)
    evaluation = AtariVectorBackend("ALE/Breakout-v5", 1, evaluation=True, num_threads=1)
    train_trace, eval_trace = play(training, 400, 3), play(evaluation, 400, 3)
    lost, lives = 0, 5
    for train_step, eval_step in zip(train_trace, eval_trace):
        obs, _, reward, next_obs, terminated, _, info = train_step
        raw, eval_end, eval_info = eval_step[2], eval_step[4], eval_step[6]
        np.testing.assert_array_equal(reward, np.sign(raw))
        assert reward.dtype == np.float32
        np.testing.assert_array_equal(info["lives"], eval_info["lives"])  # the same game
        reset = bool(info.get("_final_obs", [False])[0])
        if info["lives"][0] < lives:  # a lost life: training ends its episode, not the game
            lost += 1
            assert terminated[0] and not eval_end[0] and not reset
        if not reset:
            np.testing.assert_array_equal(next_obs[0, :3], obs[0, 1:])  # a one-frame shift
        lives = info["lives"][0]
    assert lost >= 2  # random Breakout loses lives within 400 steps
    assert sum(float(np.abs(step[2]).sum()) for step in eval_trace) > 0  # it scored


def test_same_step_autoreset_hands_the_final_observation() -> None:
    env = make_vec_env("ALE/Pong-v5", 2, seed=1, max_episode_steps=30)
    trace = play(env, 31, 1)
    _, _, _, next_obs, terminated, truncated, info = trace[29]
    assert truncated.all() and not terminated.any() and info["_final_obs"].all()
    assert not next_obs[:, :3].any()  # the new games' reset stacks
    assert info["final_obs"][:, :3].any()  # the ended games' last stacks
    assert not np.isnan(info["episode_return"]).any()  # EpisodeStats closed the episodes


def test_checkpoints_cannot_restore_atari_games() -> None:
    env = make_vec_env("ALE/Pong-v5", 1, seed=0)
    states = env.unwrapped.get_states()
    why = "ale-py's vector env exposes no emulator states"
    assert states == [{"atari": "ALE/Pong-v5", "restorable": False, "why": why}]
    with pytest.raises(NotImplementedError, match="cannot continue its games"):
        env.unwrapped.set_states(states)
    with pytest.raises(ValueError, match="no reset_mask"):
        env.reset(options={"reset_mask": np.array([True])})


def test_a_resumed_atari_run_continues_with_new_games(tmp_path) -> None:
    """No emulator states: a resumed run starts new games (seeded by the step) and goes on
    with its agent, buffer and counters; the interrupted episodes end as truncations in the
    replay buffer, so the frame store takes the new games' first stacks whole."""
    from rlcore.checkpoint import load_checkpoint
    from rlcore.train import train
    from tests.conftest import make_config

    args = ["algo=dqn", "env=ALE/Pong-v5", "algo.learning_starts=100", "algo.buffer_size=1000",
            "eval_every=0", "env.num_envs=2", "threads=1", "logger=quiet"]  # fmt: skip
    run = tmp_path / "run"
    train(make_config(*args, "total_steps=300"), run)
    before = load_checkpoint(run)
    train(make_config(*args, "total_steps=600", f"resume={run}"), run)
    after = load_checkpoint(run)
    assert after["loop"]["counters"]["step"] == 600
    assert "new episodes: ale-py's vector env exposes no emulator states" in (
        run / "train.log"
    ).read_text()
    # the first run's 300 rows come first (the resumed buffer is larger, in step order);
    # its newest row of each env was cut, no other row of it changed
    first, resumed = before["loop"]["stateful"]["buffer"], after["loop"]["stateful"]["buffer"]
    assert first["size"] == 300 and resumed["size"] == 600
    truncated = first["data"]["truncated"].clone()
    truncated[298:300] = 1.0
    assert torch.equal(resumed["data"]["truncated"][:300], truncated)


def test_cut_episodes_truncates_the_newest_rows_and_restarts_the_frame_stacks() -> None:
    spec = ObsSpec((ObsPart("obs", (2, 3, 3), IMAGE, frame_stack=2),))
    buffer = ReplayBuffer(8, spec, (), 2, seed=0, action_dtype=torch.int64, frames=True)

    frames = [np.full((2, 1, 3, 3), v, np.uint8) for v in range(4)]
    for t in range(2):
        obs = np.concatenate([frames[t], frames[t + 1]], 1)
        nxt = np.concatenate([frames[t + 1], frames[t + 2]], 1)
        buffer.add(obs, np.zeros(2), np.zeros(2), nxt, np.zeros(2), np.zeros(2))
    buffer.cut_episodes()
    assert buffer.data["truncated"][:4].tolist() == [0.0, 0.0, 1.0, 1.0]
    fresh = np.full((2, 2, 3, 3), 9, np.uint8)  # a new game: not the last next_obs
    buffer.add(fresh, np.zeros(2), np.zeros(2), fresh, np.zeros(2), np.zeros(2))
    assert torch.equal(buffer.batch(torch.tensor([4])).obs, torch.as_tensor(fresh[:1]))


def test_the_frame_buffer_on_real_atari_frames_equals_a_plain_buffer() -> None:
    """Breakout with lost lives and a truncation: the frame store (each 84 x 84 frame once)
    gives the same batches as a buffer of whole stacks, at under a third of the bytes (a
    half-size margin: lives of ~20 steps each add 3 reset frames)."""
    env = make_vec_env("ALE/Breakout-v5", 2, seed=2, max_episode_steps=150)
    spec = ObsSpec((ObsPart("obs", (4, 84, 84), IMAGE, frame_stack=4),))
    plain = ReplayBuffer(256, spec, (), 2, seed=4, action_dtype=torch.int64)
    frames = ReplayBuffer(256, spec, (), 2, seed=4, action_dtype=torch.int64, frames=True,
                          frame_margin=0.5)  # fmt: skip
    from rlcore.envs.make import final_next_obs

    for obs, action, reward, next_obs, terminated, truncated, info in play(env, 200, 2):
        stored_next = final_next_obs(next_obs, info)
        for buffer in (plain, frames):
            buffer.add(obs, action, reward, stored_next, terminated, truncated)
    assert bool(frames.frames_valid(torch.arange(256)).all())  # so both draw the same rows
    for _ in range(3):
        a, b = frames.sample(64), plain.sample(64)
        torch.testing.assert_close(a.obs, b.obs, rtol=0, atol=0)
        torch.testing.assert_close(a.next_obs, b.next_obs, rtol=0, atol=0)
        torch.testing.assert_close(a.action, b.action, rtol=0, atol=0)
    stored = frames.frame_stores["obs"].frames.numel()
    assert stored < 0.33 * (plain.data["obs"].numel() + plain.data["next_obs"].numel())


def test_env_atari_maps_to_the_atari_config() -> None:
    from tests.conftest import make_config

    config = make_config("algo=dqn", "env=ALE/Pong-v5")
    assert config.env.id == "ALE/Pong-v5" and config.env.name == "ale_pong-v5"


def test_render_shows_the_agents_view() -> None:
    env = AtariVectorBackend("ALE/Pong-v5", 2, render_mode="rgb_array", num_threads=1)
    assert env.render() is None  # before a reset
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(np.array([0, 1]))
    frames = env.render()
    assert len(frames) == 2 and frames[1].shape == (336, 336, 3) and frames[1].dtype == np.uint8
    np.testing.assert_array_equal(frames[1][::4, ::4, 2], obs[1, -1])  # the newest frame
    with pytest.raises(ValueError, match="not human"):
        AtariVectorBackend("ALE/Pong-v5", 1, render_mode="human")


def test_fire_follows_a_lost_life_so_a_game_never_stalls() -> None:
    """A policy that never presses FIRE: after each lost life the back end presses it (as
    envpool's fire reset does), so an evaluation game of Breakout ends by game over in a
    few hundred steps, not at the 108,000-frame cap; the step after a lost life is FIRE."""
    env = AtariVectorBackend("ALE/Breakout-v5", 1, evaluation=True, num_threads=1)
    assert env.fire_action == 1  # Breakout's minimal action set: NOOP, FIRE, RIGHT, LEFT
    env.reset(seed=0)
    lives, fired, steps = 5, 0, 0
    for steps in range(1, 2001):  # noqa: B007 - read after the loop
        pending = bool(env.fire_next[0])
        _, _, terminated, truncated, info = env.step(np.array([0]))
        fired += pending
        if terminated[0] or truncated[0]:
            break
        assert bool(env.fire_next[0]) == (info["lives"][0] < lives)
        lives = info["lives"][0]
    assert terminated[0] and not truncated[0] and steps < 500 and fired == 4
    pong = AtariVectorBackend("ALE/Pong-v5", 1, num_threads=1)
    assert pong.fire_action == 1 or pong.fire_action is None
    no_fire = AtariVectorBackend("ALE/Pong-v5", 1, num_threads=1, use_fire_reset=False)
    assert no_fire.fire_action is None


def test_each_ended_game_reports_its_raw_score_beside_the_clipped_rewards() -> None:
    """Same seed and actions: where a game ends (a game over or the frame cap, not a lost
    life) both forms report ``info["game_return"]``, the sum of the evaluation form's raw
    rewards since the game began, NaN elsewhere; training's rewards are those rewards
    clamped to [-1, 1]. Breakout's bricks score 1, 4 and 7, so clipping changes the sum."""
    training = AtariVectorBackend("ALE/Breakout-v5", 1, num_threads=1, max_episode_steps=300)
    evaluation = AtariVectorBackend(
        "ALE/Breakout-v5", 1, evaluation=True, num_threads=1, max_episode_steps=300
    )
    train_trace, eval_trace = play(training, 900, 5), play(evaluation, 900, 5)
    raw_sum, games = 0.0, []
    for train_step, eval_step in zip(train_trace, eval_trace):
        raw, game_over = eval_step[2], eval_step[4] | eval_step[5]
        np.testing.assert_array_equal(train_step[2], np.clip(raw, -1, 1))
        raw_sum += float(raw[0])
        for info in (train_step[6], eval_step[6]):
            if game_over[0]:
                assert info["game_return"][0] == raw_sum
            else:
                assert np.isnan(info["game_return"][0])
        if game_over[0]:
            games.append(raw_sum)
            raw_sum = 0.0
    assert len(games) >= 3 and sum(games) > 0  # every 300 steps at least, and it scored


def test_a_training_run_logs_whole_game_scores(tmp_path) -> None:
    """train.csv holds ``train/game_return`` (raw, whole games) where a game ended, beside
    the per-life, clipped ``train/episode_return``; the game's score is its lives' sum of
    raw rewards, so never below the clipped per-life returns' sum."""
    from rlcore.logging import read_csv
    from rlcore.train import train
    from tests.conftest import make_config

    run = tmp_path / "run"
    train(make_config("algo=dqn", "env=ALE/Breakout-v5", "algo.learning_starts=380",
                      "algo.buffer_size=1000", "eval_every=0", "env.num_envs=1", "threads=1",
                      "env.max_episode_steps=200", "total_steps=400", "logger=quiet"), run)  # fmt: skip
    rows = read_csv(run / "train.csv")
    games = [row for row in rows if row.get("train/game_return", "") != ""]
    ends = [0.0] + [row["step"] for row in games]
    assert ends[1] == 200 and len(games) >= 2  # the frame cap (or a game over) ends games
    assert all(0 < b - a <= 200 for a, b in zip(ends, ends[1:]))
    lives = [
        row["train/episode_return"] for row in rows if row.get("train/episode_return", "") != ""
    ]
    assert len(lives) >= 2 and sum(lives) <= sum(row["train/game_return"] for row in games)
    assert all(row.get("train/episode_return", "") != "" for row in games)  # the last life's row
