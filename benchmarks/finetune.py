"""Diffusion / flow policies on Hopper: behaviour cloning on the recipe's medium dataset,
then online fine-tuning with DPPO, ReinFlow (flow base) and ResiP (diffusion base).

    python -m rlcore.benchmarks.finetune --dataset local/hopper/medium-v0 --env-steps 200000 \\
        --seeds 0 1 --jobs 2

1. Behaviour cloning (``algo=diffusion_bc`` and ``algo=flow_bc``, ``--pretrain-steps``
   gradient steps) -- skipped when the committed snapshots
   ``benchmarks/assets/hopper_{diffusion,flow}_bc.pt`` exist (``--retrain`` trains and
   rewrites them: agent-only, the EMA weights and the observation statistics).
2. The BC policies' return: ``--eval-episodes`` deterministic episodes each.
3. Fine-tuning from those snapshots, ``--env-steps`` simulator steps per run (DPPO and
   ReinFlow take chunks of H = 4 actions per loop step, so their loop runs
   env-steps / 4 chunks), ``--envs`` sub-envs, ``--rollout-env-steps`` simulator steps
   per sub-env per iteration; one rlcore run per method and seed (an interrupted
   benchmark resumes each from its checkpoint, a finished one is read back).

The table reports per method: the BC start, the evaluation return after fine-tuning
(last evaluation, mean / std / [min, max] over seeds), the best evaluation, and the
median seconds per iteration (rollout + update, ``time/iteration_s``; both methods run
at the same time on the same machine, one torch thread each). It checks the papers'
claims: each fine-tuner ends clearly above its BC start (by more than the start's
evaluation spread and 5% of it), ReinFlow's iteration is much faster than DPPO's (paper: 11.7 s vs
99 s on Hopper), ResiP above its frozen base. The JSON records every seed's curve and the
CPU (lscpu model and flags).

The networks are 3 x 256 residual MLPs (the papers: 3 x 512), so the snapshots stay under
2 MB and the CPU budget fits; every other setting is the algorithm's default unless
``--set METHOD:KEY=VALUE`` changes it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcore.benchmarks.runs import (
    cpu_info,
    overrides_by_name,
    run_method,
    worker_pool,
    write_agent_snapshot,
    write_result,
)

ASSETS = Path(__file__).resolve().parent / "assets"
RESULTS = Path(__file__).resolve().parent / "results"
BC = {"ddpm": "diffusion_bc", "flow": "flow_bc"}
# method -> (base head, acts in chunks of the head's horizon)
METHODS: dict[str, tuple[str, bool]] = {
    "dppo": ("ddpm", True),
    "reinflow": ("flow", True),
    "resip": ("ddpm", False),
}
HORIZON = 4


def asset_path(head: str, folder: Path = ASSETS) -> Path:
    return folder / f"hopper_{'diffusion' if head == 'ddpm' else 'flow'}_bc.pt"


def pretrain(
    head: str,
    dataset: str,
    steps: int,
    run_root: Path,
    threads: int,
    folder: Path = ASSETS,
    hidden: str = "[256,256,256]",
    extra: Sequence[str] = (),
) -> Path:
    """Train ``BC[head]`` on ``dataset`` (plus ``extra`` rlcore.train overrides) and write
    its agent-only snapshot to ``folder``."""
    overrides = [f"algo={BC[head]}", "env=hopper", f"dataset={dataset}", f"total_steps={steps}",
                 f"algo.hidden={hidden}", f"eval_every={steps}", "eval_episodes=10", *extra]  # fmt: skip
    result = run_method(BC[head], 0, overrides, run_root, threads)
    source = {"step": steps, "dataset": dataset, "overrides": overrides,
              "eval_return": result["rows"][-1]["eval/return"]}  # fmt: skip
    return write_agent_snapshot(
        Path(result["run_dir"]),
        ("ema", "obs_normalizer", "updates"),
        asset_path(head, folder),
        source,
    )


def bc_return(path: Path, episodes: int, seed: int = 0) -> dict[str, float]:
    """Deterministic evaluation of a BC snapshot (chunks executed open loop)."""
    from rlcore.envs.make import make_vec_env
    from rlcore.evaluation import evaluate
    from rlcore.policies import load_agent

    agent = load_agent(path)
    torch.manual_seed(seed)  # the evaluation samplers start from random noise
    env = make_vec_env("hopper", min(episodes, 5), seed=seed, obs_history=agent.config.obs_history)
    try:
        return evaluate(lambda o: agent.act(o, deterministic=True), env, episodes, seed)
    finally:
        env.close()


def method_overrides(method: str, args: argparse.Namespace, asset: Path) -> list[str]:
    """rlcore.train overrides of one fine-tuning run at the benchmark's env-step budget."""
    chunk = HORIZON if METHODS[method][1] else 1
    per_loop_step = args.envs * chunk  # simulator steps per loop step
    out = [f"algo={method}", "env=hopper", f"algo.pretrained={asset}", f"algo.hidden={args.hidden}",
           f"env.num_envs={args.envs}", f"algo.rollout_steps={args.rollout_env_steps // chunk}",
           f"total_steps={args.env_steps // chunk}",
           f"eval_every={max(args.eval_every_env_steps // chunk, per_loop_step)}",
           f"eval_episodes={args.eval_episodes}", "checkpoint_every_s=120"]  # fmt: skip
    return out  # the head settings not named here are the snapshot's (algo.pretrained)


