"""Wall time of a sweep run serially (Hydra's basic launcher) and with 2 parallel jobs
(joblib launcher), same runs, same machine.

    python -m rlcore.benchmarks.sweep_parallel                        # the issue's 6-run sweep
    python -m rlcore.benchmarks.sweep_parallel --steps 3000 --seeds 0 --out /tmp/sweep.json  # quick

Runs ``python -m rlcore.train -m algo=sac,td3 env=InvertedPendulum seed=0,1,2`` (algos,
env and seeds are flags) as a subprocess twice: with the basic launcher (one job after
the other in one process) and with ``hydra/launcher=joblib hydra.launcher.n_jobs=<jobs>``.
Both use ``threads=1`` so every run does the same work (joblib would cap the parallel
jobs at cores // jobs threads anyway) and the two sweeps must give the same numbers: the
script compares every run's eval.csv between them. ``--order`` chooses which goes first
(``--rounds 2`` alternates, A B B A). Prints a table and writes
``benchmarks/results/sweep_parallel.json`` (wall times, ratio, load average before and
after each sweep, CPU model from lscpu, nice value).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rlcore.benchmarks.soak import cpu_model

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]


def sweep_args(args: argparse.Namespace) -> list[str]:
    """The sweep's overrides, shared by both launchers."""
    return [
        f"algo={','.join(args.algos)}",
        f"env={args.env}",
        f"seed={','.join(str(s) for s in args.seeds)}",
        f"total_steps={args.steps}",
        f"eval_every={args.eval_every}",
        f"eval_episodes={args.eval_episodes}",
        f"checkpoint_every={args.steps}",
        "keep_agent_snapshots=false",
        "logger=quiet",
        "threads=1",
    ]


def run_sweep(launcher: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One sweep in a fresh directory; wall seconds and every run's eval.csv text."""
    cwd = workdir / launcher
    cwd.mkdir(parents=True)
    extra = (
        []
        if launcher == "basic"
        else ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={args.jobs}"]
    )
    cmd = [sys.executable, "-m", "rlcore.train", "-m", *sweep_args(args), *extra]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    load_before = os.getloadavg()
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{launcher} sweep failed:\n{out.stderr[-3000:]}")
    sweep_dir = next((cwd / "runs" / "multirun").iterdir())
    evals = {
        str(path.parent.relative_to(sweep_dir)).rsplit("_", 1)[0]: path.read_text()
        for path in sorted(sweep_dir.glob("*/*/*/eval.csv"))
    }
    print(f"  {launcher}: {seconds:.1f} s, {len(evals)} runs", flush=True)
    return {
        "seconds": seconds,
        "runs": len(evals),
        "evals": evals,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=["sac", "td3"])
    parser.add_argument("--env", default="InvertedPendulum")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=15_000, help="env steps per run")
    parser.add_argument("--eval-every", type=int, default=5_000)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=2, help="joblib's n_jobs")
    parser.add_argument("--order", choices=["basic-first", "joblib-first"], default="basic-first")
    parser.add_argument("--rounds", type=int, default=1, help="2: A B B A")
    parser.add_argument("--out", type=Path, default=RESULTS / "sweep_parallel.json")
    args = parser.parse_args(argv)

    order = ["basic", "joblib"] if args.order == "basic-first" else ["joblib", "basic"]
    sequence = [order if r % 2 == 0 else order[::-1] for r in range(args.rounds)]
    print(
        f"sweep: {' '.join(sweep_args(args))} ({len(args.algos) * len(args.seeds)} runs), "
        f"basic launcher vs joblib n_jobs={args.jobs}",
        flush=True,
    )
    samples: dict[str, list[dict[str, Any]]] = {"basic": [], "joblib": []}
    with tempfile.TemporaryDirectory(prefix="rlcore_sweep_") as tmp:
        for r, launchers in enumerate(sequence):
            for launcher in launchers:
                samples[launcher].append(run_sweep(launcher, args, Path(tmp) / f"round{r}"))
    identical = all(
        s["evals"] == samples["basic"][0]["evals"] for s in samples["basic"] + samples["joblib"]
    )
    basic = min(s["seconds"] for s in samples["basic"])
    joblib = min(s["seconds"] for s in samples["joblib"])
    print("\n| launcher | runs | wall time (s) |\n|---|---:|---:|")
    print(f"| basic (serial) | {samples['basic'][0]['runs']} | {basic:.1f} |")
    print(f"| joblib, n_jobs={args.jobs} | {samples['joblib'][0]['runs']} | {joblib:.1f} |")
    print(f"serial / parallel: {basic / joblib:.2f}x; same eval.csv in both: {identical}")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs, nice {os.nice(0)}")
    payload = {
        "benchmark": "sweep wall time: Hydra basic launcher vs joblib launcher",
        "command": f"python -m rlcore.train -m {' '.join(sweep_args(args))} [hydra/launcher=joblib hydra.launcher.n_jobs={args.jobs}]",
        "basic_seconds": basic,
        "joblib_seconds": joblib,
        "speedup": basic / joblib,
        "identical_evals": identical,
        "machine": {
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "nice": os.nice(0),
        },
        "samples": {
            k: [{key: v for key, v in s.items() if key != "evals"} for s in runs]
            for k, runs in samples.items()
        },
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out}")
    return payload


if __name__ == "__main__":
    main()
