"""MOREC vs its base MOPO vs IQL: the final normalised score of each on locomotion and
NeoRL-2 datasets over several seeds, beside the data's own score (MOREC's claim: its
filter beats the base method it is built on).

    python -m rlcore.benchmarks.model_based --tasks hopper-medium DMSD --steps 10000 --jobs 2
    python -m rlcore.benchmarks.model_based --tasks RandomFrictionHopper --algos mopo morec \
        --set morec:algo.rollout_batch=200

Every task is a dataset (``TASKS``; ``--dataset-for TASK=ID`` changes one) with the
per-task settings of the references: MOPO's from OfflineRL-Kit's run_mopo.py, MOREC's from
polixir/morec's generate_tmuxp_morec_mopo.py (the nearest D4RL task where the reference
has none: Hopper's for RandomFrictionHopper, HalfCheetah-medium's for SafetyHalfCheetah;
on the NeoRL-2 tasks without a D4RL body, DMSD, Pipeline, Simglucose and RocketRecovery,
MOPO's 5-step rollouts and its default penalty, MOREC's defaults; the NeoRL clip 1e6 on
all NeoRL-2 tasks), IQL's defaults. MOREC's run of seed s rolls out in the ensemble MOPO's run of seed s fitted
(``algo.dynamics_from``, as the reference loads its MOPO runs' ensembles), so the two
differ only by the filter and its dynamics reward; without mopo in ``--algos`` MOREC fits
its own. ``--fit-epochs`` caps the ensemble's fit (a budget: the references fit until 5
epochs pass without a 1% holdout gain). Every run is a run directory under ``--run-dir``
(``<algo>_<task>_seed<seed>``, resumed when interrupted, read back when finished).
Prints the table, writes JSON (``--out``), then the report of the runs (``rlcore.report``).

Cost: a MOREC model step scores 10 candidates of every row with 40 discriminators (8e10
multiply-adds for the reference's 2,000 rows: about 4 s on a shared CPU core here, 4-7
minutes a round of 100-step rollouts once the policy stays in the data); on a CPU,
``--set morec:algo.rollout_batch=200`` is the budget the tables in benchmarks/README.md
state.
"""

from __future__ import annotations

import argparse
from concurrent.futures import Future, as_completed
from dataclasses import dataclass
from typing import Any

from rlcore.benchmarks.neorl2 import data_score
from rlcore.benchmarks.runs import (
    add_grid_arguments,
    check_configs,
    datasets_for,
    final_scores,
    finish_score_grid,
    overrides_by_name,
    run_method,
    worker_pool,
)

ALGOS = ("mopo", "morec", "iql")


@dataclass(frozen=True)
class Task:
    """A dataset to train on and each algorithm's per-task settings (overrides)."""

    env: str
    dataset: str
    mopo: tuple[str, ...] = ()
    morec: tuple[str, ...] = ()
    iql: tuple[str, ...] = ()


