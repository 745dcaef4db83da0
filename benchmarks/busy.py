"""Training speed next to another CPU-bound process: rlcore's default ``threads: auto``
(one torch thread) against torch on every core, each on a quiet and on a busy machine.

    python -m rlcore.benchmarks.busy                   # the docs' table (~15-20 min, 2 idle cores)
    python -m rlcore.benchmarks.busy --quick           # tiny sizes (~2-4 min)
    python -m rlcore.benchmarks.busy --quick --workloads sac   # < 1 min
    python -m rlcore.benchmarks.busy --workloads sac iql --rounds 3
    python -m rlcore.benchmarks.busy --competitor-nice 10      # the competitor niced

Four cells per workload: {quiet, busy} x {default (``threads`` not given, i.e. auto),
``threads=<all cores>`` (torch's own default, the old one)}. "busy" is one competitor
process, a pure-Python spin loop at normal priority (``--competitor-nice`` renices it),
started by the benchmark before the run and killed after it. Each run is ``rlcore.train``
in a fresh process (forked from a server that imported rlcore once, so a cell does not
pay the imports) with a cap of ``--seconds`` counted from its first logged speed; a run
still going then is stopped (SIGTERM: it checkpoints and ends) and its speed is what it
logged until then. The speed is the
loop's, read from ``time.csv`` between its first and last row (``time/sps`` or
``time/updates_per_s``: seconds since the loop started = step / rate), so set-up, the
random warm-up, the first rollout and the final evaluation are left out.

Workloads (Hopper-v5, default hyper-parameters unless named):

* ``sac``: SAC, UTD 1, env steps/s after ``learning_starts``.
* ``ppo``: PPO on 4 envs (native back end), minibatches of 64 (its Hopper default on one
  env), env steps/s over rollouts 2.. (updates included).
* ``ppo_sync`` / ``ppo_async``: the same on gymnasium's sync / async back ends.
* ``iql``: IQL offline updates/s on a random Hopper dataset the benchmark records first
  (``rlcore.offline.recording.collect``, in a temporary Minari root; no download).
* ``dppo``: DPPO fine-tuning ``benchmarks/assets/hopper_diffusion_bc.pt`` (DDPM, 20
  denoising steps, chunks of 4, 3x256 residual MLP) on 2 envs; chunk steps/s over
  iterations 2.. (1 chunk = 4 env steps).
* ``ppo_mjx`` (only when named: JAX and mujoco-mjx, and 30-130 s to compile MJX's step on
  the CPU): PPO on 16 envs on ``env.backend=mjx`` (JAX's CPU device).

The table gives speeds (medians over ``--rounds``) and ratios: busy / quiet for each
setting, default / all cores on the quiet machine (what one thread gives up there), and
"share" = default busy / all-cores quiet: the share of the old quiet-machine speed a run
keeps beside a busy process (a fair share with one competitor is 0.5). The JSON
(``--out``, default ``benchmarks/results/busy.json``) holds every sample, the threads
each run used (its ``meta.json``), lscpu's model and flags, the load averages before and
after, and the command.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import multiprocessing
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rlcore.benchmarks.finetune import asset_path
from rlcore.benchmarks.runs import cpu_info, die_with_parent
from rlcore.benchmarks.throughput.common import fmt, markdown_table, ratio, write_json

RESULTS = Path(__file__).resolve().parent / "results"
DATASET = "busy/hopper-random-v0"
# {quiet, busy} x {default threads (auto), threads=<every CPU>}
CELLS = ("quiet/default", "quiet/all", "busy/default", "busy/all")
SPIN = "while True:\n    pass\n"  # the competitor: one core, pure Python, no I/O
STOP_GRACE_S = 20.0  # after the cap, seconds a run gets to stop before it is killed
SETUP_S = 300.0  # seconds a run may take to log its first speed (the cap counts from there)


@dataclasses.dataclass(frozen=True)
class Size:
    """How long each workload's run is (``--quick`` shrinks every field)."""

    updates: int = 2000  # SAC env steps after learning_starts; IQL gradient steps
    rollouts: int = 6  # PPO / DPPO iterations (the first is not measured)
    ppo_rollout: int = 256  # PPO env steps per sub-env per iteration
    dppo_rollout: int = 50  # DPPO chunks per sub-env per iteration
    dataset_steps: int = 5000  # IQL's random dataset
    rows: int = 100  # time.csv rows per SAC / IQL run (a capped run still logs two)


QUICK = Size(updates=40, rollouts=3, ppo_rollout=16, dppo_rollout=4, dataset_steps=600, rows=40)


