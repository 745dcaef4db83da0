"""Actor-learner throughput on Ray: env steps/s and learner updates/s of SAC (UTD 1) and
PPO on Hopper with 0 (one process), 1, 2 and 4 actors, and how many actors one learner
can feed before it is the bottleneck (SRL's question), from the measured costs.

    python -m rlcore.benchmarks.distributed              # ~10 min on 2 idle cores
    python -m rlcore.benchmarks.distributed --quick      # tiny sizes (~3 min)
    python -m rlcore.benchmarks.distributed --algos sac --actors 0 2

Each cell is ``python -m rlcore.train`` in a fresh process (``distributed.actors=N``,
local Ray on 127.0.0.1; N = 0 is the single-process run), one torch thread in the
learner and in each actor, no evaluation before the end. Speeds are the loop's, read from
``time.csv`` between its first and last row of the measured phase (SAC: after the random
warm-up; PPO: iterations 2..), so process start, Ray's start and the warm-up are left out;
``dist.csv`` gives each actor's own env steps/s while collecting and the policy lag.

The learner's capacity (env steps/s it can consume) comes from the single-process run and
the 1-actor run: one process spends ``1 / sps_single`` seconds per env step, of which an
actor's collecting costs ``1 / actor_sps`` (its rate alone beside the learner), so the
learner's part per env step is ``c = 1 / sps_single - 1 / actor_sps`` (SAC at UTD 1: one
update; PPO: the update's share per sample). One learner can feed ``1 / c`` env steps/s,
i.e. ``N* = (1 / c) / actor_sps`` actors; with more, the learner is the bottleneck. On this
2-core machine 2+ actors share the cores with the learner, so the measured rows beyond
1 actor show contention as much as scaling: the model is what carries to a bigger host.
The JSON (``--out``, default ``benchmarks/results/distributed.json``) has every cell, the
model, lscpu's model and flags and the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlcore.benchmarks.runs import cpu_info, write_result
from rlcore.benchmarks.throughput.common import fmt, markdown_table, ratio

RESULTS = Path(__file__).resolve().parent / "results"
RUN = ["logger=quiet", "eval_every=100000000", "checkpoint_every=100000000",
       "checkpoint_every_s=0", "eval_episodes=1", "eval_envs=1", "keep_agent_snapshots=false",
       "threads=1", "env=Hopper"]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Size:
    """Run lengths (``--quick`` shrinks them)."""

    sac_warmup: int = 1_000  # random env steps before SAC's updates
    sac_online: int = 3_000  # SAC env steps measured (UTD 1)
    ppo_rollout: int = 1_024  # PPO vector steps per worker per iteration (1 env each)
    ppo_iterations: int = 4  # PPO iterations (the first is left out of the speed)


QUICK = Size(sac_warmup=300, sac_online=600, ppo_rollout=256, ppo_iterations=3)


def overrides(algo: str, actors: int, size: Size) -> list[str]:
    """One cell's command-line overrides (besides ``RUN`` and the run dir)."""
    dist = [f"distributed.actors={actors}"]
    if algo == "sac":
        total = size.sac_warmup + size.sac_online
        return ["algo=sac", f"algo.learning_starts={size.sac_warmup}", f"total_steps={total}",
                f"log_every={max(1, size.sac_online // 10)}", *dist]  # fmt: skip
    workers = max(1, actors)
    per_iteration = size.ppo_rollout * workers
    return ["algo=ppo", f"algo.rollout_steps={size.ppo_rollout}",
            f"total_steps={per_iteration * size.ppo_iterations}",
            f"log_every={per_iteration}", *dist]  # fmt: skip


def _read_csv(path: Path) -> list[dict[str, float]]:
    from rlcore.logging import read_csv

    return read_csv(path) if path.is_file() else []


def loop_speeds(run_dir: Path, first_step: int) -> dict[str, float | None]:
    """Env steps/s and updates/s of the loop between its first and last ``time.csv`` row
    at or after ``first_step`` (seconds since the loop started = step / ``time/sps``);
    a rollout phase (PPO, one row per iteration) gives iterations/s."""
    rows = [r for r in _read_csv(run_dir / "time.csv")
            if r.get("time/sps") and r["step"] >= first_step]  # fmt: skip
    if len(rows) < 2:
        return {"env_steps_per_s": None, "updates_per_s": None, "rows": len(rows)}
    seconds = [r["step"] / r["time/sps"] for r in rows]
    span = seconds[-1] - seconds[0]
    if span <= 0:
        return {"env_steps_per_s": None, "updates_per_s": None, "rows": len(rows)}
    updates = [r.get("time/updates") for r in rows]
    if None in (updates[0], updates[-1]):  # a rollout phase logs a row per iteration
        per_s = (len(rows) - 1) / span
    else:
        per_s = (updates[-1] - updates[0]) / span
    return {"env_steps_per_s": (rows[-1]["step"] - rows[0]["step"]) / span,
            "updates_per_s": per_s, "rows": len(rows)}  # fmt: skip


