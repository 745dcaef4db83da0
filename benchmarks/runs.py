"""Pieces shared by the benchmarks that train rlcore runs (offline, o2o, snapshot,
bf16_parity, sac_hopper_vs_sb3, corruption, neorl2, model_based): training one run dir,
worker processes, the CPU record, the JSON, score tables, and the figures,
which always come from ``rlcore.report`` (no benchmark draws its own)."""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
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
    benchmark was interrupted. A run dir with run files but no checkpoint (a run killed
    before its first checkpoint) is emptied and trained afresh: rlcore.train refuses to
    write a new run over an old one, and there is nothing to resume from.
    Returns (the run's eval.csv rows, wall seconds)."""
    from hydra import compose, initialize_config_module

    from rlcore.logging import read_csv
    from rlcore.overrides import normalize_overrides
    from rlcore.run_dir import existing_run_markers
    from rlcore.train import train

    overrides = [*overrides, "keep_agent_snapshots=false", "logger=quiet"]
    if threads > 0:
        overrides.append(f"threads={threads}")
    if (run_dir / "checkpoints" / "latest.pt").is_file():
        overrides.append(f"resume={run_dir}")
    elif existing_run_markers(run_dir):
        print(
            f"  {run_dir} holds run files ({', '.join(existing_run_markers(run_dir))}) but no "
            "checkpoint (killed before its first one): removing them and starting afresh",
            flush=True,
        )
        clear_dir(run_dir)
    with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
        cfg = compose("config", overrides=normalize_overrides(list(overrides)))
    start = time.perf_counter()
    train(cfg, run_dir)
    return read_csv(run_dir / "eval.csv"), time.perf_counter() - start


def run_method(
    method: str, seed: int, overrides: list[str], run_root: Path, threads: int
) -> dict[str, Any]:
    """Train (or resume, or read back when finished) ``run_root/<method>_seed<seed>``:
    its eval.csv rows, wall seconds summed over every invocation that trained it (a
    finished run that a later invocation only reads back keeps its training time)."""
    _exit_if_orphaned()  # the benchmark was killed: no queued run starts
    run_dir = run_root / f"{method}_seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    ledger = run_dir / "bench_seconds.txt"
    before = float(ledger.read_text()) if ledger.is_file() else 0.0
    try:
        rows, seconds = train_run(run_dir, [*overrides, f"seed={seed}"], threads)
        ledger.write_text(repr(before + seconds))
    finally:
        # the benchmark died during the run (its SIGTERM stopped the run at a checkpoint):
        # exit rather than wait forever for work on a queue nobody feeds
        _exit_if_orphaned()
    return {"rows": rows, "seconds": before + seconds, "run_dir": str(run_dir)}


def write_agent_snapshot(
    run_dir: Path, agent_keys: Sequence[str], out: Path, source: dict[str, Any]
) -> Path:
    """Strip ``run_dir``'s latest checkpoint to an agent-only snapshot (the benchmark
    assets): the run's format, algo, config, spaces and observation statistics, the agent
    entries ``agent_keys`` (no optimisers, no target networks) and ``source`` (where it
    came from). Written with ``torch.save`` to ``out``."""
    import torch

    state = torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=False)
    missing = [key for key in agent_keys if key not in state["agent"]]
    if missing:
        raise KeyError(f"{run_dir}'s agent has no {missing}; it has {sorted(state['agent'])}")
    snapshot = {key: state[key] for key in ("format", "algo", "config", "spaces", "obs_normalizer")}
    snapshot["agent"] = {key: state["agent"][key] for key in agent_keys}
    snapshot["source"] = source
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(snapshot, out)
    return out


def check_configs(parser: argparse.ArgumentParser, runs: dict[str, list[str]]) -> None:
    """Compose and settle every run's config (``{label: overrides}``) before the grid trains
    any: an unknown key or a bad value in one ``--set`` stops the command line, not that
    run hours in (the dataset, env and files are checked when each run starts)."""
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from rlcore import catalog
    from rlcore.overrides import normalize_overrides
    from rlcore.settings import algorithm_name, settle

    with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
        for label, overrides in runs.items():
            try:
                cfg = compose("config", overrides=normalize_overrides(list(overrides)))
                cfg_dict = OmegaConf.to_container(cfg, resolve=True)
                algorithm = catalog.get(algorithm_name(cfg_dict))
                settle(cfg_dict, algorithm.config_class, algorithm.pretrained_head)
            except (HydraException, ValueError) as error:
                parser.error(f"{label}: {str(error).splitlines()[0]}")