@dataclasses.dataclass(frozen=True)
class Workload:
    """One training run: what it is, the unit of its speed, its overrides at a size."""

    what: str
    unit: str
    overrides: Callable[[Size], list[str]]
    opt_in: bool = False


def _sac(size: Size) -> list[str]:
    starts = 200
    return ["algo=sac", "env=Hopper", f"algo.learning_starts={starts}",
            f"total_steps={starts + size.updates}", f"log_every={max(1, size.updates // size.rows)}"]  # fmt: skip


def _ppo(backend: str, envs: int) -> Callable[[Size], list[str]]:
    def overrides(size: Size) -> list[str]:
        minibatches = max(1, size.ppo_rollout * envs // 64)  # 64 a minibatch, as on 1 env
        return ["algo=ppo", "env=Hopper", f"env.backend={backend}", f"env.num_envs={envs}",
                f"algo.rollout_steps={size.ppo_rollout}", f"algo.num_minibatches={minibatches}",
                f"total_steps={size.rollouts * size.ppo_rollout * envs}"]  # fmt: skip

    return overrides


def _iql(size: Size) -> list[str]:
    return ["algo=iql", "env=Hopper", f"dataset={DATASET}", f"total_steps={size.updates}",
            f"log_every={max(1, size.updates // size.rows)}"]  # fmt: skip


def _dppo(size: Size) -> list[str]:
    import torch

    asset = asset_path("ddpm")
    head = torch.load(asset, weights_only=False)["config"]["algo"]  # the snapshot's layout
    hidden = "[" + ",".join(str(h) for h in head["hidden"]) + "]"
    envs = 2
    return ["algo=dppo", "env=Hopper", f"algo.pretrained={asset}", f"algo.hidden={hidden}",
            f"algo.denoiser={head['denoiser']}", f"algo.activation={head['activation']}",
            f"env.num_envs={envs}", f"algo.rollout_steps={size.dppo_rollout}",
            f"total_steps={size.rollouts * size.dppo_rollout * envs}"]  # fmt: skip


WORKLOADS: dict[str, Workload] = {
    "sac": Workload("SAC, UTD 1", "env steps/s", _sac),
    "ppo": Workload("PPO, 4 envs, native back end", "env steps/s", _ppo("native", 4)),
    "ppo_sync": Workload("PPO, 4 envs, gymnasium sync", "env steps/s", _ppo("sync", 4)),
    "ppo_async": Workload("PPO, 4 envs, gymnasium async", "env steps/s", _ppo("async", 4)),
    "iql": Workload("IQL offline updates", "updates/s", _iql),
    "dppo": Workload("DPPO fine-tuning (diffusion BC asset), 2 envs", "chunk steps/s", _dppo),
    "ppo_mjx": Workload("PPO, 16 envs, mjx on JAX's CPU", "env steps/s", _ppo("mjx", 16), True),
}
PRELOAD = ["hydra", "rlcore.train", "rlcore.envs.native", "rlcore.algos.sac", "rlcore.algos.ppo",
           "rlcore.algos.iql", "rlcore.algos.dppo"]  # fmt: skip
# a cell's fixed settings: no evaluation or checkpoint before the end, one final episode
RUN = ["logger=quiet", "eval_every=100000000", "checkpoint_every=100000000",
       "checkpoint_every_s=0", "eval_episodes=1", "eval_envs=1", "keep_agent_snapshots=false"]  # fmt: skip


def loop_rate(run_dir: Path) -> float | None:
    """Steps (or updates) per second of the loop between the first and the last row of
    ``time.csv`` that carry a speed; None with fewer than two such rows."""
    from rlcore.logging import read_csv

    path = run_dir / "time.csv"
    rows = [r for r in read_csv(path) if r.get("time/sps") or r.get("time/updates_per_s")] if (
        path.is_file()
    ) else []  # fmt: skip
    if len(rows) < 2:
        return None
    seconds = [r["step"] / (r.get("time/sps") or r["time/updates_per_s"]) for r in rows]
    if seconds[-1] <= seconds[0]:
        return None
    return (rows[-1]["step"] - rows[0]["step"]) / (seconds[-1] - seconds[0])


def _train_cell(overrides: list[str], run_dir: str) -> None:
    """A cell's run (in a fresh process): ``rlcore.train`` as the command line runs it."""
    from hydra import compose, initialize_config_module

    from rlcore.loops import TrainingInterrupted
    from rlcore.overrides import normalize_overrides
    from rlcore.train import train

    with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
        cfg = compose("config", overrides=normalize_overrides(overrides))
    die_with_parent()  # the fork server, which ends with the benchmark
    with contextlib.suppress(TrainingInterrupted):  # the cap: what it logged is measured
        train(cfg, run_dir)


@contextlib.contextmanager
def competitor(busy: bool, nice: int) -> Iterator[int | None]:
    """A spinning process on one core for the block (``busy``), else nothing."""
    if not busy:
        yield None
        return

    def setup() -> None:
        os.nice(nice)
        die_with_parent()

    process = subprocess.Popen([sys.executable, "-c", SPIN], preexec_fn=setup)
    try:
        time.sleep(0.2)  # running before the run starts
        yield process.pid
    finally:
        process.kill()
        process.wait()


def _wait_for_first_row(process: Any, csv: Path, deadline: float) -> bool:
    """Wait until the run logs its first speed row (``time.csv``: after SAC's random
    warm-up, PPO's first iteration with any compilation, ...) or ends; False when
    ``deadline`` passes first."""
    while process.is_alive() and not csv.is_file():
        if time.perf_counter() > deadline:
            return False
        time.sleep(0.1)
    return True


def run_cell(
    context: Any, overrides: list[str], run_dir: Path, seconds: float, busy: bool, nice: int
) -> dict[str, Any]:
    """One run in a fresh process, beside a competitor when ``busy``; its loop speed, the
    torch threads it used and whether it hit the cap (``seconds`` after its first row)."""
    import json

    with competitor(busy, nice):
        process = context.Process(target=_train_cell, args=(overrides, str(run_dir)))
        start = time.perf_counter()
        process.start()
        try:
            logging = _wait_for_first_row(process, run_dir / "time.csv", start + SETUP_S)
            process.join(seconds if logging else 0)
            capped = process.is_alive()
        finally:  # capped, or the benchmark itself is stopped
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)  # the run stops at its next step
                process.join(STOP_GRACE_S)
            if process.is_alive():  # a step that takes long: what it logged is kept
                process.kill()
                process.join()
        wall = time.perf_counter() - start
    meta = run_dir / "meta.json"
    effective = json.loads(meta.read_text())["effective"] if meta.is_file() else {}
    return {"rate": loop_rate(run_dir), "torch_threads": effective.get("torch_threads"),
            "capped": capped, "wall_s": wall, "exitcode": process.exitcode}  # fmt: skip


