"""Does SAC's bfloat16 speed mode learn as well as float32? Hopper-v5, same seeds.

    python -m rlcore.benchmarks.bf16_parity                        # 100k steps, seeds 0 1, 2 jobs
    python -m rlcore.benchmarks.bf16_parity --steps 20000 --seeds 0 --jobs 1   # a quick look

Trains rlcore's SAC (CleanRL defaults, ``configs/algo/sac.yaml``) on Hopper-v5 for
``--steps`` env steps per (mode, seed): ``float32`` (the default) and ``bf16``
(``algo.precision=bf16 algo.compile=true``, the fast mode the throughput suite times).
Evaluates every ``--eval-every`` steps (10 deterministic episodes). Reports per run the
final evaluation return, the mean of the last three evaluations (less noisy) and the
best, and whether every bf16 seed's final return lies inside the float32 seeds' range
(the issue's "within the seed spread of float32"). ``--jobs n`` runs n trainings at a
time with one torch thread each; interrupted runs resume from their checkpoints.
Prints a table and writes JSON to benchmarks/results/bf16_parity.json, with which speed
modes were native (``speed_modes``), then the report of the runs (``rlcore.report``:
report.md, report.json and PNG figures, one group per mode) to ``<JSON stem>_report/``
beside it (``--no-figures``: none).

Needs a machine where bf16 is native (a GPU with bf16, a CPU with AVX512-BF16 or AMX):
elsewhere rlcore runs precision=bf16 as float32 (``rlcore.speed``), so the comparison
would be float32 against itself, and emulated bf16 (``RLCORE_ALLOW_EMULATED_BF16=1``)
would take ~13x longer; the script stops with that message instead.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from rlcore.benchmarks.runs import report_dir, train_run, worker_pool, write_figures, write_result
from rlcore.speed import ALLOW_EMULATED_BF16, speed_report

RESULTS = Path(__file__).resolve().parent / "results"
# float32 eager as the reference (compile named: the default "auto" depends on the length)
MODES = {"float32": ["algo.compile=false"], "bf16": ["algo.precision=bf16", "algo.compile=true"]}


def check_bf16_native(report: dict) -> None:
    """Stop with the reason unless bf16 is native here (or emulation was asked for)."""
    if not report["bf16_native"] and not report["emulated_bf16_allowed"]:
        raise SystemExit(
            f"bf16 is not native on this machine ({report['bf16_reason']}): precision=bf16 "
            "would run float32 and this benchmark would compare float32 with itself. Run it "
            f"on a CPU with AVX512-BF16/AMX or a GPU ({ALLOW_EMULATED_BF16}=1 runs emulated "
            "bf16, ~13x slower)."
        )


def run_name(mode: str, seed: int) -> str:
    """The run directory's name (under ``--run-dir``) of one (mode, seed)."""
    return f"{mode}_seed{seed}"


def figures(run_dir: Path, seeds: list[int], out: Path) -> dict[str, Path]:
    """rlcore.report's report and figures of every (mode, seed) run, written to ``out``."""
    return write_figures([run_dir / run_name(m, s) for m in MODES for s in seeds], out)


def run_one(mode: str, seed: int, steps: int, eval_every: int, run_dir: Path, threads: int) -> dict:
    """Train one (mode, seed) SAC run on Hopper; its evaluation returns."""
    overrides = [
        "algo=sac",
        "env=hopper",
        f"seed={seed}",
        f"total_steps={steps}",
        f"eval_every={eval_every}",
        f"checkpoint_every={max(eval_every, steps // 4)}",
        *MODES[mode],
    ]
    evals, seconds = train_run(run_dir / run_name(mode, seed), overrides, threads)
    returns = [row["eval/return"] for row in evals]
    result = {
        "final": returns[-1],
        "last3": float(np.mean(returns[-3:])),
        "best": max(returns),
        "evals": returns,
        "seconds": seconds,
    }
    print(
        f"  {mode} seed {seed}: final {result['final']:.0f} last-3 {result['last3']:.0f} "
        f"best {result['best']:.0f} ({result['seconds']:.0f} s)",
        flush=True,
    )
    return result


def summarise(results: dict[str, dict], seeds: list[int]) -> dict:
    """Print the table; per-mode means and where bf16's finals fall against float32's."""
    fp32_finals = [results[f"float32_seed{s}"]["final"] for s in seeds]
    low, high = min(fp32_finals), max(fp32_finals)
    print(
        f"| mode | {' | '.join(f'seed {s} final / last-3' for s in seeds)} | mean final / last-3 |"
    )
    print("|" + "---|" * (2 + len(seeds)))
    summary = {}
    for mode in MODES:
        runs = [results[f"{mode}_seed{s}"] for s in seeds]
        cells = " | ".join(f"{r['final']:.0f} / {r['last3']:.0f}" for r in runs)
        summary[mode] = {
            "mean_final": float(np.mean([r["final"] for r in runs])),
            "mean_last3": float(np.mean([r["last3"] for r in runs])),
        }
        print(
            f"| {mode} | {cells} | {summary[mode]['mean_final']:.0f} / "
            f"{summary[mode]['mean_last3']:.0f} |"
        )
    bf16_finals = [results[f"bf16_seed{s}"]["final"] for s in seeds]
    inside = all(low <= r <= high for r in bf16_finals)
    not_below = all(r >= low for r in bf16_finals)
    print(
        f"bf16 finals {[round(r) for r in bf16_finals]} vs the float32 range [{low:.0f}, "
        f"{high:.0f}]: inside {inside}, none below it {not_below}"
    )
    return {
        "summary": summary,
        "float32_range": [low, high],
        "bf16_inside_float32_range": inside,
        "bf16_none_below_float32_range": not_below,
    }


def main(argv: list[str] | None = None) -> None:
    """Train the runs, print the table, write the JSON and the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--eval-every", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--jobs", type=int, default=2, help="trainings run at a time")
    parser.add_argument("--run-dir", type=Path, default=Path("runs/bench/bf16_parity"))
    parser.add_argument("--out", type=Path, default=RESULTS / "bf16_parity.json")
    parser.add_argument(
        "--no-figures", action="store_true", help="skip the rlcore.report report and figures"
    )
    args = parser.parse_args(argv)
    modes = speed_report("cpu")
    check_bf16_native(modes)

    jobs = [(mode, seed) for seed in args.seeds for mode in MODES]
    threads = 1 if args.jobs > 1 else 0
    with worker_pool(args.jobs) as pool:
        futures = {
            job: pool.submit(run_one, *job, args.steps, args.eval_every, args.run_dir, threads)
            for job in jobs
        }
        results = {f"{mode}_seed{seed}": f.result() for (mode, seed), f in futures.items()}

    report = summarise(results, args.seeds)
    figures_dir = None if args.no_figures else report_dir(args.out)
    write_result(
        args,
        {
            "runs": results,
            **report,
            "speed_modes": modes,
            "report": None if figures_dir is None else str(figures_dir),
        },
    )
    if figures_dir is not None:  # after the JSON, so a failing report cannot lose the table
        figures(args.run_dir, args.seeds, figures_dir)


if __name__ == "__main__":
    main()
