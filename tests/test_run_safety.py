"""A user's run is never lost or mixed, and bad input gets one clear message.

Run directories are never overwritten, Ctrl-C / SIGTERM save a checkpoint that resumes
exactly, a damaged checkpoint falls back to the previous one, a full disk leaves the
last good files intact, and config values are checked before anything runs."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest
import torch

import rlcore.checkpoint as checkpoint_module
from rlcore.checkpoint import (
    CheckpointReadError,
    CheckpointWriteError,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from rlcore.config import ConfigError
from rlcore.logging import Logger, read_csv
from rlcore.loops import RunContext, _Progress
from rlcore.run_dir import RunDirExistsError
from rlcore.train import train
from tests.conftest import FAST, HANG_GUARD_S, REPO, make_config, python_cmd
from tests.test_resume import hooked_cli

SAC_TINY = [
    "algo=sac",
    "env=InvertedPendulum",
    "algo.learning_starts=100",
    "algo.batch_size=32",
    "algo.hidden=[32,32]",
    "eval_every=300",
    "checkpoint_every=300",
    "log_every=100",
    *FAST,
]


def _cli(args: list[str], cwd, timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        python_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def _one_clean_error(out: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    text = out.stdout + out.stderr
    assert out.returncode == code, text
    assert "Traceback" not in text, text
    assert out.stderr.startswith("error: "), out.stderr
    for needle in needles:
        assert needle in out.stderr, out.stderr


# ----------------------------------------------------------------------------- run dirs


def test_existing_run_dir_is_refused_and_left_untouched(tmp_path):
    run_dir = tmp_path / "run"
    train(make_config(*SAC_TINY, "total_steps=300"), run_dir)
    before = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with pytest.raises(RunDirExistsError, match="already holds a run"):
        train(make_config(*SAC_TINY, "total_steps=300", "seed=1"), run_dir)
    out = _cli([*SAC_TINY, "total_steps=300", "seed=1", f"run_dir={run_dir}"], tmp_path)
    _one_clean_error(out, 2, "already holds a run", f"resume={run_dir}")
    after = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert after == before  # no file added, removed or changed (Hydra's .hydra/ included)


def test_resume_of_missing_dir_creates_nothing(tmp_path):
    missing = tmp_path / "nope"
    out = _cli([*SAC_TINY, "total_steps=300", f"resume={missing}"], tmp_path)
    _one_clean_error(out, 3, "no such run directory")
    assert not missing.exists()


def test_resume_keeps_hydra_record_of_the_original_run(tmp_path):
    run_dir = tmp_path / "run"
    out = _cli([*SAC_TINY, "total_steps=300", f"run_dir={run_dir}"], tmp_path)
    assert out.returncode == 0, out.stderr
    original = (run_dir / ".hydra" / "overrides.yaml").read_text()
    out = _cli([*SAC_TINY, "total_steps=600", f"resume={run_dir}"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert (run_dir / ".hydra" / "overrides.yaml").read_text() == original
    assert "total_steps=600" in (run_dir / ".hydra_resumed" / "overrides.yaml").read_text()
    assert "resuming from" in (run_dir / "train.log").read_text()


def test_train_log_holds_the_progress_lines(tmp_path):
    train(make_config(*SAC_TINY, "total_steps=300"), tmp_path / "run")
    log = (tmp_path / "run" / "train.log").read_text()
    assert "run dir" in log and "step 300/300" in log and "ETA" in log


# ----------------------------------------------------------------------------- signals


# Source run first in the child: once the run has logged its 2nd row of training
# losses, it sends SIG to itself, as a user's Ctrl-C / a scheduler's SIGTERM would arrive.
# An event of the run, not a timer: the signal lands at the same step on any machine.
_SIGNAL_HOOK = """
import os
import rlcore.logging as _logging

_log, _rows = _logging.Logger.log, [0]

def _log_hook(self, metrics, step):
    _log(self, metrics, step)
    if "train/critic_loss" in metrics:
        _rows[0] += 1
        if _rows[0] == 2:
            os.kill(os.getpid(), SIG)

