"""Smoke test of the throughput suite (benchmarks/throughput.py): a tiny run, JSON shape."""

from __future__ import annotations

import json
import math

from benchmarks.throughput import alternate, main


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
    from benchmarks.bf16_parity import summarise

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
