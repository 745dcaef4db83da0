"""The ``threads`` option: ``auto`` (the default) runs torch on one thread in training,
evaluation and export, ``threads=N`` is honoured, bad values are refused; async workers
build their envs on one thread; and ``python -m rlcore.benchmarks.busy`` at its tiniest
size writes its table and JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlcore.algos.sac import SAC, SACConfig
from rlcore.benchmarks import busy
from rlcore.config import ConfigError
from rlcore.evaluate import EvaluateError, parse_options
from rlcore.evaluate import main as evaluate_main
from rlcore.export import main as export_main
from rlcore.threads import apply_threads, check_threads, intra_op_threads
from rlcore.train import train
from tests.conftest import REPO, make_config
from tests.saved_runs import save_run

HOPPER = "Hopper-v5"
# a short SAC run; no ``threads=`` (conftest's FAST sets threads=1)
SHORT = ["algo=sac", "env=Hopper", "logger=quiet", "eval_episodes=1", "eval_envs=1",
         "total_steps=60", "algo.learning_starts=50", "algo.batch_size=16",
         "algo.hidden=[16,16]", "env.max_episode_steps=20"]  # fmt: skip


@pytest.fixture(autouse=True)
def two_threads_before():
    """Each test starts from a process on 2 torch threads (so ``auto`` has to act) and
    leaves it on 1, as the suite runs."""
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(1)


def _meta_threads(run_dir: Path) -> int:
    return json.loads((run_dir / "meta.json").read_text())["effective"]["torch_threads"]


def test_train_default_is_one_thread(tmp_path: Path) -> None:
    cfg = make_config(*SHORT)
    assert cfg.threads == "auto"
    train(cfg, tmp_path / "run")
    assert torch.get_num_threads() == 1
    assert _meta_threads(tmp_path / "run") == 1


def test_auto_sets_one_interop_thread_in_a_fresh_process() -> None:
    # torch takes the inter-op size only before the pool starts: a fresh process shows it
    code = ("import torch; from rlcore.threads import apply_threads; apply_threads('auto'); "
            "print(torch.get_num_threads(), torch.get_num_interop_threads())")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "2"})  # fmt: skip
    assert out.stdout.split() == ["1", "1"]


def test_train_honours_threads_n(tmp_path: Path) -> None:
    train(make_config(*SHORT, "threads=3"), tmp_path / "run")
    assert torch.get_num_threads() == 3
    assert _meta_threads(tmp_path / "run") == 3


def test_train_threads_null_leaves_torch_alone(tmp_path: Path) -> None:
    train(make_config(*SHORT, "threads=null"), tmp_path / "run")
    assert _meta_threads(tmp_path / "run") == 2  # what the process had


@pytest.mark.parametrize("value", ["0", "many", "-2"])
def test_train_refuses_bad_threads(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match="threads=.*must be auto, an integer >= 1, or null"):
        train(make_config(*SHORT, f"threads={value}"), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_check_threads_values() -> None:
    assert check_threads("auto") == "auto" and check_threads(None) is None
    assert check_threads("null") is None  # command-line text (evaluate, export, collect)
    assert check_threads("4") == 4 and check_threads(2.0) == 2
    assert intra_op_threads("auto") == 1 and intra_op_threads(None) is None
    for bad in (0, True, "x", 1.5):
        with pytest.raises(ValueError, match="must be auto"):
            check_threads(bad)
    assert apply_threads(None) == 2  # null: torch's setting untouched


def _saved_sac(tmp_path: Path) -> Path:
    import gymnasium as gym

    probe = gym.make(HOPPER)
    config = SACConfig(hidden=(16, 16))
    run = tmp_path / "sac_run"
    save_run(run, "sac", SAC(probe.observation_space, probe.action_space, config), config, HOPPER)
    return run


def test_evaluate_default_is_one_thread_and_honours_n(tmp_path: Path) -> None:
    run = _saved_sac(tmp_path)
    assert evaluate_main([str(run), "episodes=1"]) == 0
    assert torch.get_num_threads() == 1
    assert evaluate_main([str(run), "episodes=1", "threads=3"]) == 0
    assert torch.get_num_threads() == 3
    assert parse_options([str(run), "threads=null"])[1]["threads"] is None
    with pytest.raises(EvaluateError, match="threads=0: must be auto"):
        parse_options([str(run), "threads=0"])


def test_export_default_is_one_thread_and_honours_n(tmp_path: Path) -> None:
    run = _saved_sac(tmp_path)
    assert export_main([str(run), "--format", "torchscript"]) == 0
    assert torch.get_num_threads() == 1
    assert export_main([str(run), "--format", "torchscript", "--threads", "3"]) == 0
    assert torch.get_num_threads() == 3


def test_async_workers_build_envs_on_one_thread() -> None:
    from rlcore.envs.make import _in_worker

    assert torch.get_num_threads() == 2
    _in_worker(lambda: None, os.getpid())  # gymnasium's probe env in the learner's process
    assert torch.get_num_threads() == 2
    _in_worker(lambda: None, os.getpid() + 1)  # in a worker process
    assert torch.get_num_threads() == 1


def test_async_backend_run_keeps_the_learners_threads(tmp_path: Path) -> None:
    train(make_config(*SHORT, "env.backend=async", "env.num_envs=2", "threads=3"),
          tmp_path / "run")  # fmt: skip
    assert _meta_threads(tmp_path / "run") == 3


def test_loop_rate_reads_time_csv(tmp_path: Path) -> None:
    # rows at steps 100 and 300, 2 s and 6 s after the loop started: 200 steps in 4 s
    (tmp_path / "time.csv").write_text("step,time/sps\n100,50.0\n300,50.0\n")
    assert busy.loop_rate(tmp_path) == pytest.approx(50.0)
    (tmp_path / "time.csv").write_text("step,time/updates_per_s\n100,100.0\n300,50.0\n")
    assert busy.loop_rate(tmp_path) == pytest.approx(200 / 5)
    (tmp_path / "time.csv").write_text("step,time/sps\n100,50.0\n")
    assert busy.loop_rate(tmp_path) is None


def test_busy_benchmark_tiniest_writes_table_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "busy.json"
    payload = busy.main(["--quick", "--workloads", "sac", "--updates", "4", "--seconds", "300",
                         "--all-threads", "2", "--out", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert "| sac | env steps/s |" in printed and "share (default busy / all quiet)" in printed
    saved = json.loads(out.read_text())
    assert saved["table"] == payload["table"]
    assert set(saved["machine"]["lscpu"]) == {"model", "flags"}
    samples = saved["workloads"]["sac"]["samples"]
    assert sorted(samples) == sorted(busy.CELLS)
    for cell, runs in samples.items():
        assert runs[0]["torch_threads"] == (1 if cell.endswith("default") else 2), cell
        assert runs[0]["rate"] > 0 and not runs[0]["capped"], cell
    summary = saved["workloads"]["sac"]["summary"]
    assert summary["share"] == pytest.approx(
        summary["median"]["busy/default"] / summary["median"]["quiet/all"]
    )


def test_collect_default_is_one_thread_and_honours_n(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlcore.offline.collect import main as collect_main

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    args = ["env=Hopper", "policy=random", "steps=20"]
    collect_main([*args, "dataset_id=local/threads/a-v0"])
    assert torch.get_num_threads() == 1
    collect_main([*args, "dataset_id=local/threads/b-v0", "threads=3"])
    assert torch.get_num_threads() == 3
