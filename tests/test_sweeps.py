"""Sweeps on Hydra launchers: joblib (parallel local processes), submitit (its local
executor stands in for SLURM) and Ray (when installed), through ``python -m rlcore.train -m``."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from tests.conftest import FAST, HANG_GUARD_S, REPO, python_cmd

# a run of a few seconds: 100 random steps, then one update per step, two evaluations
TINY = [*FAST, "seed=0", "total_steps=400", "algo.learning_starts=100", "eval_every=200"]


def _sweep(
    tmp_path: Path, *args: str, tiny: list[str] = TINY, timeout: float = HANG_GUARD_S
) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "HYDRA_FULL_ERROR": "0"}
    return subprocess.run(
        python_cmd("-m", *args, *tiny),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _run_dirs(tmp_path: Path) -> dict[str, Path]:
    """The sweep's run dirs by ``<algo>/<env>/seed<k>_<n>``."""
    sweeps = list((tmp_path / "runs" / "multirun").iterdir())
    assert len(sweeps) == 1, sweeps
    return {
        str(path.parent.relative_to(sweeps[0])): path.parent
        for path in sweeps[0].glob("*/*/*/config.yaml")
    }


def _check_run(run_dir: Path) -> dict:
    """A finished run: config, evaluations at 200 and 400 steps, final checkpoint."""
    assert (run_dir / "config.yaml").is_file()
    eval_rows = (run_dir / "eval.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in eval_rows[1:]] == ["200", "400"]
    assert (run_dir / "checkpoints" / "latest.pt").is_file()
    return json.loads((run_dir / "meta.json").read_text())


def _compose_launcher(name: str) -> dict:
    with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra/launcher={name}"], return_hydra_config=True)
    return dict(cfg.hydra.launcher)


def test_presets_are_found_on_the_package_search_path():
    joblib = _compose_launcher("rlcore_joblib")
    assert joblib["_target_"].endswith("JoblibLauncher") and joblib["n_jobs"] == 2
    slurm = _compose_launcher("rlcore_slurm")
    assert slurm["_target_"].endswith("SlurmLauncher")
    assert (slurm["cpus_per_task"], slurm["gpus_per_node"], slurm["timeout_min"]) == (4, 0, 720)
    assert slurm["partition"] is None  # the user's cluster decides


def test_joblib_sweep_runs_jobs_in_two_concurrent_processes(tmp_path):
    # concurrent: each job waits at its start for the other (tests/sweep_barrier.py); run
    # one after the other, the first would give up at the guard and never meet the second
    barrier = [
        "+hydra.callbacks.barrier._target_=tests.sweep_barrier.Rendezvous",
        f"+hydra.callbacks.barrier.folder={tmp_path / 'barrier'}",
        "+hydra.callbacks.barrier.parties=2",
        f"+hydra.callbacks.barrier.hang_guard_s={HANG_GUARD_S / 2}",
    ]
    args = ["algo=sac,td3", "env=InvertedPendulum", "hydra/launcher=rlcore_joblib", *barrier]
    out = _sweep(tmp_path, *args)
    assert out.returncode == 0, out.stderr
    assert "Joblib.Parallel(n_jobs=2" in out.stdout + out.stderr
    runs = _run_dirs(tmp_path)
    assert sorted(runs) == ["sac/invertedpendulum/seed0_0", "td3/invertedpendulum/seed0_1"]
    metas = [_check_run(path) for path in runs.values()]
    pids = {meta["pid"] for meta in metas}
    assert len(pids) == 2  # the basic launcher runs every job in the calling process
    met = sorted(p.name for p in (tmp_path / "barrier").glob("met_*"))
    assert [name.split("_")[1] for name in met] == ["0", "1"], met  # both met at the barrier
    assert {int(name.split("_")[2]) for name in met} == pids


def test_a_failing_job_stops_the_sweep_and_is_named(tmp_path):
    # IQL is offline and fails at once for want of a dataset; SAC's job runs beside it
    # IQL has no learning_starts to override: total_steps must pass SAC's 1,000 random
    # steps (sac_invertedpendulum), or SAC's job fails too and the two errors race
    tiny = [*FAST, "seed=0", "total_steps=1200"]
    args = ["algo=sac,iql", "env=InvertedPendulum", "hydra/launcher=rlcore_joblib"]
    out = _sweep(tmp_path, *args, tiny=tiny)
    assert out.returncode == 2  # a config error (docs/cli.md, "Exit codes")
    assert "error: job 1 (" in out.stderr and "iql/invertedpendulum/seed0_1): " in out.stderr
    assert "algo=iql trains on offline data: pass dataset=" in out.stderr
    assert "Traceback" not in out.stderr


def test_submitit_local_sweeps_envs_by_friendly_names(tmp_path):
    # env= with several friendly names goes through the CLI's name mapping to config names
    out = _sweep(
        tmp_path,
        "algo=sac",
        "env=InvertedPendulum,InvertedDoublePendulum-v5",
        "hydra/launcher=submitit_local",
    )
    assert out.returncode == 0, out.stderr
    runs = _run_dirs(tmp_path)
    assert sorted(runs) == [
        "sac/inverteddoublependulum/seed0_1",
        "sac/invertedpendulum/seed0_0",
    ]
    pids = {_check_run(run_dir)["pid"] for run_dir in runs.values()}
    assert len(pids) == 2  # submitit's local executor: one subprocess per job
    # one submitit job (own folder, own log) per run
    logs = list((tmp_path / "runs").rglob(".submitit/*/*_0_log.out"))
    assert len({log.parent.name for log in logs}) == 2, logs


@pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None,
    reason="hydra-ray-launcher (pip install 'rlcore[ray-sweep]') is not installed",
)
def test_ray_local_runs_a_job(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep the 127.0.0.1 node IP
    launcher = _compose_launcher("rlcore_ray")["ray"]
    assert launcher["remote"]["num_cpus"] == 1
    # local Ray on the loopback interface only, no dashboard
    assert launcher["init"]["_node_ip_address"] == "127.0.0.1"
    assert launcher["init"]["include_dashboard"] is False
    out = _sweep(
        tmp_path,
        "algo=sac",
        "env=InvertedPendulum",
        "hydra/launcher=rlcore_ray",
        "+hydra.launcher.ray.init.num_cpus=2",
    )
    assert out.returncode == 0, out.stderr
    runs = _run_dirs(tmp_path)
    assert list(runs) == ["sac/invertedpendulum/seed0_0"]
    assert _check_run(runs["sac/invertedpendulum/seed0_0"])["pid"] != os.getpid()


def test_sweep_progress_lines_name_the_jobs_swept_values(tmp_path):
    # joblib: the jobs run in other processes, which learn the swept keys from the parent
    args = ["algo=sac", "env=InvertedPendulum", "seed=0,1", "hydra/launcher=rlcore_joblib"]
    tiny = [*FAST, "logger.console=true", "total_steps=400", "algo.learning_starts=100"]
    out = _sweep(tmp_path, *args, tiny=[*tiny, "eval_every=200"])
    assert out.returncode == 0, out.stderr
    for seed in (0, 1):
        assert f"[sac InvertedPendulum-v5 seed={seed}] step 400/400" in out.stdout, out.stdout
    for run_dir in _run_dirs(tmp_path).values():  # Hydra's record, written by rlcore
        assert "seed=" in (run_dir / ".hydra" / "overrides.yaml").read_text()