def overrides_by_name(
    items: Sequence[str], known: Sequence[str], selected: Sequence[str], what: str
) -> dict[str, list[str]]:
    """``--set NAME:KEY=VALUE`` items as {selected name: [KEY=VALUE, ...]}; names that are
    known but not selected this time are ignored (one command line serves per-method
    invocations), anything else stops with the expected form."""
    extra: dict[str, list[str]] = {name: [] for name in selected}
    for item in items:
        name, _, override = item.partition(":")
        if name not in known or "=" not in override:
            raise SystemExit(f"--set expects {what}:KEY=VALUE with {what} in {list(known)}")
        if name in extra:
            extra[name].append(override)
    return extra


def seeds_by_name(
    items: Sequence[str],
    known: Sequence[str],
    selected: Sequence[str],
    seeds: Sequence[int],
    what: str,
) -> dict[str, list[int]]:
    """``--seeds-for NAME=N`` items: NAME runs only the first N of ``seeds`` (the others
    run all of them); names known but not selected are ignored."""
    out = {name: list(seeds) for name in selected}
    for item in items:
        name, _, count = item.partition("=")
        if name not in known or not count.isdigit():
            raise SystemExit(f"--seeds-for expects {what}=N with {what} in {list(known)}")
        if name in out:
            out[name] = list(seeds)[: int(count)]
    return out


def read_run(run_dir: Path) -> dict[str, Any]:
    """A run dir's eval.csv rows and its benchmark time ledger, without training
    (``--read-only`` tables)."""
    from rlcore.logging import read_csv

    if not (run_dir / "eval.csv").is_file():
        raise SystemExit(f"--read-only: {run_dir} has no eval.csv")
    ledger = run_dir / "bench_seconds.txt"
    seconds = float(ledger.read_text()) if ledger.is_file() else math.nan
    return {"rows": read_csv(run_dir / "eval.csv"), "seconds": seconds, "run_dir": str(run_dir)}


def cpu_info() -> dict[str, str]:
    """lscpu's model name and flags (benchmarks record the CPU they ran on)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"model": platform.processor(), "flags": ""}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {
        k: fields.get(name, "").strip() for k, name in (("model", "Model name"), ("flags", "Flags"))
    }


def clear_dir(path: Path) -> None:
    """Remove everything inside ``path`` (the folder itself stays)."""
    for child in path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


_PARENT_PID: int | None = None  # a worker's benchmark process (set by _exit_with_parent)


def _exit_if_orphaned() -> None:
    """In a benchmark's worker whose benchmark process is gone: exit at once."""
    if _PARENT_PID is not None and os.getppid() != _PARENT_PID:
        os._exit(1)


def _exit_with_parent(parent_pid: int) -> None:
    """Worker initialiser: on Linux the kernel sends this worker SIGTERM when the benchmark
    process dies, so a killed benchmark (``kill``, not only Ctrl-C, which reaches the whole
    process group) leaves no training running on the cores it held. (The run stops at its
    next checkpoint; ``run_method`` then refuses the runs still queued.)"""
    global _PARENT_PID
    _PARENT_PID = parent_pid
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def die_with_parent() -> None:
    """In a process the benchmark started: SIGTERM when the benchmark process dies (a
    ``kill`` of the benchmark alone leaves nothing running on the cores it held)."""
    _exit_with_parent(os.getppid())


def worker_pool(jobs: int) -> ProcessPoolExecutor:
    """``jobs`` spawned worker processes that exit when the benchmark process dies."""
    return ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=get_context("spawn"),
        initializer=_exit_with_parent,
        initargs=(os.getpid(),),
    )


def write_result(args: argparse.Namespace, payload: dict[str, Any]) -> None:
    """``payload`` plus the command-line arguments (paths, lists of paths as strings) as
    JSON to ``args.out``."""

    def plain_value(value: Any) -> Any:
        if isinstance(value, list):
            return [plain_value(v) for v in value]
        return str(value) if isinstance(value, Path) else value

    plain = {k: plain_value(v) for k, v in vars(args).items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**payload, "args": plain}, indent=2))
    print(f"wrote {args.out}")


NORMALIZED = "eval/normalized_score"


