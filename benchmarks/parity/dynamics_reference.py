"""Golden numbers of OfflineRL-Kit's dynamics ensemble (tests/golden/dynamics.json), for
tests/test_dynamics.py.

Run in a side environment with torch and numpy, outside the repository, on the
``offlinerlkit`` package of a snapshot of yihaosun1124/OfflineRL-Kit (``COMMIT``)::

    /work/side/parity-online/venv/bin/python benchmarks/parity/dynamics_reference.py \\
        --kit <folder holding offlinerlkit/>

Imports ``EnsembleDynamicsModel`` and ``EnsembleDynamics`` from it (gym, d4rl, mujoco_py
stubbed: only its oracle dynamics read them), sets the initial weights of ``initial`` below
(4 members, 2 elites, hidden 16 x 16, the reference's weight decays scaled up so they show),
and runs ``EnsembleDynamics.learn`` (Adam, lr 1e-3) on 6 batches of per-member rows, then
``validate`` on holdout rows. Writes each batch's loss, every final parameter and the
holdout errors.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch

COMMIT = "e3ce697"
OUT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "dynamics.json"
OBS, ACT, MEMBERS, ELITES, HIDDEN = 3, 2, 4, 2, (16, 16)
DECAYS = (2.5e-3, 5e-3, 1e-2)  # the reference's 2.5e-5 .. 1e-4, x 100 so the term shows
BATCHES, ROWS = 6, 32


def initial() -> dict[str, np.ndarray]:
    """Weights U(+-1/sqrt(in)), biases U(+-0.1), log-variance bounds near 0.5 / -10."""
    rng = np.random.default_rng(0)
    dims = [OBS + ACT, *HIDDEN, 2 * (OBS + 1)]
    params = {}
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        bound = 1 / np.sqrt(a)
        params[f"{i}.w"] = rng.uniform(-bound, bound, (MEMBERS, a, b)).astype(np.float32)
        params[f"{i}.b"] = rng.uniform(-0.1, 0.1, (MEMBERS, 1, b)).astype(np.float32)
    params["max_logvar"] = (0.5 + 0.1 * rng.standard_normal(OBS + 1)).astype(np.float32)
    params["min_logvar"] = (-10 + 0.1 * rng.standard_normal(OBS + 1)).astype(np.float32)
    return params


def data() -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, np.ndarray]:
    """Per-member standardised inputs (E, ROWS, in) and targets (E, ROWS, obs + 1) of
    ``BATCHES`` batches, then holdout rows (ROWS, .)."""
    rng = np.random.default_rng(1)
    xs = [
        rng.standard_normal((MEMBERS, ROWS, OBS + ACT)).astype(np.float32) for _ in range(BATCHES)
    ]
    ys = [rng.standard_normal((MEMBERS, ROWS, OBS + 1)).astype(np.float32) for _ in range(BATCHES)]
    hold_x = rng.standard_normal((ROWS, OBS + ACT)).astype(np.float32)
    hold_y = rng.standard_normal((ROWS, OBS + 1)).astype(np.float32)
    return xs, ys, hold_x, hold_y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kit", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    for name in ("gym", "gym.envs", "gym.envs.mujoco", "d4rl", "mujoco_py"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["gym.envs.mujoco"].mujoco_env = types.SimpleNamespace(MujocoEnv=object)
    sys.path.insert(0, str(args.kit.resolve()))
    from offlinerlkit.dynamics.ensemble_dynamics import EnsembleDynamics  # noqa: PLC0415
    from offlinerlkit.modules.dynamics_module import EnsembleDynamicsModel  # noqa: PLC0415

    torch.set_num_threads(1)
    params = initial()
    model = EnsembleDynamicsModel(OBS, ACT, HIDDEN, MEMBERS, ELITES, weight_decays=DECAYS)
    layers = [*model.backbones, model.output_layer]
    with torch.no_grad():
        for i, layer in enumerate(layers):
            layer.weight.copy_(torch.from_numpy(params[f"{i}.w"]))
            layer.bias.copy_(torch.from_numpy(params[f"{i}.b"]))
        model.max_logvar.copy_(torch.from_numpy(params["max_logvar"]))
        model.min_logvar.copy_(torch.from_numpy(params["min_logvar"]))
    dynamics = EnsembleDynamics(model, torch.optim.Adam(model.parameters(), lr=1e-3), None, None)
    xs, ys, hold_x, hold_y = data()
    losses = [float(dynamics.learn(x, y, batch_size=ROWS)) for x, y in zip(xs, ys)]
    final = {f"{i}.w": layer.weight for i, layer in enumerate(layers)}
    final.update({f"{i}.b": layer.bias for i, layer in enumerate(layers)})
    final.update(max_logvar=model.max_logvar, min_logvar=model.min_logvar)
    golden = {
        "reference": f"github.com/yihaosun1124/OfflineRL-Kit@{COMMIT} EnsembleDynamics.learn",
        "torch": torch.__version__,
        "losses": losses,
        "holdout_errors": [float(e) for e in dynamics.validate(hold_x, hold_y)],
        "params": {k: v.detach().numpy().round(9).tolist() for k, v in final.items()},
    }
    args.out.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
