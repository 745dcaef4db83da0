"""Behaviour unchanged, checked: fingerprints of short training runs before and after a
refactor.

    python -m rlcore.benchmarks.equivalence --out before.json          # on the old code
    python -m rlcore.benchmarks.equivalence --compare before.json      # on the new code

Each case (sac, td3, ppo, dqn, iql offline-to-online, wsrl, dppo, resip, cpo, fast_td3;
``seed=0``, one thread, small networks, a few thousand steps) trains in this process from
the same inputs: a 2,000-step random Hopper dataset and a diffusion behaviour-cloning run
(for dppo / resip) recorded here first. A fingerprint is the SHA-256 of the run's
``train.csv`` and ``eval.csv`` with their time columns left out (``time/*``,
``eval/train_seconds``: no two runs take the same time) and of every tensor of the final
agent state. ``--compare`` prints one row per case and exits 1 when any differs. On the
same machine and CPU the numbers are bit-identical (rlcore runs are deterministic on the
CPU), so any difference is a behaviour change; on another CPU class they may differ in
rounding, so compare on the machine that recorded the file.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CASES: dict[str, list[str]] = {
    "sac": ["algo=sac", "env=InvertedPendulum", "total_steps=2400", "algo.learning_starts=300",
            "algo.batch_size=64", "algo.hidden=[64,64]", "eval_every=600", "log_every=100",
            "env.num_envs=2", "algo.compile=false"],
    "td3": ["algo=td3", "env=Hopper", "total_steps=1600", "algo.learning_starts=300",
            "algo.batch_size=64", "algo.hidden=[64,64]", "eval_every=800", "log_every=100",
            "env.max_episode_steps=100"],
    "ppo": ["algo=ppo", "env=Hopper", "total_steps=4096", "algo.rollout_steps=128",
            "env.num_envs=2", "algo.num_minibatches=4", "algo.update_epochs=4",
            "eval_every=1024", "env.max_episode_steps=100", "algo.compile=false"],
    "dqn": ["algo=dqn", "env=CartPole-v1", "total_steps=1200", "algo.learning_starts=200",
            "algo.batch_size=32", "eval_every=600", "log_every=100"],
    "iql_o2o": ["algo=iql", "env=Hopper", "total_steps=400", "algo.online_steps=1600",
                "algo.batch_size=64", "algo.hidden=[64,64]", "eval_every=1000",
                "log_every=100", "env.max_episode_steps=100", "algo.compile=false",
                "dataset=local/hopper/random-v0"],
    "wsrl": ["algo=wsrl", "env=Hopper", "total_steps=500", "algo.offline_steps=200",
             "algo.warmup_steps=100", "algo.hidden=[32,32]", "algo.batch_size=32",
             "algo.compile=false", "eval_every=250", "log_every=50",
             "env.max_episode_steps=100", "dataset=local/hopper/random-v0"],
    "dppo": ["algo=dppo", "algo.pretrained={ddpm}", "algo.denoising_steps=5",
             "algo.finetune_steps=3", "algo.minibatch_size=40", "total_steps=1200",
             "algo.critic_hidden=[32,32]", "env=Hopper", "env.num_envs=2",
             "algo.rollout_steps=20", "algo.hidden=[32,32,32]", "algo.time_dim=8",
             "eval_every=400", "eval_episodes=2", "log_every=20", "env.max_episode_steps=60"],
    "resip": ["algo=resip", "algo.pretrained={ddpm}", "algo.denoising_steps=5",
              "algo.num_minibatches=2", "total_steps=800", "env=Hopper", "env.num_envs=2",
              "algo.rollout_steps=20", "algo.hidden=[32,32,32]", "algo.time_dim=8",
              "eval_every=400", "eval_episodes=2", "log_every=20", "env.max_episode_steps=60"],
    "cpo": ["algo=cpo", "env=SafetyHopperVelocity", "algo.cost_limit=5",
            "env.max_episode_steps=100", "algo.hidden=[32,32]", "eval_every=800",
            "log_every=100", "total_steps=3200", "env.num_envs=2", "algo.rollout_steps=200",
            "algo.update_epochs=3"],
    "fast_td3": ["algo=fast_td3", "env=Hopper", "env.backend=native", "env.num_envs=4",
                 "total_steps=2400", "algo.warmup_vector_steps=50", "algo.batch_size=64",
                 "algo.critic_hidden=[64,64]", "algo.actor_hidden=[64,64]",
                 "algo.buffer_size=100000", "algo.v_min=-250", "algo.v_max=250",
                 "eval_every=800", "log_every=100", "env.max_episode_steps=100"],
}  # fmt: skip
COMMON = ["seed=0", "threads=1", "logger=quiet", "eval_episodes=2", "eval_envs=2",
          "checkpoint_every=0", "checkpoint_every_s=0", "keep_agent_snapshots=false"]  # fmt: skip
TIME_COLUMNS = ("time/", "eval/train_seconds")


def _compose(overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_module

    from rlcore.overrides import normalize_overrides

    with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
        return compose("config", overrides=normalize_overrides(overrides))


def csv_digest(path: Path) -> str:
    """SHA-256 of a metrics CSV without its time columns (absent file: of nothing)."""
    if not path.is_file():
        return hashlib.sha256(b"").hexdigest()
    rows = list(csv.reader(path.read_text().splitlines()))
    keep = [i for i, name in enumerate(rows[0]) if not name.startswith(TIME_COLUMNS)]
    out = io.StringIO()
    csv.writer(out).writerows([[row[i] if i < len(row) else "" for i in keep] for row in rows])
    return hashlib.sha256(out.getvalue().encode()).hexdigest()


def state_digest(state: Any) -> str:
    """SHA-256 of every tensor (and number) of a nested agent state, keys sorted."""
    import torch

    digest = hashlib.sha256()

    def visit(node: Any, path: str) -> None:
        if isinstance(node, torch.Tensor):
            digest.update(path.encode())
            digest.update(node.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(node, dict):
            for key in sorted(node, key=str):
                visit(node[key], f"{path}.{key}")
        elif isinstance(node, list | tuple):
            for i, item in enumerate(node):
                visit(item, f"{path}[{i}]")
        elif isinstance(node, int | float | bool | str) or node is None:
            digest.update(f"{path}={node!r}".encode())

    visit(state, "agent")
    return digest.hexdigest()


def prepare(root: Path) -> dict[str, str]:
    """The shared inputs: a random Hopper dataset and a diffusion BC run; returns the
    placeholders the cases use."""
    from rlcore.offline.recording import collect
    from rlcore.train import train

    os.environ["MINARI_DATASETS_PATH"] = str(root / "minari")
    collect("Hopper", "random", "local/hopper/random-v0", steps=2000, seed=0)
    bc = root / "bc_ddpm"
    train(_compose(["algo=diffusion_bc", "env=Hopper", "dataset=local/hopper/random-v0",
                    "total_steps=30", "algo.hidden=[32,32,32]", "algo.time_dim=8",
                    "algo.denoising_steps=5", "eval_every=30", *COMMON]), bc)  # fmt: skip
    return {"ddpm": str(bc)}


def fingerprint(name: str, root: Path, inputs: dict[str, str]) -> dict[str, str]:
    """Train case ``name`` into ``root/<name>`` and fingerprint it."""
    from rlcore.checkpoint import load_checkpoint
    from rlcore.train import train

    run_dir = root / name
    overrides = [arg.format(**inputs) for arg in CASES[name]]
    started = time.monotonic()
    train(_compose([*overrides, *COMMON]), run_dir)
    return {
        "train_csv": csv_digest(run_dir / "train.csv"),
        "eval_csv": csv_digest(run_dir / "eval.csv"),
        "agent": state_digest(load_checkpoint(run_dir)["agent"]),
        "seconds": f"{time.monotonic() - started:.1f}",
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the fingerprints here (JSON)")
    parser.add_argument("--compare", type=Path, help="compare with fingerprints written before")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args(argv)
    from rlcore.benchmarks.runs import cpu_info

    with tempfile.TemporaryDirectory(prefix="rlcore_equivalence_") as tmp:
        root = Path(tmp)
        inputs = prepare(root)
        prints = {}
        for name in args.cases:
            prints[name] = fingerprint(name, root, inputs)
            print(f"{name}: {prints[name]['seconds']} s", file=sys.stderr, flush=True)
    result = {"lscpu": cpu_info(), "python": platform.python_version(), "cases": prints}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    if not args.compare:
        return 0
    before = json.loads(args.compare.read_text())["cases"]
    differ = 0
    print("| case | train.csv | eval.csv | final parameters |\n|---|---|---|---|")
    for name, now in prints.items():
        old = before.get(name)
        cells = [
            "-" if old is None else ("same" if old[key] == now[key] else "DIFFERENT")
            for key in ("train_csv", "eval_csv", "agent")
        ]
        differ += "DIFFERENT" in cells
        print(f"| {name} | {' | '.join(cells)} |")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
