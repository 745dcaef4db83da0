"""Every offline algorithm of the library on NeoRL-2's tasks: the final NeoRL-2-normalised
score of each (algorithm, task) over several seeds, beside the data's own score.

    python -m rlcore.offline.neorl2_recipe env=DMSD dataset_id=local/dmsd/high-v0   # data first
    python -m rlcore.benchmarks.neorl2 --tasks DMSD --steps 20000 --seeds 0 1 2 --jobs 2
    python -m rlcore.benchmarks.neorl2 --tasks DMSD RandomFrictionHopper --algos iql td3_bc

Each task trains on ``--dataset-for TASK=ID`` (default ``local/<task>/high-v0``: the data
recipe's training split, ``rlcore.offline.neorl2_recipe``) with every algorithm's own
defaults (``configs/algo/<algo>.yaml``; ``--set ALGO:KEY=VALUE`` adds an override, which
the JSON records) for ``--steps`` gradient steps, evaluating every ``--eval-every`` steps
(``--eval-episodes`` episodes). NeoRL-2 normalises with its random / expert returns
(``rlcore.evaluation.D4RL_REF_SCORES``). Every run is a run directory under ``--run-dir``
(``<algo>_<task>_seed<seed>``: resumed when interrupted, read back when finished).
Prints the table, writes JSON (``--out``), then the report of the runs (``rlcore.report``).
"""

from __future__ import annotations

import argparse
from typing import Any

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

TASKS = ("DMSD", "RandomFrictionHopper", "SafetyHalfCheetah", "Pipeline", "Simglucose",
         "RocketRecovery")  # fmt: skip
# relative cost of one gradient step on CPU (measured, 1 thread): orders the job queue
COST = {"iql": 1.0, "riql": 1.3, "td3_bc": 0.7, "awac": 1.0, "rebrac": 5.0, "cql": 20.0,
        "cal_ql": 20.0, "mopo": 3.0, "morec": 4.0, "diffusion_bc": 1.5, "flow_bc": 1.5}  # fmt: skip
# the generative family's algorithms that learn from a dataset alone (DPPO, ReinFlow, ResiP
# fine-tune online); FISOR (the safe family) is left out: no NeoRL-2 dataset here holds a
# cost (SafetyHalfCheetah's recipe keeps only trajectories under the speed limit)
BEHAVIOUR_CLONING = ("diffusion_bc", "flow_bc")


def offline_algorithms() -> list[str]:
    """The catalog's offline family (``rlcore.catalog``) and the diffusion / flow policies
    cloned from the data (``BEHAVIOUR_CLONING``): what ``--algos`` takes."""
    from rlcore import catalog

    offline = [name for name, entry in catalog.ALGORITHMS.items() if entry.family == "offline"]
    return [*offline, *BEHAVIOUR_CLONING]


def data_score(dataset_id: str) -> float:
    """The normalised mean return of a dataset's episodes (the pinned reference returns of
    its task, else its own metadata's: ``rlcore.offline.normalized_score``)."""
    from rlcore.offline import load_dataset, normalized_score

    dataset = load_dataset(dataset_id)
    return float(normalized_score(dataset.episode_returns().mean(), dataset_id, dataset))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the grid, print the table, write the JSON and the report."""
    algos = offline_algorithms()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["DMSD"], choices=TASKS)
    parser.add_argument("--algos", nargs="+", default=algos, choices=algos)
    add_grid_arguments(parser, "neorl2", steps=20_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--dataset-for", nargs="*", default=[], metavar="TASK=ID")
    parser.add_argument("--set", nargs="*", default=[], metavar="ALGO:KEY=VALUE")
    args = parser.parse_args(argv)

    defaults = {task: f"local/{task.lower()}/high-v0" for task in args.tasks}
    datasets = datasets_for(args.tasks, defaults, args.dataset_for)
    extra = overrides_by_name(args.set, algos, args.algos, "ALGO")
    jobs = [(a, t, s) for t in args.tasks for a in args.algos for s in args.seeds]
    jobs.sort(key=lambda job: -COST.get(job[0], 1.0))  # longest first

    def overrides(algo: str, task: str) -> list[str]:
        return [f"algo={algo}", f"env={task}", f"dataset={datasets[task]}",
                f"total_steps={args.steps}", f"eval_every={min(args.eval_every, args.steps)}",
                f"checkpoint_every={min(args.eval_every, args.steps)}",
                f"eval_episodes={args.eval_episodes}", *extra[algo]]  # fmt: skip

    check_configs(parser, {f"{a}_{t.lower()}": overrides(a, t) for a, t, _ in jobs})
    with worker_pool(args.jobs) as pool:
        futures = {
            (a, t, s): pool.submit(
                run_method, f"{a}_{t.lower()}", s, overrides(a, t), args.run_dir, args.threads
            )  # fmt: skip
            for a, t, s in jobs
        }
        results = {job: future.result() for job, future in futures.items()}

    rows = []
    for task in args.tasks:
        row: dict[str, Any] = {"task": task, "dataset": datasets[task],
                               "data": data_score(datasets[task])}  # fmt: skip
        for algo in args.algos:
            cell = final_scores([results[(algo, task, s)] for s in args.seeds])
            row[algo] = {**cell, "overrides": extra[algo]}
        rows.append(row)
    finish_score_grid(args, rows, args.algos, [results[job]["run_dir"] for job in jobs])
    return {"rows": rows}


if __name__ == "__main__":
    main()