def record_dataset(root: Path, steps: int) -> None:
    """IQL's dataset: uniform random actions on Hopper, in its own Minari root."""
    from rlcore.offline.recording import collect

    os.environ["MINARI_DATASETS_PATH"] = str(root)  # this process and every cell's
    collect("Hopper", "random", DATASET, steps=steps, seed=0)


def summarise(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians per cell and the ratios the table shows."""
    medians: dict[str, float | None] = {}
    for cell, runs in samples.items():
        rates = [r["rate"] for r in runs if r["rate"] is not None]
        medians[cell] = statistics.median(rates) if rates else None
    return {
        "median": medians,
        "busy/quiet default": ratio(medians["busy/default"], medians["quiet/default"]),
        "busy/quiet all": ratio(medians["busy/all"], medians["quiet/all"]),
        "default/all quiet": ratio(medians["quiet/default"], medians["quiet/all"]),
        "share": ratio(medians["busy/default"], medians["quiet/all"]),
    }


def table(results: dict[str, Any], all_threads: int) -> str:
    """The markdown table of every workload measured."""
    headers = ["workload", "unit", "quiet, default", f"quiet, {all_threads} threads",
               "busy, default", f"busy, {all_threads} threads", "busy/quiet default",
               f"busy/quiet {all_threads} threads", "default/all quiet",
               "share (default busy / all quiet)"]  # fmt: skip
    rows = []
    for name, result in results.items():
        s = result["summary"]
        rows.append([name, result["unit"], *(fmt(s["median"][cell]) for cell in CELLS),
                     *(fmt(s[key], True) for key in ("busy/quiet default", "busy/quiet all",
                                                      "default/all quiet", "share"))])  # fmt: skip
    return markdown_table(headers, rows)


def _machine() -> dict[str, Any]:
    import torch

    return {"lscpu": cpu_info(), "cpu_count": os.cpu_count(),
            "cpu_affinity": len(os.sched_getaffinity(0)), "torch": torch.__version__,
            "nice": os.nice(0), "load_avg_start": list(os.getloadavg())}  # fmt: skip


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = [n for n, w in WORKLOADS.items() if not w.opt_in]
    parser.add_argument("--workloads", nargs="+", default=default, choices=list(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=1, help="runs per cell (median)")
    parser.add_argument(
        "--quick", action="store_true", help="tiny runs: a dry run of the code path"
    )
    parser.add_argument("--seconds", type=float, default=None,
                        help="cap per run, from its first logged speed (default 90; --quick 10)")  # fmt: skip
    parser.add_argument("--all-threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="torch threads of the comparison setting (default: every CPU)")  # fmt: skip
    parser.add_argument("--competitor-nice", type=int, default=0,
                        help="nice value of the competitor (0: normal priority)")  # fmt: skip
    parser.add_argument("--updates", type=int, default=None, help="SAC / IQL run length")
    parser.add_argument("--rollouts", type=int, default=None, help="PPO / DPPO iterations")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON (default results/busy.json; --quick busy_quick.json)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = 10.0 if args.quick else 90.0
    if args.out is None:
        args.out = RESULTS / ("busy_quick.json" if args.quick else "busy.json")
    size = QUICK if args.quick else Size()
    args.size = dataclasses.replace(
        size, updates=args.updates or size.updates, rollouts=args.rollouts or size.rollouts
    )
    return args


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every cell of every workload asked for: samples, the summary, what was run."""
    out: dict[str, Any] = {}
    settings = {"default": [], "all": [f"threads={args.all_threads}"]}
    context = multiprocessing.get_context("forkserver")
    # cells fork from a server that imported these once (no torch work runs in it)
    context.set_forkserver_preload(PRELOAD)
    minari_root = os.environ.get("MINARI_DATASETS_PATH")
    with tempfile.TemporaryDirectory(prefix="rlcore_busy_") as tmp:
        work = Path(tmp)
        try:
            if "iql" in args.workloads:
                record_dataset(work / "minari", args.size.dataset_steps)
            for name in args.workloads:
                workload = WORKLOADS[name]
                overrides = [*workload.overrides(args.size), *RUN]
                print(f"{name}: {workload.what} ({shlex.join(overrides)})", flush=True)
                samples: dict[str, list[dict[str, Any]]] = {cell: [] for cell in CELLS}
                for round_ in range(args.rounds):
                    for cell in CELLS:  # quiet and busy alternate within a round
                        condition, setting = cell.split("/")
                        run_dir = work / "runs" / f"{name}_{condition}_{setting}_{round_}"
                        result = run_cell(context, [*overrides, *settings[setting]], run_dir,
                                          args.seconds, condition == "busy",
                                          args.competitor_nice)  # fmt: skip
                        samples[cell].append(result)
                        _print_cell(cell, result, workload.unit)
                out[name] = {"what": workload.what, "unit": workload.unit,
                             "overrides": overrides, "samples": samples,
                             "summary": summarise(samples)}  # fmt: skip
        finally:
            if minari_root is None:
                os.environ.pop("MINARI_DATASETS_PATH", None)
            else:
                os.environ["MINARI_DATASETS_PATH"] = minari_root
    return out


def _print_cell(cell: str, result: dict[str, Any], unit: str) -> None:
    failed = result["exitcode"] not in (0, -signal.SIGTERM)
    print(f"  {cell:>12} ({result['torch_threads']} threads): {fmt(result['rate'])} {unit}, "
          f"{result['wall_s']:.0f} s{' (capped)' if result['capped'] else ''}"
          f"{' FAILED' if failed else ''}", flush=True)  # fmt: skip


def _stop(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Measure, print the table, write the JSON; returns what the JSON holds."""
    args = parse_args(argv)
    command = "python -m rlcore.benchmarks.busy " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    payload: dict[str, Any] = {"command": command, "machine": _machine(),
                               "size": dataclasses.asdict(args.size), "rounds": args.rounds,
                               "all_threads": args.all_threads, "seconds_cap": args.seconds,
                               "competitor": {"code": SPIN, "nice": args.competitor_nice}}  # fmt: skip
    previous = signal.signal(signal.SIGTERM, _stop)  # a killed benchmark stops run + competitor
    try:
        payload["workloads"] = measure(args)
    finally:
        signal.signal(signal.SIGTERM, previous)
    payload["machine"]["load_avg_end"] = list(os.getloadavg())
    payload["table"] = table(payload["workloads"], args.all_threads)
    print(f"\n{payload['table']}\n", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, payload)
    print(f"wrote {args.out}")
    return payload


if __name__ == "__main__":
    main()
