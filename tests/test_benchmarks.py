"""Smoke tests of the benchmark scripts (throughput suite, offline table): tiny runs,
JSON shape."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from rlcore.benchmarks.offline import main as offline_main
from rlcore.benchmarks.offline import override_tag
from rlcore.benchmarks.runs import write_figures
from rlcore.benchmarks.throughput.cli import main
from rlcore.benchmarks.throughput.common import alternate
from rlcore.logging import read_csv
from rlcore.offline.collect import main as collect_main
from rlcore.offline.datasets import load_dataset
from rlcore.offline.scores import normalized_score
from tests.conftest import HANG_GUARD_S


def _positive(value: object) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def test_alternate_interleaves_and_takes_medians():
    calls: list[str] = []

    def measure(name: str, values: list[float]):
        it = iter(values)

        def run() -> float:
            calls.append(name)
            return next(it)

        return run

    result = alternate(
        {"a": measure("a", [1.0, 5.0, 3.0]), "b": measure("b", [2.0, 2.0, 8.0]), "c": None}, 3
    )
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert result["a"] == {"samples": [1.0, 5.0, 3.0], "median": 3.0}
    assert result["b"]["median"] == 2.0
    assert result["c"] is None


def test_quick_suite_writes_json(tmp_path):
    out = tmp_path / "x.json"
    argv = ["--quick", "--sections", "memory", "env", "--envs", "Hopper", "--num-envs", "1", "2"]
    argv += ["--env-steps", "200", "--threads", "1", "--memory-capacity", "200000"]
    main([*argv, "--out", str(out)])
    data = json.loads(out.read_text())

    assert data["quick"] is True
    for key in ("platform", "cpu_count", "torch", "mujoco", "gymnasium", "torch_threads"):
        assert key in data["machine"]
    assert "stable_baselines3" in data["machine"] and "envpool" in data["machine"]
    assert list(data["sections"]) == ["env", "memory"]  # canonical order

    env = data["sections"]["env"]
    assert [(r["env"], r["num_envs"]) for r in env["rows"]] == [("Hopper-v5", 1), ("Hopper-v5", 2)]
    for row in env["rows"]:
        for name in ("native", "sync", "async", "ceiling"):
            contender = row["steps_per_s"][name]
            assert len(contender["samples"]) == data["args"]["rounds"] == 1
            assert _positive(contender["median"])
        assert row["steps_per_s"]["envpool"] is None or _positive(
            row["steps_per_s"]["envpool"]["median"]
        )
        for key in ("native/sync", "native/async", "native/ceiling"):
            assert _positive(row["ratios"][key])
        assert row["ratios"]["native/envpool"] is None or _positive(row["ratios"]["native/envpool"])

    memory = data["sections"]["memory"]
    rlcore = memory["buffers"]["rlcore"]
    assert rlcore["buffer_bytes"] == memory["raw_bytes"] == 200_000 * 4 * 28
    assert _positive(memory["ratios"]["rlcore/raw"])

    names = {t["name"]: t for t in data["targets"]}
    assert {t["section"] for t in data["targets"]} == {"env", "memory"}
    assert _positive(names["memory: rlcore peak RSS / raw data"]["value"])
    assert names["env Hopper 64 envs: native / MuJoCo ceiling"]["value"] is None  # not run
    for target in data["targets"]:
        assert target["met"] in (True, False, None)


def test_bf16_parity_summary_places_bf16_against_the_float32_range():
    from rlcore.benchmarks.bf16_parity import summarise

    def run(final: float) -> dict:
        return {"final": final, "last3": final - 10.0}

    results = {
        "float32_seed0": run(1000.0),
        "float32_seed1": run(1400.0),
        "bf16_seed0": run(1200.0),
        "bf16_seed1": run(1500.0),
    }
    report = summarise(results, [0, 1])
    assert report["float32_range"] == [1000.0, 1400.0]
    assert report["summary"]["bf16"] == {"mean_final": 1350.0, "mean_last3": 1340.0}
    assert not report["bf16_inside_float32_range"]  # 1500 is above the range
    assert report["bf16_none_below_float32_range"]
    results["bf16_seed0"] = run(900.0)
    assert not summarise(results, [0, 1])["bf16_none_below_float32_range"]


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_report(folder: Path, metric: str) -> dict:
    """The rlcore.report files in ``folder`` (three real PNGs, report.md quoting the
    command that redraws them); returns report.json."""
    for name in ("learning_curves", "final_scores", "performance_profile"):
        assert (folder / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
    report = json.loads((folder / "report.json").read_text())
    assert report["metric"] == metric
    assert "python -m rlcore.report " in (folder / "report.md").read_text()
    return report


def test_offline_benchmark_table_bf16_resume_and_report(tmp_path, monkeypatch, capfd):
    """benchmarks/offline.py end to end on a tiny random Hopper dataset: rows with the
    behaviour score, per-algorithm precision and run dirs; a run dir left by a run killed
    before its first checkpoint is emptied and trained afresh; the report and figures of
    the runs come from rlcore.report (normalised scores, one group per algorithm); a
    second call resumes the finished runs (same numbers, no retraining); bad --bf16 names
    fail clearly."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.setenv("RLCORE_ALLOW_EMULATED_BF16", "1")  # the label logic, on any CPU
    collect_main(["env=Hopper", "policy=random", "steps=400", "dataset_id=t/hopper/rand-v0"])
    stale = tmp_path / "runs" / "td3_bc_medium_seed0_bf16"  # killed before a checkpoint
    (stale / "tb").mkdir(parents=True)
    (stale / "config.yaml").write_text("stale: true\n")
    (stale / "eval.csv").write_text("step,eval/normalized_score\n5,-99.0\n")
    argv = ["--datasets", "medium", "--algos", "td3_bc", "iql", "--bf16", "td3_bc"]
    argv += ["--set", "iql:algo.beta=0.5", "iql:algo.tau=0.01"]
    argv += ["--steps", "30", "--eval-every", "15", "--dataset-id", "medium=t/hopper/rand-v0"]
    argv += ["--run-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "offline.json")]
    first = offline_main(argv)
    printed = capfd.readouterr().out  # the trainings print from worker processes
    assert f"{stale} holds run files (config.yaml, eval.csv, tb) but no checkpoint" in printed
    assert "removing them and starting afresh" in printed
    assert not (stale / "tb").exists() and "stale" not in (stale / "config.yaml").read_text()
    (row,) = first["rows"]
    returns = load_dataset("t/hopper/rand-v0").episode_returns()
    assert row["behaviour"] == pytest.approx(normalized_score(float(returns.mean()), "Hopper-v5"))
    assert row["td3_bc"]["precision"] == "bf16" and row["iql"]["precision"] == "float32"
    for algo in ("td3_bc", "iql"):
        assert row[algo]["steps"] == 30 and row[algo]["best"] >= row[algo]["last"]
        assert math.isfinite(row[algo]["mean_last10"])
        (curve,) = row[algo]["curves"]  # one seed: (step, score) per evaluation
        assert [step for step, _ in curve] == [15, 30]
        assert curve[-1][1] == pytest.approx(row[algo]["last"], abs=0.01)
    assert (tmp_path / "runs" / "td3_bc_medium_seed0_bf16" / "eval.csv").is_file()
    assert (tmp_path / "runs" / "iql_medium_seed0_beta0.5_tau0.01" / "eval.csv").is_file()
    assert row["iql"]["overrides"] == ["algo.beta=0.5", "algo.tau=0.01"]
    assert row["td3_bc"]["overrides"] == []
    config = (tmp_path / "runs" / "iql_medium_seed0_beta0.5_tau0.01" / "config.yaml").read_text()
    assert "beta: 0.5" in config and "tau: 0.01" in config
    written = json.loads((tmp_path / "offline.json").read_text())
    assert written["rows"] == first["rows"]
    assert first["report"] == tmp_path / "offline_report"
    assert written["report"] == str(tmp_path / "offline_report")
    report = assert_report(tmp_path / "offline_report", "eval/normalized_score")
    groups = {g["label"]: g for g in report["groups"]}
    assert sorted(groups) == [
        "iql Hopper-v5 t/hopper/rand-v0",
        "td3_bc Hopper-v5 t/hopper/rand-v0",
    ]  # one run each: no differing keys to label
    for algo in ("td3_bc", "iql"):
        group = groups[f"{algo} Hopper-v5 t/hopper/rand-v0"]
        assert group["final_scores"] == [pytest.approx(row[algo]["last"])]
        assert group["best_scores"] == [pytest.approx(row[algo]["best"])]
        assert group["curve"]["step"] == [15, 30]
    assert {Path(p).name for g in report["groups"] for p in g["runs"]} == {
        "td3_bc_medium_seed0_bf16",
        "iql_medium_seed0_beta0.5_tau0.01",
    }
    again_result = offline_main([*argv, "--no-figures"])
    assert again_result["report"] is None
    again = again_result["rows"][0]
    for algo in ("td3_bc", "iql"):
        assert {k: again[algo][k] for k in ("last", "best")} == {
            k: row[algo][k] for k in ("last", "best")
        }
    capfd.readouterr()
    with pytest.raises(SystemExit, match="--bf16 names algorithms not in --algos"):
        offline_main([*argv[:4], "--bf16", "cql"])
    with pytest.raises(SystemExit, match="--set expects"):
        offline_main([*argv[:4], "--set", "cql:algo.beta=1"])
    with pytest.raises(SystemExit, match="--set expects"):
        offline_main([*argv[:5], "--set", "iql:beta"])


def _fake_run(path: Path, config: str, evals: list[tuple[int, float]]) -> Path:
    """A run dir as rlcore.train leaves it, for the report: config.yaml and eval.csv."""
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(config)
    rows = "".join(f"{step},{value}\n" for step, value in evals)
    (path / "eval.csv").write_text("step,eval/return\n" + rows)
    return path


def test_bf16_parity_figures_group_the_runs_by_mode(tmp_path):
    """bf16_parity's report: one group per mode (labelled by its precision), each with
    its seeds' final returns, drawn by rlcore.report."""
    from rlcore.benchmarks.bf16_parity import MODES, figures, run_name

    finals = {
        ("float32", 0): 900.0,
        ("float32", 1): 1100.0,
        ("bf16", 0): 950.0,
        ("bf16", 1): 1300.0,
    }
    for (mode, seed), final in finals.items():
        precision, compile_ = ("bf16", "true") if mode == "bf16" else ("float32", "false")
        config = f"algo:\n  name: sac\n  precision: {precision}\n  compile: {compile_}\n"
        config += f"env:\n  id: Hopper-v5\nseed: {seed}\n"
        _fake_run(tmp_path / "runs" / run_name(mode, seed), config, [(50, 10.0), (100, final)])
    assert list(MODES) == ["float32", "bf16"]
    figures(tmp_path / "runs", [0, 1], tmp_path / "report")
    report = assert_report(tmp_path / "report", "eval/return")
    groups = {g["label"]: g for g in report["groups"]}
    # algo.compile is a per-run key of rlcore.report (a speed setting): precision labels
    assert sorted(groups) == [
        "sac Hopper-v5 algo.precision=bf16",
        "sac Hopper-v5 algo.precision=float32",
    ]
    bf16 = groups["sac Hopper-v5 algo.precision=bf16"]
    assert bf16["seeds"] == [0, 1] and sorted(bf16["final_scores"]) == [950.0, 1300.0]
    assert bf16["final"]["mean"]["point"] == pytest.approx(1125.0)


def test_sac_vs_sb3_report_draws_both_libraries_on_one_task(tmp_path):
    """The SB3 side's run dir (write_sb3_run) is read by rlcore.report next to rlcore's
    run: two groups of the same task, SB3's curve from its per-chunk evaluations."""
    import argparse

    from rlcore.benchmarks.sac_hopper_vs_sb3 import SB3_ALGO, write_sb3_run

    args = argparse.Namespace(seed=3, steps=400, learning_starts=100)
    sb3 = tmp_path / "stamp" / "sb3"
    write_sb3_run(sb3, args, "2.9.2", [(200, 50.0)])
    write_sb3_run(sb3, args, "2.9.2", [(200, 50.0), (400, 80.0)])  # rewritten per chunk
    config = "algo:\n  name: sac\n  actor_lr: 0.0003\nenv:\n  id: Hopper-v5\nseed: 3\n"
    rlcore = _fake_run(tmp_path / "stamp" / "rlcore", config, [(200, 40.0), (400, 120.0)])
    write_figures([rlcore, sb3], tmp_path / "report")
    report = assert_report(tmp_path / "report", "eval/return")
    groups = {g["label"]: g for g in report["groups"]}
    assert sorted(groups) == ["sac Hopper-v5", f"{SB3_ALGO} Hopper-v5"]
    theirs = groups[f"{SB3_ALGO} Hopper-v5"]
    assert theirs["seeds"] == [3] and theirs["final_scores"] == [80.0]
    assert theirs["curve"]["step"] == [200, 400] and theirs["curve"]["iqm"] == [50.0, 80.0]
    assert groups["sac Hopper-v5"]["best_scores"] == [120.0]
    assert "algo:\n  name: sb3_sac\n  library: stable-baselines3 2.9.2" in (
        (sb3 / "config.yaml").read_text()
    )


def test_offline_benchmark_reads_a_d4rl_file(tmp_path, monkeypatch, capsys):
    """--dataset-id takes a D4RL-format HDF5 path (how users with D4RL's files run it)."""
    import h5py

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    collect_main(["env=Hopper", "policy=random", "steps=300", "dataset_id=t/hopper/rand-v0"])
    data = load_dataset("t/hopper/rand-v0")
    path = tmp_path / "hopper_random.hdf5"
    with h5py.File(path, "w") as f:
        f["observations"], f["next_observations"] = data.obs.numpy(), data.next_obs.numpy()
        f["actions"], f["rewards"] = data.action.numpy(), data.reward.numpy()
        f["terminals"], f["timeouts"] = data.terminated.numpy(), data.truncated.numpy()
    argv = ["--datasets", "medium", "--algos", "td3_bc", "--steps", "10", "--eval-every", "10"]
    argv += ["--dataset-id", f"medium={path}", "--run-dir", str(tmp_path / "runs")]
    (row,) = offline_main([*argv, "--no-figures", "--out", str(tmp_path / "offline.json")])["rows"]
    expected = normalized_score(float(data.episode_returns().mean()), "Hopper-v5")
    assert row["dataset_id"] == str(path) and row["transitions"] == len(data)
    assert row["behaviour"] == pytest.approx(expected)
    assert math.isfinite(row["td3_bc"]["last"])


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    status = Path(f"/proc/{pid}/status")
    try:
        state = next(line for line in status.read_text().splitlines() if line.startswith("State"))
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "Z" not in state.split()[1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux")
def test_worker_pool_workers_exit_when_the_benchmark_is_killed():
    script = (
        "import os, time\n"
        "from rlcore.benchmarks.runs import worker_pool\n"
        "with worker_pool(1) as pool:\n"
        "    print(pool.submit(os.getpid).result(), flush=True)\n"
        "    pool.submit(time.sleep, 100_000).result()\n"  # alive until killed
    )
    root = Path(__file__).resolve().parents[1]
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=root, stdout=subprocess.PIPE)
    worker = None
    try:
        worker = int(parent.stdout.readline())
        assert _alive(worker)
        os.kill(parent.pid, signal.SIGKILL)  # no handler runs: only the kernel can stop the worker
        parent.wait()
        deadline = time.monotonic() + HANG_GUARD_S  # the kernel acts at once; a hang guard
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), "the pool's worker outlived the killed benchmark"
    finally:
        parent.kill()
        if worker is not None and _alive(worker):  # failed: leave no sleeper behind
            os.kill(worker, signal.SIGKILL)


