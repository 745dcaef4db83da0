"""Soak: does a long SAC run's memory stay flat once the replay buffer is full?

    python -m rlcore.benchmarks.soak                          # 1M steps, 1M buffer, UTD 0.02
    nice -n 10 python -m rlcore.benchmarks.soak --buffer-size 200000   # the committed result
    python -m rlcore.benchmarks.soak --steps 50000 --buffer-size 20000 \
        --out /tmp/soak.json                                  # a quick look

Trains rlcore's SAC on Hopper-v5 with the native back end through ``rlcore.train.train``
(the same composition root as the command line) for ``--steps`` env steps and records the
process's resident set size (RSS: psutil when installed, else ``VmRSS`` from
``/proc/self/status``) every ``--every`` env steps. The sample is taken inside the run:
the benchmark hands ``train`` a ``Logger`` subclass that reads RSS when the loop logs its
train-metrics row (``log_every`` is set to ``--every``), so each sample carries the exact
env step. Nothing in rlcore is changed for this.

Full SAC (one update per env step) for 1M steps takes hours on 2 cores, so the update rate
is a flag: ``--updates-per-step 0.02`` (the default) still exercises every part of the
loop (acting, buffer writes and sampling, updates, periodic evaluation and checkpoints that
include the buffer) at a cost that fits a background budget; the buffer's size and the
steps are flags too. The replay buffer is preallocated with ``torch.zeros`` (its pages are
resident from the start), so after the run is built a leak-free loop keeps RSS flat: the
table reports RSS at a few steps and the growth from the step the buffer filled (its ring
starts overwriting) to the end. The first sample (step 0) is taken after the imports,
before the run's envs, agent and buffer exist.

Prints a table, writes JSON (every (step, rss_mb) pair + settings + machine) to
``benchmarks/results/soak_sac_native.json`` and, when matplotlib is installed, the curve
next to it as a PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def rss_mb() -> float:
    """This process's resident set size in MiB."""
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except ImportError:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024  # kB
        raise RuntimeError("no psutil and no VmRSS in /proc/self/status") from None


def cpu_model() -> str:
    """``lscpu``'s model name (platform.processor() as a fallback)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def soak(args: argparse.Namespace) -> dict[str, Any]:
    """Run the training in this process, sampling RSS every ``args.every`` env steps."""
    import torch
    from hydra import compose, initialize_config_module

    import rlcore.train as train_module
    from rlcore.logging import Logger
    from rlcore.overrides import normalize_overrides

    samples: list[tuple[int, float, float]] = [(0, rss_mb(), 0.0)]
    start = time.perf_counter()

    class RssLogger(Logger):
        """Logger that also records RSS at each train-metrics row (one per ``log_every``)."""

        def log(self, metrics: dict[str, float], step: int) -> None:
            if "time/sps" in metrics:
                samples.append((int(step), rss_mb(), time.perf_counter() - start))
            super().log(metrics, step)

    overrides = [
        "algo=sac",
        "env=hopper",
        "env.backend=native",
        f"seed={args.seed}",
        f"total_steps={args.steps}",
        f"algo.buffer_size={args.buffer_size}",
        f"algo.updates_per_step={args.updates_per_step}",
        f"log_every={args.every}",
        f"eval_every={args.eval_every}",
        "eval_episodes=5",
        f"checkpoint_every={args.checkpoint_every}",
        "keep_agent_snapshots=false",
        "logger=quiet",
        f"threads={args.threads}",
    ]
    torch.set_num_threads(args.threads)
    with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
        cfg = compose("config", overrides=normalize_overrides(list(overrides)))
    original = train_module.Logger
    train_module.Logger = RssLogger  # benchmark-only: train() builds its logger by this name
    try:
        with tempfile.TemporaryDirectory(prefix="rlcore_soak_") as run_dir:
            final = train_module.train(cfg, run_dir)
    finally:
        train_module.Logger = original
    seconds = time.perf_counter() - start
    return {"samples": samples, "seconds": seconds, "final": final, "overrides": overrides}


def rss_at(samples: list[tuple[int, float, float]], step: int) -> float | None:
    """RSS of the last sample at or before ``step`` (None when there is none)."""
    before = [rss for s, rss, _ in samples if s <= step]
    return before[-1] if before else None


def summarise(result: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Print the table; RSS at chosen steps and the growth after the buffer filled."""
    samples = result["samples"]
    filled_at = min(args.buffer_size, args.steps)
    after = [(s, rss) for s, rss, _ in samples if s >= filled_at]
    growth = (after[-1][1] - after[0][1]) if len(after) >= 2 else None
    peak_after = max(rss for _, rss in after) if after else None
    marks = sorted({10_000, 100_000, filled_at, 500_000, args.steps} & set(range(args.steps + 1)))
    print(
        f"\nSAC Hopper-v5 native, {args.steps:,} env steps, buffer {args.buffer_size:,}, "
        f"{args.updates_per_step} updates/step, {result['seconds'] / 60:.1f} min, {cpu_model()}"
    )
    print("| env step | RSS (MiB) |\n|---:|---:|")
    for step in marks:
        value = rss_at(samples, step)
        if value is not None:
            print(f"| {step:,}{' (buffer full)' if step == filled_at else ''} | {value:.1f} |")
    if growth is not None:
        print(
            f"growth from the buffer filling ({after[0][0]:,}) to the end ({after[-1][0]:,}): "
            f"{growth:+.1f} MiB; peak after filling {peak_after:.1f} MiB"
        )
    return {
        "rss_at": {str(s): rss_at(samples, s) for s in marks},
        "buffer_full_step": filled_at,
        "growth_after_full_mb": growth,
        "peak_after_full_mb": peak_after,
    }


