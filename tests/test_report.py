"""rlcore.report: rliable's estimators on hand-made scores, grouping, CLI and figures."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from rlcore import report
from tests.conftest import HANG_GUARD_S, REPO

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- estimators


def test_iqm_mean_median_exact_values():
    x = np.array([0.0, 1, 2, 3, 4, 10, 20, 100])  # 8 runs: IQM drops 2 from each end
    est = report.interval_estimates({"a": x}, reps=200)["a"]
    assert est["iqm"].point == pytest.approx((2 + 3 + 4 + 10) / 4)  # 4.75
    assert est["mean"].point == pytest.approx(140 / 8)
    assert est["median"].point == pytest.approx(3.5)
    # rliable pools runs x tasks: the same 8 scores as a (4 runs, 2 tasks) matrix
    matrix = np.array([[0.0, 10], [1, 20], [2, 100], [3, 4]])
    assert report.interval_estimates({"m": matrix}, reps=10)["m"]["iqm"].point == 4.75
    # several tasks: mean and median are over per-task means (task means 1.5, 33.5, 5)
    matrix = np.array([[0.0, 10, 5], [1, 20, 5], [2, 100, 5], [3, 4, 5]])
    est = report.interval_estimates({"m": matrix}, reps=10)["m"]
    assert est["mean"].point == pytest.approx(40 / 3) and est["median"].point == 5.0
    assert est["iqm"].point == pytest.approx(np.mean([3, 4, 5, 5, 5, 5]))  # 12 runs, cut 3+3
    # tasks with different numbers of runs weigh the same in the mean (pooled: 20/3)
    assert report.interval_estimates({"r": [[0.0, 0.0], [10.0] * 4]})["r"]["mean"].point == 5.0
    # five runs: int(0.25 * 5) = 1 score cut from each end
    assert report.iqm(np.array([100.0, 0, 40, 10, 20]), axis=None) == pytest.approx(70 / 3)


def test_iqm_of_three_runs_is_rliable_trim_mean_not_fractional_iqm():
    x = np.array([1.0, 2.0, 9.0])
    assert report.iqm(x, axis=None) == pytest.approx(4.0)  # trim_mean cuts int(0.75) = 0


def test_bootstrap_interval_contains_point_and_is_seeded():
    rng = np.random.default_rng(3)
    scores = rng.normal(50.0, 20.0, size=(7, 3))
    a = report.interval_estimates({"x": scores}, reps=500, seed=1)["x"]
    b = report.interval_estimates({"x": scores}, reps=500, seed=1)["x"]
    c = report.interval_estimates({"x": scores}, reps=500, seed=2)["x"]
    for stat in report.STATISTICS:
        assert a[stat].low <= a[stat].point <= a[stat].high
        assert a[stat].low < a[stat].high
        assert a[stat] == b[stat]
    assert a["iqm"] != c["iqm"]


def test_bootstrap_interval_collapses_when_scores_are_equal():
    est = report.interval_estimates({"x": np.full((4, 2), 5.0)}, reps=300)["x"]
    for stat in report.STATISTICS:
        assert (est[stat].point, est[stat].low, est[stat].high) == (5.0, 5.0, 5.0)


def test_bootstrap_interval_of_two_runs_is_exact():
    # resampled means of [0, 1] are 0, 0.5, 1 with p = 1/4, 1/2, 1/4: 95% CI = [0, 1]
    est = report.interval_estimates({"x": [0.0, 1.0]}, reps=4000)["x"]["mean"]
    assert (est.point, est.low, est.high) == (0.5, 0.0, 1.0)


def test_stratified_bootstrap_never_mixes_tasks():
    # task A scores 0, task B scores 100 (different numbers of runs): every stratified
    # resample keeps 2 zeros and 6 hundreds, so the mean of task means is always 50 and
    # the IQM always 100 (pooled resampling would spread both)
    tasks = [np.zeros(2), np.full(6, 100.0)]
    samples, owner = report.stratified_bootstrap(tasks, reps=1000, seed=0)
    assert samples.shape == (1000, 8) and owner.tolist() == [0, 0] + [1] * 6
    assert np.all(samples[:, owner == 0] == 0.0) and np.all(samples[:, owner == 1] == 100.0)
    est = report.interval_estimates({"x": tasks}, reps=1000)["x"]
    assert (est["mean"].point, est["mean"].low, est["mean"].high) == (50.0, 50.0, 50.0)
    assert (est["iqm"].point, est["iqm"].low, est["iqm"].high) == (100.0, 100.0, 100.0)
    pooled = report.interval_estimates({"x": np.concatenate(tasks)}, reps=1000)["x"]
    assert pooled["iqm"].low < 100.0  # the same scores as one task do move
    # distinct scores per task: resampled values come only from their own task
    tasks = [np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0])]
    samples, owner = report.stratified_bootstrap(tasks, reps=500, seed=4)
    assert set(np.unique(samples[:, owner == 0])) == {1.0, 2.0, 3.0}
    assert set(np.unique(samples[:, owner == 1])) == {10.0, 20.0}


def test_performance_profile_exact_and_averaged_over_tasks():
    taus = np.array([0.0, 2.5, 4.0])
    point, low, high = report.performance_profile([1.0, 2.0, 3.0, 4.0], taus, reps=500)
    assert point.tolist() == [1.0, 0.5, 0.0]  # strictly above tau
    assert np.all(low <= point) and np.all(point <= high)
    # per-task fractions 0 and 1 average to 0.5 (pooled runs would give 4/6)
    point, low, high = report.performance_profile([[0.0, 0.0], [10.0] * 4], [5.0], reps=200)
    assert point.tolist() == [0.5] and low.tolist() == [0.5] and high.tolist() == [0.5]


def test_align_curves_uses_equal_steps_and_interpolates_otherwise():
    a = (np.array([0.0, 10, 20]), np.array([0.0, 1, 2]))
    b = (np.array([0.0, 10, 20]), np.array([5.0, 5, 5]))
    steps, values = report.align_curves([a, b])
    assert steps.tolist() == [0, 10, 20] and values.tolist() == [[0, 1, 2], [5, 5, 5]]
    c = (np.array([5.0, 15]), np.array([10.0, 30]))  # shorter, shifted grid
    steps, values = report.align_curves([a, c])
    assert steps.tolist() == [5, 10, 15]
    assert values.tolist() == [[0.5, 1.0, 1.5], [10.0, 20.0, 30.0]]


# --------------------------------------------------------------------------- fake runs


FINISHED = "finished"


def write_run(
    path: Path,
    algo: str,
    seed: int,
    returns: list[float],
    env_id: str = "InvertedPendulum-v5",
    steps: list[int] | None = None,
    total_steps: int | None = None,
    end: str | None = FINISHED,
    **overrides,
) -> Path:
    """A run dir as rlcore.train writes it (config.yaml, eval.csv, train.csv, train.log),
    with given returns. ``total_steps`` defaults to the last evaluation's step (3000
    without evaluations); train.log ends with ``end``: FINISHED is the closing summary's
    ``finished: all N steps done`` line, any other text is written as it is, None writes
    no train.log."""
    steps = steps or [1000 * (i + 1) for i in range(len(returns))]
    total = total_steps if total_steps is not None else (steps[-1] if steps else 3000)
    config = {
        "algo": {"name": algo, "gamma": 0.99, "tau": 0.005, "total_steps": total},
        "env": {"name": env_id.split("-")[0].lower(), "id": env_id, "num_envs": 1},
        "logger": {"tensorboard": False, "csv": True},
        "seed": seed,
        "device": "cpu",
        "threads": 1,
        "total_steps": total,
        "dataset": None,
        "resume": None,
        "run_dir": str(path),
    }
    if algo == "td3":
        config["algo"]["policy_noise"] = 0.2
    for dotted, value in overrides.items():
        node = config
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(config), path / "config.yaml")
    with (path / "eval.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "eval/best_return", "eval/length", "eval/return"])
        best = -np.inf
        for step, value in zip(steps, returns):
            best = max(best, value)
            writer.writerow([step, best, 100, value])
    (path / "train.csv").write_text("step,train/critic_loss\n1000,0.5\n")
    if end is not None:
        if end == FINISHED:
            end = f"finished: all {total:,} steps done; final evaluation return 1.0, best 2.0"
        (path / "train.log").write_text(
            f"[2026-12-01 10:00:00] [{algo} {env_id}] run dir {path}\n"
            f"[2026-12-01 10:00:01] progress line without an end\n"
            f"[2026-12-01 10:09:59] {end}\n"
        )
    return path


def make_sweep(root: Path) -> Path:
    """2 algos x 3 seeds; SAC also at gamma 0.98; TD3 with per-run threads differing."""
    for seed in range(3):
        write_run(root / f"sac/seed{seed}", "sac", seed, [0.0, 10.0 * seed, 5.0])
        write_run(root / f"sac98/seed{seed}", "sac", seed, [1.0, 2.0, 3.0], algo__gamma=0.98)
        write_run(root / f"td3/seed{seed}", "td3", seed, [3.0, 4.0], threads=seed + 1)
    return root


def test_grouping_by_config_with_differing_override(tmp_path):
    runs = report.load_runs([make_sweep(tmp_path / "sweep")])
    assert len(runs) == 9
    groups = report.group_runs(runs)
    labels = [g.label for g in groups]
    assert labels == [
        "sac InvertedPendulum-v5 algo.gamma=0.98",
        "sac InvertedPendulum-v5 algo.gamma=0.99",
        "td3 InvertedPendulum-v5",
    ]
    for g in groups:
        assert g.seeds == [0, 1, 2] and len(g.runs) == 3
    assert {r.path.parent.name for r in groups[0].runs} == {"sac98"}
    assert {r.path.parent.name for r in groups[2].runs} == {"td3"}
    # run dirs given one by one group the same way; hidden folders are skipped
    (tmp_path / "sweep" / "sac" / "seed0" / ".hydra").mkdir()
    write_run(tmp_path / "sweep" / "sac" / "seed0" / ".hydra" / "x", "sac", 9, [1.0])
    assert len(report.find_run_dirs(tmp_path / "sweep")) == 9


def test_aggregate_final_best_last_k_and_no_reference(tmp_path):
    for seed, final in enumerate([0.0, 10.0, 20.0, 40.0, 100.0]):
        write_run(tmp_path / f"r{seed}", "sac", seed, [final - 2, final + 5, final])
    (result,) = report.aggregate(report.group_runs(report.load_runs([tmp_path])), reps=300)
    assert result.final["iqm"].point == pytest.approx(70 / 3)
    assert result.final["mean"].point == pytest.approx(34.0)
    assert result.final["median"].point == pytest.approx(20.0)
    assert result.best["iqm"].point == pytest.approx(70 / 3 + 5)
    assert result.normalized_final is None and result.reference == "no reference"
    assert result.curve_steps.tolist() == [1000, 2000, 3000]
    assert result.curve[0].tolist() == pytest.approx([70 / 3 - 2, 70 / 3 + 5, 70 / 3])
    (k2,) = report.aggregate(report.group_runs(report.load_runs([tmp_path])), last_k=2, reps=10)
    assert k2.final["mean"].point == pytest.approx(34.0 + 2.5)


def _add_train_seconds(run: Path, seconds: list[float]) -> None:
    """Give a fake run's eval rows the training-time column rlcore.train logs."""
    rows = list(csv.reader((run / "eval.csv").open()))
    rows[0].append("eval/train_seconds")
    for row, value in zip(rows[1:], seconds):
        row.append(str(value))
    with (run / "eval.csv").open("w", newline="") as f:
        csv.writer(f).writerows(rows)


