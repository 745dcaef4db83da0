"""Off-policy training at equal wall time on the CPU: FastTD3 on many native envs against
SAC and TD3 on one env, the comparison FastTD3 (Seo et al. 2025) makes on a GPU.

    python -m rlcore.benchmarks.walltime --seconds 1800 --jobs 2
    python -m rlcore.benchmarks.walltime --read-only      # tabulate the run dirs as they are

Every run trains until ``stop_after_s`` seconds of training (evaluations not counted:
rlcore.train's ``stop_after_s``), one torch thread each, ``--jobs`` runs at a time. Jobs
are ordered so that the seeds of one method on one task run side by side: every method
shares the machine with a run like itself. ``rlcore.report`` then scores the runs twice,
against training time (final = the return when the time ran out, AUC = mean height of
the curve over the seconds) and against env steps, with IQM and bootstrap CIs, and draws
the learning curves (``<out stem>_report_time/`` and ``_report_steps/``).

FastTD3 is sized for two CPU cores, not the GPU defaults (batch 32,768, 1024-wide
critics: about 1 env step/s here): ``--fast-envs`` native envs (default 32), batch 1024,
256x256 actor and critics, a 1M-transition buffer (the sizes the command line has since
taken on a CPU by itself: algos/fast_td3.py ``CPU_SIZES``; passed explicitly here, so
the table reproduces). Gymnasium's MuJoCo tasks take the reference's HumanoidBench
settings rather than Playground's: gamma 0.99 and a support wide enough for these runs'
discounted returns (``SUPPORT``; configs/algo_env/fast_td3_<env>.yaml, the command
line's, are wider: they cover the fastest gaits). SAC and TD3 run their defaults
(SAC compiles its update, ``algo.compile=auto``: the compilation is not counted in the
budget, nor are evaluations and checkpoints).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from rlcore.benchmarks.runs import (
    cpu_info,
    overrides_by_name,
    read_run,
    run_method,
    worker_pool,
    write_figures,
    write_result,
)

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("fast_td3", "sac", "td3")
TASKS = ("Hopper", "HalfCheetah")
# half-width of the C51 support per task: the discounted returns (gamma 0.99) a policy
# reaches here stay inside it (Hopper: the reference's HumanoidBench default)
SUPPORT = {"Hopper": 250.0, "HalfCheetah": 500.0}
NO_STEP_LIMIT = 100_000_000  # env steps: the time budget ends every run first


def method_overrides(method: str, task: str, fast_envs: int) -> list[str]:
    """rlcore.train overrides of one method on one task (the time budget comes on top)."""
    common = [f"env={task.lower()}", f"total_steps={NO_STEP_LIMIT}"]
    if method != "fast_td3":
        return [f"algo={method}", *common]
    half = SUPPORT.get(task)
    if half is None:
        raise SystemExit(f"no C51 support known for {task}: add it to SUPPORT ({list(SUPPORT)})")
    return [
        "algo=fast_td3", *common, f"env.num_envs={fast_envs}", "algo.batch_size=1024",
        "algo.actor_hidden=[256,256]", "algo.critic_hidden=[256,256]",
        "algo.buffer_size=1000000", "algo.gamma=0.99",
        f"algo.v_min={-half:g}", f"algo.v_max={half:g}",
    ]  # fmt: skip


def summarise(result: dict[str, Any]) -> dict[str, float]:
    """One run's numbers at the end of its budget: return, env steps, training seconds."""
    rows = [r for r in result["rows"] if "eval/return" in r]
    last = rows[-1]
    return {
        "final_return": float(last["eval/return"]),
        "best_return": float(max(r["eval/return"] for r in rows)),
        "env_steps": float(last.get("eval/env_steps", last["step"])),
        "train_seconds": float(last.get("eval/train_seconds", np.nan)),
        "wall_seconds": float(result["seconds"]),
        "evaluations": len(rows),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--seconds", type=float, default=1800.0, help="training time per run")
    parser.add_argument("--fast-envs", type=int, default=32, help="fast_td3's native envs")
    parser.add_argument("--eval-every", type=int, default=5_000, help="env steps")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="METHOD:KEY=VALUE",
        help="extra rlcore.train override for one method, e.g. fast_td3:env.num_envs=16",
    )  # fmt: skip
    parser.add_argument("--read-only", action="store_true", help="train nothing: tabulate")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap resamples")
    parser.add_argument("--run-dir", type=Path, default=Path("runs/bench/walltime"))
    parser.add_argument("--out", type=Path, default=RESULTS / "walltime.json")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        raise SystemExit("--seconds must be > 0")

    extra = overrides_by_name(args.set, list(METHODS), args.methods, "METHOD")
    common = [
        f"stop_after_s={args.seconds:g}", f"eval_every={args.eval_every}",
        f"eval_episodes={args.eval_episodes}", "checkpoint_every_s=300",
    ]  # fmt: skip
    # one method's seeds side by side (jobs are taken in this order)
    jobs = [
        (task, method, seed, [*method_overrides(method, task, args.fast_envs), *common,
                              *extra[method]])
        for task in args.tasks for method in args.methods for seed in args.seeds
    ]  # fmt: skip
    if args.read_only:
        results = {(t, m, s): read_run(args.run_dir / t / f"{m}_seed{s}") for t, m, s, _ in jobs}
    else:
        with worker_pool(args.jobs) as pool:
            futures = {
                (t, m, s): pool.submit(run_method, m, s, o, args.run_dir / t, args.threads)
                for t, m, s, o in jobs
            }
            results = {key: future.result() for key, future in futures.items()}

    table: dict[str, dict[str, Any]] = {}
    for task in args.tasks:
        for method in args.methods:
            runs = [summarise(results[(task, method, s)]) for s in args.seeds]
            table.setdefault(task, {})[method] = {
                key: float(np.mean([r[key] for r in runs]))
                for key in ("final_return", "best_return", "env_steps", "train_seconds")
            } | {"seeds": [{"seed": s, **r} for s, r in zip(args.seeds, runs)]}
    run_dirs = [Path(r["run_dir"]) for r in results.values()]
    reports = {}
    for name, x in (("time", "eval/train_seconds"), ("steps", "eval/env_steps")):
        out = args.out.with_name(f"{args.out.stem}_report_{name}")
        write_figures(run_dirs, out, reps=args.reps, x=x)
        reports[name] = str(out)
    print(f"\ntraining time {args.seconds:g} s per run, {args.jobs} runs at a time, "
          f"{args.threads} thread(s) each\n")  # fmt: skip
    print("| task | method | seeds | env steps | final return (per seed) | best |")
    print("|---|---|---|---|---|---|")
    for task, methods in table.items():
        for method, row in methods.items():
            finals = " / ".join(f"{r['final_return']:,.0f}" for r in row["seeds"])
            print(f"| {task} | {method} | {len(row['seeds'])} | {row['env_steps']:,.0f} "
                  f"| {row['final_return']:,.0f} ({finals}) | {row['best_return']:,.0f} |")  # fmt: skip
    payload = {"cpu": cpu_info(), "table": table, "reports": reports}
    write_result(args, payload)
    return payload


if __name__ == "__main__":
    main()