def test_override_tag_names_runs_apart():
    assert override_tag("algo.beta=1.0") == "beta1.0"  # the common case stays short
    assert override_tag("env.gamma=0.9") != override_tag("algo.gamma=0.9")
    assert override_tag("env.gamma=0.9") == "env.gamma0.9"
    assert override_tag("algo.hidden=[64, 64]") == "hidden6464"  # no brackets, commas, spaces


def test_restore_state_reproduces_the_next_observation():
    import gymnasium as gym

    from rlcore.benchmarks.offline_diagnostics import restore_state

    source, copy = gym.make("Hopper-v5"), gym.make("Hopper-v5")
    obs, _ = source.reset(seed=3)
    copy.reset(seed=4)
    rng = np.random.default_rng(0)
    for _ in range(5):
        obs, *_ = source.step(rng.uniform(-1, 1, 3).astype(np.float32))
    restore_state(copy, obs)
    action = rng.uniform(-1, 1, 3).astype(np.float32)
    expected, reward, *_ = source.step(action)
    got, copy_reward, *_ = copy.step(action)
    np.testing.assert_allclose(got, expected, atol=1e-5)  # x position differs, dynamics do not
    assert copy_reward == pytest.approx(reward, abs=1e-5)
    pendulum = gym.make("InvertedPendulum-v5")  # observation is qpos + qvel: x is observed
    pendulum.reset(seed=0)
    with pytest.raises(ValueError, match=r"qpos\[1:\] \+ qvel"):
        restore_state(pendulum, np.zeros(4))