def actor_stats(run_dir: Path) -> dict[str, Any]:
    """From ``dist.csv``: each actor's mean env steps/s while collecting, the mean policy
    lag, restarts (empty for a single-process run)."""
    rows = _read_csv(run_dir / "dist.csv")
    if not rows:
        return {}
    keys = sorted({k for r in rows for k in r if k.startswith("dist/actor")})
    per_actor = {k.removeprefix("dist/").removesuffix("_sps"):
                 _mean([r[k] for r in rows if r.get(k)]) for k in keys}  # fmt: skip
    lags = [r["dist/policy_lag"] for r in rows if r.get("dist/policy_lag") is not None]
    return {"actor_sps": per_actor, "actor_sps_mean": _mean(list(per_actor.values())),
            "policy_lag": _mean(lags), "restarts": rows[-1].get("dist/restarts")}  # fmt: skip


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def run_cell(algo: str, actors: int, size: Size, root: Path) -> dict[str, Any]:
    """One training run in a fresh process; its speeds and actor stats."""
    run_dir = root / f"{algo}_actors{actors}"
    cmd = [sys.executable, "-m", "rlcore.train", *RUN, *overrides(algo, actors, size),
           f"run_dir={run_dir}"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    first = size.sac_warmup if algo == "sac" else size.ppo_rollout * max(1, actors)
    cell = {"algo": algo, "actors": actors, "command": " ".join(cmd[1:]), "wall_s": wall,
            "returncode": done.returncode, **loop_speeds(run_dir, first),
            **actor_stats(run_dir)}  # fmt: skip
    if done.returncode:
        cell["error"] = (done.stderr or done.stdout).strip().splitlines()[-1:]
    return cell


def learner_model(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Per algorithm: the learner's cost per env step ``c`` (single-process seconds per env
    step minus one actor's collecting seconds per env step), its capacity ``1 / c`` and
    the actors it can feed ``N* = capacity / actor_sps``."""
    model = {}
    for algo in sorted({c["algo"] for c in cells}):
        single = next((c for c in cells if c["algo"] == algo and c["actors"] == 0), None)
        one = next((c for c in cells if c["algo"] == algo and c["actors"] == 1), None)
        sps = single and single.get("env_steps_per_s")
        actor = one and one.get("actor_sps_mean")
        if not sps or not actor or 1 / sps <= 1 / actor:
            model[algo] = {"note": "needs the 0- and 1-actor cells (and an actor faster than "
                                   "the single process)"}  # fmt: skip
            continue
        cost = 1 / sps - 1 / actor
        model[algo] = {"single_sps": sps, "actor_sps": actor, "learner_s_per_env_step": cost,
                       "learner_capacity_sps": 1 / cost,
                       "actors_one_learner_feeds": (1 / cost) / actor}  # fmt: skip
    return model


def table(cells: list[dict[str, Any]], model: dict[str, Any]) -> str:
    rows = []
    for c in cells:
        single = next((s for s in cells if s["algo"] == c["algo"] and s["actors"] == 0), None)
        base = single.get("env_steps_per_s") if single else None
        rows.append([c["algo"], str(c["actors"] or "one process"), fmt(c.get("env_steps_per_s")),
                     fmt(ratio(c.get("env_steps_per_s"), base), True),
                     fmt(c.get("updates_per_s")), fmt(c.get("actor_sps_mean")),
                     fmt(c.get("policy_lag")), "ok" if not c["returncode"] else "failed"])  # fmt: skip
    out = markdown_table(["algo", "actors", "env steps/s", "vs one process", "learner updates/s (PPO: iterations/s)",
                          "env steps/s per actor", "policy lag", "run"], rows)  # fmt: skip
    lines = [out, ""]
    for algo, m in model.items():
        if "learner_capacity_sps" in m:
            lines.append(f"{algo}: learner {m['learner_s_per_env_step'] * 1e3:.2f} ms per env step "
                         f"-> feeds {fmt(m['learner_capacity_sps'])} env steps/s = "
                         f"{m['actors_one_learner_feeds']:.2f} actors of "
                         f"{fmt(m['actor_sps'])} env steps/s")  # fmt: skip
        else:
            lines.append(f"{algo}: {m['note']}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", nargs="+", default=["sac", "ppo"], choices=["sac", "ppo"])
    parser.add_argument("--actors", nargs="+", type=int, default=[0, 1, 2, 4])
    parser.add_argument("--quick", action="store_true", help="tiny sizes")
    parser.add_argument("--out", type=Path, default=RESULTS / "distributed.json")
    parser.add_argument("--run-root", type=Path, default=None, help="keep the run dirs here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    size = QUICK if args.quick else Size()
    cells = []
    with tempfile.TemporaryDirectory(prefix="rlcore_dist_") as tmp:
        root = args.run_root or Path(tmp)
        for algo in args.algos:
            for actors in args.actors:
                cell = run_cell(algo, actors, size, root)
                cells.append(cell)
                print(f"{algo} actors={actors}: {fmt(cell.get('env_steps_per_s'))} env steps/s, "
                      f"{fmt(cell.get('updates_per_s'))} updates/s"
                      + (f" (failed: {cell['error']})" if cell["returncode"] else ""), flush=True)  # fmt: skip
    model = learner_model(cells)
    print(table(cells, model))
    payload = {"size": dataclasses.asdict(size), "cells": cells, "model": model,
               "machine": {"lscpu": cpu_info(), "cpu_count": os.cpu_count()},
               "command": " ".join(["python -m rlcore.benchmarks.distributed",
                                    *(argv if argv is not None else sys.argv[1:])])}  # fmt: skip
    write_result(args, payload)
    return payload


if __name__ == "__main__":
    main()