HOPPER_MOPO = ("algo.rollout_length=5", "algo.penalty_coef=5.0")  # hopper-medium(-expert)
HOPPER_MOREC = ("algo.penalty_coef=15.0", "algo.select=softmax")  # hopper-medium(-expert)
HALFCHEETAH_MOPO = ("algo.rollout_length=5", "algo.penalty_coef=0.5")  # halfcheetah-medium
HALFCHEETAH_MOREC = ("algo.penalty_coef=0.5", "algo.select=max")  # halfcheetah-medium
NEORL_CLIP = ("algo.state_clip=1e6",)  # the reference's clip on NeoRL tasks
NO_BODY_MOPO = ("algo.rollout_length=5",)  # NeoRL-2 tasks without a D4RL neighbour
TASKS = {
    "hopper-medium": Task("Hopper", "local/hopper/medium-mb-v0", HOPPER_MOPO, HOPPER_MOREC),
    # sampled actions of the expert SAC snapshot: run with hopper-medium-expert's settings
    "hopper-expert": Task("Hopper", "local/hopper/expert-mb-v0", HOPPER_MOPO, HOPPER_MOREC),
    "DMSD": Task("DMSD", "local/dmsd/high-v0", NO_BODY_MOPO, NEORL_CLIP),
    "RandomFrictionHopper": Task("RandomFrictionHopper", "local/randomfrictionhopper/high-v0",
                                 HOPPER_MOPO, (*HOPPER_MOREC, *NEORL_CLIP)),  # fmt: skip
    "SafetyHalfCheetah": Task("SafetyHalfCheetah", "local/safetyhalfcheetah/high-v0",
                              HALFCHEETAH_MOPO, (*HALFCHEETAH_MOREC, *NEORL_CLIP)),  # fmt: skip
    "Pipeline": Task("Pipeline", "local/pipeline/high-v0", NO_BODY_MOPO, NEORL_CLIP),
    "Simglucose": Task("Simglucose", "local/simglucose/high-v0", NO_BODY_MOPO, NEORL_CLIP),
    "RocketRecovery": Task("RocketRecovery", "local/rocketrecovery/high-v0", NO_BODY_MOPO,
                           NEORL_CLIP),  # fmt: skip
}
# the claim's table (two locomotion datasets, two NeoRL-2 tasks); the other NeoRL-2 tasks
# fill the NeoRL-2 table's MOPO and MOREC columns (--tasks names them)
CLAIM = ("hopper-medium", "hopper-expert", "DMSD", "RandomFrictionHopper")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the grid (MOREC after the MOPO run whose ensemble it uses), print the table,
    write the JSON and the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(CLAIM), choices=list(TASKS))
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    add_grid_arguments(parser, "model_based", steps=10_000)
    parser.add_argument("--fit-epochs", type=int, default=20,
                        help="cap on the dynamics ensemble's fit (epochs over the data)")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--dataset-for", nargs="*", default=[], metavar="TASK=ID")
    parser.add_argument("--set", nargs="*", default=[], metavar="ALGO:KEY=VALUE")
    args = parser.parse_args(argv)

    defaults = {task: spec.dataset for task, spec in TASKS.items()}
    datasets = datasets_for(args.tasks, defaults, args.dataset_for)
    extra = overrides_by_name(args.set, ALGOS, args.algos, "ALGO")
    evaluate = min(args.eval_every, args.steps)

    def name(algo: str, task: str) -> str:
        return f"{algo}_{task.lower()}"

    def settings(algo: str, task: str, seed: int) -> list[str]:
        """The per-task settings, the fit's cap, MOREC's ensemble source, ``--set``."""
        spec = TASKS[task]
        chosen = list({"mopo": spec.mopo, "morec": spec.morec, "iql": spec.iql}[algo])
        if algo != "iql":
            chosen.append(f"algo.max_dynamics_epochs={args.fit_epochs}")
        if algo == "morec" and "mopo" in args.algos:
            source = args.run_dir / f"{name('mopo', task)}_seed{seed}"
            chosen.append(f"algo.dynamics_from={source}")
        return [*chosen, *extra[algo]]

    def overrides(algo: str, task: str, seed: int) -> list[str]:
        return [f"algo={algo}", f"env={TASKS[task].env}", f"dataset={datasets[task]}",
                f"total_steps={args.steps}", f"eval_every={evaluate}",
                f"checkpoint_every={evaluate}", f"eval_episodes={args.eval_episodes}",
                *settings(algo, task, seed)]  # fmt: skip

    def submit(pool: Any, algo: str, task: str, seed: int) -> Future:
        return pool.submit(run_method, name(algo, task), seed, overrides(algo, task, seed),
                           args.run_dir, args.threads)  # fmt: skip

    first = [(a, t, s) for a in args.algos if a != "morec" or "mopo" not in args.algos
             for t in args.tasks for s in args.seeds]  # fmt: skip
    check_configs(parser, {f"{name(a, t)}_seed{s}": overrides(a, t, s)
                           for a in args.algos for t in args.tasks for s in args.seeds})  # fmt: skip
    with worker_pool(args.jobs) as pool:
        futures = {job: submit(pool, *job) for job in first}
        if "morec" in args.algos and "mopo" in args.algos:  # each after its MOPO run
            fitted = {futures[("mopo", t, s)]: (t, s) for t in args.tasks for s in args.seeds}
            for future in as_completed(fitted):
                task, seed = fitted[future]
                future.result()  # a failed MOPO run stops the grid here
                futures[("morec", task, seed)] = submit(pool, "morec", task, seed)
        results = {job: future.result() for job, future in futures.items()}

    rows = []
    for task in args.tasks:
        row: dict[str, Any] = {"task": task, "dataset": datasets[task],
                               "data": data_score(datasets[task])}  # fmt: skip
        for algo in args.algos:
            cell = final_scores([results[(algo, task, s)] for s in args.seeds])
            row[algo] = {**cell, "settings": settings(algo, task, args.seeds[0])}
        rows.append(row)
    finish_score_grid(args, rows, args.algos, [results[job]["run_dir"] for job in results])
    return {"rows": rows}


if __name__ == "__main__":
    main()