def test_offline_diagnostics_end_to_end(tmp_path, monkeypatch, capsys):
    """gaits and critic on a tiny IQL run: an agent ranked against itself gives exactly zero
    learned and rollout differences (same actions, same random numbers)."""
    from rlcore.benchmarks.offline_diagnostics import main as diagnostics_main

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    collect_main(["env=Hopper", "policy=random", "steps=400", "dataset_id=t/hopper/rand-v0"])
    argv = ["--datasets", "medium", "--algos", "iql", "--steps", "20", "--eval-every", "20"]
    argv += ["--dataset-id", "medium=t/hopper/rand-v0", "--run-dir", str(tmp_path / "runs")]
    offline_main([*argv, "--no-figures", "--out", str(tmp_path / "offline.json")])
    run = str(tmp_path / "runs" / "iql_medium_seed0")
    out = ["--out", str(tmp_path / "diag.json")]
    gaits = diagnostics_main(["gaits", "--policy", f"iql={run}", "--episodes", "3", *out])
    row = gaits["gaits"]["iql"]
    assert row["episodes"] == 3
    assert len(row["fall_lengths"]) + row["reached_time_limit"] == 3
    assert math.isfinite(row["mean_return"])
    critic_argv = ["critic", "--agent", run, "--reference", run, "--behaviour", run]
    critic_argv += ["--dataset", "t/hopper/rand-v0", "--states", "3", "--rollouts", "2"]
    critic_argv += ["--horizon", "5", "--to-end", "0", "400", *out]
    report = diagnostics_main(critic_argv)["critic"]
    assert report["states"] == 3 and report["reward_scale"] > 0  # IQL's config normalises
    assert report["learned_diff_mean"] == 0.0 and report["rollout_diff_mean"] == 0.0
    assert json.loads((tmp_path / "diag.json").read_text())["critic"] == report
    capsys.readouterr()
    with pytest.raises(SystemExit, match="NAME=RUN_OR_CHECKPOINT"):
        diagnostics_main(["gaits", "--policy", run, *out])


def test_o2o_summary_reads_switch_dip_and_marks():
    from rlcore.benchmarks.o2o import claims, summarise

    rows = [  # (global step, online env steps, return): offline evals, then online
        {"step": 100, "eval/env_steps": 0.0, "eval/return": 50.0},
        {"step": 200, "eval/env_steps": 0.0, "eval/return": 100.0},
        {"step": 201, "eval/env_steps": 1.0, "eval/return": 98.0},
        {"step": 300, "eval/env_steps": 100.0, "eval/return": 80.0},
        {"step": 400, "eval/env_steps": 200.0, "eval/return": 120.0},
        {"step": 500, "eval/env_steps": 300.0, "eval/return": 70.0},  # outside the window
    ]
    out = summarise(rows, dip_window=200, marks=(100, 300))
    assert out["pre_switch"] == 100.0 and out["dip"] == 80.0
    assert out["at"] == {"100": 80.0, "300": 70.0}
    table = {
        "wsrl": {"pre_switch": 100.0, "dip": 80.0, "at": {"300": 70.0}},
        "sac": {"pre_switch": math.nan, "dip": 1.0, "at": {"300": 60.0}},
    }
    verdicts = claims(table, "300")
    assert verdicts[0].endswith("does NOT hold")  # 80 < 0.9 * 100
    assert verdicts[1].endswith("holds") and verdicts[2].endswith("not measured")
    table["sac"]["at"]["300"] = math.nan  # an unfinished run is not a failed claim
    assert claims(table, "300")[1].endswith("not measured")
    # a sparse goal task: the same summary of the success-rate column
    success = [{**r, "eval/success_rate": r["eval/return"] / 200} for r in rows]
    out = summarise(success, dip_window=200, marks=(100, 300), metric="eval/success_rate")
    assert out["pre_switch"] == 0.5 and out["dip"] == 0.4
    assert out["at"] == {"100": 0.4, "300": 0.35}