def test_auc_is_the_curves_mean_height_along_steps_or_training_time(tmp_path, capsys):
    # steps 1000, 2000, 4000 with returns 0, 10, 40: trapezoids 5 x 1000 + 25 x 2000 over
    # 3000 steps = 55000 / 3000; the same run against time 0, 30, 60 s: (150 + 750) / 60
    a = write_run(tmp_path / "a", "sac", 0, [0.0, 10.0, 40.0], steps=[1000, 2000, 4000])
    b = write_run(tmp_path / "b", "sac", 1, [20.0, 20.0, 20.0], steps=[1000, 2000, 4000])
    _add_train_seconds(a, [0.0, 30.0, 60.0])
    _add_train_seconds(b, [0.0, 10.0, 50.0])
    assert report.area_under_curve(np.array([5.0]), np.array([7.0])) == 7.0
    runs = report.group_runs(report.load_runs([tmp_path]))
    (by_step,) = report.aggregate(runs, reps=50)
    assert by_step.auc_scores.tolist() == pytest.approx([55000 / 3000, 20.0])
    assert by_step.final_scores.tolist() == [40.0, 20.0]  # the final score ignores the x-axis
    (by_time,) = report.aggregate(runs, reps=50, x="eval/train_seconds")
    assert by_time.auc_scores.tolist() == pytest.approx([900 / 60, 20.0])
    # the curves run along training time, on the range both runs reached (0-50 s)
    assert by_time.curve_x == "eval/train_seconds"
    assert by_time.curve_steps.tolist() == [0.0, 10.0, 30.0, 50.0]
    assert by_time.curve[0].tolist() == pytest.approx([10.0, (20 + 10 / 3) / 2, 15.0, 25.0])
    out = tmp_path / "out"
    args = [str(tmp_path / "a"), str(tmp_path / "b"), "--reps", "50", "--out", str(out)]
    assert report.main([*args, "--x", "eval/train_seconds"]) == 0
    saved = json.loads((out / "report.json").read_text())
    assert saved["x"] == "eval/train_seconds"
    assert saved["groups"][0]["auc_scores"] == pytest.approx([15.0, 20.0])
    assert "AUC IQM [CI]" in capsys.readouterr().out
    # an x column the runs never logged: one clear error, exit 2
    (tmp_path / "old").mkdir()
    write_run(tmp_path / "old" / "r", "sac", 0, [1.0, 2.0])
    assert report.main([str(tmp_path / "old"), "--x", "eval/train_seconds"]) == 2
    assert "x-axis 'eval/train_seconds' not found" in capsys.readouterr().err


