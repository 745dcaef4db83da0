"""CartPole-v1 over seeds: when each run first reaches the "solved" bar, and whether it stays.

    for s in 0 1 2 3 4 5 6 7 8 9; do
      python -m rlcore.train algo=dqn env=CartPole-v1 threads=1 seed=$s \\
          run_dir=runs/bench/cartpole/dqn_$s
      python -m rlcore.train algo=ppo env=CartPole-v1 threads=1 seed=$s stop_at_return=475 \\
          run_dir=runs/bench/cartpole/ppo_$s
    done
    python -m rlcore.benchmarks.cartpole runs/bench/cartpole

The runs are the README's own commands, one after another. This script reads them back
(it trains nothing): per run the first evaluation step whose mean greedy return reaches
``--threshold`` (475, CartPole-v1's bar), the final and best evaluation, the share of the
evaluations from the first hit on that still reach it (a run that solves and then
forgets shows here; none for a run stopped by ``stop_at_return``), the largest mean Q
estimate logged (DQN: above ``1 / (1 - gamma)``, the most a reward of 1 per step can sum
to, the estimates have diverged) and the wall time from ``train.log``. Runs are grouped
as ``rlcore.report`` groups them (same config up to per-run keys); per group it gives how
many seeds solved, the median steps to the bar (unsolved seeds count as never) and the
spread. The learning curves, IQMs and bootstrap intervals come from ``rlcore.report``
(written next to the JSON).
"""

from __future__ import annotations

import argparse
import math
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from rlcore import report
from rlcore.benchmarks.runs import cpu_info, report_dir, write_figures, write_result

RESULTS = Path(__file__).resolve().parent / "results"
SOLVED = 475.0  # CartPole-v1's reward_threshold in gymnasium's registry


def first_step_at(steps: np.ndarray, values: np.ndarray, threshold: float) -> float | None:
    """The first step whose value reaches ``threshold``; None when none does."""
    hits = np.flatnonzero(values >= threshold)
    return float(steps[hits[0]]) if hits.size else None


def wall_seconds(log: Path) -> float | None:
    """Seconds between the first and the last time-stamped line of a ``train.log``."""
    stamps = [
        datetime.strptime(line[1:20], "%Y-%m-%d %H:%M:%S")
        for line in log.read_text().splitlines()
        if line.startswith("[") and len(line) > 21 and line[20] == "]"
    ]
    return (stamps[-1] - stamps[0]).total_seconds() if len(stamps) > 1 else None


def run_summary(run: report.Run, threshold: float) -> dict[str, Any]:
    """One run's numbers (see the module docstring)."""
    steps, returns = run.series("eval/return")
    first = first_step_at(steps, returns, threshold)
    after = returns[steps >= first] if first is not None else returns[:0]
    stopped = run.config.get("stop_at_return") is not None  # its last evaluation is the hit
    share = float((after >= threshold).mean()) if after.size and not stopped else None
    summary: dict[str, Any] = {
        "seed": run.seed,
        "run_dir": str(run.path),
        "steps_to_threshold": first,
        "final": float(returns[-1]),
        "best": float(returns.max()),
        "last_step": float(steps[-1]),
        "evals_at_threshold_after_first": share,
        "max_q_value": None,
        "wall_s": None,
    }
    if (run.path / "train.log").is_file():
        summary["wall_s"] = wall_seconds(run.path / "train.log")
    if run.has_metric("train/q_value"):
        summary["max_q_value"] = float(run.series("train/q_value")[1].max())
    return summary


def group_summary(runs: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """Seeds solved, median steps to the bar (an unsolved seed counts as never) and spread."""
    firsts = [r["steps_to_threshold"] for r in runs]
    reached = sorted(s for s in firsts if s is not None)
    median = float(np.median([math.inf if s is None else s for s in firsts]))
    walls = [r["wall_s"] for r in runs if r["wall_s"] is not None]
    return {
        "seeds": len(runs),
        "solved": len(reached),
        "median_steps_to_threshold": median if math.isfinite(median) else None,
        "steps_to_threshold_range": [reached[0], reached[-1]] if reached else None,
        "final_at_threshold": sum(r["final"] >= threshold for r in runs),
        "mean_wall_s": float(np.mean(walls)) if walls else None,
    }


def fmt_steps(value: float | None) -> str:
    return "never" if value is None else f"{value / 1000:g}k"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run dirs or folders of run dirs")
    parser.add_argument("--threshold", type=float, default=SOLVED)
    parser.add_argument("--out", type=Path, default=RESULTS / "cartpole.json")
    args = parser.parse_args(argv)
    groups = report.group_runs(report.load_runs(args.runs))
    payload: dict[str, Any] = {"threshold": args.threshold, "groups": {}, "cpu": cpu_info()}
    for group in groups:
        runs = sorted((run_summary(r, args.threshold) for r in group.runs), key=lambda r: r["seed"])
        summary = group_summary(runs, args.threshold)
        payload["groups"][group.label] = {**summary, "runs": runs}
        print(f"\n{group.label}: reached {args.threshold:g} on {summary['solved']} of "
              f"{summary['seeds']} seeds, median steps {fmt_steps(summary['median_steps_to_threshold'])}, "
              f"final eval >= {args.threshold:g} on {summary['final_at_threshold']}")  # fmt: skip
        bar = f"{args.threshold:g}"
        print(f"| seed | steps to {bar} | final | best | evals >= {bar} from the first | max Q "
              "| wall s |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        for r in runs:
            share = r["evals_at_threshold_after_first"]
            q = r["max_q_value"]
            print(f"| {r['seed']} | {fmt_steps(r['steps_to_threshold'])} | {r['final']:.1f} | "
                  f"{r['best']:.1f} | {'-' if share is None else f'{share:.0%}'} | "
                  f"{'-' if q is None else f'{q:.0f}'} | {r['wall_s'] or '-'} |")  # fmt: skip
    write_result(args, payload)
    write_figures(args.runs, report_dir(args.out))
    return payload


if __name__ == "__main__":
    main()