def test_o2o_benchmark_end_to_end(tmp_path, monkeypatch, capsys):
    """benchmarks/o2o.py on a tiny random Hopper dataset: every method's run, the table
    and the JSON (budget far too small to learn: this checks the plumbing)."""
    from rlcore.benchmarks.o2o import main as o2o_main
    from rlcore.logging import read_csv
    from rlcore.offline.recording import collect

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    collect("Hopper", "random", "local/hopper/random-v0", steps=600, seed=0)
    small = ["algo.hidden=[16,16]", "algo.batch_size=16", "env.max_episode_steps=30"]
    argv = [
        "--dataset", "local/hopper/random-v0", "--offline-steps", "40", "--online-steps", "80",
        "--eval-every", "40", "--eval-episodes", "1", "--dip-window", "80", "--seeds", "0",
        "--run-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "o2o.json"),
        "--set", *[f"{m}:{o}" for m in ("wsrl", "rlpd", "cal_ql", "famo2o", "iql", "sac")
                   for o in small],
        "rlpd:algo.utd_ratio=2", "rlpd:algo.learning_starts=20", "sac:algo.learning_starts=20",
        "wsrl:algo.warmup_steps=20", "wsrl:algo.compile=false", "rlpd:algo.compile=false",
    ]  # fmt: skip
    payload = o2o_main(argv)
    table = payload["table"]
    assert set(table) == {"wsrl", "rlpd", "cal_ql", "famo2o", "iql", "sac"}
    for method in ("wsrl", "cal_ql", "famo2o", "iql"):  # pre-trained: a pre-switch return
        assert math.isfinite(table[method]["pre_switch"]), method
    for method in ("rlpd", "sac"):
        assert math.isnan(table[method]["pre_switch"])
    assert all(math.isfinite(row["at"]["80"]) for row in table.values())
    assert json.loads((tmp_path / "o2o.json").read_text())["cpu"]["model"] is not None
    assert "| wsrl | 1 |" in capsys.readouterr().out

    # a later invocation for one method reads its finished run back (settings of the
    # methods it does not run are ignored) and keeps the training time it took
    again = o2o_main([*argv, "--methods", "iql", "--out", str(tmp_path / "iql.json")])
    first, second = table["iql"]["seeds"][0], again["table"]["iql"]["seeds"][0]
    assert second["seconds"] >= first["seconds"] and second["at"] == first["at"]
    # --init-from: every seed starts from one finished pre-training run, no offline phase
    start = tmp_path / "runs" / "iql_seed0"
    argv_init = [*argv, "--methods", "iql", "--init-from", f"iql={start}",
                 "--run-dir", str(tmp_path / "runs_init"), "--out", str(tmp_path / "i.json")]  # fmt: skip
    init = o2o_main(argv_init)["table"]["iql"]
    assert f"init_from={start}" in init["overrides"]
    assert math.isfinite(init["pre_switch"])
    rows = read_csv(tmp_path / "runs_init" / "iql_seed0" / "eval.csv")
    assert rows[0]["step"] == 0 and rows[-1]["step"] == 80  # online env steps only
    with pytest.raises(SystemExit, match="--init-from expects"):
        o2o_main([*argv, "--init-from", f"sac={start}"])
    # --read-only tabulates the run dirs as they are, training nothing
    read = o2o_main([*argv, "--read-only", "--out", str(tmp_path / "r.json")])["table"]
    assert read["wsrl"]["at"] == table["wsrl"]["at"]
    assert read["iql"]["seeds"][0]["seconds"] == second["seconds"]


def test_snapshot_benchmark_end_to_end(tmp_path, capsys):
    """benchmarks/snapshot.py with a tiny budget: plain and S3RL students per seed, the
    aggregate table, the claims and the JSON (far too short to learn: the plumbing)."""
    from rlcore.benchmarks.snapshot import aggregate, claims
    from rlcore.benchmarks.snapshot import main as snapshot_main
    from rlcore.logging import read_csv

    small = ["algo.hidden=[16,16]", "algo.batch_size=16", "env.max_episode_steps=40",
             "algo.learning_starts=50", "log_every=20"]  # fmt: skip
    argv = ["--steps", "120", "--marks", "60", "120", "--eval-every", "60",
            "--eval-episodes", "1", "--seeds", "0", "1", "--switch-after", "80",
            "--variants", "sac", "sac_s3rl", "--run-dir", str(tmp_path / "runs"),
            "--out", str(tmp_path / "s.json"),
            "--set", *[f"{v}:{o}" for v in ("sac", "sac_s3rl") for o in small],
            "sac_s3rl:snapshot.episodes=1"]  # fmt: skip
    payload = snapshot_main(argv)
    table = payload["table"]
    assert set(table) == {"sac", "sac_s3rl"}
    assert any("snapshot.teacher=" in o for o in table["sac_s3rl"]["overrides"])
    assert not any(o.startswith("snapshot.teacher") for o in table["sac"]["overrides"])
    for row in table.values():
        assert all(math.isfinite(row["at"][m]["mean"]) for m in ("60", "120"))
        assert [s["seed"] for s in row["seeds"]] == [0, 1]
    resets = read_csv(tmp_path / "runs" / "sac_s3rl_seed0" / "snapshot.csv")
    assert resets[-1]["snapshot/resets"] >= 1
    assert (tmp_path / "runs" / "sac_s3rl_seed0" / "snapshots.npz").is_file()
    assert payload["claims"][0].startswith("SAC + S3RL above plain SAC after 120 steps:")
    assert payload["claims"][1].endswith("not measured")
    assert "| sac_s3rl | 2 |" in capsys.readouterr().out
    # --read-only tabulates the finished runs; --seeds-for takes a variant's first seeds
    read = snapshot_main([*argv, "--read-only", "--seeds-for", "sac_s3rl=1",
                          "--out", str(tmp_path / "r.json")])["table"]  # fmt: skip
    assert [s["seed"] for s in read["sac_s3rl"]["seeds"]] == [0]
    assert read["sac_s3rl"]["seeds"][0]["at"] == table["sac_s3rl"]["seeds"][0]["at"]
    assert read["sac"]["at"] == table["sac"]["at"]
    with pytest.raises(SystemExit, match="--seeds-for expects VARIANT=N"):
        snapshot_main([*argv, "--seeds-for", "ppo=1"])
    assert aggregate([1.0, 3.0]) == {"mean": 2.0, "std": 1.0, "min": 1.0, "max": 3.0}
    from rlcore.benchmarks.snapshot import curve_summary

    curve = [(10, 1.0), (20, 2.0), (30, 6.0), (40, 7.0)]
    assert curve_summary(curve) == {"last_mean": 5.0, "curve_mean": 4.0}
    seed0 = table["sac"]["seeds"][0]
    assert seed0["last_mean"] == pytest.approx(np.mean([v for _, v in seed0["curve"][-3:]]))
    fake = {"sac": {"at": {"9": {"mean": 5.0}}}, "sac_s3rl": {"at": {"9": {"mean": 7.0}}}}
    assert claims(fake, "9")[0].endswith("holds (7 vs 5)")


def test_finetune_benchmark_end_to_end(tmp_path, monkeypatch, capsys):
    """benchmarks/finetune.py with a tiny budget: BC snapshots written to an assets folder
    (EMA weights and statistics only) and read back, their return, every fine-tuner per
    seed, iteration seconds, the claims and the JSON (far too short to learn)."""
    from rlcore.benchmarks.finetune import main as finetune_main
    from rlcore.offline.recording import collect
    from rlcore.policies import load_agent

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    collect("Hopper", "random", "local/hopper/random-v0", steps=600, seed=0)
    small = ["env.max_episode_steps=30", "algo.critic_hidden=[16,16]"]
    argv = ["--dataset", "local/hopper/random-v0", "--pretrain-steps", "20", "--hidden", "[16,16,16]",
            "--assets", str(tmp_path / "assets"), "--env-steps", "320", "--envs", "2",
            "--rollout-env-steps", "80", "--eval-every-env-steps", "160", "--eval-episodes", "1",
            "--seeds", "0", "1", "--run-dir", str(tmp_path / "runs"),
            "--out", str(tmp_path / "f.json"),
            "--set", *[f"{m}:{o}" for m in ("dppo", "reinflow", "resip") for o in small],
            "dppo:algo.minibatch_size=64", "reinflow:algo.num_minibatches=2",
            "resip:algo.num_minibatches=2", "diffusion_bc:algo.ema_every=2"]  # fmt: skip
    payload = finetune_main(argv)
    assets = sorted(p.name for p in (tmp_path / "assets").iterdir())
    assert assets == ["hopper_diffusion_bc.pt", "hopper_flow_bc.pt"]
    snapshot = torch.load(tmp_path / "assets" / "hopper_flow_bc.pt", weights_only=False)
    assert set(snapshot["agent"]) == {"ema", "obs_normalizer", "updates"}
    assert load_agent(tmp_path / "assets" / "hopper_flow_bc.pt").config.head == "flow"
    # --set diffusion_bc:... reaches the diffusion pre-training only, and the snapshot says so
    ddpm = torch.load(tmp_path / "assets" / "hopper_diffusion_bc.pt", weights_only=False)
    assert ddpm["config"]["algo"]["ema_every"] == 2 != snapshot["config"]["algo"]["ema_every"]
    assert "algo.ema_every=2" in ddpm["source"]["overrides"]
    table = payload["table"]
    assert set(table) == {"dppo", "reinflow", "resip"}
    for method, row in table.items():
        assert [s["seed"] for s in row["seeds"]] == [0, 1]
        # 320 simulator steps: 2 iterations of 2 envs x 80 steps, evaluated twice
        assert [x for x, _ in row["seeds"][0]["curve_env_steps"]] == [160, 320], method
        assert len(row["seeds"][0]["iteration_seconds"]) == 2
        assert math.isfinite(row["final"]["mean"]) and row["seconds_per_iteration"] > 0
    assert table["dppo"]["bc_return"] == table["resip"]["bc_return"]
    assert len(payload["claims"]) == 4 and "ReinFlow's iteration" in payload["claims"][3]
    assert "| reinflow | flow_bc |" in capsys.readouterr().out
    # a second invocation reads the snapshots and finished runs back
    again = finetune_main([*argv, "--methods", "resip", "--out", str(tmp_path / "g.json")])
    assert again["table"]["resip"]["final"] == table["resip"]["final"]


