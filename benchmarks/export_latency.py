"""Per-action latency of an exported policy next to ``load_policy``'s, on this CPU, one
thread (torch and onnxruntime alike), one observation per call as a controller acts.

    python -m rlcore.benchmarks.export_latency [--calls 2000] [--out benchmarks/results/export_latency.json]

For each committed Hopper asset (SAC, diffusion BC with 20 DDPM steps, flow BC with 4
Euler steps, CPO): ``rlcore.export`` writes the ONNX and TorchScript files, then each
way of acting (``load_policy``; onnxruntime on the ONNX file with numpy in and out;
``torch.jit.load`` of the TorchScript file) is timed over ``--calls`` calls on observations
recorded from the env (after 50 warm-up calls), and checked against ``load_policy``
(max |difference| of the actions, with the same noise for the sampling policies). The
table gives median and 90th percentile microseconds per action; the JSON also records the
CPU (lscpu model and flags) and the library versions.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlcore.benchmarks.runs import cpu_info
from rlcore.export import export_policy, policy_from_checkpoint, record_draws
from rlcore.policies import load_policy
from rlcore.spaces import action_space_from, to_env_action

ASSETS = Path(__file__).resolve().parent / "assets"
POLICIES = {  # name: asset
    "SAC": "hopper_sac_expert.pt",
    "diffusion BC (20 steps)": "hopper_diffusion_bc.pt",
    "flow BC (4 steps)": "hopper_flow_bc.pt",
    "CPO": "safe_hopper_cpo.pt",
}
WARMUP = 50


def recorded_obs(n: int, seed: int = 0) -> np.ndarray:
    """Hopper-v5 observations of a random-action rollout (float32)."""
    env = gym.make("Hopper-v5")
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    rows = []
    for _ in range(n):
        rows.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    return np.stack(rows).astype(np.float32)


def timed(act: Callable[[int], Any], calls: int) -> dict[str, float]:
    """Median / p90 microseconds of ``act(i)`` over ``calls`` calls after a warm-up."""
    for i in range(WARMUP):
        act(i)
    times = np.empty(calls)
    for i in range(calls):
        start = time.perf_counter()
        act(i)
        times[i] = time.perf_counter() - start
    return {
        "median_us": float(np.median(times) * 1e6),
        "p90_us": float(np.quantile(times, 0.9) * 1e6),
    }


def measure(asset: Path, obs: np.ndarray, calls: int, folder: Path) -> dict[str, Any]:
    """Latencies and the largest action difference to ``load_policy`` for one asset."""
    import onnxruntime

    state_spaces = torch.load(asset, weights_only=False)["spaces"]
    space = action_space_from(state_spaces)
    deployed, info = policy_from_checkpoint(asset)
    files = {}
    for fmt, suffix in (("onnx", ".onnx"), ("torchscript", ".ts")):
        files[fmt] = folder / f"{asset.stem}{suffix}"
        metadata = export_policy(deployed, files[fmt], fmt, info["obs_shape"], 1, info)
    draws = int(metadata["noise_draws"])
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        str(files["onnx"]), options, providers=["CPUExecutionProvider"]
    )
    scripted = torch.jit.load(str(files["torchscript"]))
    policy = load_policy(asset)
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((len(obs), 1, draws)).astype(np.float32)

    def feed(i: int) -> dict[str, np.ndarray]:
        row = obs[i % len(obs)][None]
        return {"obs": row, "noise": noise[i % len(obs)]} if draws else {"obs": row}

    def run_onnx(i: int) -> np.ndarray:
        return session.run(None, feed(i))[0]

    def run_script(i: int) -> np.ndarray:
        with torch.inference_mode():
            return scripted(*(torch.from_numpy(v) for v in feed(i).values())).numpy()

    worst = {"onnx": 0.0, "torchscript": 0.0}
    for i in range(min(len(obs), 50)):  # the files against load_policy, same noise
        want, recorded = record_draws(lambda i=i: policy(obs[i][None]))
        want = to_env_action(want, space)
        args = {"obs": obs[i][None], **({"noise": recorded} if draws else {})}
        got_onnx = session.run(None, args)[0]
        got_script = scripted(*(torch.from_numpy(v) for v in args.values())).numpy()
        worst["onnx"] = max(worst["onnx"], float(np.abs(got_onnx - want).max()))
        worst["torchscript"] = max(worst["torchscript"], float(np.abs(got_script - want).max()))
    return {
        "asset": asset.name,
        "noise_draws": draws,
        "load_policy": timed(lambda i: policy(obs[i % len(obs)][None]), calls),
        "onnx": timed(run_onnx, calls),
        "torchscript": timed(run_script, calls),
        "max_abs_diff": worst,
    }


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| policy | load_policy (us) | ONNX + onnxruntime (us) | TorchScript (us) | speed-up ONNX | max diff |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lp, ox, ts = (r[k]["median_us"] for k in ("load_policy", "onnx", "torchscript"))
        lines.append(
            f"| {name} | {lp:,.0f} (p90 {r['load_policy']['p90_us']:,.0f}) | {ox:,.0f} "
            f"(p90 {r['onnx']['p90_us']:,.0f}) | {ts:,.0f} (p90 {r['torchscript']['p90_us']:,.0f}) "
            f"| {lp / ox:.1f}x | {max(r['max_abs_diff'].values()):.1e} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlcore.benchmarks.export_latency")
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per way of acting")
    parser.add_argument("--policies", nargs="*", default=list(POLICIES), choices=list(POLICIES))
    parser.add_argument("--out", default="benchmarks/results/export_latency.json")
    args = parser.parse_args(argv)
    import onnxruntime

    torch.set_num_threads(1)
    obs = recorded_obs(200)
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in args.policies:
            results[name] = measure(ASSETS / POLICIES[name], obs, args.calls, Path(folder))
    print(table(results))
    record = {
        "command": "python -m rlcore.benchmarks.export_latency " + " ".join(argv or []),
        "threads": 1,
        "calls": args.calls,
        "cpu": cpu_info(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
