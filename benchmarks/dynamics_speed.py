"""Training speed of the dynamics ensemble: rlcore.dynamics vs OfflineRL-Kit, same data,
same widths, same machine, one run.

    python -m rlcore.benchmarks.dynamics_speed --reference-python <side venv>/bin/python \\
        --kit <folder holding offlinerlkit/> [--rows 50000] [--epochs 3] [--threads 1]

Both sides fit 7 members of 4 x 200 (5 elites, the weight decays of run_mopo.py) on the
same ``--rows`` Hopper-shaped transitions (11 observation, 3 action dimensions; a noisy
linear system drawn from seed 0), batch 256, 20% holdout (at most 1,000 rows), for exactly
``--epochs`` epochs (patience above the epoch count, so no early stop), on ``--threads``
CPU threads: ours with ``rlcore.dynamics.fit_dynamics``, the reference with
``EnsembleDynamics.train`` (run in its own side environment by ``--reference-python``:
this file again, with ``--as-reference``). Each side first fits a tiny model once,
untimed (torch's first Adam step imports modules for ~1 s). The reference's wall time includes its
per-epoch logging to a stub logger and the model save at the end (a few ms). Prints the
seconds per epoch of each and the ratio (reference / ours: > 1 means rlcore is faster),
and writes ``benchmarks/results/dynamics_speed.json`` with lscpu's model and flags.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

OBS, ACT, HIDDEN, MEMBERS, ELITES = 11, 3, (200, 200, 200, 200), 7, 5
DECAYS = (2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4)
OUT = Path(__file__).resolve().parent / "results" / "dynamics_speed.json"


def make_data(rows: int, path: Path) -> None:
    """A noisy linear system s' = s + 0.05 (A s + B a), r = c.s + d.a, saved as .npz."""
    rng = np.random.default_rng(0)
    a = 0.3 * rng.standard_normal((OBS, OBS))
    b = rng.standard_normal((ACT, OBS))
    obs = rng.standard_normal((rows, OBS)).astype(np.float32)
    action = rng.uniform(-1, 1, (rows, ACT)).astype(np.float32)
    next_obs = obs + 0.05 * (obs @ a + action @ b) + 0.01 * rng.standard_normal((rows, OBS))
    reward = obs @ rng.standard_normal(OBS) + action @ rng.standard_normal(ACT)
    np.savez(path, obs=obs, action=action, next_obs=next_obs.astype(np.float32),
             reward=reward.astype(np.float32))  # fmt: skip


def time_ours(path: Path, epochs: int, threads: int) -> float:
    import torch

    from rlcore.dynamics import ProbabilisticEnsemble, fit_dynamics

    torch.set_num_threads(threads)
    data = {k: torch.from_numpy(v) for k, v in np.load(path).items()}
    torch.manual_seed(0)
    warm = {k: v[:300] for k, v in data.items()}  # the first Adam step's imports, untimed
    fit_dynamics(ProbabilisticEnsemble(OBS, ACT, 2, 1, (8,), (0.0, 0.0)), warm["obs"],
                 warm["action"], warm["reward"], warm["next_obs"], torch.Generator(),
                 max_epochs=1)  # fmt: skip
    model = ProbabilisticEnsemble(OBS, ACT, MEMBERS, ELITES, HIDDEN, DECAYS)
    start = time.perf_counter()
    result = fit_dynamics(model, data["obs"], data["action"], data["reward"], data["next_obs"],
                          torch.Generator().manual_seed(0), patience=epochs + 1,
                          max_epochs=epochs)  # fmt: skip
    seconds = time.perf_counter() - start
    assert result.epochs == epochs
    return seconds


def time_reference(path: Path, epochs: int, threads: int, kit: Path) -> float:
    """OfflineRL-Kit's ``EnsembleDynamics.train`` (run inside its side environment)."""
    import torch

    for name in ("gym", "gym.envs", "gym.envs.mujoco", "d4rl", "mujoco_py"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["gym.envs.mujoco"].mujoco_env = types.SimpleNamespace(MujocoEnv=object)
    sys.path.insert(0, str(kit.resolve()))
    from offlinerlkit.dynamics.ensemble_dynamics import EnsembleDynamics  # noqa: PLC0415
    from offlinerlkit.modules.dynamics_module import EnsembleDynamicsModel  # noqa: PLC0415
    from offlinerlkit.utils.scaler import StandardScaler  # noqa: PLC0415

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    np.random.seed(0)
    loaded = dict(np.load(path))
    data = {"observations": loaded["obs"], "actions": loaded["action"],
            "next_observations": loaded["next_obs"], "rewards": loaded["reward"][:, None]}  # fmt: skip

    def build(members: int, elites: int, hidden: list[int], decays: list[float]):
        model = EnsembleDynamicsModel(OBS, ACT, hidden, members, elites, weight_decays=decays)
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)
        return EnsembleDynamics(model, optim, StandardScaler(), terminal_fn=None)

    with tempfile.TemporaryDirectory() as folder:
        logger = types.SimpleNamespace(
            log=lambda *_: None, logkv=lambda *_: None, set_timestep=lambda *_: None,
            dumpkvs=lambda **_: None, model_dir=folder,
        )  # fmt: skip
        warm = {k: v[:300] for k, v in data.items()}  # the first Adam step's imports, untimed
        build(2, 1, [8], [0.0, 0.0]).train(warm, logger, max_epochs=1)
        dynamics = build(MEMBERS, ELITES, list(HIDDEN), list(DECAYS))
        start = time.perf_counter()
        dynamics.train(data, logger, max_epochs=epochs, max_epochs_since_update=epochs + 1)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-python", type=Path)
    parser.add_argument("--kit", type=Path)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--as-reference", type=Path, help=argparse.SUPPRESS)  # the data file
    args = parser.parse_args()
    if args.as_reference is not None:  # inside the reference's environment
        print(json.dumps({"seconds": time_reference(args.as_reference, args.epochs,
                                                    args.threads, args.kit)}))  # fmt: skip
        return
    if args.reference_python is None or args.kit is None:
        parser.error("--reference-python and --kit are needed (the baseline runs beside ours)")
    from rlcore.benchmarks.runs import cpu_info

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "data.npz"
        make_data(args.rows, path)
        common = ["--epochs", str(args.epochs), "--threads", str(args.threads)]
        reference = subprocess.run(
            [str(args.reference_python), __file__, "--as-reference", str(path), "--kit",
             str(args.kit), *common],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        theirs = json.loads(reference.stdout.strip().splitlines()[-1])["seconds"]
        ours = time_ours(path, args.epochs, args.threads)
    result = {
        "rows": args.rows, "epochs": args.epochs, "threads": args.threads,
        "members": MEMBERS, "hidden": list(HIDDEN),
        "rlcore_s_per_epoch": ours / args.epochs,
        "offlinerl_kit_s_per_epoch": theirs / args.epochs,
        "speedup": theirs / ours, "cpu": cpu_info(),
    }  # fmt: skip
    print(f"| fit ({args.rows:,} rows, {MEMBERS} x {len(HIDDEN)}x200, {args.threads} thread) "
          f"| s / epoch |")  # fmt: skip
    print("|---|---|")
    print(f"| rlcore.dynamics | {result['rlcore_s_per_epoch']:.2f} |")
    print(f"| OfflineRL-Kit EnsembleDynamics | {result['offlinerl_kit_s_per_epoch']:.2f} |")
    print(f"| ratio (OfflineRL-Kit / rlcore) | {result['speedup']:.2f}x |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