def test_orphaned_worker_starts_no_queued_run(tmp_path):
    """A worker whose benchmark died (its SIGTERM stopped the current run at a checkpoint)
    exits instead of starting the runs still queued for it."""
    script = (
        "import pathlib\n"
        "import rlcore.benchmarks.runs as runs\n"
        "runs._PARENT_PID = -1  # not this process's parent\n"
        f"runs.run_method('sac', 0, [], pathlib.Path({str(tmp_path)!r}), 1)\n"
    )
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", script], cwd=root, timeout=HANG_GUARD_S)
    assert proc.returncode == 1 and not (tmp_path / "sac_seed0").exists()


def test_worker_whose_benchmark_died_during_a_run_exits_after_it(tmp_path):
    """The benchmark died while the worker trained (the kernel's SIGTERM stopped the run at
    a checkpoint): the worker records the run's seconds and exits instead of waiting for
    work on a queue that nobody feeds any more."""
    script = (
        "import os, pathlib\n"
        "import rlcore.benchmarks.runs as runs\n"
        "runs._PARENT_PID = os.getppid()\n"
        "def stopped_run(run_dir, overrides, threads):\n"
        "    runs._PARENT_PID = -1  # the benchmark process is gone\n"
        "    return [], 2.5\n"
        "runs.train_run = stopped_run\n"
        f"runs.run_method('sac', 0, [], pathlib.Path({str(tmp_path)!r}), 1)\n"
        "print('returned to the pool')\n"
    )
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=root,
        timeout=HANG_GUARD_S,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "returned" not in proc.stdout
    assert (tmp_path / "sac_seed0" / "bench_seconds.txt").read_text() == "2.5"


def test_safe_benchmark_online_cpo_writes_the_behaviour_policy_asset(tmp_path):
    """benchmarks/safe.py's online part with a tiny CPO budget: the table row and, with
    --cpo-asset, the first seed's agent-only snapshot, which loads and acts."""
    from rlcore.benchmarks.safe import main as safe_main
    from rlcore.policies import load_agent

    asset = tmp_path / "assets" / "cpo.pt"
    payload = safe_main(["--methods", "cpo", "--on-policy-steps", "200", "--eval-episodes", "1",
                         "--seeds", "3", "--run-dir", str(tmp_path / "runs"),
                         "--out", str(tmp_path / "safe.json"), "--cpo-asset", str(asset),
                         "--set", "cpo:algo.rollout_steps=100", "cpo:env.max_episode_steps=20",
                         "cpo:algo.update_epochs=1"])  # fmt: skip
    row = payload["table"]["cpo"]
    assert [s["seed"] for s in row["seeds"]] == [3] and row["steps"] == 200
    snapshot = torch.load(asset, weights_only=False)
    assert set(snapshot["agent"]) == {"nets", "updates"} and snapshot["algo"] == "cpo"
    assert snapshot["source"]["seed"] == 3 and "algo=cpo" in snapshot["source"]["overrides"]
    agent = load_agent(asset)
    action = agent.act(
        np.zeros((1, *snapshot["spaces"]["obs_shape"]), np.float32), deterministic=True
    )
    assert action.shape == (1, 3)
    with pytest.raises(SystemExit, match="needs cpo"):
        safe_main(["--methods", "ppo_lag", "--on-policy-steps", "200", "--seeds", "3",
                   "--run-dir", str(tmp_path / "runs2"), "--out", str(tmp_path / "x.json"),
                   "--cpo-asset", str(asset), "--set", "ppo_lag:algo.rollout_steps=100",
                   "ppo_lag:env.max_episode_steps=20"])  # fmt: skip


def test_safe_benchmark_compresses_lagrangian_schedules_and_checks_claims():
    import argparse

    from rlcore.benchmarks.safe import claims, method_overrides

    args = argparse.Namespace(on_policy_steps=500_000, off_policy_steps=200_000,
                              eval_episodes=5, cost_limit=25.0)  # fmt: skip
    overrides = method_overrides("sac_lag", args)
    # OmniSafe: lambda moves after 190k of 1M updates at lr 1e-5; a 200k run: after 38k, 5e-5
    assert "algo.multiplier_delay=38000" in overrides and "algo.lambda_lr=5e-05" in overrides
    assert "algo.cost_limit=25.0" in overrides and "total_steps=200000" in overrides
    assert not any("cost_limit" in o for o in method_overrides("sac", args))
    # PPOLag: lr 0.035 over OmniSafe's 1e7 steps; 500k steps: 20x the rate, 0.7
    assert "algo.lambda_lr=0.7" in method_overrides("ppo_lag", args)
    assert not any("lambda_lr" in o for o in method_overrides("cpo", args))

    def row(ret: float, cost: float) -> dict:
        return {"train_return": {"mean": ret}, "train_cost": {"mean": cost}}

    verdicts = claims({"sac": row(3000, 900), "sac_lag": row(1500, 20), "cpo": row(800, 30)}, 25)
    assert verdicts[0].startswith("sac_lag: mean episode cost 20.0 <= 25: holds; return 1500 = 50%")
    assert "does not hold" in verdicts[1]


def test_every_mutation_applies_to_the_current_code() -> None:
    """Each mutation's original text occurs exactly once in its file and the named tests
    exist, so a refactor that moves the maths cannot silently retire a mutation."""
    from rlcore.benchmarks.mutations import MUTATIONS

    root = Path(__file__).resolve().parents[1]
    stale = [
        (m.name, m.file, (root / m.file).read_text().count(m.original))
        for m in MUTATIONS
        if (root / m.file).read_text().count(m.original) != 1
    ]
    assert not stale, f"mutations whose original text is not found exactly once: {stale}"
    assert all(m.original != m.replacement for m in MUTATIONS)


