"""Diffusion / flow policies: behaviour cloning on a dataset, then online fine-tuning with
DPPO, ReinFlow (flow base) and ResiP (diffusion base); Hopper by default, any task with
``--env`` (a robot task is scored by its success rate).

    python -m rlcore.benchmarks.finetune --dataset local/hopper/medium-v0 --env-steps 200000 \\
        --seeds 0 1 --jobs 2
    python -m rlcore.benchmarks.finetune --env PandaLift --dataset local/pandalift/mixed-v0 \\
        --seeds 0 1 2 --jobs 2 --out benchmarks/results/finetune_pandalift.json

1. Behaviour cloning (``algo=diffusion_bc`` and ``algo=flow_bc``, ``--pretrain-steps``
   gradient steps) -- skipped when the committed snapshots
   ``benchmarks/assets/<env>_{diffusion,flow}_bc.pt`` exist (``--retrain`` trains and
   rewrites them: agent-only, the EMA weights and the observation statistics).
2. The BC policies' score: ``--bc-eval-episodes`` deterministic episodes each (return,
   and the success rate on a task that reports success).
3. Fine-tuning from those snapshots, ``--env-steps`` simulator steps per run (DPPO and
   ReinFlow take chunks of H = 4 actions per loop step, so their loop runs
   env-steps / 4 chunks), ``--envs`` sub-envs, ``--rollout-env-steps`` simulator steps
   per sub-env per iteration; one rlcore run per method and seed (an interrupted
   benchmark resumes each from its checkpoint, a finished one is read back).

The table reports per method, in the task's score (the success rate where the task
reports success, else the return): the BC start, the evaluation after fine-tuning
(last evaluation, mean / std / [min, max] over seeds), the best evaluation, and the
median seconds per iteration (rollout + update, ``time/iteration_s``; both methods run
at the same time on the same machine, one torch thread each). It checks the papers'
claims: each fine-tuner ends clearly above its BC start (returns: by more than the
start's evaluation spread and 5% of it; success rates: by more than two binomial standard
errors of the start and 0.05), ReinFlow's iteration is much faster than DPPO's (paper: 11.7 s vs
99 s on Hopper), ResiP above its frozen base. The JSON records every seed's curve and the
CPU (lscpu model and flags).

The networks are 3 x 256 residual MLPs (the papers: 3 x 512), so the snapshots stay under
2 MB and the CPU budget fits; every other setting is the algorithm's default unless
``--set METHOD:KEY=VALUE`` changes it. ``--flatten-obs`` runs a goal-conditioned task
with its dict observation flattened (``env.flatten_obs=true env.backend=sync``), as its
demonstrations were recorded.
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


def asset_path(head: str, folder: Path = ASSETS, env: str = "hopper") -> Path:
    return folder / f"{env.lower()}_{'diffusion' if head == 'ddpm' else 'flow'}_bc.pt"


def env_overrides(env: str, flatten_obs: bool) -> list[str]:
    """The rlcore.train overrides that pick the task (a flattened goal task runs on the
    gymnasium back end: the native one keeps dict observations)."""
    return [f"env={env}", *(["env.flatten_obs=true", "env.backend=sync"] if flatten_obs else [])]


def score_key(rows: Sequence[dict[str, Any]]) -> str:
    """The score a table reports: the success rate where the task reports one."""
    return "eval/success_rate" if "eval/success_rate" in rows[-1] else "eval/return"


def pretrain(
    head: str,
    dataset: str,
    steps: int,
    run_root: Path,
    threads: int,
    folder: Path = ASSETS,
    hidden: str = "[256,256,256]",
    extra: Sequence[str] = (),
    env: str = "hopper",
    flatten_obs: bool = False,
) -> Path:
    """Train ``BC[head]`` on ``dataset`` (plus ``extra`` rlcore.train overrides) and write
    its agent-only snapshot to ``folder``."""
    overrides = [f"algo={BC[head]}", *env_overrides(env, flatten_obs), f"dataset={dataset}",
                 f"total_steps={steps}", f"algo.hidden={hidden}", f"eval_every={steps}",
                 "eval_episodes=10", *extra]  # fmt: skip
    result = run_method(BC[head], 0, overrides, run_root, threads)
    last = result["rows"][-1]
    source = {"step": steps, "dataset": dataset, "overrides": overrides,
              "eval_return": last["eval/return"]}  # fmt: skip
    if "eval/success_rate" in last:
        source["eval_success_rate"] = last["eval/success_rate"]
    return write_agent_snapshot(
        Path(result["run_dir"]),
        ("ema", "obs_normalizer", "updates"),
        asset_path(head, folder, env),
        source,
    )


def bc_return(
    path: Path, episodes: int, seed: int = 0, env_name: str = "hopper", flatten_obs: bool = False
) -> dict[str, float]:
    """Deterministic evaluation of a BC snapshot (chunks executed open loop): return, and
    ``success_rate`` on a task that reports success."""
    from rlcore.envs.make import make_vec_env
    from rlcore.evaluation import evaluate
    from rlcore.policies import load_agent

    agent = load_agent(path)
    torch.manual_seed(seed)  # the evaluation samplers start from random noise
    env = make_vec_env(env_name, min(episodes, 5), seed=seed, obs_history=agent.config.obs_history,
                       flatten_obs=flatten_obs)  # fmt: skip
    try:
        return evaluate(lambda o: agent.act(o, deterministic=True), env, episodes, seed)
    finally:
        env.close()


def method_overrides(method: str, args: argparse.Namespace, asset: Path) -> list[str]:
    """rlcore.train overrides of one fine-tuning run at the benchmark's env-step budget."""
    chunk = HORIZON if METHODS[method][1] else 1
    per_loop_step = args.envs * chunk  # simulator steps per loop step
    out = [f"algo={method}", *env_overrides(args.env, args.flatten_obs), f"algo.pretrained={asset}",
           f"algo.hidden={args.hidden}",
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
    parser.add_argument("--env", default="hopper", help="the task (rlcore.train's env=)")
    parser.add_argument(
        "--flatten-obs",
        action="store_true",
        help="flatten a goal task's dict observation (its demonstrations' form)",
    )
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
    parser.add_argument(
        "--bc-eval-episodes",
        type=int,
        default=None,
        help="episodes of the BC start's evaluation (default: --eval-episodes)",
    )
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
        if args.retrain or not asset_path(head, args.assets, args.env).is_file():
            print(f"behaviour cloning {BC[head]}: {args.pretrain_steps:,} steps", flush=True)
            pretrain(head, args.dataset, args.pretrain_steps, args.run_dir / "bc", args.threads,
                     args.assets, args.hidden, extra[BC[head]], args.env,
                     args.flatten_obs)  # fmt: skip
        assets[head] = asset_path(head, args.assets, args.env)
    bc_episodes = args.bc_eval_episodes or args.eval_episodes
    start = {head: bc_return(path, bc_episodes, 0, args.env, args.flatten_obs)
             for head, path in assets.items()}  # fmt: skip
    for head, result in start.items():
        success = f", success {result['success_rate']:.2f}" if "success_rate" in result else ""
        print(f"BC {BC[head]}: return {result['return']:.0f} +- {result['return_std']:.0f}"
              f"{success} ({bc_episodes} episodes)")  # fmt: skip

    overrides = {m: [*method_overrides(m, args, assets[METHODS[m][0]]), *extra[m]]
                 for m in args.methods}  # fmt: skip
    with worker_pool(args.jobs) as pool:
        futures = {
            (m, s): pool.submit(run_method, m, s, overrides[m], args.run_dir, args.threads)
            for s in args.seeds
            for m in args.methods
        }
        results = {key: future.result() for key, future in futures.items()}

    key = score_key(results[(args.methods[0], args.seeds[0])]["rows"])
    score = "success_rate" if key == "eval/success_rate" else "return"
    table: dict[str, dict[str, Any]] = {}
    for m in args.methods:
        chunk = HORIZON if METHODS[m][1] else 1
        seeds = []
        for s in args.seeds:
            rows = results[(m, s)]["rows"]
            curve = [(int(r["step"]) * chunk, float(r[key])) for r in rows]
            seconds = iteration_seconds(Path(results[(m, s)]["run_dir"]))
            seeds.append({"seed": s, "final": curve[-1][1], "best": max(v for _, v in curve),
                          "curve_env_steps": curve, "iteration_seconds": seconds})  # fmt: skip
        all_seconds = [x for r in seeds for x in r["iteration_seconds"]]
        table[m] = {
            "base": BC[METHODS[m][0]],
            "bc_return": start[METHODS[m][0]]["return"],
            "bc_score": start[METHODS[m][0]][score],
            "final": summary([r["final"] for r in seeds]),
            "best": summary([r["best"] for r in seeds]),
            "seconds_per_iteration": float(np.median(all_seconds)) if all_seconds else math.nan,
            "seeds": seeds,
            "overrides": overrides[m],
        }
    print(f"{args.env}, {args.dataset}; {args.env_steps:,} simulator steps per run, "
          f"{len(args.seeds)} seeds; evaluation {score.replace('_', ' ')}: mean +- std "
          f"[min, max]")  # fmt: skip
    print("| method | base | BC start | after fine-tuning | best eval | s / iteration |")
    print("|---|---|---|---|---|---|")
    digits = 2 if score == "success_rate" else 0
    for m, row in table.items():
        f = row["final"]
        print(f"| {m} | {row['base']} | {row['bc_score']:.{digits}f} | {f['mean']:.{digits}f} +- "
              f"{f['std']:.{digits}f} [{f['min']:.{digits}f}, {f['max']:.{digits}f}] | "
              f"{row['best']['mean']:.{digits}f} | {row['seconds_per_iteration']:.1f} |")  # fmt: skip
    verdicts = claims(table, start, score, bc_episodes)
    for line in verdicts:
        print(f"- {line}")
    payload = {"env": args.env, "dataset": args.dataset, "score": score,
               "bc": {BC[h]: r for h, r in start.items()}, "bc_eval_episodes": bc_episodes,
               "table": table, "claims": verdicts, "cpu": cpu_info()}  # fmt: skip
    write_result(args, payload)
    return payload


def improvement_margin(score: str, base: float, spread: float, episodes: int) -> float:
    """How far above its BC start a fine-tuner must end to improve "clearly": a return by
    more than the start's spread and 5% of it, a success rate by more than two binomial
    standard errors of the start (``episodes`` episodes) and 0.05."""
    if score == "success_rate":
        return max(2.0 * math.sqrt(base * (1.0 - base) / episodes), 0.05)
    return max(spread, 0.05 * abs(base))


def claims(
    table: dict[str, dict[str, Any]],
    start: dict[str, dict[str, float]],
    score: str = "return",
    episodes: int = 10,
) -> list[str]:
    """The papers' claims, measured on this table."""
    out = []
    digits = 2 if score == "success_rate" else 0
    for m in ("dppo", "reinflow", "resip"):
        if m not in table:
            continue
        head = METHODS[m][0]
        base, spread = start[head][score], start[head]["return_std"]
        margin = improvement_margin(score, base, spread, episodes)
        final = table[m]["final"]["mean"]
        verdict = "holds" if final > base + margin else "does NOT hold"
        out.append(f"{m} improves clearly on its BC start ({final:.{digits}f} vs {base:.{digits}f}, "
                   f"margin {margin:.{digits}f}): {verdict}")  # fmt: skip
    if "dppo" in table and "reinflow" in table:
        a, b = table["reinflow"]["seconds_per_iteration"], table["dppo"]["seconds_per_iteration"]
        verdict = "holds" if a < b else "does NOT hold"
        out.append(f"ReinFlow's iteration faster than DPPO's ({a:.1f} s vs {b:.1f} s, "
                   f"ratio {b / a:.1f}x; paper 99 / 11.7 = 8.5x): {verdict}")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