def test_normalised_scores_from_d4rl_reference(tmp_path):
    for seed in range(2):
        write_run(tmp_path / f"r{seed}", "sac", seed, [1000.0, 2000.0], env_id="Hopper-v5")
    (result,) = report.aggregate(report.group_runs(report.load_runs([tmp_path])), reps=10)
    expected = 100 * (2000 + 20.272305) / (3234.3 + 20.272305)
    assert result.normalized_final["iqm"].point == pytest.approx(expected)
    assert result.reference == "reference returns of Hopper-v5: random -20.2723, expert 3234.3"
    # offline runs logged their own normalised score (e.g. from Minari references): used as is
    for seed in range(2):
        run = tmp_path / "offline" / f"r{seed}"
        run.mkdir(parents=True)
        (tmp_path / f"r{seed}" / "config.yaml").rename(run / "config.yaml")
        (run / "eval.csv").write_text(
            f"step,eval/normalized_score,eval/return\n1000,40,1000\n2000,{50 + seed},2000\n"
        )
    (result,) = report.aggregate(report.group_runs(report.load_runs([tmp_path / "offline"])))
    assert result.reference == "logged eval/normalized_score"
    assert result.normalized_final["mean"].point == pytest.approx(50.5)
    assert result.normalized_best["iqm"].point == pytest.approx(50.5)


def test_across_tasks_pools_normalised_scores_per_configuration(tmp_path):
    def norm(value, random, expert):
        return 100 * (value - random) / (expert - random)

    hopper, walker = [1000.0, 3000.0], [500.0, 1500.0, 2500.0, 4000.0]
    for seed, value in enumerate(hopper):
        write_run(tmp_path / f"h{seed}", "sac", seed, [value], env_id="Hopper-v5")
    for seed, value in enumerate(walker):
        write_run(tmp_path / f"w{seed}", "sac", seed, [value], env_id="Walker2d-v5")
    write_run(tmp_path / "ip", "sac", 0, [1.0])  # no reference: left out
    write_run(tmp_path / "td3", "td3", 0, [1.0], env_id="Hopper-v5")  # one task: left out
    results = report.aggregate(report.group_runs(report.load_runs([tmp_path])), reps=200)
    (row,) = report.aggregate_across_tasks(results, reps=200)
    assert row.label == "sac" and row.tasks == ["Hopper-v5", "Walker2d-v5"]
    assert row.runs_per_task == [2, 4]
    h = [norm(v, -20.272305, 3234.3) for v in hopper]
    w = [norm(v, 1.629008, 4592.3) for v in walker]
    assert row.estimates["mean"].point == pytest.approx((np.mean(h) + np.mean(w)) / 2)
    assert row.estimates["iqm"].point == pytest.approx(np.mean(sorted(h + w)[1:-1]))
    assert row.estimates["iqm"].low < row.estimates["iqm"].point < row.estimates["iqm"].high