def test_walltime_benchmark_end_to_end(tmp_path, capsys):
    """benchmarks/walltime.py with a 1.5 s budget: every run stops on its training time
    (not on steps), the table and both reports (against time, against env steps); a second
    invocation reads the spent runs back without training them further."""
    from rlcore.benchmarks.walltime import main as walltime_main
    from rlcore.benchmarks.walltime import method_overrides

    argv = [
        "--tasks", "Hopper", "--methods", "fast_td3", "sac", "--seeds", "0", "--seconds", "1.5",
        "--fast-envs", "2", "--eval-every", "300", "--eval-episodes", "1", "--jobs", "1",
        "--reps", "20", "--set", "sac:algo.learning_starts=100", "sac:algo.hidden=[16,16]",
        "sac:algo.compile=false",
        "--run-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "w.json"),
    ]  # fmt: skip
    table = walltime_main(argv)["table"]["Hopper"]
    for method in ("fast_td3", "sac"):
        (run,) = table[method]["seeds"]
        # stopped by the budget: at most a few ticks past 1.5 s, long before the step limit
        assert 1.5 <= run["train_seconds"] < 30.0, run
        assert 0 < run["env_steps"] < 100_000, run
    assert table["fast_td3"]["seeds"][0]["env_steps"] % 2 == 0  # 2 envs per vector step
    saved = json.loads((tmp_path / "w.json").read_text())
    time_report = json.loads((tmp_path / "w_report_time" / "report.json").read_text())
    assert time_report["x"] == "eval/train_seconds" and len(time_report["groups"]) == 2
    steps_report = json.loads((tmp_path / "w_report_steps" / "report.json").read_text())
    assert steps_report["x"] == "eval/env_steps"
    assert saved["args"]["seconds"] == 1.5 and saved["cpu"]["model"] is not None
    assert "| Hopper | fast_td3 | 1 |" in capsys.readouterr().out
    again = walltime_main(argv)["table"]["Hopper"]  # resumed with the budget spent
    assert again["sac"]["seeds"][0]["env_steps"] == table["sac"]["seeds"][0]["env_steps"]
    read = walltime_main([*argv, "--read-only"])["table"]["Hopper"]
    assert read["fast_td3"]["final_return"] == table["fast_td3"]["final_return"]
    args = method_overrides("fast_td3", "HalfCheetah", 16)
    assert "algo.v_min=-500" in args and "env.num_envs=16" in args
    with pytest.raises(SystemExit, match="no C51 support known for Walker2d"):
        method_overrides("fast_td3", "Walker2d", 16)


def test_robots_benchmark_end_to_end(tmp_path, capsys):
    """The speed table's rows on this machine (no side Python): every row measured, the
    JSON written with the CPU record."""
    from rlcore.benchmarks.robots import main

    out = tmp_path / "robots.json"
    main(["--envs", "2", "--steps", "40", "--out", str(out)])
    record = json.loads(out.read_text())
    rows = record["rows"]["2"]
    assert {"rlcore native, 1 thread", "rlcore sync (gymnasium SyncVectorEnv)"} <= set(rows)
    assert all(rate > 0 for rate in rows.values()) and record["lscpu"]
    assert "x robosuite" in capsys.readouterr().out


def test_her_benchmark_end_to_end(tmp_path, capsys):
    """Both libraries' SAC + HER on PandaReach at a tiny budget: run dirs the report reads
    (SB3's config.yaml and eval.csv too) and the JSON of every evaluation."""
    from rlcore.benchmarks.her import main

    main(["--env", "PandaReach", "--steps", "200", "--eval-every", "100",
          "--learning-starts", "100", "--seeds", "0", "--methods", "rlcore_her", "sb3_her",
          "--run-dir", str(tmp_path)])  # fmt: skip
    record = json.loads((tmp_path / "her_bench.json").read_text())
    for method in ("rlcore_her", "sb3_her"):
        evals = record["runs"][f"{method}/seed0"]["evals"]
        assert [step for step, _ in evals] == [100, 200]
        assert all(0.0 <= rate <= 1.0 for _, rate in evals)
        assert (tmp_path / "pandareach" / f"{method}_seed0" / "eval.csv").is_file()


def test_her_benchmark_runs_dqn_on_bit_flipping(tmp_path, capsys):
    """--algo dqn: rlcore's DQN with and without HER and SB3's DQN + HER on BitFlipping,
    SB3 evaluated inside one learn call (its epsilon schedule spans the run)."""
    import yaml

    from rlcore.benchmarks.her import main

    main(["--algo", "dqn", "--env", "BitFlipping", "--n-bits", "4", "--steps", "120",
          "--eval-every", "60", "--learning-starts", "40", "--seeds", "0",
          "--run-dir", str(tmp_path)])  # fmt: skip
    record = json.loads((tmp_path / "her_bench.json").read_text())
    assert record["algo"] == "dqn" and record["n_bits"] == 4
    for method in ("rlcore_her", "sb3_her", "rlcore_dqn"):
        assert [step for step, _ in record["runs"][f"{method}/seed0"]["evals"]] == [60, 120]
    config = yaml.safe_load((tmp_path / "bitflipping" / "rlcore_her_seed0" / "config.yaml").read_text())
    assert config["algo"]["loss"] == "huber" and config["env"]["kwargs"]["n_bits"] == 4
    sb3 = yaml.safe_load((tmp_path / "bitflipping" / "sb3_her_seed0" / "config.yaml").read_text())
    assert sb3["algo"]["name"] == "sb3_dqn_her"
    capsys.readouterr()
    for argv, message in [
        (["--algo", "dqn", "--methods", "rlcore_sac"], "choose from"),
        (["--algo", "dqn", "--env", "PandaReach"], "runs on BitFlipping"),
        (["--algo", "sac", "--n-bits", "4"], "BitFlipping's option"),
        (["--algo", "dqn", "--steps", "500"], "no update would happen"),
    ]:  # each refused before any run, with the reason
        with pytest.raises(SystemExit) as stop:
            main([*argv, "--run-dir", str(tmp_path / "refused")])
        assert stop.value.code == 2 and message in capsys.readouterr().err, argv
    assert not (tmp_path / "refused").exists()


def test_dynamics_speed_times_our_fit_on_its_data(tmp_path) -> None:
    """The benchmark's data and our side run (the reference needs its side environment)."""
    import numpy as np

    from rlcore.benchmarks.dynamics_speed import ACT, OBS, make_data, time_ours

    path = tmp_path / "data.npz"
    make_data(400, path)
    data = np.load(path)
    assert data["obs"].shape == (400, OBS) and data["action"].shape == (400, ACT)
    assert np.abs(data["next_obs"] - data["obs"]).mean() < 0.3  # small steps of a linear system
    assert time_ours(path, epochs=1, threads=1) > 0


def test_grid_benchmarks_refuse_bad_inputs_before_any_run(tmp_path, monkeypatch, capsys):
    """A bad corruption, a missing dataset or critic, or a count below its least stops the
    command line (exit 2, the reason) before a run starts; the other grid benchmarks take
    the same counts."""
    from rlcore.benchmarks.corruption import main as corruption_main
    from rlcore.benchmarks.neorl2 import main as neorl2_main

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    collect_main(["env=Hopper", "policy=random", "steps=50", "dataset_id=t/hopper/tiny-v0"])
    capsys.readouterr()
    runs = tmp_path / "runs"
    common = ["--dataset", "t/hopper/tiny-v0", "--run-dir", str(runs), "--no-figures"]
    for argv, message in [
        (["--rate", "1.5"], "corruption rate 1.5 must be in [0, 1]"),
        (["--scale", "-1"], "corruption scale -1.0 must be >= 0"),
        (["--corruption-seed", "-2"], "corruption seed -2 must be >= 0"),
        (["--dataset", "t/none/x-v0"], "is not available offline"),
        (["--critic", str(tmp_path / "none"), "--settings", "adversarial_obs"], "does not exist"),
        (["--jobs", "0"], "--jobs: 0: at least 1"),
        (["--seeds", "-1"], "--seeds: -1: at least 0"),
        (["--set", "iql:algo.nonexistent=1"], "iql_clean: Could not override 'algo.nonexistent'"),
        (["--set", "iql:algo.precision=bf17"], "iql_clean: algo.precision='bf17': choose from"),
    ]:
        with pytest.raises(SystemExit) as stop:
            corruption_main([*common, *argv])
        assert stop.value.code == 2 and message in capsys.readouterr().err, argv
    with pytest.raises(SystemExit) as stop:
        neorl2_main(["--steps", "0", "--run-dir", str(runs)])
    assert stop.value.code == 2 and "--steps: 0: at least 1" in capsys.readouterr().err
    from rlcore.benchmarks.model_based import main as model_based_main

    for grid_main, argv in ((neorl2_main, ["--algos", "iql"]), (model_based_main, ["--algos", "mopo"])):
        with pytest.raises(SystemExit) as stop:
            grid_main([*argv, "--set", f"{argv[1]}:algo.nonexistent=1", "--run-dir", str(runs)])
        assert stop.value.code == 2 and "Could not override 'algo.nonexistent'" in (
            capsys.readouterr().err
        )
    assert not runs.exists()