_logging.Logger.log = _log_hook
"""


def _interrupt_when_learning(args, run_dir, sig) -> subprocess.CompletedProcess:
    """Run the CLI; it gets ``sig`` once it has logged two training rows; its result."""
    proc = hooked_cli([*args, f"run_dir={run_dir}"], f"SIG = {int(sig)}\n{_SIGNAL_HOOK}",
                      cwd=run_dir.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                      text=True)  # fmt: skip
    stdout, stderr = proc.communicate(timeout=HANG_GUARD_S)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_signal_saves_a_checkpoint_that_resumes_exactly(sig, code, tmp_path):
    # no step- or time-based checkpoint: whatever exists was written by the signal
    args = [*SAC_TINY, "total_steps=1200", "checkpoint_every=0", "checkpoint_every_s=0"]
    args += ["eval_every=600"]  # both evaluations come after the resume
    stopped = tmp_path / "stopped"
    out = _interrupt_when_learning(args, stopped, sig)
    assert out.returncode == code, out.stderr
    # a stop the user asked for is not an error: one "interrupted:" line with the command
    assert out.stderr.startswith(f"interrupted: stopped by {sig.name}"), out.stderr
    assert f"python -m rlcore.train resume={stopped}" in out.stderr
    step = load_checkpoint(stopped)["loop"]["counters"]["step"]
    assert 100 < step < 1200
    assert f"received {sig.name}" in (stopped / "train.log").read_text()

    train(make_config(*args, f"resume={stopped}"), stopped)
    train(make_config(*args), tmp_path / "full")
    a, b = load_checkpoint(tmp_path / "full"), load_checkpoint(stopped)
    assert a["loop"]["counters"] == b["loop"]["counters"]
    for key, value in a["agent"]["critic"].items():
        assert torch.equal(value, b["agent"]["critic"][key]), key
    rows = [(r["step"], r["eval/return"]) for r in read_csv(stopped / "eval.csv")]
    assert rows == [(r["step"], r["eval/return"]) for r in read_csv(tmp_path / "full" / "eval.csv")]


def test_checkpoints_by_time_as_well_as_steps(tmp_path):
    # steps never trigger one (checkpoint_every=0); a tiny time interval checkpoints
    # after every step, so several agent snapshots exist before the end
    train(
        make_config(*SAC_TINY, "total_steps=300", "checkpoint_every=0", "checkpoint_every_s=1e-9"),
        tmp_path / "timed",
    )
    assert len(list((tmp_path / "timed" / "checkpoints").glob("agent_step_*.pt"))) > 100
    train(
        make_config(*SAC_TINY, "total_steps=300", "checkpoint_every=0", "checkpoint_every_s=0"),
        tmp_path / "end_only",
    )
    snapshots = list((tmp_path / "end_only" / "checkpoints").glob("agent_step_*.pt"))
    assert [p.name for p in snapshots] == ["agent_step_300.pt"]
    # the agent-only file: the networks of the run's last checkpoint, no optimiser states;
    # it acts as the whole agent does, and init_from names what it lacks
    snapshot = load_checkpoint(snapshots[0])
    whole = load_checkpoint(tmp_path / "end_only")
    assert set(whole["agent"]) - set(snapshot["agent"]) == {
        "actor_optimizer", "critic_optimizer", "alpha_optimizer"}  # fmt: skip
    for part in ("actor", "critic", "target_critic"):
        for key, value in whole["agent"][part].items():
            assert torch.equal(value, snapshot["agent"][part][key]), (part, key)
    from rlcore.policies import load_policy

    obs = np.linspace(-1, 1, 4)  # InvertedPendulum
    np.testing.assert_array_equal(load_policy(snapshots[0])(obs), load_policy(tmp_path / "end_only")(obs))
    with pytest.raises(ConfigError, match="is an agent-only snapshot"):
        train(make_config(*SAC_TINY, f"init_from={snapshots[0]}"), tmp_path / "continued")


def test_agent_only_files_leave_out_optimiser_states_at_any_depth() -> None:
    from rlcore.run_dir import without_optimizers

    weights = {"w": torch.ones(2)}
    adam = {"state": {0: {"exp_avg": torch.zeros(2)}}, "param_groups": [{"lr": 1e-3}]}
    state = {"actor": weights, "actor_optimizer": adam, "updates": 7,
             "sub": {"net": weights, "opt": adam, "rates": {"state": 1, "other": 2}}}  # fmt: skip
    kept = without_optimizers(state)
    assert kept == {"actor": weights, "updates": 7,
                    "sub": {"net": weights, "rates": {"state": 1, "other": 2}}}  # fmt: skip
    assert kept["actor"] is weights and kept["sub"]["rates"] is state["sub"]["rates"]
    assert without_optimizers({"actor": weights}) == {"actor": weights}
    assert state["actor_optimizer"] is adam and "opt" in state["sub"]  # the input unchanged


def test_eta_follows_recent_speed_not_the_warmup(tmp_path, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    logger = Logger(tmp_path, tensorboard=False, csv_files=False, console=False)
    progress = _Progress(RunContext("x", logger, save=lambda s: tmp_path), total=100_000, start=0)
    step = 0
    for _ in range(10):  # warm-up: 1,000 steps/s for 10 s
        clock[0] += 1.0
        step += 1_000
        progress.recent_sps(step)
    for _ in range(120):  # learning: 10 steps/s for 2 minutes
        clock[0] += 1.0
        step += 10
        progress.recent_sps(step)
    assert progress.recent_sps(step) == pytest.approx(10.0, rel=0.05)
    assert progress.sps(step) > 80  # the whole-run average the old ETA used
    logger.close()


# ----------------------------------------------------------------------------- checkpoints


def test_damaged_latest_checkpoint_falls_back_to_previous(tmp_path):
    run_dir = tmp_path / "run"
    train(make_config(*SAC_TINY, "total_steps=600"), run_dir)
    latest = run_dir / "checkpoints" / "latest.pt"
    previous = run_dir / "checkpoints" / "previous.pt"
    assert load_checkpoint(previous)["loop"]["counters"]["step"] == 300
    latest.write_bytes(latest.read_bytes()[:1000])  # truncated, as by a full disk or copy
    with pytest.warns(UserWarning, match="latest.pt is unreadable"):
        assert load_checkpoint(run_dir)["loop"]["counters"]["step"] == 300
    state, used, problems = read_checkpoint(run_dir)
    assert used == previous and "latest.pt" in problems[0]

    train(make_config(*SAC_TINY, "total_steps=600", f"resume={run_dir}"), run_dir)
    log = (run_dir / "train.log").read_text()
    assert "latest.pt is unreadable" in log and "resuming from" in log and "(step 300)" in log
    assert load_checkpoint(run_dir)["loop"]["counters"]["step"] == 600

    for file in (latest, previous):
        file.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointReadError, match="latest.pt.*previous.pt"):
        load_checkpoint(run_dir)


def test_full_disk_keeps_the_previous_checkpoint_and_stops_clearly(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    real_save, calls = torch.save, [0]

    def save_until_disk_full(obj, f, *args, **kwargs):
        calls[0] += 1
        if calls[0] > 2:  # latest + agent snapshot at step 300 succeed, then the disk is full
            f.write(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module.torch, "save", save_until_disk_full)
    with pytest.raises(CheckpointWriteError, match="No space left on device"):
        train(make_config(*SAC_TINY, "total_steps=900"), run_dir)
    monkeypatch.setattr(checkpoint_module.torch, "save", real_save)
    assert load_checkpoint(run_dir)["loop"]["counters"]["step"] == 300
    assert not list((run_dir / "checkpoints").glob(".*.tmp"))  # no half-written file left

    # the CLI turns it into one line naming the fix
    with pytest.raises(CheckpointWriteError) as info:
        monkeypatch.setattr(checkpoint_module.torch, "save", save_until_disk_full)
        calls[0] = 0
        save_checkpoint({"x": 1}, tmp_path / "a.pt")
        save_checkpoint({"x": 2}, tmp_path / "a.pt", keep_previous=True)
        save_checkpoint({"x": 3}, tmp_path / "a.pt", keep_previous=True)
    assert "a.pt" in str(info.value) and "intact" in str(info.value)
    monkeypatch.setattr(checkpoint_module.torch, "save", real_save)
    assert torch.load(tmp_path / "a.pt")["x"] == 2
    assert torch.load(tmp_path / "previous.pt")["x"] == 1


# ----------------------------------------------------------------------------- bad config


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("algo.batch_size=-5", "algo.batch_size=-5: must be > 0"),
        ("algo.batch_size=0", "algo.batch_size=0: must be > 0"),
        ("algo.actor_lr=abc", "algo.actor_lr='abc': expected a number"),
        ("algo.gamma=1.5", "algo.gamma=1.5: must lie in (0, 1]"),
        ("algo.hidden=[64,0]", "layer widths must be positive"),
        ("algo.buffer_size=0", "algo.buffer_size=0: must be > 0"),
        ("total_steps=0", "total_steps=0: must be > 0"),
        ("total_steps=50", "total_steps=50 <= algo.learning_starts=100"),
        ("eval_episodes=0", "eval_episodes=0: must be >= 1"),
        ("stop_after_s=0", "stop_after_s=0: must be > 0 (seconds) or null"),
        ("env.num_envs=0", "env.num_envs=0: must be >= 1"),
        ("env.obs=[state,pixels]", "expected a string (state, pixels or state+pixels)"),
        ("seed=-1", "seed=-1: must be >= 0"),
        ("+foo=1", "unknown option(s) ['foo']"),
    ],
)
def test_bad_config_values_are_refused_before_anything_runs(override, needle, tmp_path):
    with pytest.raises(ConfigError) as info:
        train(make_config(*SAC_TINY, "total_steps=300", override), tmp_path / "run")
    assert needle in str(info.value)
    assert not (tmp_path / "run").exists()


def test_ppo_run_shorter_than_one_rollout_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="less than one rollout"):
        train(make_config("algo=ppo", "env=InvertedPendulum", "total_steps=100"), tmp_path)


@pytest.mark.parametrize(
    ("override", "needle"),
    [("algo.batch_size=-5", "must be > 0"), ("algo.actor_lr=abc", "expected a number")],
)
def test_cli_bad_value_is_one_line_exit_2_and_leaves_no_run_dir(override, needle, tmp_path):
    out = _cli([*SAC_TINY, "total_steps=300", override], tmp_path)
    _one_clean_error(out, 2, needle)
    assert len(out.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.rglob(".hydra"))  # the refused run left no run directory


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # DQN's dataclass default is 2.5e-4; CartPole's recipe (algo_env/dqn_cartpole.yaml)
        (["algo=dqn", "env=CartPole-v1"], "(default for dqn on CartPole-v1: algo.lr=0.0023)"),
        (["algo=dqn", "env=Acrobot-v1"], "(default for dqn on Acrobot-v1: algo.lr=0.00025)"),
    ],
)
def test_bad_value_names_the_runs_own_default(args, needle, tmp_path):
    """A bad value's message offers the value this run's config files give (the algo_env
    file of the pair), not the config dataclass's default."""
    with pytest.raises(ConfigError) as info:
        train(make_config(*args, "algo.lr=-1", *FAST), tmp_path / "run")
    assert str(info.value) == f"algo.lr=-1: must be > 0 {needle}"


