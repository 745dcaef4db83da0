"""benchmarks/gpu_record.py (``bash benchmarks/mjx_gpu.sh record``): capped rows, failures
and time-outs recorded per row, skips by missing package or budget, and the dry run end to
end on JAX's CPU device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlcore.benchmarks import gpu_record
from rlcore.benchmarks.gpu_record import DRY, Record, Runner

ROOT = Path(__file__).resolve().parents[1]


def _runner(tmp_path: Path, seconds: float = 60) -> Runner:
    work = tmp_path / "work"
    work.mkdir()
    return Runner(tmp_path / "log", work, time.time() + seconds)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a container's init may not reap an orphan at once)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_a_process_past_its_cap_is_killed_and_recorded_as_timed_out(tmp_path):
    runner = _runner(tmp_path)
    marker = tmp_path / "child_pid"
    # a child of the capped process too: the whole session goes
    code = f"import subprocess, time; p = subprocess.Popen(['sleep', '60']); open({str(marker)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    start = time.time()
    outcome = runner.run("sleeper", [sys.executable, "-c", code], cap=2)
    assert outcome.status == "timed out (2 s cap)"
    assert time.time() - start < 15
    time.sleep(0.5)
    assert not _running(int(marker.read_text()))
    assert "===== sleeper (timed out" in (tmp_path / "log").read_text()


def test_a_failing_process_is_recorded_with_its_last_line_and_a_result_read(tmp_path):
    runner = _runner(tmp_path)
    failed = runner.run("fails", [sys.executable, "-c", "print('a'); raise SystemExit('boom')"], 30)
    assert failed.status == "failed (exit 1): boom"
    result = tmp_path / "r.json"
    code = f"import json; json.dump({{'x': 1}}, open({str(result)!r}, 'w'))"
    ok = runner.run("ok", [sys.executable, "-c", code], 30, result=result)
    assert (ok.status, ok.result) == ("ok", {"x": 1})


def test_a_cap_never_runs_past_the_deadline(tmp_path):
    runner = _runner(tmp_path, seconds=2)
    outcome = runner.run("sleeper", [sys.executable, "-c", "import time; time.sleep(30)"], 300)
    assert outcome.status.startswith("timed out") and outcome.wall_s < 10


def test_the_record_is_rewritten_after_every_change(tmp_path):
    rec = Record(tmp_path / "r.json", {"device": {"gpu": None}})
    rec.set("throughput", status="running")
    first = json.loads((tmp_path / "r.json").read_text())
    rec.set("throughput", status="ok", numbers=[1])
    rec.set("levers", status="failed (exit 1): x")
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert first["rows"][0]["status"] == "running"
    assert [(r["row"], r["name"], r["status"]) for r in rows] == [
        ("a", "throughput", "ok"),
        ("b", "levers", "failed (exit 1): x"),
    ]


def test_cores_are_split_on_large_hosts_only():
    assert gpu_record.core_split(16) == {"native": "0-1", "rows": "2-5", "compile": "6-15"}
    assert gpu_record.core_split(2) == {"native": None, "rows": None, "compile": None}


def test_missing_packages_are_named_one_per_line(monkeypatch):
    monkeypatch.setitem(gpu_record.REQUIRED, "no_such_module_xyz", "no-such-dist")
    missing = gpu_record.missing_modules()
    assert "no_such_module_xyz (pip install no-such-dist)" in missing


def test_rows_without_their_packages_or_time_are_skipped_and_recorded(tmp_path, monkeypatch):
    """The driver's whole path in a second: every row skipped, none started."""
    monkeypatch.setattr(
        gpu_record, "missing_modules", lambda: ["jax (pip install jax)", "hydra (pip install x)"]
    )
    monkeypatch.setenv("RECORD_SKIP", "levers,fast_td3")
    path = gpu_record.record(DRY, tmp_path / "out", time.time(), seconds=18)
    rows = {r["name"]: r for r in json.loads(path.read_text())["rows"]}
    assert rows["throughput"]["status"] == "skipped: missing hydra, jax"
    assert rows["ppo"]["status"] == "skipped: missing hydra, jax"
    assert rows["levers"]["status"] == rows["fast_td3"]["status"] == "skipped: RECORD_SKIP"
    assert rows["summary"]["compilations"] == {}
    # updates needs neither, but the budget (18 s, 5 s kept back) is under a row's minimum
    assert rows["updates"]["status"].startswith("skipped: budget")
    assert (tmp_path / "out" / "gpu_record.log").exists()