def test_corruption_benchmark_end_to_end(tmp_path, monkeypatch, capsys):
    """benchmarks/corruption.py on a tiny random Hopper dataset: each cell is its seeds'
    final scores, the drop is the clean mean minus the corrupted one, RIQL runs with the
    reference's Hopper settings per corruption, an adversarial attack reads this grid's
    clean IQL run (trained first even when IQL is not tabled), every run records what it
    trained on, --set reaches one algorithm only."""
    import yaml

    from rlcore.benchmarks.corruption import main as corruption_main

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    collect_main(["env=Hopper", "policy=random", "steps=400", "dataset_id=t/hopper/rand-v0"])
    runs = tmp_path / "runs"
    argv = ["--steps", "20", "--eval-every", "20", "--seeds", "0", "1", "--algos", "riql",
            "--settings", "clean", "random_obs", "adversarial_action", "--dataset",
            "t/hopper/rand-v0", "--run-dir", str(runs), "--out", str(tmp_path / "c.json"),
            "--no-figures", "--set", "riql:algo.tau=0.01", "cql:algo.compile=true"]  # fmt: skip
    result = corruption_main(argv)
    capsys.readouterr()
    rows = {row["setting"]: row["riql"] for row in result["rows"]}
    for setting in ("clean", "random_obs", "adversarial_action"):
        scores = [float(read_csv(runs / f"riql_{setting}_seed{s}" / "eval.csv")[-1][
            "eval/normalized_score"]) for s in (0, 1)]  # fmt: skip
        assert rows[setting]["scores"] == pytest.approx(scores)
        assert rows[setting]["mean"] == pytest.approx(np.mean(scores))
    for setting in ("random_obs", "adversarial_action"):
        assert rows[setting]["drop"] == pytest.approx(rows["clean"]["mean"] - rows[setting]["mean"])
    assert result["mean_drop"]["riql"] == pytest.approx(
        (rows["random_obs"]["drop"] + rows["adversarial_action"]["drop"]) / 2)  # fmt: skip
    assert (runs / "iql_clean_seed0" / "eval.csv").is_file()  # the attacked critic
    config = yaml.safe_load((runs / "riql_random_obs_seed0" / "config.yaml").read_text())
    assert (config["algo"]["huber_sigma"], config["algo"]["quantile"],
            config["algo"]["num_critics"]) == (0.1, 0.25, 3)  # fmt: skip
    assert config["corruption"]["kind"] == "obs" and config["corruption"]["mode"] == "random"
    meta = json.loads((runs / "riql_adversarial_action_seed1" / "meta.json").read_text())
    (record,) = meta["effective"]["dataset_corruption"]
    assert (record["kind"], record["mode"], record["rate"]) == ("action", "adversarial", 0.3)
    config = yaml.safe_load((runs / "riql_adversarial_action_seed1" / "config.yaml").read_text())
    assert config["corruption"]["critic"] == str(runs / "iql_clean_seed0")
    assert config["algo"]["tau"] == 0.01 and rows["clean"]["overrides"] == ["algo.tau=0.01"]
    critic_config = yaml.safe_load((runs / "iql_clean_seed0" / "config.yaml").read_text())
    assert critic_config["algo"]["tau"] != 0.01  # --set reaches its algorithm only
    with pytest.raises(SystemExit, match="ALGO:KEY=VALUE"):
        corruption_main([*argv, "--set", "sac:algo.tau=0.01"])
    written = json.loads((tmp_path / "c.json").read_text())
    assert written["rows"] == result["rows"] and "model" in written["cpu"]

    # --merge: another algorithm's column, run apart, joins the table setting by setting
    merge = ["--steps", "20", "--eval-every", "20", "--seeds", "0", "1", "--algos", "td3_bc",
             "--settings", "clean", "random_obs", "--dataset", "t/hopper/rand-v0", "--run-dir",
             str(runs), "--no-figures", "--merge", str(tmp_path / "c.json")]  # fmt: skip
    merged = corruption_main([*merge, "--out", str(tmp_path / "m.json")])
    capsys.readouterr()
    table = {row["setting"]: row for row in merged["rows"]}
    assert list(table) == ["clean", "random_obs", "adversarial_action"]
    assert all(table[s]["riql"]["scores"] == rows[s]["scores"] for s in table)
    td3 = {s: table[s]["td3_bc"] for s in ("clean", "random_obs")}
    assert "td3_bc" not in table["adversarial_action"]
    assert td3["random_obs"]["drop"] == pytest.approx(td3["clean"]["mean"] - td3["random_obs"]["mean"])
    assert merged["mean_drop"] == pytest.approx(
        {"riql": result["mean_drop"]["riql"], "td3_bc": td3["random_obs"]["drop"]})
    assert merged["mean_drop_common"] == pytest.approx(
        {"riql": rows["random_obs"]["drop"], "td3_bc": td3["random_obs"]["drop"]})
    again = corruption_main([*merge[:-1], str(tmp_path / "m.json"), "--out",
                             str(tmp_path / "m2.json")])  # a merged file merges again  # fmt: skip
    capsys.readouterr()
    assert set(again["mean_drop"]) == {"riql", "td3_bc"}
    assert [{a: row[a]["scores"] for a in ("riql", "td3_bc") if a in row} for row in again["rows"]] \
        == [{a: row[a]["scores"] for a in ("riql", "td3_bc") if a in row} for row in merged["rows"]]
    with pytest.raises(SystemExit, match="differ in steps"):  # before any training
        corruption_main([*merge[2:], "--steps", "30", "--out", str(tmp_path / "x.json")])
    assert read_csv(runs / "td3_bc_clean_seed0" / "eval.csv")[-1]["step"] == 20  # untouched


def test_neorl2_benchmark_end_to_end(tmp_path, monkeypatch, capsys):
    """benchmarks/neorl2.py on a tiny DMSD dataset: the data's score from its returns and
    NeoRL-2's references, each cell its seeds' final normalised scores, --set reaches one
    algorithm only."""
    from rlcore.benchmarks.neorl2 import main as neorl2_main
    from rlcore.offline.neorl2_recipe import main as recipe_main

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    recipe_main(["env=DMSD", "dataset_id=local/dmsd/high-v0", "transitions=300"])
    runs = tmp_path / "runs"
    result = neorl2_main(["--steps", "20", "--eval-every", "20", "--eval-episodes", "1",
                          "--seeds", "0", "1", "--algos", "iql", "td3_bc", "--set",
                          "iql:algo.beta=1.0", "--run-dir", str(runs), "--out",
                          str(tmp_path / "n.json"), "--no-figures"])  # fmt: skip
    capsys.readouterr()
    (row,) = result["rows"]
    returns = load_dataset("local/dmsd/high-v0").episode_returns()
    assert row["data"] == pytest.approx(100 * (returns.mean() - 30.60) / (849.51 - 30.60))
    for algo in ("iql", "td3_bc"):
        scores = [float(read_csv(runs / f"{algo}_dmsd_seed{s}" / "eval.csv")[-1][
            "eval/normalized_score"]) for s in (0, 1)]  # fmt: skip
        assert row[algo]["scores"] == pytest.approx(scores)
    assert "beta: 1.0" in (runs / "iql_dmsd_seed0" / "config.yaml").read_text()
    assert row["iql"]["overrides"] == ["algo.beta=1.0"] and row["td3_bc"]["overrides"] == []


