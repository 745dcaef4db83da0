"""Pieces shared by the benchmarks that train rlcore runs (offline, bf16_parity)."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h): signal this process when its parent dies


def train_run(
    run_dir: Path, overrides: list[str], threads: int
) -> tuple[list[dict[str, float]], float]:
    """Compose rlcore's config with ``overrides`` (quiet logger, ``threads`` torch threads
    when > 0) and train in ``run_dir``, resuming from its checkpoint when an earlier
    benchmark was interrupted. Returns (the run's eval.csv rows, wall seconds)."""
    from hydra import compose, initialize_config_module

    from rlcore.logging import read_csv
    from rlcore.train import train

    overrides = [*overrides, "keep_agent_snapshots=false", "logger=quiet"]
    if threads > 0:
        overrides.append(f"threads={threads}")
    if (run_dir / "checkpoints" / "latest.pt").is_file():
        overrides.append(f"resume={run_dir}")
    with initialize_config_module(config_module="configs", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    start = time.perf_counter()
    train(cfg, run_dir)
    return read_csv(run_dir / "eval.csv"), time.perf_counter() - start


def _exit_with_parent(parent_pid: int) -> None:
    """Worker initialiser: on Linux the kernel sends this worker SIGTERM when the benchmark
    process dies, so a killed benchmark (``kill``, not only Ctrl-C, which reaches the whole
    process group) leaves no training running on the cores it held."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def worker_pool(jobs: int) -> ProcessPoolExecutor:
    """``jobs`` spawned worker processes that exit when the benchmark process dies."""
    return ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=get_context("spawn"),
        initializer=_exit_with_parent,
        initargs=(os.getpid(),),
    )


def write_result(args: argparse.Namespace, payload: dict[str, Any]) -> None:
    """``payload`` plus the command-line arguments as JSON to ``args.out``."""
    plain = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**payload, "args": plain}, indent=2))
    print(f"wrote {args.out}")
