"""``python -m rlcore.evaluate``: a saved run evaluated from the command line (per-episode
returns and their mean, the same on every call), one-line errors with their exit codes,
and MP4s of the episodes rendered headless."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rlcore.algos.sac import SAC, SACConfig
from rlcore.envs.make import make_vec_env
from rlcore.evaluate import evaluate, main
from rlcore.policies import load_policy
from tests.conftest import REPO
from tests.saved_runs import save_run

HOPPER = "Hopper-v5"


def sac_run(tmp_path: Path) -> Path:
    import gymnasium as gym

    probe = gym.make(HOPPER)
    torch.manual_seed(0)
    config = SACConfig(hidden=(32, 32))
    agent = SAC(probe.observation_space, probe.action_space, config)
    run = tmp_path / "sac_run"
    save_run(run, "sac", agent, config, HOPPER, normalise=True)
    return run


def episode_returns(text: str) -> list[float]:
    return [float(r) for r in re.findall(r"^episode \d+: return (-?[\d.]+)", text, re.M)]


def test_evaluates_a_saved_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = sac_run(tmp_path)
    assert main([str(run), "episodes=3", "seed=2"]) == 0
    first = capsys.readouterr().out
    returns = episode_returns(first)
    assert len(returns) == 3
    mean = float(re.search(r"mean over 3 episodes: return (-?[\d.]+)", first).group(1))
    assert mean == pytest.approx(np.mean(returns), abs=0.01)
    # the same as evaluating load_policy on the run's env by hand
    by_hand = evaluate(load_policy(run), make_vec_env(HOPPER, 1), 3, seed=2)
    assert mean == pytest.approx(by_hand["return"], abs=0.01)
    assert main([str(run / "checkpoints" / "latest.pt"), "episodes=3", "seed=2"]) == 0
    assert capsys.readouterr().out == first


def test_errors_are_one_line_with_exit_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path / "missing")]) == 1
    assert capsys.readouterr().err == f"error: checkpoint {tmp_path / 'missing'} does not exist\n"
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 1
    assert capsys.readouterr().err.startswith(f"error: no checkpoint found in {tmp_path / 'empty'}")
    run = sac_run(tmp_path)
    for bad, words in [("episode=3", "unknown option 'episode'"), ("video=yes", "video=true"),
                       ("episodes=0", "at least 1"), ("seed=-1", "seed=-1: must be >= 0")]:  # fmt: skip
        assert main([str(run), bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1


def headless_gl() -> str | None:
    """The MUJOCO_GL back end that renders a Hopper frame here (egl, else osmesa), or None."""
    probe = "import gymnasium as g; e = g.make('Hopper-v5', render_mode='rgb_array'); " \
            "e.reset(seed=0); assert e.render().mean() > 0"  # fmt: skip
    for backend in ("egl", "osmesa"):
        env = {**os.environ, "MUJOCO_GL": backend}
        done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True)
        if done.returncode == 0:
            return backend
    return None


def test_video_writes_one_mp4_per_episode(tmp_path: Path) -> None:
    imageio = pytest.importorskip("imageio.v2", reason="pip install 'rlcore[video]'")
    pytest.importorskip("imageio_ffmpeg", reason="pip install 'rlcore[video]'")
    backend = headless_gl()
    if backend is None:
        pytest.skip("no headless OpenGL here (MUJOCO_GL=egl and osmesa both fail to render)")
    run = sac_run(tmp_path)
    env = {**os.environ, "MUJOCO_GL": backend}
    done = subprocess.run(
        [sys.executable, "-m", "rlcore.evaluate", str(run), "episodes=2", "video=true"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    videos = sorted((run / "videos").glob("*.mp4"))
    assert [v.name for v in videos] == ["episode_1_seed0.mp4", "episode_2_seed0.mp4"]
    lengths = [int(n) for n in re.findall(r"length (\d+)", done.stdout)]
    for video, length in zip(videos, lengths, strict=True):
        frames = imageio.mimread(video, memtest=False)
        assert len(frames) == length  # the reset frame and one per step but the last
        assert frames[0].shape == (480, 480, 3) and np.asarray(frames[0]).std() > 1


def test_training_records_an_evaluation_video_every_k_evaluations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``eval_video_every=2``: an MP4 at every 2nd evaluation (by step), a GIF in
    TensorBoard, and the run's numbers unchanged (the video episode draws nothing from
    the run's random streams)."""
    pytest.importorskip("imageio_ffmpeg", reason="pip install 'rlcore[video]'")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlcore.logging import read_csv
    from rlcore.train import train
    from tests.conftest import make_config

    backend = headless_gl()
    if backend is None:
        pytest.skip("no headless OpenGL here (MUJOCO_GL=egl and osmesa both fail to render)")
    monkeypatch.setenv("MUJOCO_GL", backend)
    args = ["algo=sac", "env=Hopper", "total_steps=400", "algo.learning_starts=100",
            "algo.batch_size=32", "algo.hidden=[32,32]", "eval_every=100", "eval_episodes=2",
            "eval_envs=2", "env.max_episode_steps=40", "threads=1", "logger.console=false",
            "env.backend=sync"]  # fmt: skip
    train(make_config(*args, "eval_video_every=2"), tmp_path / "video")
    train(make_config(*args), tmp_path / "plain")
    videos = sorted(p.name for p in (tmp_path / "video" / "videos").glob("*.mp4"))
    steps = [int(r["step"]) for r in read_csv(tmp_path / "video" / "eval.csv")]
    assert videos == sorted(f"eval_step_{s}.mp4" for s in steps if (s // 100) % 2 == 0)
    assert len(videos) >= 2 and not (tmp_path / "plain" / "videos").exists()
    events = EventAccumulator(str(tmp_path / "video" / "tb"), size_guidance={"images": 0})
    events.Reload()
    assert [e.step for e in events.Images("eval/video")] == sorted(
        int(v.removeprefix("eval_step_").removesuffix(".mp4")) for v in videos
    )

    def numbers(run: str) -> list[dict]:  # every value but the training time (wall clock)
        rows = read_csv(tmp_path / run / "eval.csv")
        return [{k: v for k, v in r.items() if k != "eval/train_seconds"} for r in rows]

    assert numbers("video") == numbers("plain")


def test_a_video_of_a_task_that_cannot_render_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task without an ``rgb_array`` render mode (NeoRL-2's DMSD): training with
    ``eval_video_every`` stops before its first step, and ``rlcore.evaluate video=true``
    with a one-line error (exit 2), not a traceback from the env's constructor."""
    from rlcore.train import train
    from tests.conftest import make_config

    args = ["algo=sac", "env=DMSD", "total_steps=60", "algo.learning_starts=20",
            "algo.batch_size=8", "algo.hidden=[8]", "eval_every=60", "eval_episodes=1",
            "threads=1", "logger=quiet"]  # fmt: skip
    with pytest.raises(ValueError, match="cannot render frames for a video"):
        train(make_config(*args, "eval_video_every=1"), tmp_path / "video")
    assert not (tmp_path / "video" / "train.csv").exists()
    train(make_config(*args), tmp_path / "run")
    assert main([str(tmp_path / "run"), "episodes=1", "video=true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: video=true: neorl2/DMSD-v0 cannot render frames for a video")
    assert err.count("\n") == 1
