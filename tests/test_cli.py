"""The command line as a user meets it: names, errors, run directory, sweeps, NaN stop."""

import json
import subprocess

import torch
from omegaconf import OmegaConf

from rlcore.checkpoint import load_checkpoint
from rlcore.utils import tensors_finite
from tests.conftest import HANG_GUARD_S, REPO, python_cmd

TINY = [
    "total_steps=300",
    "algo.learning_starts=100",
    "algo.batch_size=32",
    "eval_every=300",
    "eval_episodes=1",
    "eval_envs=1",
    "checkpoint_every=300",
    "threads=1",
    "env.max_episode_steps=50",
    "logger.progress_interval_s=0",
]


def run_cli(args, cwd, timeout=HANG_GUARD_S):
    return subprocess.run(
        python_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_env()
    )


def _env():
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_unknown_algo_lists_choices_without_traceback(tmp_path):
    out = run_cli(["algo=sacc", "env=Hopper"], tmp_path)
    assert out.returncode == 2
    assert "unknown algorithm 'sacc'" in out.stderr
    assert all(name in out.stderr for name in ("ppo", "sac", "td3", "iql", "cql", "rebrac"))
    assert "Traceback" not in out.stderr + out.stdout


def test_unknown_env_lists_choices_without_traceback(tmp_path):
    out = run_cli(["algo=sac", "env=Hoppr"], tmp_path)
    assert out.returncode == 2
    assert "unknown environment 'Hoppr'" in out.stderr and "Walker2d-v5" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_run_directory_contents(tmp_path):
    out = run_cli(["algo=sac", "env=Hopper", *TINY], tmp_path)
    assert out.returncode == 0, out.stderr
    (run_dir,) = (tmp_path / "runs" / "sac" / "hopper").iterdir()
    assert "steps/s" in out.stdout and "ETA" in out.stdout and "episode return" in out.stdout
    config = (run_dir / "config.yaml").read_text()
    assert "id: Hopper-v5" in config and "batch_size: 32" in config
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["versions"]["torch"] == torch.__version__.split("+")[0] or meta["versions"][
        "torch"
    ].startswith(torch.__version__.split("+")[0])
    assert "mujoco" in meta["versions"] and "gymnasium" in meta["versions"] and "git_commit" in meta
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    assert (run_dir / "train.csv").read_text().startswith("step,")
    assert (run_dir / "eval.csv").is_file()
    assert (run_dir / "checkpoints" / "latest.pt").is_file()


def test_full_gym_id_and_case_insensitive_short_name(tmp_path):
    out = run_cli(["algo=td3", "env=Pendulum-v1", *TINY[:-1]], tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "runs" / "td3" / "pendulum-v1").is_dir()  # gym ids: lower case
    out = run_cli(
        [
            "algo=PPO",
            "env=INVERTEDPENDULUM",
            "total_steps=128",
            "algo.rollout_steps=64",
            "eval_episodes=1",
            "eval_envs=1",
            "threads=1",
        ],
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "runs" / "ppo" / "invertedpendulum").is_dir()


def test_multirun_sweep_over_seeds(tmp_path):
    out = run_cli(["-m", "algo=sac", "env=InvertedPendulum", "seed=0,1", *TINY], tmp_path)
    assert out.returncode == 0, out.stderr
    configs = sorted((tmp_path / "runs" / "multirun").glob("*/sac/invertedpendulum/*/config.yaml"))
    assert len(configs) == 2
    seeds = {int(OmegaConf.load(c).seed) for c in configs}  # the run's own seed
    assert seeds == {0, 1}


def test_resume_with_different_network_refuses_naming_field(tmp_path):
    run_dir = tmp_path / "run"
    out = run_cli(["algo=sac", "env=InvertedPendulum", *TINY, f"run_dir={run_dir}"], tmp_path)
    assert out.returncode == 0, out.stderr
    out = run_cli(
        ["algo=sac", "env=InvertedPendulum", *TINY, "algo.hidden=[64,64]", f"resume={run_dir}"],
        tmp_path,
    )
    assert out.returncode == 2  # a config error (docs/cli.md, "Exit codes")
    assert "algo.hidden" in out.stderr and "Traceback" not in out.stderr
    out = run_cli(["algo=sac", "env=Hopper", *TINY, f"resume={run_dir}"], tmp_path)
    assert out.returncode == 2 and "trained on InvertedPendulum-v5; drop env=" in out.stderr
    assert not (run_dir / ".hydra_resumed").exists()  # refused: nothing written
    other = tmp_path / "branch"  # a resumed run continues in its own directory, not there
    out = run_cli([f"resume={run_dir}", f"run_dir={other}"], tmp_path)
    assert out.returncode == 2 and f"continues in its own directory ({run_dir})" in out.stderr
    assert not other.exists()


def test_nan_loss_stops_with_message_and_good_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    out = run_cli(
        [
            "algo=sac",
            "env=Hopper",
            *TINY,
            f"run_dir={run_dir}",
            "+env.kwargs.forward_reward_weight=nan",
        ],
        tmp_path,
    )
    assert out.returncode == 1
    assert "non-finite loss 'critic_loss'" in out.stderr
    # the first update runs on the first online step after learning_starts=100 random ones
    assert "at environment step 101" in out.stderr and "Traceback" not in out.stderr
    state = load_checkpoint(run_dir)
    assert state["loop"]["counters"]["step"] == 101
    assert tensors_finite(state["agent"])


def test_resume_of_missing_run_is_a_clear_error(tmp_path):
    out = run_cli(["algo=sac", "env=Hopper", *TINY, f"resume={tmp_path / 'nope'}"], tmp_path)
    assert out.returncode == 3 and "no such run directory" in out.stderr
    assert not (tmp_path / "nope").exists()
    assert "Traceback" not in out.stderr
