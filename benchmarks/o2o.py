"""Offline-to-online fine-tuning on one dataset: WSRL, RLPD, Cal-QL and IQL fine-tuning,
FamO2O and SAC from scratch, side by side at the same online budget.

    python -m rlcore.benchmarks.o2o --dataset local/hopper/medium-replay-v0 --offline-steps 50000 \\
        --online-steps 50000 --seeds 0 1 --jobs 2

For every method and seed it trains one rlcore run (``python -m rlcore.train`` maths, in a
worker process; an interrupted benchmark resumes each run from its checkpoint) and reads
the run's eval.csv. Methods with offline pre-training (WSRL: CQL with a 10-critic
ensemble; Cal-QL; IQL; FamO2O) train ``--offline-steps`` gradient steps first; RLPD and SAC
start online. The table reports, per method (mean over seeds, each seed in the JSON):

* ``pre-switch``: the return of the evaluation at the end of offline training;
* ``dip``: the lowest evaluation return within the first ``--dip-window`` online env steps
  (the warm-up steps count: they are env steps), and ``dip / pre-switch``;
* the return after 25k and 50k online env steps (the evaluation at that step; ``--marks``).

and checks the papers' claims: WSRL never dips below 90% of its pre-switch return and beats
SAC from scratch at the end; RLPD beats SAC from scratch; FamO2O matches IQL fine-tuning.
On a sparse goal task (AntMaze data of ``rlcore.offline.antmaze``) pass ``--env`` and
``--metric eval/success_rate``: the same table and claims on success rates.
``--utd-for rlpd=5`` etc. shrink an update-to-data ratio to fit a CPU budget (recorded in
the JSON next to the numbers). The JSON also records the CPU (lscpu model and flags).
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
# method -> (algo, pre-trains offline)
METHODS: dict[str, tuple[str, bool]] = {
    "wsrl": ("wsrl", True),
    "rlpd": ("rlpd", False),
    "cal_ql": ("cal_ql", True),
    "famo2o": ("famo2o", True),
    "iql": ("iql", True),
    "sac": ("sac", False),
}
# relative cost per online step, to start the longest runs first
COST = {"rlpd": 6.0, "wsrl": 3.0, "cal_ql": 3.0, "famo2o": 1.5, "iql": 1.0, "sac": 1.0}


def method_overrides(
    method: str, dataset: str, offline_steps: int, online_steps: int, env: str = "hopper"
) -> list[str]:
    """rlcore.train overrides of one method: the phases' lengths in each algorithm's terms
    (offline algorithms: total_steps = offline steps + algo.online_steps; online ones:
    total_steps = online env steps + algo.offline_steps)."""
    algo, pretrains = METHODS[method]
    out = [f"algo={algo}", f"env={env}"]
    if method == "sac":
        return [*out, f"total_steps={online_steps}"]
    out.append(f"dataset={dataset}")
    if algo in ("wsrl", "rlpd"):
        out.append(f"total_steps={online_steps}")
        if pretrains:
            out.append(f"algo.offline_steps={offline_steps}")
        return out
    return [*out, f"total_steps={offline_steps}", f"algo.online_steps={online_steps}"]


def summarise(
    rows: list[dict[str, float]],
    dip_window: int,
    marks: tuple[int, ...],
    metric: str = "eval/return",
) -> dict:
    """Pre-switch value, dip and values at ``marks`` online env steps of ``metric``
    (``eval/return``, or ``eval/success_rate`` on a sparse goal task) from eval.csv rows
    (``eval/env_steps`` is the online env-step count of each evaluation)."""
    offline = [r for r in rows if r.get("eval/env_steps", 0) == 0]
    online = [r for r in rows if r.get("eval/env_steps", 0) > 0]
    pre = offline[-1][metric] if offline else math.nan
    window = [r[metric] for r in online if r["eval/env_steps"] <= dip_window]
    dip = min(window) if window else math.nan
    at = {}
    for mark in marks:
        hits = [r[metric] for r in online if r["eval/env_steps"] == mark]
        at[str(mark)] = hits[-1] if hits else math.nan
    curve = [(int(r["eval/env_steps"]), float(r[metric])) for r in online]
    return {"pre_switch": pre, "dip": dip, "at": at, "curve": curve}


def claims(table: dict[str, dict[str, Any]], end: str) -> list[str]:
    """The papers' claims, each marked holds / does not hold / not measured."""

    def mean(method: str, key: str) -> float:
        if method not in table:
            return math.nan
        return table[method][key] if key != "end" else table[method]["at"][end]

    checks = [
        ("WSRL: no dip below 90% of the pre-switch return",
         mean("wsrl", "dip") >= 0.9 * mean("wsrl", "pre_switch")),
        ("WSRL beats SAC from scratch at the end", mean("wsrl", "end") > mean("sac", "end")),
        ("RLPD beats SAC from scratch at the end", mean("rlpd", "end") > mean("sac", "end")),
        ("FamO2O at least matches IQL fine-tuning at the end",
         mean("famo2o", "end") >= mean("iql", "end")),
    ]  # fmt: skip
    needed = {0: ("wsrl",), 1: ("wsrl", "sac"), 2: ("rlpd", "sac"), 3: ("famo2o", "iql")}
    values = {
        0: (mean("wsrl", "dip"), mean("wsrl", "pre_switch")),
        1: (mean("wsrl", "end"), mean("sac", "end")),
        2: (mean("rlpd", "end"), mean("sac", "end")),
        3: (mean("famo2o", "end"), mean("iql", "end")),
    }
    out = []
    for i, (text, holds) in enumerate(checks):
        if any(m not in table for m in needed[i]) or any(map(math.isnan, values[i])):
            out.append(f"{text}: not measured")
        else:
            out.append(f"{text}: {'holds' if holds else 'does NOT hold'}")
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="local/hopper/medium-replay-v0")
    parser.add_argument(
        "--env", default="hopper",
        help="the online env of every run (e.g. antmazeumazeeval for AntMaze data)",
    )  # fmt: skip
    parser.add_argument(
        "--metric", default="eval/return", choices=["eval/return", "eval/success_rate"],
        help="the evaluation column the table and the claims read",
    )  # fmt: skip
    parser.add_argument(
        "--marks", type=int, nargs="+", default=[25_000, 50_000],
        help="online env steps the table reports (those within --online-steps)",
    )  # fmt: skip
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--offline-steps", type=int, default=50_000)
    parser.add_argument("--online-steps", type=int, default=50_000)
    parser.add_argument("--eval-every", type=int, default=2_500)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--dip-window", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument(
        "--seeds-for", nargs="*", default=[], metavar="METHOD=N",
        help="fewer seeds for a method, e.g. rlpd=1 (its first N seeds)",
    )  # fmt: skip
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="METHOD:KEY=VALUE",
        help="extra rlcore.train override for one method, e.g. rlpd:algo.utd_ratio=5",
    )  # fmt: skip
    parser.add_argument(
        "--init-from", nargs="*", default=[], metavar="METHOD=RUN",
        help="start a method's runs (every seed) from one finished pre-training run "
        "(rlcore.train init_from=): its offline phase is skipped and its step-0 evaluation "
        "is the pre-switch return",
    )  # fmt: skip
    parser.add_argument(
        "--read-only", action="store_true",
        help="train nothing: tabulate the run dirs as they are (unfinished runs give NaN "
        "at the marks they have not reached)",
    )  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/bench/o2o"))
    parser.add_argument("--out", type=Path, default=RESULTS / "o2o.json")
    args = parser.parse_args(argv)
    if args.offline_steps % args.eval_every or args.online_steps % args.eval_every:
        raise SystemExit("--offline-steps and --online-steps must be multiples of --eval-every")

    extra = overrides_by_name(args.set, list(METHODS), args.methods, "METHOD")
    seeds = seeds_by_name(args.seeds_for, list(METHODS), args.methods, args.seeds, "METHOD")
    for item in args.init_from:
        method, _, source = item.partition("=")
        if method not in METHODS or not METHODS[method][1] or not source:
            raise SystemExit("--init-from expects METHOD=RUN with a pre-training METHOD")
        if method in extra:
            extra[method].append(f"init_from={source}")
    common = [f"eval_every={args.eval_every}", f"eval_episodes={args.eval_episodes}"]
    jobs = []
    for method in args.methods:
        overrides = [
            *method_overrides(
                method, args.dataset, args.offline_steps, args.online_steps, args.env
            ),
            *common,
            *extra[method],
        ]
        jobs += [(method, seed, overrides) for seed in seeds[method]]
    jobs.sort(key=lambda job: -COST.get(job[0], 1.0))
    if args.read_only:
        results = {(m, s): read_run(args.run_dir / f"{m}_seed{s}") for m, s, _ in jobs}
    else:
        with worker_pool(args.jobs) as pool:
            futures = {
                (m, s): pool.submit(run_method, m, s, o, args.run_dir, args.threads)
                for m, s, o in jobs
            }
            results = {key: future.result() for key, future in futures.items()}

    marks = tuple(m for m in args.marks if m <= args.online_steps) or (args.online_steps,)
    end = str(marks[-1])
    table: dict[str, dict[str, Any]] = {}
    for method in args.methods:
        per_seed = [
            {**summarise(results[(method, s)]["rows"], args.dip_window, marks, args.metric),
             "seed": s,
             "seconds": results[(method, s)]["seconds"]}
            for s in seeds[method]
        ]  # fmt: skip
        table[method] = {
            "pre_switch": float(np.mean([r["pre_switch"] for r in per_seed])),
            "dip": float(np.mean([r["dip"] for r in per_seed])),
            "at": {k: float(np.mean([r["at"][k] for r in per_seed])) for k in map(str, marks)},
            "seeds": per_seed,
            "overrides": [o for m, s, o in jobs if m == method][0],
        }

    what = "success rates" if args.metric == "eval/success_rate" else "returns"
    digits = 2 if args.metric == "eval/success_rate" else 0
    print(f"dataset {args.dataset} on {args.env}; offline {args.offline_steps:,} gradient "
          f"steps, online {args.online_steps:,} env steps; {what} are means over seeds")  # fmt: skip
    cols = " | ".join(f"after {int(m) // 1000}k" for m in map(str, marks))
    print(f"| method | seeds | pre-switch | dip (first {args.dip_window // 1000}k) | "
          f"dip / pre | {cols} | hours |")  # fmt: skip
    print("|---" * (6 + len(marks)) + "|")
    for method, row in table.items():
        ratio = row["dip"] / row["pre_switch"] if row["pre_switch"] else math.nan
        hours = sum(r["seconds"] for r in row["seeds"]) / 3600
        values = " | ".join(f"{row['at'][str(m)]:.{digits}f}" for m in marks)
        print(f"| {method} | {len(row['seeds'])} | {row['pre_switch']:.{digits}f} | "
              f"{row['dip']:.{digits}f} | {ratio:.2f} | {values} | {hours:.2f} |")  # fmt: skip
    verdicts = claims(table, end)
    for line in verdicts:
        print(f"- {line}")
    payload = {
        "table": table, "claims": verdicts, "cpu": cpu_info(), "env": args.env,
        "metric": args.metric,
    }  # fmt: skip
    write_result(args, payload)
    return payload


if __name__ == "__main__":
    main()
