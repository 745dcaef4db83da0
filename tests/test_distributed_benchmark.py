"""benchmarks/distributed.py: the speeds read from a run's CSVs and the learner model, on
hand-made files (the benchmark's runs themselves need Ray and minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcore.benchmarks import distributed as bench


def _write(path: Path, header: str, rows: list[str]) -> None:
    path.write_text("\n".join([header, *rows]) + "\n")


def test_loop_speeds_use_the_rows_of_the_measured_phase(tmp_path: Path) -> None:
    # seconds since the loop started = step / sps: 100 -> 1 s, 400 -> 2 s, 1000 -> 4 s
    _write(tmp_path / "time.csv", "step,time/sps,time/updates",
           ["100,100,0", "400,200,300", "1000,250,900"])  # fmt: skip
    speeds = bench.loop_speeds(tmp_path, first_step=400)  # the warm-up row left out
    assert speeds["env_steps_per_s"] == pytest.approx(600 / 2)
    assert speeds["updates_per_s"] == pytest.approx(600 / 2)
    assert bench.loop_speeds(tmp_path, first_step=1000)["env_steps_per_s"] is None
    # PPO: one row per iteration, no update counter -> iterations/s
    _write(
        tmp_path / "time.csv",
        "step,time/iteration_s,time/sps",
        ["100,1,100", "400,1,200", "1000,1,250"],
    )
    assert bench.loop_speeds(tmp_path, first_step=100)["updates_per_s"] == pytest.approx(2 / 3)


def test_actor_stats_average_each_actor_and_the_lag(tmp_path: Path) -> None:
    _write(tmp_path / "dist.csv", "step,dist/actor0_sps,dist/actor1_sps,dist/policy_lag,dist/restarts",
           ["10,100,300,1,0", "20,200,,3,1"])  # fmt: skip
    stats = bench.actor_stats(tmp_path)
    assert stats["actor_sps"] == {"actor0": 150.0, "actor1": 300.0}
    assert stats["actor_sps_mean"] == pytest.approx(225.0)
    assert stats["policy_lag"] == pytest.approx(2.0)
    assert stats["restarts"] == 1.0
    assert bench.actor_stats(tmp_path / "missing") == {}


def test_learner_model_hand_computed() -> None:
    # one process: 50 env steps/s = 20 ms a step; an actor collects at 200/s = 5 ms a step:
    # the learner's part is 15 ms a step -> 66.7 steps/s -> 1/3 of an actor
    cells = [{"algo": "sac", "actors": 0, "env_steps_per_s": 50.0},
             {"algo": "sac", "actors": 1, "env_steps_per_s": 45.0, "actor_sps_mean": 200.0},
             {"algo": "ppo", "actors": 0, "env_steps_per_s": 100.0}]  # fmt: skip
    model = bench.learner_model(cells)
    assert model["sac"]["learner_s_per_env_step"] == pytest.approx(0.015)
    assert model["sac"]["learner_capacity_sps"] == pytest.approx(1 / 0.015)
    assert model["sac"]["actors_one_learner_feeds"] == pytest.approx((1 / 0.015) / 200.0)
    assert "note" in model["ppo"]  # no 1-actor cell: no model, said so


def test_cell_overrides_scale_ppo_rollouts_with_the_workers() -> None:
    size = bench.Size(sac_warmup=10, sac_online=20, ppo_rollout=8, ppo_iterations=3)
    assert "total_steps=30" in bench.overrides("sac", 2, size)
    ppo = bench.overrides("ppo", 4, size)
    assert "total_steps=96" in ppo and "distributed.actors=4" in ppo
    assert "total_steps=24" in bench.overrides("ppo", 0, size)