def test_cli_bad_value_names_the_runs_own_default(tmp_path):
    """Through the command line (Hydra's group choices, an experiment included)."""
    out = _cli(["algo=dqn", "env=CartPole-v1", "algo.lr=-1"], tmp_path)
    _one_clean_error(
        out, 2, "algo.lr=-1: must be > 0 (default for dqn on CartPole-v1: algo.lr=0.0023)"
    )
    out = _cli(["+experiment=iql_hopper_medium", "algo.tau=2"], tmp_path)
    _one_clean_error(
        out, 2, "(default for iql on Hopper-v5 (+experiment=iql_hopper_medium): algo.tau=0.001)"
    )


def test_algo_env_pair_overrides_top_level_keys(config_factory):
    cfg = config_factory("algo=sac", "env=InvertedPendulum")
    assert cfg.eval_every == 1000 and cfg.algo.learning_starts == 1000
    assert config_factory("algo=sac", "env=InvertedPendulum", "eval_every=500").eval_every == 500
    assert config_factory("algo=sac", "env=Hopper").eval_every == 10000


# ----------------------------------------------------------------------------- spaces, data


def test_dict_observations_in_a_rollout_run_and_the_flatten_option(tmp_path):
    """A rollout algorithm takes a Dict of vectors as it is (its rollout stores it
    flattened: tests/test_observations.py) and, with the flatten option, as one vector;
    a dataset of flat observations is refused on the dict env, naming the option."""
    from tests.goal_env import ENV_ID

    args = [
        "algo=ppo",
        f"env={ENV_ID}",
        "total_steps=128",
        "algo.rollout_steps=64",
        "algo.num_minibatches=2",
        *FAST,
    ]
    assert np.isfinite(train(make_config(*args), tmp_path / "dict")["eval/return"])
    assert "obs" in load_checkpoint(tmp_path / "dict")["spaces"]  # the parts' spec
    result = train(make_config(*args, "env.flatten_obs=true"), tmp_path / "flat")
    assert np.isfinite(result["eval/return"])
    assert load_checkpoint(tmp_path / "flat")["spaces"]["obs_shape"] == [3]
    # a dataset of flat observations (a D4RL-format file), for the dict env: refused
    # naming the option
    import h5py

    with h5py.File(tmp_path / "flat.hdf5", "w") as f:
        for key, shape in (("observations", (20, 3)), ("actions", (20, 1)), ("rewards", (20,)),
                           ("terminals", (20,)), ("timeouts", (20,))):  # fmt: skip
            f[key] = np.zeros(shape, np.float32)
    offline = ["algo=iql", f"env={ENV_ID}", f"dataset={tmp_path / 'flat.hdf5'}", *FAST]
    with pytest.raises(ConfigError, match=r"flat observations \(3,\).*env\.flatten_obs=true"):
        train(make_config(*offline), tmp_path / "offline")