def plot(samples: list[tuple[int, float, float]], filled_at: int, path: Path) -> bool:
    """RSS against env steps as a PNG; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG")
        return False
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot([s for s, _, _ in samples], [r for _, r, _ in samples], marker=".", lw=1)
    ax.axvline(filled_at, color="grey", ls="--", lw=1, label="replay buffer full")
    ax.set_xlabel("env steps")
    ax.set_ylabel("RSS (MiB)")
    ax.set_title("rlcore SAC, Hopper-v5 native back end: resident memory")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")
    return True


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000, help="env steps")
    parser.add_argument("--buffer-size", type=int, default=1_000_000, help="replay capacity")
    parser.add_argument(
        "--updates-per-step", type=float, default=0.02, help="SAC gradient updates per env step"
    )
    parser.add_argument("--every", type=int, default=10_000, help="env steps between samples")
    parser.add_argument("--eval-every", type=int, default=100_000)
    parser.add_argument("--checkpoint-every", type=int, default=250_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path, default=RESULTS / "soak_sac_native.json")
    args = parser.parse_args(argv)

    print(
        f"soak budget: {args.steps:,} env steps, {args.updates_per_step} updates/step "
        f"(~{int(args.steps * args.updates_per_step):,} updates), buffer {args.buffer_size:,}, "
        f"RSS every {args.every:,} steps",
        flush=True,
    )
    result = soak(args)
    summary = summarise(result, args)
    png = args.out.with_suffix(".png")
    payload = {
        "benchmark": "soak: SAC Hopper-v5 native back end, RSS over env steps",
        "settings": {
            "steps": args.steps,
            "buffer_size": args.buffer_size,
            "updates_per_step": args.updates_per_step,
            "sample_every": args.every,
            "eval_every": args.eval_every,
            "checkpoint_every": args.checkpoint_every,
            "seed": args.seed,
            "threads": args.threads,
            "overrides": result["overrides"],
        },
        "machine": {
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "nice": os.nice(0),
            "loadavg_end": os.getloadavg(),
        },
        "seconds": result["seconds"],
        "final": result["final"],
        **summary,
        "samples": [
            {"step": s, "rss_mb": round(r, 2), "seconds": round(t, 1)}
            for s, r, t in result["samples"]
        ],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload["png"] = png.name if plot(result["samples"], summary["buffer_full_step"], png) else None
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out}")
    return payload


if __name__ == "__main__":
    main()
