import math
import os

import numpy as np
import pytest
import torch

from rlcore.algos.sac import SAC, SACConfig
from rlcore.checkpoint import load_checkpoint, save_checkpoint
from rlcore.logging import Logger, format_duration, read_csv
from rlcore.policies import load_agent, load_policy
from rlcore.train import train
from tests.conftest import FAST, make_config


def test_logger_writes_csv_per_group_and_tensorboard(tmp_path):
    logger = Logger(tmp_path, tensorboard=True, console=False)
    logger.log({"train/loss": 1.5, "train/q": 2.0}, step=10)
    logger.log({"train/loss": 1.0, "train/new_metric": 3.0}, step=20)  # column appears later
    logger.log({"eval/return": 100.0}, step=20)
    logger.close()
    rows = read_csv(tmp_path / "train.csv")
    assert rows == [
        {"step": 10, "train/loss": 1.5, "train/q": 2.0},
        {"step": 20, "train/loss": 1.0, "train/new_metric": 3.0},
    ]
    assert read_csv(tmp_path / "eval.csv") == [{"step": 20, "eval/return": 100.0}]
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_label_cells_stay_words_in_csv_and_tensorboard_and_report_skips_them(tmp_path):
    """``eval/phase`` is logged by name: a text cell, a TensorBoard text entry, and not a
    metric the report offers to plot."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlcore.report import Run

    logger = Logger(tmp_path, tensorboard=True, console=False)
    logger.log({"eval/return": 10.0, "eval/phase": "offline"}, step=5)
    logger.log({"eval/return": 20.0, "eval/phase": "online"}, step=9)
    logger.close()
    rows = read_csv(tmp_path / "eval.csv")
    assert [(r["step"], r["eval/return"], r["eval/phase"]) for r in rows] == [
        (5, 10.0, "offline"),
        (9, 20.0, "online"),
    ]
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0}).Reload()
    assert [e.value for e in events.Scalars("eval/return")] == [10.0, 20.0]
    texts = [
        t.tensor_proto.string_val[0].decode() for t in events.Tensors("eval/phase/text_summary")
    ]
    assert texts == ["offline", "online"]
    run = Run(tmp_path, {}, {"eval": rows})
    assert run.available_metrics() == ["eval/return"]
    assert not run.has_metric("eval/phase")


def test_logger_resume_drops_rows_after_checkpoint(tmp_path):
    logger = Logger(tmp_path, tensorboard=False, console=False)
    for step in (100, 200, 300):
        logger.log({"train/loss": float(step)}, step)
    logger.close()
    Logger(tmp_path, tensorboard=False, console=False, resume_step=200).close()
    assert [r["step"] for r in read_csv(tmp_path / "train.csv")] == [100, 200]


def test_progress_line_and_duration_format(tmp_path, capsys):
    logger = Logger(tmp_path, tensorboard=False, progress_interval_s=3600)
    logger.progress("first", force=True)
    logger.progress("suppressed")
    assert capsys.readouterr().out == "first\n"
    assert format_duration(3725) == "1h02m" and format_duration(75) == "1m15s"


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_checkpoint({"format": 1, "value": torch.ones(3)}, path)

    def crash(obj, f, *args, **kwargs):
        f.write(b"partial garbage")
        raise OSError("disk died mid-write")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError):
        save_checkpoint({"format": 1, "value": torch.zeros(3)}, path)
    monkeypatch.undo()
    assert torch.equal(torch.load(path)["value"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temp files left


def test_load_checkpoint_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")
    with pytest.raises(FileNotFoundError, match="no checkpoint found"):
        load_checkpoint(tmp_path)
    torch.save({"hello": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not an rlcore checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


@pytest.mark.parametrize("algo", ["sac", "ppo"])
def test_load_agent_and_policy_for_inference_in_one_call(algo, tmp_path):
    extra = (
        ["algo.rollout_steps=64", "total_steps=128"]
        if algo == "ppo"
        else ["algo.learning_starts=50", "total_steps=120", "algo.batch_size=16"]
    )
    cfg = make_config(
        f"algo={algo}",
        "env=Hopper",
        *FAST,
        *extra,
        "eval_episodes=1",
        "env.max_episode_steps=30",
        "algo.hidden=[16,16]",
    )
    train(cfg, tmp_path)
    agent = load_agent(tmp_path)
    state = load_checkpoint(tmp_path)
    for key, value in agent.actor.state_dict().items():
        assert torch.equal(value, state["agent"]["actor"][key])
    policy = load_policy(tmp_path / "checkpoints" / "latest.pt")
    obs = np.random.default_rng(0).normal(size=11).astype(np.float32)
    action = policy(obs)
    assert action.shape == (3,) and np.isfinite(action).all()
    if algo == "ppo":  # the policy applies the saved observation normalisation
        norm = state["loop"]["env"]["wrappers"]["NormalizeObservation"]
        assert state["obs_normalizer"] is not None
        scaled = np.clip((obs - norm["mean"]) / np.sqrt(norm["var"] + 1e-8), -10, 10)
        np.testing.assert_allclose(action, agent.act(scaled.astype(np.float32), deterministic=True))


def test_user_loop_with_own_env_and_state_dict(tmp_path):
    """The documented embedding: own gymnasium env, own loop, act/update/state_dict."""
    import gymnasium as gym

    from rlcore.buffers import ReplayBuffer

    env = gym.make("Pendulum-v1")
    agent = SAC(env.observation_space, env.action_space, SACConfig(hidden=(32, 32)))
    buffer = ReplayBuffer(1000, env.observation_space.shape, env.action_space.shape)
    obs, _ = env.reset(seed=0)
    for _ in range(100):
        action = agent.act(obs)
        assert env.action_space.contains(action.astype(np.float32))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        buffer.add(obs[None], action[None], [reward], next_obs[None], [terminated], [truncated])
        obs = next_obs
    metrics = agent.update(buffer.sample(32))
    assert all(math.isfinite(v) for v in metrics.values())
    torch.save(agent.state_dict(), tmp_path / "agent.pt")
    fresh = SAC(env.observation_space, env.action_space, SACConfig(hidden=(32, 32)))
    fresh.load_state_dict(torch.load(tmp_path / "agent.pt"))
    np.testing.assert_array_equal(
        fresh.act(obs, deterministic=True), agent.act(obs, deterministic=True)
    )
    assert os.path.getsize(tmp_path / "agent.pt") > 0
