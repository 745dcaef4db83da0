"""Without ``mujoco.batch`` (MuJoCo < 4.0) the native back end refuses with a message
naming the required version, and ``backend="auto"`` falls back to sync with a warning."""

import warnings

import gymnasium as gym
import numpy as np
import pytest

import rlcore.envs.native
from rlcore.envs.make import make_vec_env
from rlcore.envs.native import NativeBackendUnavailableError, NativeVectorEnv


def base_env(env):
    while hasattr(env, "env"):
        env = env.env
    return env


@pytest.fixture
def old_mujoco(monkeypatch):
    """Pretend the installed MuJoCo predates ``mujoco.batch``."""
    monkeypatch.setattr(rlcore.envs.native, "Batch", None)


def test_auto_is_native_where_mujoco_has_batch():
    assert rlcore.envs.native.batch_available()  # this project's MuJoCo (pyproject: mujoco>=4.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = make_vec_env("Hopper", 2, backend="auto")
        other = make_vec_env("Reacher", 2, backend="auto")  # no native version: sync
    assert isinstance(base_env(env), NativeVectorEnv)
    assert isinstance(base_env(other), gym.vector.SyncVectorEnv)
    env.close()
    other.close()


def test_explicit_native_without_batch_names_the_mujoco_version(old_mujoco):
    with pytest.raises(NativeBackendUnavailableError, match=r"MuJoCo >= 4\.0.*env\.backend=sync"):
        make_vec_env("Hopper", 2, backend="native")
    with pytest.raises(NativeBackendUnavailableError, match=r"MuJoCo >= 4\.0"):
        NativeVectorEnv("Hopper-v5", 2)


def test_auto_without_batch_falls_back_to_sync_with_one_warning(old_mujoco):
    with pytest.warns(RuntimeWarning, match=r"MuJoCo >= 4\.0.*sync") as record:
        env = make_vec_env("Hopper", 2, seed=0, backend="auto", max_episode_steps=20)
    assert len([w for w in record if issubclass(w.category, RuntimeWarning)]) == 1
    assert isinstance(base_env(env), gym.vector.SyncVectorEnv)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 11)
    _, reward, *_ = env.step(np.zeros((2, 3), np.float32))
    assert reward.shape == (2,) and np.isfinite(reward).all()
    env.close()
    with warnings.catch_warnings():  # a task without a native version: sync, no warning
        warnings.simplefilter("error")
        make_vec_env("Reacher", 1, backend="auto").close()


def test_cli_reports_the_missing_mujoco_version_in_one_line(
    old_mujoco, tmp_path, capsys, monkeypatch
):
    import sys

    from rlcore.cli import cli

    monkeypatch.setattr(sys, "argv", ["rlcore.train"])  # cli() rewrites sys.argv
    with pytest.raises(SystemExit) as exit_info:
        cli(["algo=sac", "env=Hopper", "env.backend=native", f"hydra.run.dir={tmp_path}"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "MuJoCo >= 4.0" in err and "Traceback" not in err