# --------------------------------------------------------------------------- CLI


def run_report(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "rlcore.report", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        env=env,
    )


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000


def test_cli_end_to_end_on_fake_runs(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for seed, final in enumerate([0.0, 10.0, 20.0, 40.0, 100.0]):
        write_run(sweep / f"sac/s{seed}", "sac", seed, [final - 2, final + 5, final])
    for seed in range(3):
        write_run(sweep / f"td3/s{seed}", "td3", seed, [1.0, 7.0], env_id="Hopper-v5")
    out = run_report(sweep, "--reps", "500", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "warning" not in out.stderr  # 3 seeds or more in every group
    lines = {line.split(" | ")[0].lstrip("| "): line for line in out.stdout.splitlines()}
    sac = lines["sac InvertedPendulum-v5"]
    assert "| 0,1,2,3,4 | 5 | 23.33 [" in sac and "| 34.00 [" in sac and "| 20.00 [" in sac
    assert "| 28.33 [" in sac and sac.endswith("| no reference |")
    td3 = lines["td3 Hopper-v5"]
    norm = 100 * (7 + 20.272305) / (3234.3 + 20.272305)
    assert "| 7.00 [7.00, 7.00] |" in td3 and td3.endswith(
        f"| {norm:.2f} [{norm:.2f}, {norm:.2f}] |"
    )
    files = sorted(p.name for p in (sweep / "report").iterdir())
    assert files == [
        "final_scores.png",
        "learning_curves.png",
        "performance_profile.png",
        "report.json",
        "report.md",
    ]
    for name in ("final_scores.png", "learning_curves.png", "performance_profile.png"):
        assert_png(sweep / "report" / name)
    md = (sweep / "report" / "report.md").read_text()
    assert sac in md and "![learning curves](learning_curves.png)" in md
    data = json.loads((sweep / "report" / "report.json").read_text())
    (g,) = [g for g in data["groups"] if g["algo"] == "sac"]
    assert g["final"]["iqm"]["point"] == pytest.approx(70 / 3)
    assert sorted(g["final_scores"]) == [0, 10, 20, 40, 100] and g["seeds"] == [0, 1, 2, 3, 4]
    # the same seed gives the same numbers; --out elsewhere
    assert report.main([str(sweep), "--reps", "500", "--out", str(tmp_path / "o")]) == 0
    again = capsys.readouterr().out
    assert again.split("\n\n")[1] == out.stdout.split("\n\n")[1]
    md_again = (tmp_path / "o" / "report.md").read_text()
    assert md_again.split("\n")[3:] == md.split("\n")[3:]  # all but the quoted command
    assert "Generated by `python -m rlcore.report " in md and "--reps 500" in md


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    write_run(tmp_path / "runs" / "a", "sac", 0, [1.0, 2.0])
    (tmp_path / "empty").mkdir()
    cases = [
        ([str(tmp_path / "missing")], "no such directory"),
        ([str(tmp_path / "empty")], "no runs under"),
        (
            [str(tmp_path / "runs"), "--metric", "eval/score"],
            "metric 'eval/score' not found in any of the 1 run(s)",
        ),
        ([str(tmp_path / "runs"), "--last-k", "0"], "--last-k must be >= 1"),
    ]
    for argv, message in cases:
        assert report.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1
    report.main([str(tmp_path / "runs"), "--metric", "eval/score"])
    err = capsys.readouterr().err
    assert "available metrics: eval/best_return, eval/length, eval/return, train/critic_loss" in err
    assert not (tmp_path / "runs" / "report").exists()


def test_cli_skips_runs_without_the_metric_with_a_note(tmp_path, capsys):
    write_run(tmp_path / "a", "sac", 0, [1.0, 2.0])
    write_run(tmp_path / "b", "sac", 1, [3.0, 4.0])
    crashed = write_run(tmp_path / "c", "sac", 2, [])  # header only: no evaluation yet
    assert report.main([str(tmp_path), "--reps", "50"]) == 0
    captured = capsys.readouterr()
    assert "note: skipping 1 run(s) without 'eval/return' values" in captured.err
    assert str(crashed) in captured.err
    assert "| sac InvertedPendulum-v5 | 0,1 | 2 | 3.00 [2.00, 4.00] |" in captured.out


def test_cli_points_goal_runs_to_their_success_rate(tmp_path, capsys):
    for seed in (0, 1):
        run = write_run(tmp_path / f"r{seed}", "sac", seed, [-50.0, -20.0], env_id="PandaReach-v1")
        rows = (run / "eval.csv").read_text().splitlines()
        rates = ["eval/success_rate", "0.0", "0.5"]
        (run / "eval.csv").write_text("\n".join(f"{r},{x}" for r, x in zip(rows, rates)) + "\n")
    assert report.main([str(tmp_path), "--reps", "50"]) == 0
    err = capsys.readouterr().err
    assert "--metric eval/success_rate reports success rates" in err
    assert report.main([str(tmp_path), "--reps", "50", "--metric", "eval/success_rate"]) == 0
    captured = capsys.readouterr()
    assert "success rates" not in captured.err
    assert "| sac PandaReach-v1 | 0,1 | 2 | 0.50 [0.50, 0.50] |" in captured.out
    write_run(tmp_path / "r2", "sac", 2, [-50.0, -20.0], env_id="PandaReach-v1")  # no rate
    assert report.main([str(tmp_path), "--reps", "50"]) == 0
    assert "success rates" not in capsys.readouterr().err


def test_cli_warns_when_runs_have_fewer_evaluations_than_last_k(tmp_path, capsys):
    write_run(tmp_path / "a", "sac", 0, [1.0, 2.0, 3.0])
    write_run(tmp_path / "b", "sac", 1, [5.0, 7.0])
    assert report.main([str(tmp_path), "--reps", "50", "--last-k", "3"]) == 0
    captured = capsys.readouterr()
    assert "warning: 1 run(s) logged fewer than --last-k=3 evaluations" in captured.err
    assert "(fewest: 2)" in captured.err
    assert "| 6.00 [6.00, 6.00] |" in captured.out  # b: the mean of its two, 5 and 7
    assert report.main([str(tmp_path), "--reps", "50", "--last-k", "2"]) == 0
    assert "fewer than --last-k" not in capsys.readouterr().err


def test_resumed_run_is_read_with_its_last_config(tmp_path):
    run = write_run(tmp_path / "a", "sac", 0, [1.0, 2.0], total_steps=3000)
    config = OmegaConf.load(run / "config.yaml")
    config.total_steps = 6000
    config.resume = str(run)
    OmegaConf.save(config, run / "config_resumed.yaml")
    write_run(tmp_path / "b", "sac", 1, [1.0, 2.0], total_steps=3000)
    runs = report.load_runs([tmp_path])
    assert [r.resumed for r in runs] == [True, False]
    labels = [g.label for g in report.group_runs(runs)]
    assert labels == [
        "sac InvertedPendulum-v5 total_steps=3000",
        "sac InvertedPendulum-v5 total_steps=6000",
    ]


def test_matches_rliable_when_installed():
    """Cross-check against rliable 1.2.0 (needs pandas<3; skipped when not installed)."""
    rly = pytest.importorskip("rliable.library")
    from rliable import metrics

    rng = np.random.default_rng(0)
    scores = rng.normal(size=(10, 3))  # 10 runs x 3 tasks: the bootstrap is stratified
    ours = report.interval_estimates({"x": scores}, reps=20000, seed=0)["x"]
    fns = {"iqm": metrics.aggregate_iqm, "mean": metrics.aggregate_mean}
    fns["median"] = metrics.aggregate_median
    for stat, fn in fns.items():
        points, intervals = rly.get_interval_estimates(
            {"x": scores}, lambda s, f=fn: np.array([f(s)]), reps=20000
        )
        assert ours[stat].point == pytest.approx(points["x"][0])
        assert ours[stat].low == pytest.approx(intervals["x"][0, 0], abs=0.02)
        assert ours[stat].high == pytest.approx(intervals["x"][1, 0], abs=0.02)
    taus = np.linspace(-2.0, 2.0, 9)
    point, low, high = report.performance_profile(scores, taus, reps=20000)
    r_point, r_cis = rly.create_performance_profile({"x": scores}, taus, reps=20000)
    assert point == pytest.approx(r_point["x"])
    assert low == pytest.approx(r_cis["x"][0], abs=0.03)
    assert high == pytest.approx(r_cis["x"][1], abs=0.03)


# --------------------------------------------------------------------------- real runs


def test_report_on_real_tiny_runs(tmp_path):
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    for seed in (0, 1):
        cfg = make_config(
            "algo=sac",
            "env=InvertedPendulum",
            *FAST,
            f"seed={seed}",
            "total_steps=400",
            "algo.learning_starts=100",
            "algo.batch_size=32",
            "eval_every=200",
            "eval_episodes=1",
            "eval_envs=1",
            "env.max_episode_steps=50",
        )
        train(cfg, tmp_path / "runs" / f"seed{seed}")
    assert report.main([str(tmp_path / "runs"), "--reps", "200"]) == 0
    data = json.loads((tmp_path / "runs" / "report" / "report.json").read_text())
    (g,) = data["groups"]
    assert g["label"] == "sac InvertedPendulum-v5" and g["seeds"] == [0, 1]
    assert g["curve"]["step"] == [200, 400]
    # rlcore.train's closing line in train.log is what marks a run finished
    assert (
        g["run_ends"]
        == [{"finished": True, "why": "all 400 steps done", "step": 400, "planned": 400}] * 2
    )
    for name in ("final_scores.png", "learning_curves.png", "performance_profile.png"):
        assert_png(tmp_path / "runs" / "report" / name)


def test_fewer_than_three_seeds_are_warned_about_in_the_report_and_figure(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    sweep = tmp_path / "sweep"
    for seed in range(2):
        write_run(sweep / f"sac/s{seed}", "sac", seed, [1.0, 2000.0 + seed], steps=[5000, 10000])
    figures = {}
    save = Figure.savefig

    def record(fig, path, *args, **kwargs):
        fig.canvas.draw()
        figures[Path(path).name] = fig
        return save(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    assert report.main([str(sweep), "--reps", "200"]) == 0
    md = (sweep / "report" / "report.md").read_text()
    assert "**Warning**: fewer than 3 seeds in sac InvertedPendulum-v5 (n=2)" in md
    assert "min-max), not a confidence interval" in md
    curves = figures["learning_curves.png"].axes[0]
    legend = [" ".join(t.get_text().split()) for t in curves.get_legend().get_texts()]
    assert legend == ["sac InvertedPendulum-v5 (n=2: band = min-max of the runs, not a CI)"]
    # axes in words, numbers with thousands separators; the y-label says what the band is
    assert curves.get_xlabel() == "environment steps (offline runs: gradient steps)"
    ylabel = " ".join(curves.get_ylabel().split())
    assert ylabel == "evaluation return (IQM; band = min-max of the runs, not a CI)"
    ticks = [t.get_text() for t in curves.get_xticklabels()]
    assert "10,000" in ticks and "10000" not in ticks
    finals = [t.get_text() for t in figures["final_scores.png"].axes[0].get_xticklabels()]
    assert any("," in t for t in finals), finals


def test_cli_warns_below_three_seeds(tmp_path):
    sweep = tmp_path / "sweep"
    for seed in range(2):
        write_run(sweep / f"sac/s{seed}", "sac", seed, [1.0, 2.0])
    out = run_report(sweep, "--reps", "200", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "warning: fewer than 3 seeds in sac InvertedPendulum-v5 (n=2)" in out.stderr


# --------------------------------------------------------------------------- what is drawn and scored


def record_figures(monkeypatch) -> dict:
    """The figures rlcore.report saves, by file name, drawn (so texts and artists exist)."""
    from matplotlib.figure import Figure

    figures = {}
    save = Figure.savefig

    def record(fig, path, *args, **kwargs):
        fig.canvas.draw()
        figures[Path(path).name] = fig
        return save(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    return figures


def panels(figure) -> dict:
    """A figure's axes by title."""
    return {ax.get_title(): ax for ax in figure.axes if ax.get_title()}


def test_a_curve_of_one_point_is_a_marker_with_its_error_bar(tmp_path, monkeypatch):
    # Hopper: each run evaluated once; Walker: two runs whose evaluations overlap at
    # step 2000 only (the common range is one point). Both curves used to draw nothing.
    for seed, value in enumerate([10.0, 30.0]):
        write_run(tmp_path / f"h{seed}", "sac", seed, [value], env_id="Hopper-v5")
    write_run(tmp_path / "w0", "sac", 0, [1.0, 5.0], env_id="Walker2d-v5", steps=[1000, 2000])
    write_run(tmp_path / "w1", "sac", 1, [7.0, 9.0], env_id="Walker2d-v5", steps=[2000, 3000],
              total_steps=2000)  # fmt: skip
    figures = record_figures(monkeypatch)
    assert report.main([str(tmp_path), "--reps", "2000", "--out", str(tmp_path / "out")]) == 0
    axes = panels(figures["learning_curves.png"])
    for task, step, (mid, low, high) in [
        ("Hopper-v5", 1000.0, (20.0, 10.0, 30.0)),  # IQM of 2 runs = their mean; band = min-max
        ("Walker2d-v5", 2000.0, (6.0, 5.0, 7.0)),
    ]:
        ax = axes[task]
        (container,) = ax.containers  # one error bar: the marker, its caps, its bar
        marker, caps, (bar,) = container.lines
        assert marker.get_marker() == "o" and len(caps) == 2
        assert marker.get_xdata().tolist() == [step] and marker.get_ydata().tolist() == [mid]
        assert bar.get_segments()[0].tolist() == [[step, low], [step, high]]
        # no line of one point without a marker (which draws nothing)
        assert [
            x for x in ax.get_lines() if len(x.get_xdata()) == 1 and x.get_marker() == "None"
        ] == []
        assert len(ax.get_legend().get_texts()) == 1


def test_curve_y_label_and_legend_say_the_same_band(tmp_path, monkeypatch):
    # Hopper: 3 and 4 seeds (bootstrap CIs); Walker: 3 seeds, 2 seeds and 1 seed (mixed)
    for seed in range(3):
        write_run(tmp_path / f"hs{seed}", "sac", seed, [1.0, 2.0 + seed], env_id="Hopper-v5")
        write_run(tmp_path / f"ws{seed}", "sac", seed, [1.0, 2.0 + seed], env_id="Walker2d-v5")
    for seed in range(4):
        write_run(tmp_path / f"ht{seed}", "td3", seed, [1.0, 3.0 + seed], env_id="Hopper-v5")
    for seed in range(2):
        write_run(tmp_path / f"wt{seed}", "td3", seed, [1.0, 3.0 + seed], env_id="Walker2d-v5")
    write_run(tmp_path / "wp", "ppo", 0, [1.0, 4.0], env_id="Walker2d-v5")
    figures = record_figures(monkeypatch)
    assert report.main([str(tmp_path), "--reps", "200", "--out", str(tmp_path / "out")]) == 0
    axes = panels(figures["learning_curves.png"])
    hopper, walker = axes["Hopper-v5"], axes["Walker2d-v5"]

    def texts(ax):
        legend = [" ".join(t.get_text().split()) for t in ax.get_legend().get_texts()]
        return " ".join(ax.get_ylabel().split()), legend

    assert texts(hopper) == (
        "evaluation return (IQM; band = 95% bootstrap CI)",
        [
            "sac Hopper-v5 (n=3: band = 95% bootstrap CI)",
            "td3 Hopper-v5 (n=4: band = 95% bootstrap CI)",
        ],
    )
    assert texts(walker) == (
        "evaluation return (IQM; band: see legend)",
        [
            "ppo Walker2d-v5 (n=1: 1 run, no band)",
            "sac Walker2d-v5 (n=3: band = 95% bootstrap CI)",
            "td3 Walker2d-v5 (n=2: band = min-max of the runs, not a CI)",
        ],
    )
    assert report.band_words(3, 0.9) == "band = 90% bootstrap CI"


def interrupted_line(run: Path, step: int) -> None:
    """Append the ``interrupted:`` line rlcore.train writes after Ctrl-C (its own code)."""
    from rlcore.cli import _stopped
    from rlcore.loops import TrainingInterrupted

    error = TrainingInterrupted("SIGINT", step, run / "checkpoints" / "latest.pt")
    with pytest.raises(SystemExit):
        _stopped(str(error), 130, run)


def closing_line(run: Path, step: int, **stops) -> None:
    """Append rlcore.train's closing ``finished:`` line for a stop rule (its own code)."""
    from rlcore.loops import LoopSettings
    from rlcore.run import closing_summary

    result = {
        "run/step": step,
        "run/reached_stop_at_return": float("stop_at_return" in stops),
        "run/out_of_time": float("stop_after_s" in stops),
        "run/train_seconds": 600.5,
        "eval/return": 950.0,
        "eval/best_return": 960.0,
    }
    first = closing_summary(result, LoopSettings(**stops), run)[0]
    with (run / "train.log").open("a") as log:
        log.write(f"[2026-12-01 11:00:00] {first}\n")


def test_run_end_tells_finished_runs_from_runs_that_stopped_early(tmp_path):
    def end(path: Path) -> tuple[bool, str, int | None, int | None]:
        e = report.load_run(path).end
        return e.finished, e.why, e.step, e.planned

    kw = {"total_steps": 20000, "end": None}
    full = write_run(tmp_path / "full", "sac", 0, [1.0, 2.0], steps=[10000, 20000])
    assert end(full) == (True, "all 20,000 steps done", 20000, 20000)
    target = write_run(tmp_path / "target", "sac", 0, [1.0, 950.0], **kw)
    closing_line(target, 2000, stop_at_return=900.0)
    assert end(target) == (True, "stop_at_return=900 reached at step 2,000", 2000, 20000)
    timed = write_run(tmp_path / "timed", "sac", 0, [1.0, 950.0], **kw)
    closing_line(timed, 2000, stop_after_s=600.0)
    assert end(timed) == (
        True, "stop_after_s=600 reached at step 2,000 (600 s of training)", 2000, 20000
    )  # fmt: skip
    stopped = write_run(tmp_path / "stopped", "sac", 0, [1.0, 2.0], **kw)
    interrupted_line(stopped, 2000)
    assert end(stopped) == (False, "interrupted: stopped by SIGINT at step 2,000", 2000, 20000)
    killed = write_run(tmp_path / "killed", "sac", 0, [1.0, 2.0], **kw)
    (killed / "train.log").write_text("[2026-12-01 10:00:00] [sac] run dir x\n")
    (killed / "train.csv").write_text("step,train/critic_loss\n1000,0.5\n3534,0.4\n")
    no_end = "no end line in train.log (killed, crashed or still running)"
    assert end(killed) == (False, no_end, 3534, 20000)
    # finished at 2,000, resumed to 20,000 and killed: the old finished line does not count
    resumed = write_run(tmp_path / "resumed", "sac", 0, [1.0, 2.0], total_steps=20000,
                        end="finished: all 2,000 steps done; final evaluation return 2.0")  # fmt: skip
    with (resumed / "train.log").open("a") as log:
        log.write("[2026-12-01 12:00:00] resuming from ckpt/latest.pt (step 2,000)\n")
    assert end(resumed) == (
        False, "no end line in train.log after its last resume (killed, crashed or still "
        "running)", 2000, 20000,
    )  # fmt: skip
    # a resume that failed before training leaves a finished run finished
    with (full / "train.log").open("a") as log:
        log.write("[2026-12-01 12:00:00] error: resume failed: disk full\n")
    assert end(full)[0] is True
    # no train.log (a trimmed copy): inferred from the rows and the config
    copy = write_run(tmp_path / "copy", "sac", 0, [1.0, 2.0], steps=[10000, 20000], end=None)
    assert end(copy) == (
        True, "all 20,000 steps done (no train.log: inferred from the logged rows)", 20000, 20000
    )  # fmt: skip
    short = write_run(tmp_path / "short", "sac", 0, [1.0, 2.0], **kw)
    assert end(short) == (False, "no train.log, and it logged up to step 2,000 of 20,000",
                          2000, 20000)  # fmt: skip
    # offline-to-online: total_steps offline gradient steps, then algo.online_steps
    o2o = write_run(tmp_path / "o2o", "iql", 0, [1.0], algo__online_steps=500, total_steps=1000,
                    end=None)  # fmt: skip
    assert report.planned_steps(report.load_run(o2o).config) == 1500
    assert end(o2o)[0] is False


def hopper_with_two_stopped_runs(root: Path) -> dict[str, Path]:
    """Three SAC Hopper seeds of 20,000 steps evaluated every 1,000: seed 0 finished,
    seed 1 interrupted (Ctrl-C) at 2,000, seed 2 killed at 3,534 (no end line); and a
    TD3 seed that finished early on stop_at_return (a normal end)."""
    runs = {
        "s0": write_run(root / "s0", "sac", 0, [float(i) for i in range(20)], env_id="Hopper-v5"),
        "s1": write_run(root / "s1", "sac", 1, [1.0, 2.0], env_id="Hopper-v5",
                        total_steps=20000, end=None),
        "s2": write_run(root / "s2", "sac", 2, [1.0, 2.0, 3.0], env_id="Hopper-v5",
                        total_steps=20000, end="progress"),
        "td3": write_run(root / "td3", "td3", 0, [1.0, 950.0], env_id="Hopper-v5",
                         total_steps=20000, end=None),
    }  # fmt: skip
    interrupted_line(runs["s1"], 2000)
    (runs["s2"] / "train.csv").write_text("step,train/critic_loss\n1000,0.5\n3534,0.4\n")
    closing_line(runs["td3"], 2000, stop_at_return=900.0)
    return runs


def test_cli_refuses_runs_that_stopped_early_by_default(tmp_path, capsys):
    runs = hopper_with_two_stopped_runs(tmp_path / "hopper")
    capsys.readouterr()  # rlcore.train's own "interrupted:" line
    assert report.main([str(tmp_path / "hopper"), "--reps", "50"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: 2 of 4 runs stopped before their end: {runs['s1']} (at 2,000 of 20,000 "
        "steps: interrupted: stopped by SIGINT at step 2,000); "
        f"{runs['s2']} (at 3,534 of 20,000 steps: no end line in train.log (killed, crashed "
        "or still running)). Their last evaluation is not a final score: pass --incomplete "
        "include to score them there (marked * in the table), or --incomplete exclude to "
        "leave them out\n"
    )
    assert not (tmp_path / "hopper" / "report").exists()


def test_cli_includes_runs_that_stopped_early_only_when_asked_and_marks_them(tmp_path, capsys):
    runs = hopper_with_two_stopped_runs(tmp_path / "hopper")
    capsys.readouterr()
    out = tmp_path / "out"
    argv = [str(tmp_path / "hopper"), "--reps", "50", "--out", str(out)]
    assert report.main([*argv, "--incomplete", "include"]) == 0
    captured = capsys.readouterr()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in captured.out.splitlines()}
    assert rows["sac Hopper-v5"].startswith("| sac Hopper-v5 | 0,1*,2* | 3 | ")
    assert rows["td3 Hopper-v5"].startswith("| td3 Hopper-v5 | 0 | 1 | ")  # stop_at_return: fine
    note = (
        "incomplete: 2 of 3 runs stopped early (2,000 and 3,534 of 20,000 steps); their "
        "final score is taken where they stopped (last evaluation at step 2,000 and 3,000)"
    )
    assert f"*: sac Hopper-v5: {note}" in captured.out.splitlines()
    assert captured.err.splitlines()[-2:] == [
        f"warning: stopped early, scored where it stopped: {runs['s1']}: interrupted: "
        "stopped by SIGINT at step 2,000; final score from step 2,000 of 20,000",
        f"warning: stopped early, scored where it stopped: {runs['s2']}: no end line in "
        "train.log (killed, crashed or still running); final score from step 3,000 of 20,000",
    ]
    data = json.loads((out / "report.json").read_text())
    sac, td3 = data["groups"]
    assert sac["incomplete"] == note and td3["incomplete"] is None
    assert sac["final_step"] == [20000, 2000, 3000] and sac["final_scores"] == [19.0, 2.0, 3.0]
    assert all(isinstance(step, int) for step in sac["final_step"])
    assert [e["finished"] for e in sac["run_ends"]] == [True, False, False]
    assert [e["step"] for e in sac["run_ends"]] == [20000, 2000, 3534]
    assert td3["run_ends"][0]["why"] == "stop_at_return=900 reached at step 2,000"
    md = (out / "report.md").read_text()
    assert "**Warning**: runs that stopped early are scored where they stopped:" in md
    assert f"- {runs['s2']}: no end line in train.log" in md and f"*: sac Hopper-v5: {note}" in md
    # exclude: the two runs are left out, with a note in the console and both files
    assert report.main([*argv, "--incomplete", "exclude"]) == 0
    captured = capsys.readouterr()
    assert "| sac Hopper-v5 | 0 | 1 | 19.00 [19.00, 19.00] |" in captured.out
    assert "incomplete" not in captured.out
    left_out = (
        f"left out 2 run(s) that stopped early (--incomplete exclude): {runs['s1']} (at 2,000 "
        "of 20,000 steps: interrupted: stopped by SIGINT at step 2,000); "
    )
    assert captured.err.startswith(f"note: {left_out}")
    assert json.loads((out / "report.json").read_text())["notes"][0].startswith(left_out)
    assert f"Note: {left_out}" in (out / "report.md").read_text()


def test_cli_refuses_two_runs_with_one_seed_and_names_both(tmp_path, capsys):
    a = write_run(tmp_path / "runs" / "a", "sac", 0, [1.0, 2.0])
    copy = write_run(tmp_path / "runs" / "copy_of_a", "sac", 0, [1.0, 2.0])
    write_run(tmp_path / "runs" / "b", "sac", 1, [3.0, 4.0])
    argv = [str(tmp_path / "runs"), "--reps", "50", "--out", str(tmp_path / "out")]
    assert report.main(argv) == 2
    assert capsys.readouterr().err == (
        f"error: runs with the same seed in one group: sac InvertedPendulum-v5: seed 0 in 2 "
        f"runs ({a}, {copy}) (copies, or repeats of one seed, are not independent runs). "
        "Remove the copies or give the runs different seeds; --duplicate-seeds keep counts "
        "every run (marked (xN) in the table)\n"
    )
    assert not (tmp_path / "out").exists()
    # kept on request: the seed is printed once with its count, never "0,0"
    assert report.main([*argv, "--duplicate-seeds", "keep"]) == 0
    captured = capsys.readouterr()
    assert "| sac InvertedPendulum-v5 | 0 (x2),1 | 3 | " in captured.out
    assert "0,0" not in captured.out
    assert (
        f"(x2) sac InvertedPendulum-v5: seed 0 was run 2 times ({a}, {copy}): n counts these "
        "runs, which are not independent"
    ) in captured.out.splitlines()
    assert captured.err.startswith("warning: runs with the same seed in one group: ")
    (group,) = json.loads((tmp_path / "out" / "report.json").read_text())["groups"]
    assert group["duplicate_seeds"] == {"0": [str(a), str(copy)]}
