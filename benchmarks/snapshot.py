"""S3RL snapshot reset on Hopper: student SAC and TD3 with and without snapshots from a
teacher, at equal env steps, plus ablations.

    python -m rlcore.benchmarks.snapshot --teacher benchmarks/assets/hopper_sac_expert.pt \\
        --steps 100000 --seeds 0 1 2 --jobs 2

Every variant is one rlcore run per seed (``python -m rlcore.train`` maths in a worker
process; an interrupted benchmark resumes each run from its checkpoint, a finished one is
read back). The S3RL variants add ``snapshot.teacher=<teacher>`` (10 teacher episodes,
sampled for a stochastic teacher such as SAC as the reference does, a snapshot every 10 steps, k-means on the teacher's Q labels with the
paper's k, truncation after 100 steps, ordinary resets after ``--switch-after`` env
steps); the students keep CleanRL's settings (``configs/algo/{sac,td3}.yaml``). The teacher
is the committed agent-only snapshot of an rlcore SAC run (benchmarks/assets/README.md),
so the table is rebuilt on a new machine without training it again.

The table reports, per variant, the evaluation return (10 episodes from ordinary resets)
after 25k / 50k / 100k env steps, the mean of the last 3 evaluations and the mean over
all evaluations (the area under the learning curve): mean, standard deviation and
[min, max] over seeds,
and checks the paper's claim: S3RL above the same student without snapshots at equal env
steps. The JSON also records every seed's curve and the CPU (lscpu model and flags).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from rlcore.benchmarks.runs import (
    cpu_info,
    overrides_by_name,
    read_run,
    run_method,
    seeds_by_name,
    worker_pool,
    write_result,
)

RESULTS = Path(__file__).resolve().parent / "results"
TEACHER = Path(__file__).resolve().parent / "assets" / "hopper_sac_expert.pt"
# variant -> (student algorithm, snapshot overrides or None for the plain student)
VARIANTS: dict[str, tuple[str, list[str] | None]] = {
    "sac": ("sac", None),
    "sac_s3rl": ("sac", []),
    "td3": ("td3", None),
    "td3_s3rl": ("td3", []),
    "sac_s3rl_uniform": ("sac", ["snapshot.selection=uniform"]),  # ablation: no clusters
    "sac_s3rl_no_truncation": ("sac", ["snapshot.truncate_after=null"]),  # ablation
}
DEFAULT_VARIANTS = ["sac", "sac_s3rl", "td3", "td3_s3rl", "sac_s3rl_uniform"]


def variant_overrides(variant: str, teacher: Path, steps: int, switch_after: int) -> list[str]:
    """rlcore.train overrides of one variant."""
    algo, snapshot = VARIANTS[variant]
    out = [f"algo={algo}", "env=hopper", f"total_steps={steps}"]
    if snapshot is not None:
        out += [f"snapshot.teacher={teacher}", f"snapshot.switch_after={switch_after}", *snapshot]
    return out


def returns_at(rows: list[dict[str, float]], marks: tuple[int, ...]) -> dict[str, float]:
    """The evaluation return logged at each of ``marks`` env steps (NaN where none)."""
    out = {}
    for mark in marks:
        hits = [r["eval/return"] for r in rows if int(r["step"]) == mark and "eval/return" in r]
        out[str(mark)] = float(hits[-1]) if hits else math.nan
    return out


def curve_summary(curve: list[tuple[int, float]], last: int = 3) -> dict[str, float]:
    """``last_mean``: the mean of the last ``last`` evaluations (less noisy than the final
    one alone); ``curve_mean``: the mean over every evaluation (area under the learning
    curve per evaluation: sample efficiency over the whole run)."""
    values = [value for _, value in curve]
    if not values:
        return {"last_mean": math.nan, "curve_mean": math.nan}
    return {"last_mean": float(np.mean(values[-last:])), "curve_mean": float(np.mean(values))}


def aggregate(values: list[float]) -> dict[str, float]:
    """Mean, standard deviation (ddof 0) and range over seeds."""
    array = np.asarray(values, dtype=np.float64)
    return {"mean": float(array.mean()), "std": float(array.std()),
            "min": float(array.min()), "max": float(array.max())}  # fmt: skip


def claims(table: dict[str, dict[str, Any]], end: str) -> list[str]:
    """S3RL above the plain student at the end, per student (mean over seeds)."""
    out = []
    for student in ("sac", "td3"):
        s3rl = f"{student}_s3rl"
        text = f"{student.upper()} + S3RL above plain {student.upper()} after {int(end):,} steps"
        if student not in table or s3rl not in table:
            out.append(f"{text}: not measured")
            continue
        a, b = table[s3rl]["at"][end]["mean"], table[student]["at"][end]["mean"]
        out.append(f"{text}: {'holds' if a > b else 'does NOT hold'} ({a:.0f} vs {b:.0f})")
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", type=Path, default=TEACHER,
                        help="rlcore run dir / checkpoint, or a snapshots .npz file")  # fmt: skip
    parser.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--switch-after", type=int, default=50_000,
                        help="env steps with snapshot resets (then ordinary resets)")  # fmt: skip
    parser.add_argument("--marks", type=int, nargs="+", default=[25_000, 50_000, 100_000])
    parser.add_argument("--eval-every", type=int, default=5_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--seeds-for", nargs="*", default=[], metavar="VARIANT=N",
                        help="fewer seeds for a variant (its first N seeds)")  # fmt: skip
    parser.add_argument("--read-only", action="store_true",
                        help="tabulate the run dirs as they are, training nothing")  # fmt: skip
    parser.add_argument("--set", nargs="*", default=[], metavar="VARIANT:KEY=VALUE",
                        help="extra rlcore.train override for one variant")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/bench/snapshot"))
    parser.add_argument("--out", type=Path, default=RESULTS / "snapshot.json")
    args = parser.parse_args(argv)
    marks = tuple(m for m in args.marks if m <= args.steps)
    if not marks or any(m % args.eval_every for m in marks):
        raise SystemExit("--marks must be <= --steps and multiples of --eval-every")
    extra = overrides_by_name(args.set, list(VARIANTS), args.variants, "VARIANT")
    common = [f"eval_every={args.eval_every}", f"eval_episodes={args.eval_episodes}"]
    overrides = {
        v: [*variant_overrides(v, args.teacher, args.steps, args.switch_after), *common, *extra[v]]
        for v in args.variants
    }
    seeds_of = seeds_by_name(args.seeds_for, list(VARIANTS), args.variants, args.seeds, "VARIANT")
    jobs = [(v, s) for v in args.variants for s in seeds_of[v]]
    if args.read_only:
        results = {(v, s): read_run(args.run_dir / f"{v}_seed{s}") for v, s in jobs}
    else:
        with worker_pool(args.jobs) as pool:
            futures = {
                (v, s): pool.submit(run_method, v, s, overrides[v], args.run_dir, args.threads)
                for v, s in jobs
            }
            results = {key: future.result() for key, future in futures.items()}

    table: dict[str, dict[str, Any]] = {}
    for v in args.variants:
        seeds = [
            {"seed": s, "at": returns_at(results[(v, s)]["rows"], marks),
             "seconds": results[(v, s)]["seconds"],
             "curve": [(int(r["step"]), float(r["eval/return"]))
                       for r in results[(v, s)]["rows"] if "eval/return" in r]}
            for s in seeds_of[v]
        ]  # fmt: skip
        for row in seeds:
            row.update(curve_summary(row["curve"]))
        table[v] = {
            "at": {str(m): aggregate([r["at"][str(m)] for r in seeds]) for m in marks},
            "last_mean": aggregate([r["last_mean"] for r in seeds]),
            "curve_mean": aggregate([r["curve_mean"] for r in seeds]),
            "seeds": seeds,
            "overrides": overrides[v],
        }
    end = str(marks[-1])
    print(f"Hopper-v5, teacher {args.teacher}; up to {len(args.seeds)} seeds; snapshot resets for "
          f"the first {args.switch_after:,} env steps; evaluation return: mean +- std [min, max]")  # fmt: skip
    print("| variant | seeds | " + " | ".join(f"after {m // 1000}k" for m in marks)
          + " | last 3 evals | all evals | hours |")  # fmt: skip
    print("|---" * (len(marks) + 5) + "|")
    for v, row in table.items():
        cells = " | ".join(
            f"{a['mean']:.0f} +- {a['std']:.0f} [{a['min']:.0f}, {a['max']:.0f}]"
            for a in [*(row["at"][str(m)] for m in marks), row["last_mean"], row["curve_mean"]]
        )
        hours = sum(r["seconds"] for r in row["seeds"]) / 3600
        print(f"| {v} | {len(row['seeds'])} | {cells} | {hours:.2f} |")
    verdicts = claims(table, end)
    for line in verdicts:
        print(f"- {line}")
    payload = {"table": table, "claims": verdicts, "cpu": cpu_info()}
    write_result(args, payload)
    return payload


if __name__ == "__main__":
    main()