def test_dataset_with_wrong_dtype_or_nan_is_a_clear_error(tmp_path):
    from rlcore.offline.datasets import DatasetError, load_dataset

    def write(path, observations):
        with h5py.File(path, "w") as f:
            f["observations"] = observations
            f["actions"] = np.zeros((4, 1), np.float32)
            f["rewards"] = np.zeros(4, np.float32)
            f["terminals"] = np.zeros(4, bool)
            f["timeouts"] = np.zeros(4, bool)

    write(tmp_path / "strings.hdf5", np.array([[b"a"], [b"b"], [b"c"], [b"d"]]))
    with pytest.raises(DatasetError, match="'observations' .* has dtype \\|S1; expected numbers"):
        load_dataset(str(tmp_path / "strings.hdf5"))
    nan_obs = np.zeros((4, 2), np.float32)
    nan_obs[2, 1] = np.nan
    write(tmp_path / "nan.hdf5", nan_obs)
    with pytest.raises(DatasetError, match="non-finite value .* at row 2"):
        load_dataset(str(tmp_path / "nan.hdf5"))


def test_full_disk_while_writing_a_dataset_removes_the_partial_one(tmp_path, monkeypatch):
    import minari

    from rlcore.offline.datasets import DatasetError
    from rlcore.offline.recording import collect

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    collect("InvertedPendulum", "random", "local/pendulum/kept-v0", steps=50, seed=0)

    def disk_full(dataset_id, *args, **kwargs):
        from minari.storage.datasets_root_dir import get_dataset_path

        partial = get_dataset_path(dataset_id) / "data"
        partial.mkdir(parents=True)
        (partial / "main_data.hdf5").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(minari, "create_dataset_from_buffers", disk_full)
    with pytest.raises(DatasetError, match="No space left on device.*removed the partial"):
        collect("InvertedPendulum", "random", "local/pendulum/new-v0", steps=50, seed=0)
    assert not (tmp_path / "local" / "pendulum" / "new-v0").exists()
    assert (tmp_path / "local" / "pendulum" / "kept-v0").is_dir()