def test_model_based_benchmark_end_to_end(tmp_path, monkeypatch, capsys):
    """benchmarks/model_based.py on a tiny DMSD dataset: each MOREC run rolls out in the
    ensemble of the MOPO run of its seed (loaded, not refitted), the per-task settings and
    the fit's cap reach the runs, each cell its seeds' final normalised scores."""
    from rlcore.benchmarks.model_based import main as model_based_main
    from rlcore.offline.neorl2_recipe import main as recipe_main

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    recipe_main(["env=DMSD", "dataset_id=local/dmsd/high-v0", "transitions=300"])
    runs = tmp_path / "runs"
    small = ["algo.hidden=[16,16]", "algo.dynamics_hidden=[16,16]", "algo.rollout_batch=20",
             "algo.dynamics_decays=[0.0,0.0,0.0]", "algo.rollout_freq=10"]  # fmt: skip
    sets = [f"{algo}:{item}" for algo in ("mopo", "morec") for item in small]
    sets += ["morec:algo.reward_iterations=20", "morec:algo.reward_snapshot_every=10",
             "morec:algo.discriminators=2", "morec:algo.rollout_length=3"]  # fmt: skip
    result = model_based_main(["--tasks", "DMSD", "--algos", "mopo", "morec", "--steps", "20",
                               "--fit-epochs", "2", "--eval-every", "20", "--eval-episodes",
                               "1", "--seeds", "0", "1", "--set", *sets, "--run-dir",
                               str(runs), "--out", str(tmp_path / "m.json"),
                               "--no-figures"])  # fmt: skip
    capsys.readouterr()
    (row,) = result["rows"]
    returns = load_dataset("local/dmsd/high-v0").episode_returns()
    assert row["data"] == pytest.approx(100 * (returns.mean() - 30.60) / (849.51 - 30.60))
    for seed in (0, 1):
        mopo, morec = runs / f"mopo_dmsd_seed{seed}", runs / f"morec_dmsd_seed{seed}"
        assert "dynamics fitted in 2 epochs" in (mopo / "train.log").read_text()
        assert "dynamics ensemble loaded from" in (morec / "train.log").read_text()
        assert "rollout_length: 5" in (mopo / "config.yaml").read_text()  # the task's MOPO
        assert "state_clip: 1000000.0" in (morec / "config.yaml").read_text()  # NeoRL's clip
        fitted, used = (torch.load(run / "checkpoints" / "latest.pt", weights_only=False)
                        ["agent"]["dynamics"] for run in (mopo, morec))  # fmt: skip
        assert all(torch.equal(fitted[key], used[key]) for key in fitted)
    for algo in ("mopo", "morec"):
        scores = [float(read_csv(runs / f"{algo}_dmsd_seed{s}" / "eval.csv")[-1][
            "eval/normalized_score"]) for s in (0, 1)]  # fmt: skip
        assert row[algo]["scores"] == pytest.approx(scores)
    assert f"algo.dynamics_from={runs / 'mopo_dmsd_seed0'}" in row["morec"]["settings"]
    # the report puts MOREC's seeds in one group, though each read its own MOPO run
    from rlcore.report import group_runs, load_runs

    (group,) = group_runs(load_runs([runs / f"morec_dmsd_seed{s}" for s in (0, 1)]))
    assert len(group.runs) == 2
    # a locomotion dataset recorded without reference returns: D4RL's Hopper ones
    from rlcore.benchmarks.neorl2 import data_score
    from rlcore.offline.recording import collect

    collect("Hopper", "random", "local/hopper/random-v0", steps=300, seed=0)
    returns = load_dataset("local/hopper/random-v0").episode_returns()
    expected = 100 * (returns.mean() + 20.272305) / (3234.3 + 20.272305)
    assert data_score("local/hopper/random-v0") == pytest.approx(expected)


def test_atari_curves_bin_rlcore_and_cleanrl_episodes_by_env_step(tmp_path, capsys):
    """Each run's episodes averaged per bin, then over runs (population std); CleanRL's
    PPO and DQN print formats both parsed; a bin without episodes reads '-'."""
    from rlcore.benchmarks.atari_curves import main as curves_main

    runs = []
    for name, rows in (("a", [(10, -21.0), (40, -19.0), (130, -15.0)]), ("b", [(20, -20.0)])):
        run = tmp_path / name
        run.mkdir()
        lines = ["step,train/episode_return,train/entropy", "5,,1.7"]
        lines += [f"{step},{value}," for step, value in rows]
        (run / "train.csv").write_text("\n".join(lines) + "\n")
        runs.append(str(run))
    log = tmp_path / "cleanrl.log"
    log.write_text("SPS: 100\nglobal_step=30, episodic_return=-21.0\n"
                   "global_step=60, episodic_return=[-17.]\nglobal_step=140, "
                   "episodic_return=[3.5]\n")  # fmt: skip
    out = tmp_path / "curves.json"
    result = curves_main(["--rlcore", *runs, "--cleanrl", str(log), "--bin", "50",
                          "--out", str(out)])  # fmt: skip
    ours, theirs = result["table"]["rlcore"], result["table"]["cleanrl"]
    assert [r["from"] for r in ours] == [0, 50, 100]  # the last episode ends at step 140
    assert ours[0]["mean"] == pytest.approx((-20.0 + -20.0) / 2) and ours[0]["std"] == 0.0
    assert ours[0]["episodes"] == 3 and ours[1]["mean"] is None and ours[2]["mean"] == -15.0
    assert [r["mean"] for r in theirs] == [-21.0, -17.0, 3.5]
    assert json.loads(out.read_text())["table"]["cleanrl"][2]["episodes"] == 1
    printed = capsys.readouterr().out
    assert "| 50-100 (200-400) | - | -17.00 +- 0.00 (1) |" in printed
    assert result["rlcore_columns"] == ["train/episode_return"]
    assert "note: rlcore runs read from train/episode_return" in printed
    empty = tmp_path / "empty.log"
    empty.write_text("SPS: 1\n")
    with pytest.raises(SystemExit, match="no training episodes"):
        curves_main(["--rlcore", *runs, "--cleanrl", str(empty)])
    # a run that logs whole games: their raw scores, not the lives' clipped returns
    games = tmp_path / "games"
    games.mkdir()
    (games / "train.csv").write_text("step,train/episode_return,train/game_return\n"
                                     "10,1.0,\n30,2.0,7.0\n60,0.0,\n90,1.0,11.0\n")  # fmt: skip
    capsys.readouterr()
    result = curves_main(["--rlcore", str(games), "--cleanrl", str(log), "--bin", "50"])
    assert [r["mean"] for r in result["table"]["rlcore"]] == [7.0, 11.0, None]
    assert result["rlcore_columns"] == ["train/game_return"]
    assert "note:" not in capsys.readouterr().out