def count(least: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer of at least ``least`` (a bad value is a usage error
    before any training, not a failure in the first run, or the last)."""

    def parse(text: str) -> int:
        value = int(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"{value}: at least {least}")
        return value

    parse.__name__ = "integer"  # argparse's "invalid integer value: ..."
    return parse


def add_grid_arguments(parser: argparse.ArgumentParser, name: str, steps: int) -> None:
    """The options of a benchmark that trains a grid of runs: ``--steps`` gradient steps,
    ``--eval-every``, ``--seeds``, ``--jobs`` trainings at a time of ``--threads`` torch
    threads, ``--run-dir`` (default runs/bench/<name>), ``--out`` (default
    benchmarks/results/<name>.json), ``--no-figures``."""
    results = Path(__file__).resolve().parent / "results"
    parser.add_argument("--steps", type=count(1), default=steps, help="gradient steps per run")
    parser.add_argument("--eval-every", type=count(1), default=5_000)
    parser.add_argument("--seeds", type=count(0), nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=count(1), default=1, help="trainings run at a time")
    parser.add_argument("--threads", type=count(1), default=1, help="torch threads per training")
    parser.add_argument("--run-dir", type=Path, default=Path("runs/bench") / name)
    parser.add_argument("--out", type=Path, default=results / f"{name}.json")
    parser.add_argument("--no-figures", action="store_true", help="skip the rlcore.report")


def datasets_for(tasks: Sequence[str], defaults: dict[str, str], items: Sequence[str]) -> dict[str, str]:
    """Each task's dataset id: ``defaults``, changed by ``--dataset-for TASK=ID`` items."""
    datasets = {task: defaults[task] for task in tasks}
    for item in items:
        task, _, dataset_id = item.partition("=")
        if task not in datasets or not dataset_id:
            raise SystemExit(f"--dataset-for expects TASK=ID with TASK in {list(tasks)}: {item!r}")
        datasets[task] = dataset_id
    return datasets


def final_scores(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A table cell from ``run_method`` results (one per seed): their final normalised
    scores, mean, std and training seconds summed."""
    scores = [float(run["rows"][-1][NORMALIZED]) for run in runs]
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((x - mean) ** 2 for x in scores) / len(scores))
    return {"scores": scores, "mean": mean, "std": std,
            "seconds": float(sum(run["seconds"] for run in runs))}  # fmt: skip


def finish_score_grid(
    args: argparse.Namespace, rows: list[dict[str, Any]], methods: Sequence[str],
    run_dirs: Sequence[str | Path],
) -> None:
    """A score-table benchmark's end: print the table, write the JSON (``args.out``), then
    the report of ``run_dirs`` unless ``args.no_figures``."""
    print_score_table(rows, methods)
    report = None if args.no_figures else report_dir(args.out)
    write_result(args, {"rows": rows, "cpu": cpu_info(),
                        "report": None if report is None else str(report)})  # fmt: skip
    if report is not None:
        write_figures(sorted(Path(run_dir) for run_dir in run_dirs), report)


def print_score_table(rows: Sequence[dict[str, Any]], methods: Sequence[str]) -> None:
    """A markdown table: one row per task, its data's score, each method's mean +- std."""
    print("| task | data | " + " | ".join(methods) + " |")
    print("|---|---|" + "---|" * len(methods))
    for row in rows:
        cells = " | ".join(f"{row[m]['mean']:.1f} +- {row[m]['std']:.1f}" for m in methods)
        print(f"| {row['task']} | {row['data']:.1f} | {cells} |")


def report_dir(out: Path) -> Path:
    """Where a benchmark writing JSON to ``out`` puts its report: ``<out stem>_report/``."""
    return out.with_name(out.stem + "_report")


def write_figures(
    run_dirs: Sequence[Path], out: Path, reps: int = 2000, x: str = "step"
) -> dict[str, Path]:
    """The report of ``run_dirs`` (report.md, report.json, learning-curve, final-score and
    performance-profile PNGs) written into ``out`` by ``rlcore.report``, the one place
    figures are drawn. The metric is ``eval/normalized_score`` when every run logged it
    (offline runs), else ``eval/return``. report.md quotes the equivalent
    ``python -m rlcore.report`` command, which redraws the same files. ``x`` is the eval
    column the curves and the AUC run along (``rlcore.report --x``)."""
    from rlcore import report

    runs = report.load_runs(list(run_dirs))
    metric = NORMALIZED if all(run.has_metric(NORMALIZED) for run in runs) else "eval/return"
    runs, skipped = report.split_by_metric(runs, metric)
    if skipped:
        print(f"note: report skips {len(skipped)} run(s) without '{metric}' values")
    results = report.aggregate(report.group_runs(runs), metric, reps=reps, x=x)
    command = " ".join(
        ["python -m rlcore.report", *(shlex.quote(str(d)) for d in run_dirs)]
        + ["--metric", metric, "--reps", str(reps), "--out", shlex.quote(str(out))]
        + (["--x", x] if x != "step" else [])
    )
    files = report.write_report(results, out, metric, reps=reps, sources=run_dirs, command=command)
    print(f"wrote the report ({metric}, {len(results)} groups) and figures to {out}")
    return files