def summary(values: list[float]) -> dict[str, float]:
    array = np.asarray(values, dtype=np.float64)
    return {"mean": float(array.mean()), "std": float(array.std()),
            "min": float(array.min()), "max": float(array.max())}  # fmt: skip


def iteration_seconds(run_dir: Path) -> list[float]:
    """Wall seconds of every iteration (rollout + update) the run logged."""
    from rlcore.logging import read_csv

    return [
        r["time/iteration_s"] for r in read_csv(run_dir / "time.csv") if "time/iteration_s" in r
    ]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="local/hopper/medium-v0")
    parser.add_argument("--pretrain-steps", type=int, default=50_000)
    parser.add_argument("--retrain", action="store_true", help="train the BC snapshots again")
    parser.add_argument("--assets", type=Path, default=ASSETS, help="folder of the BC snapshots")
    parser.add_argument("--hidden", default="[256,256,256]", help="residual MLP widths")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--env-steps", type=int, default=200_000, help="simulator steps per run")
    parser.add_argument("--envs", type=int, default=10)
    parser.add_argument("--rollout-env-steps", type=int, default=1000,
                        help="simulator steps per sub-env per iteration")  # fmt: skip
    parser.add_argument("--eval-every-env-steps", type=int, default=20_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--set", nargs="*", default=[], metavar="METHOD:KEY=VALUE",
                        help="an override of one method's runs; METHOD may also be a BC "
                             "pre-training (diffusion_bc, flow_bc)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/bench/finetune"))
    parser.add_argument("--out", type=Path, default=RESULTS / "finetune.json")
    args = parser.parse_args(argv)
    heads = sorted({METHODS[m][0] for m in args.methods})
    names = [*METHODS, *BC.values()]
    extra = overrides_by_name(args.set, names, [*args.methods, *(BC[h] for h in heads)], "METHOD")

    assets = {}
    for head in heads:
        if args.retrain or not asset_path(head, args.assets).is_file():
            print(f"behaviour cloning {BC[head]}: {args.pretrain_steps:,} steps", flush=True)
            pretrain(head, args.dataset, args.pretrain_steps, args.run_dir / "bc", args.threads,
                     args.assets, args.hidden, extra[BC[head]])  # fmt: skip
        assets[head] = asset_path(head, args.assets)
    start = {head: bc_return(path, args.eval_episodes) for head, path in assets.items()}
    for head, result in start.items():
        print(f"BC {BC[head]}: return {result['return']:.0f} +- {result['return_std']:.0f}")

    overrides = {m: [*method_overrides(m, args, assets[METHODS[m][0]]), *extra[m]]
                 for m in args.methods}  # fmt: skip
    with worker_pool(args.jobs) as pool:
        futures = {
            (m, s): pool.submit(run_method, m, s, overrides[m], args.run_dir, args.threads)
            for s in args.seeds
            for m in args.methods
        }
        results = {key: future.result() for key, future in futures.items()}

    table: dict[str, dict[str, Any]] = {}
    for m in args.methods:
        chunk = HORIZON if METHODS[m][1] else 1
        seeds = []
        for s in args.seeds:
            rows = results[(m, s)]["rows"]
            curve = [(int(r["step"]) * chunk, float(r["eval/return"])) for r in rows]
            seconds = iteration_seconds(Path(results[(m, s)]["run_dir"]))
            seeds.append({"seed": s, "final": curve[-1][1], "best": max(v for _, v in curve),
                          "curve_env_steps": curve, "iteration_seconds": seconds})  # fmt: skip
        all_seconds = [x for r in seeds for x in r["iteration_seconds"]]
        table[m] = {
            "base": BC[METHODS[m][0]],
            "bc_return": start[METHODS[m][0]]["return"],
            "final": summary([r["final"] for r in seeds]),
            "best": summary([r["best"] for r in seeds]),
            "seconds_per_iteration": float(np.median(all_seconds)) if all_seconds else math.nan,
            "seeds": seeds,
            "overrides": overrides[m],
        }
    print(f"Hopper-v5, {args.dataset}; {args.env_steps:,} simulator steps per run, "
          f"{len(args.seeds)} seeds; evaluation return: mean +- std [min, max]")  # fmt: skip
    print("| method | base | BC start | after fine-tuning | best eval | s / iteration |")
    print("|---|---|---|---|---|---|")
    for m, row in table.items():
        f = row["final"]
        print(f"| {m} | {row['base']} | {row['bc_return']:.0f} | {f['mean']:.0f} +- "
              f"{f['std']:.0f} [{f['min']:.0f}, {f['max']:.0f}] | {row['best']['mean']:.0f} | "
              f"{row['seconds_per_iteration']:.1f} |")  # fmt: skip
    verdicts = claims(table, start)
    for line in verdicts:
        print(f"- {line}")
    payload = {"bc": {BC[h]: r for h, r in start.items()}, "table": table, "claims": verdicts,
               "cpu": cpu_info()}  # fmt: skip
    write_result(args, payload)
    return payload


def claims(table: dict[str, dict[str, Any]], start: dict[str, dict[str, float]]) -> list[str]:
    """The papers' claims, measured on this table."""
    out = []
    for m in ("dppo", "reinflow", "resip"):
        if m not in table:
            continue
        head = METHODS[m][0]
        base, spread = start[head]["return"], start[head]["return_std"]
        margin = max(spread, 0.05 * abs(base))  # "clearly": beyond the start's spread and 5%
        final = table[m]["final"]["mean"]
        verdict = "holds" if final > base + margin else "does NOT hold"
        out.append(f"{m} improves clearly on its BC start ({final:.0f} vs {base:.0f} +- "
                   f"{spread:.0f}, margin {margin:.0f}): {verdict}")  # fmt: skip
    if "dppo" in table and "reinflow" in table:
        a, b = table["reinflow"]["seconds_per_iteration"], table["dppo"]["seconds_per_iteration"]
        verdict = "holds" if a < b else "does NOT hold"
        out.append(f"ReinFlow's iteration faster than DPPO's ({a:.1f} s vs {b:.1f} s, "
                   f"ratio {b / a:.1f}x; paper 99 / 11.7 = 8.5x): {verdict}")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
