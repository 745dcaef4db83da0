"""The HER paper's bit-flipping task (envs/bitflip.py): steps, rewards and episode ends by
hand, the vectorised reward HER recomputes, and DQN + HER on it from the command line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlcore.envs.bitflip import BitFlippingEnv
from rlcore.envs.make import make_vec_env


def test_a_flip_moves_one_bit_and_the_goal_ends_the_episode() -> None:
    env = BitFlippingEnv(4)
    env.reset(seed=0)
    env.state["bits"][:] = [0, 1, 1, 0]
    env.state["goal"][:] = [1, 1, 0, 0]
    obs, reward, terminated, truncated, info = env.step(0)
    np.testing.assert_array_equal(obs["observation"], [1, 1, 1, 0])
    np.testing.assert_array_equal(obs["achieved_goal"], [1, 1, 1, 0])
    np.testing.assert_array_equal(obs["desired_goal"], [1, 1, 0, 0])
    assert (reward, terminated, truncated, info["is_success"]) == (-1.0, False, False, False)
    obs, reward, terminated, truncated, info = env.step(2)
    assert (reward, terminated, truncated, info["is_success"]) == (0.0, True, False, True)


def test_an_episode_is_cut_after_n_steps_and_seeds_repeat() -> None:
    env = BitFlippingEnv(3)
    first, _ = env.reset(seed=7)
    env.state["goal"][:] = 1 - env.state["bits"]  # three flips away
    ends = [env.step(0)[2:4] for _ in range(3)]  # bit 0 back and forth: never the goal
    assert ends == [(False, False), (False, False), (False, True)]
    again, _ = BitFlippingEnv(3).reset(seed=7)
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    with pytest.raises(ValueError, match="a bit index"):
        env.step(3)


def test_the_reward_is_vectorised_over_leading_axes() -> None:
    env = BitFlippingEnv(2)
    achieved = np.array([[[0, 1], [1, 1]], [[0, 0], [1, 0]]], np.float32)
    desired = np.array([[[0, 1], [0, 1]], [[0, 0], [0, 0]]], np.float32)
    np.testing.assert_array_equal(env.compute_reward(achieved, desired, None),
                                  [[0.0, -1.0], [0.0, -1.0]])  # fmt: skip


def test_registered_with_a_short_name_and_restored_exactly() -> None:
    from rlcore.envs.make import get_vec_env_state, set_vec_env_state

    env = make_vec_env("bitflipping", 2, seed=3, env_kwargs={"n_bits": 6})
    assert isinstance(env.single_action_space, gym.spaces.Discrete)
    env.reset(seed=3)
    env.step(np.array([1, 2]))
    state = get_vec_env_state(env)
    expected = [env.step(np.array([a, a]))[0] for a in (0, 4, 5)]
    other = make_vec_env("bitflipping", 2, seed=11, env_kwargs={"n_bits": 6})
    other.reset(seed=11)
    set_vec_env_state(other, state)
    for action, want in zip((0, 4, 5), expected):
        got = other.step(np.array([action, action]))[0]
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def test_dqn_with_hindsight_relabelling_runs_from_the_command_line(tmp_path) -> None:
    """DQN reads the dict observation and HER relabels its goals (a short run)."""
    from rlcore.train import train
    from tests.conftest import make_config

    result = train(make_config(
        "algo=dqn", "env=BitFlipping", "her=future", "env.kwargs.n_bits=5",
        "algo.learning_starts=50", "algo.batch_size=16", "algo.hidden=[16]", "total_steps=120",
        "eval_every=120", "eval_episodes=2", "logger=quiet", "threads=1",
    ), tmp_path / "run")  # fmt: skip
    assert result["run/step"] == 120 and 0.0 <= result["eval/success_rate"] <= 1.0


class FixedBatch:
    """A stand-in replay buffer that gives SB3's ``train`` one fixed batch."""

    def __init__(self, samples: object) -> None:
        self.samples = samples

    def sample(self, batch_size: int, env: object = None) -> object:
        return self.samples