def test_finetune_rows_use_the_committed_heads_for_three_iterations():
    overrides = gpu_record.finetune_overrides("reinflow", DRY, seed=0)
    assert f"algo.pretrained={gpu_record.ASSETS / 'hopper_flow_bc.pt'}" in overrides
    rollout, envs = DRY.finetune_rollout, DRY.train_envs
    assert f"total_steps={3 * rollout * envs}" in overrides


@pytest.mark.slow
def test_dry_run_records_every_row_end_to_end(tmp_path):
    """``RECORD_DRY=1 bash benchmarks/mjx_gpu.sh record``: tiny sizes, mjx on JAX's CPU
    device. Every MJX row uses one compilation (Hopper, 3 envs), the one tests/test_mjx.py
    makes: JAX's cache is rlcore's per-host default here, so a suite run compiles it once
    (the script's own default is a folder under /tmp)."""
    pytest.importorskip("mujoco.mjx")
    pytest.importorskip("stable_baselines3")
    from rlcore.envs.mjx import host_cpu_tag

    cache = os.environ.get("RLCORE_JAX_CACHE") or Path.home() / ".cache/rlcore/jax" / host_cpu_tag()
    out = tmp_path / "out"
    env = {**os.environ, "RECORD_DRY": "1", "OUT": str(out), "OMP_NUM_THREADS": "1",
           "RLCORE_JAX_CACHE": str(cache), "RECORD_SECONDS": "500",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
    subprocess.run(["bash", str(ROOT / "benchmarks/mjx_gpu.sh"), "record"], env=env, check=True,
                   timeout=600, cwd=tmp_path)  # fmt: skip
    record = json.loads((out / "gpu_record.json").read_text())
    rows = {r["name"]: r for r in record["rows"]}
    assert record["dry_run"] and record["missing"] == []
    assert [r["row"] for r in record["rows"]] == ["f", "a", "b", "c", "d", "e", "-"]
    for name in ("updates", "throughput", "levers", "ppo"):
        assert rows[name]["status"] == "ok", rows[name]
        assert rows[name]["device"]["versions"]["torch"]
    tp = rows["throughput"]["ratio"][0]
    assert (
        tp["mjx"] > 0
        and tp["native"] > 0
        and tp["ratio"] == pytest.approx(tp["mjx"] / tp["native"])
    )
    assert rows["throughput"]["numbers"][0]["compile"]["status"] == "ok"
    assert rows["levers"]["baseline"]["ms_per_step_for_30x"] > 0
    assert rows["ppo"]["numbers"]["curve"] and rows["ppo"]["baseline"]["curve"]
    assert rows["fast_td3"]["status"] in ("skipped: algo missing", "ok")
    for method in DRY.finetune_methods:
        ratio = rows["finetune"]["ratio"][method]
        assert ratio["mjx_s_per_iteration"] > 0 and ratio["native_s_per_iteration"] > 0
    rates = rows["updates"]["numbers"]["rates"]
    assert all(rates[k] > 0 for k in ("rlcore_sac_eager", "rlcore_ppo_eager", "sb3_sac", "sb3_ppo"))
    assert "CUDA device" in rows["updates"]["numbers"]["notes"]["rlcore_compile_cudagraphs"]
    assert "===== throughput (ok" in (out / "gpu_record.log").read_text()


def test_a_training_run_that_fails_fails_its_row_with_the_error(tmp_path):
    runner = _runner(tmp_path)
    result = tmp_path / "train.json"
    params = {"overrides": ["algo=no_such_algo", "env=hopper"], "backend": "native",
              "device": "cpu", "seconds": 60, "target": 1.0, "threads": 1}  # fmt: skip
    outcome = runner.run("train", gpu_record.worker_command("train", params, result), 90,
                         result=result)  # fmt: skip
    assert outcome.status.startswith("failed (exit 1): ")
    assert "unknown algorithm 'no_such_algo'" in outcome.status  # the run's own last line
    assert outcome.result["stopped"].startswith("exit code")


def test_the_console_summary_has_a_line_per_row_and_each_run_headline():
    rows = [{"row": "c", "name": "ppo", "status": "ok", "wall_s": 12.0, "ratio": {"x": 2.0},
             "numbers": {"reached_at_step": 100, "best_return": 2600.0}},
            {"row": "d", "name": "fast_td3", "status": "skipped: algo missing"}]  # fmt: skip
    lines = gpu_record.summary_lines(rows)
    assert lines[0] == "[c] ppo: ok (12 s)"
    assert '"reached_at_step": 100' in lines[1] and '"vs_native": {"x": 2.0}' in lines[1]
    assert lines[2] == "[d] fast_td3: skipped: algo missing (0 s)"
