"""Atari training speed, rlcore next to CleanRL's own scripts on the same machine: PPO's
env steps/s with its updates (``ppo_atari_envpool.py``) and DQN's env steps/s with its
updates, one every 4 env steps (``dqn_atari.py``), each contender a fresh process, one
torch thread, the rounds alternating.

    python -m rlcore.benchmarks.atari_training_speed --cleanrl <cleanrl@fe8d8a0> \\
        --python <side venv>/bin/python [--game Breakout] [--ppo-iterations 5] \\
        [--dqn-steps 6000] [--rounds 2]

The side environment runs CleanRL's scripts unedited: torch 2.13 CPU, envpool 1.2.5,
gym 0.23.1, gymnasium 0.29.1 with ale-py 0.8.1 and shimmy[atari] 1.3.0, SB3 2.3.2, tyro,
tensorboard, opencv-python-headless, numpy < 2; ale-py 0.8.1 has no ROMs in its wheel,
so the game's ROM is copied in from rlcore's ale-py 0.12.1 (``ale_py/roms/<game>.bin``).

Settings, equal on both sides: PPO 8 envs x 128 steps, 4 minibatches x 4 epochs, the Nature
network, eager (``algo.compile=false``; CleanRL does not compile; a third row: rlcore
compiled, as ``auto`` runs long runs); the rate counts every
iteration but the first (each side's warm-up). DQN 1 env, batch 32, one update every 4
steps, buffer 10,000 (both allocate it up front), learning from step ``dqn_steps / 3``;
the rate counts the steps after learning starts. CleanRL reports cumulative SPS (global
step / time since its loop began) at each print: the time of a print is step / SPS, so a
window's rate is its steps over the difference of two such times. Envs differ as the
libraries do (CleanRL's PPO: envpool; its DQN: gymnasium's ALE env with SB3's wrappers;
rlcore: ale-py's vector env, ``envs/atari.py``); benchmarks/atari_envs.py measures the envs
alone. Writes results/atari_training_speed.json with lscpu's model and flags.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

from rlcore.benchmarks.runs import cpu_info, write_result

RESULTS = Path(__file__).resolve().parent / "results"
PPO_ENVS, PPO_STEPS = 8, 128
SPS = re.compile(r"SPS:\s*(\d+)")


def _run(cmd: list[str], cwd: Path, pythonpath: Path | None = None) -> str:
    """Run ``cmd`` on one torch thread (CleanRL's ``cleanrl_utils`` on ``pythonpath``)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed:\n{done.stderr[-3000:]}")
    return done.stdout


def window_rate(points: list[tuple[int, float]], first_step: int) -> float:
    """Env steps/s between the first print at or after ``first_step`` and the last, from
    CleanRL's cumulative (step, SPS) prints: a print's time is step / SPS."""
    kept = [(step, step / sps) for step, sps in points if step >= first_step and sps > 0]
    (step0, time0), (step1, time1) = kept[0], kept[-1]
    return (step1 - step0) / (time1 - time0)


def cleanrl_ppo(args: argparse.Namespace, cwd: Path) -> float:
    steps = PPO_ENVS * PPO_STEPS * args.ppo_iterations
    out = _run([args.python, str(args.cleanrl / "cleanrl" / "ppo_atari_envpool.py"),
                "--env-id", f"{args.game}-v5", "--total-timesteps", str(steps), "--no-cuda",
                "--seed", "1"], cwd, args.cleanrl)  # fmt: skip
    sps = [int(m) for m in SPS.findall(out)]
    points = [((i + 1) * PPO_ENVS * PPO_STEPS, float(s)) for i, s in enumerate(sps)]
    return window_rate(points, PPO_ENVS * PPO_STEPS)


def cleanrl_dqn(args: argparse.Namespace, cwd: Path) -> float:
    starts = args.dqn_steps // 3
    out = _run([args.python, str(args.cleanrl / "cleanrl" / "dqn_atari.py"),
                "--env-id", f"{args.game}NoFrameskip-v4", "--total-timesteps", str(args.dqn_steps),
                "--learning-starts", str(starts), "--buffer-size", "10000", "--no-cuda",
                "--seed", "1"], cwd, args.cleanrl)  # fmt: skip
    # printed at global steps > learning_starts that are multiples of 100 (train frequency 4)
    steps = [s for s in range(starts + 1, args.dqn_steps) if s % 100 == 0]
    points = list(zip(steps, (float(s) for s in SPS.findall(out))))
    return window_rate(points, starts + 100)


def _rlcore(args: argparse.Namespace, cwd: Path, algo: str, overrides: list[str]) -> Path:
    run_dir = cwd / f"rlcore_{algo}_{time.time_ns()}"
    _run([sys.executable, "-m", "rlcore.train", f"algo={algo}", f"env=ALE/{args.game}-v5",
          "threads=1", "logger=quiet", "eval_every=100000000",
          "checkpoint_every=100000000", "eval_episodes=1", "eval_envs=1",
          f"run_dir={run_dir}", *overrides], cwd)  # fmt: skip
    return run_dir


def _time_rows(run_dir: Path) -> list[dict[str, float]]:
    with (run_dir / "time.csv").open() as f:
        return [{k: float(v) for k, v in row.items() if v} for row in csv.DictReader(f)]


def rlcore_ppo(args: argparse.Namespace, cwd: Path) -> float:
    steps = PPO_ENVS * PPO_STEPS * args.ppo_iterations
    run = _rlcore(args, cwd, "ppo", [f"total_steps={steps}", "algo.compile=false"])
    rows = _time_rows(run)[1:]
    return PPO_ENVS * PPO_STEPS * len(rows) / sum(r["time/iteration_s"] for r in rows)


def rlcore_ppo_compiled(args: argparse.Namespace, cwd: Path) -> float:
    """The same, compiled (``algo.compile=true``, what ``auto`` picks for runs over 100k
    steps): the compilation falls in the first iteration, which the rate leaves out."""
    steps = PPO_ENVS * PPO_STEPS * args.ppo_iterations
    run = _rlcore(args, cwd, "ppo", [f"total_steps={steps}", "algo.compile=true"])
    rows = _time_rows(run)[1:]
    return PPO_ENVS * PPO_STEPS * len(rows) / sum(r["time/iteration_s"] for r in rows)


def rlcore_dqn(args: argparse.Namespace, cwd: Path) -> float:
    starts, every = args.dqn_steps // 3, args.dqn_steps // 12
    run = _rlcore(args, cwd, "dqn", [f"total_steps={args.dqn_steps}",
                                     f"algo.learning_starts={starts}", "algo.buffer_size=10000",
                                     f"log_every={every}"])  # fmt: skip
    rows = [r for r in _time_rows(run) if r["step"] > starts + every]  # windows after learning
    return every * len(rows) / sum(every / r["time/sps"] for r in rows)


CONTENDERS = {
    "ppo": (
        ("CleanRL ppo_atari_envpool.py", cleanrl_ppo),
        ("rlcore algo=ppo", rlcore_ppo),
        ("rlcore algo=ppo, compiled", rlcore_ppo_compiled),
    ),
    "dqn": (("CleanRL dqn_atari.py", cleanrl_dqn), ("rlcore algo=dqn", rlcore_dqn)),
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cleanrl", type=Path, required=True, help="unpacked cleanrl@fe8d8a0")
    parser.add_argument("--python", required=True, help="the side environment's python")
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--ppo-iterations", type=int, default=5)
    parser.add_argument("--dqn-steps", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", choices=sorted(CONTENDERS), action="append")
    parser.add_argument("--out", type=Path, default=RESULTS / "atari_training_speed.json")
    args = parser.parse_args(argv)
    args.cleanrl = args.cleanrl.resolve()
    load_before = os.getloadavg()[0]
    rates: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for algo in args.only or sorted(CONTENDERS):
                for name, measure in CONTENDERS[algo]:
                    rates.setdefault(name, []).append(measure(args, Path(tmp)))
                    print(f"{name}: {rates[name][-1]:.1f} env steps/s", flush=True)
    rows = []
    for algo in args.only or sorted(CONTENDERS):
        (base, _), *ours = CONTENDERS[algo]
        base_rate = median(rates[base])
        for name, _ in ours:
            rows.append({"algo": algo, "contender": name, "cleanrl": base_rate,
                         "rlcore": median(rates[name]), "ratio": median(rates[name]) / base_rate,
                         "cleanrl_runs": rates[base], "rlcore_runs": rates[name]})  # fmt: skip
    print("\n| contender | CleanRL env steps/s | rlcore env steps/s | rlcore / CleanRL |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['contender']} | {row['cleanrl']:.1f} | {row['rlcore']:.1f} | "
              f"{row['ratio']:.2f} |")  # fmt: skip
    result = {"game": args.game, "ppo_iterations": args.ppo_iterations,
              "dqn_steps": args.dqn_steps, "rounds": args.rounds, "rows": rows,
              "load_before": load_before, "load_after": os.getloadavg()[0],
              "cpu": cpu_info()}  # fmt: skip
    write_result(args, result)
    return result


if __name__ == "__main__":
    main()