def test_dqn_updates_equal_sb3s_on_dict_observations() -> None:
    """rlcore's DQN as the bit-flipping benchmark sets it (Huber loss, gradient-norm clip,
    no double-Q) and SB3's ``DQN.train`` (MultiInputPolicy) on the same weights and the
    same six batches of dict observations: the same Q-network after each update (a large
    learning rate and a tight clip, so the clip acts and the greedy next actions of the
    online and target networks part). SB3 concatenates the dict's parts in sorted-key
    order, rlcore in its spec order: the first layer's columns are permuted to match."""
    import torch
    from stable_baselines3 import DQN as SB3DQN
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.type_aliases import DictReplayBufferSamples

    from rlcore.algos.dqn import DQN, DQNConfig
    from rlcore.benchmarks.her import DQN_SETTING
    from rlcore.types import Batch

    torch.manual_seed(0)
    env = BitFlippingEnv(6)
    hp = {**DQN_SETTING, "lr": 3e-2, "max_grad_norm": 0.5}
    theirs = SB3DQN("MultiInputPolicy", env, learning_rate=hp["lr"], gamma=hp["gamma"],
                    max_grad_norm=hp["max_grad_norm"], policy_kwargs={"net_arch": [32]},
                    device="cpu")  # fmt: skip
    theirs.set_logger(configure(None, []))
    ours = DQN(env.observation_space, env.action_space, DQNConfig(
        lr=hp["lr"], gamma=hp["gamma"], hidden=(32,), loss="huber", double_q=False,
        max_grad_norm=hp["max_grad_norm"], target_update_interval=10**9))  # fmt: skip
    sorted_columns = torch.cat([torch.arange(12, 18), torch.arange(0, 12)])  # ours -> theirs
    mine = [m for m in ours.q_network.modules() if isinstance(m, torch.nn.Linear)]
    reference = [m for m in theirs.q_net.q_net if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for k, (a, b) in enumerate(zip(mine, reference)):
            a.weight.copy_(b.weight[:, sorted_columns] if k == 0 else b.weight)
            a.bias.copy_(b.bias)
        ours.target_network.load_state_dict(ours.q_network.state_dict())
    rng = np.random.default_rng(0)
    names = ("observation", "achieved_goal", "desired_goal")
    for _ in range(6):
        obs, next_obs = ({k: torch.as_tensor(rng.integers(0, 2, (16, 6)), dtype=torch.float32)
                          for k in names} for _ in range(2))  # fmt: skip
        action = torch.as_tensor(rng.integers(0, 6, 16))
        reward = -torch.as_tensor(rng.integers(0, 2, 16), dtype=torch.float32)
        done = (reward == 0).float()
        samples = DictReplayBufferSamples(obs, action[:, None], next_obs, done[:, None],
                                          reward[:, None])  # fmt: skip
        theirs.replay_buffer = FixedBatch(samples)
        theirs.train(gradient_steps=1, batch_size=16)
        flat = [torch.cat([parts[k] for k in names], 1) for parts in (obs, next_obs)]
        ours.update(Batch(obs=flat[0], action=action, reward=reward, next_obs=flat[1],
                          terminated=done, truncated=torch.zeros(16)))  # fmt: skip
        for k, (a, b) in enumerate(zip(mine, reference)):
            want = b.weight[:, sorted_columns] if k == 0 else b.weight
            torch.testing.assert_close(a.weight, want, atol=1e-6, rtol=0)
            torch.testing.assert_close(a.bias, b.bias, atol=1e-6, rtol=0)


def test_a_rendered_frame_shows_the_bits_above_the_goal() -> None:
    """``rgb_array``: one 16-pixel cell a bit, the bits' row white for 1 and black for 0, a
    grey band, then the goal's row; the frame follows a flip."""
    env = BitFlippingEnv(n_bits=3, render_mode="rgb_array")
    env.reset(seed=0)
    env.state["bits"][:] = [1, 0, 1]
    env.state["goal"][:] = [0, 0, 1]
    frame = env.render()
    assert frame.shape == (48, 48, 3) and frame.dtype == np.uint8
    assert [frame[0, 0, 0], frame[15, 16, 1], frame[8, 40, 2]] == [255, 0, 255]
    assert (frame[16:32] == 127).all()
    assert [frame[32, 0, 0], frame[47, 31, 0], frame[40, 47, 0]] == [0, 0, 255]
    env.step(1)
    assert (env.render()[:16, 16:32] == 255).all()
    assert BitFlippingEnv(n_bits=3).render() is None
    with pytest.raises(ValueError, match="render_mode='human': None or 'rgb_array'"):
        BitFlippingEnv(render_mode="human")


def test_a_dqn_run_is_evaluated_with_a_video(tmp_path) -> None:
    """A DQN + HER run on bit flipping: ``rlcore.evaluate video=true`` writes one MP4 an
    episode of the rendered bits."""
    imageio = pytest.importorskip("imageio.v2", reason="pip install 'rlcore[video]'")
    pytest.importorskip("imageio_ffmpeg", reason="pip install 'rlcore[video]'")
    from rlcore.evaluate import main
    from rlcore.train import train
    from tests.conftest import make_config

    run = tmp_path / "run"
    train(make_config(
        "algo=dqn", "env=BitFlipping", "her=future", "env.kwargs.n_bits=4",
        "algo.learning_starts=50", "algo.batch_size=16", "algo.hidden=[16]", "total_steps=100",
        "eval_every=100", "eval_episodes=1", "logger=quiet", "threads=1",
    ), run)  # fmt: skip
    assert main([str(run), "episodes=2", "video=true"]) == 0
    videos = sorted((run / "videos").glob("*.mp4"))
    assert [v.name for v in videos] == ["episode_1_seed0.mp4", "episode_2_seed0.mp4"]
    frames = imageio.mimread(videos[0], memtest=False)
    assert len(frames) >= 1 and np.asarray(frames[0]).shape[:2] == (48, 64)
