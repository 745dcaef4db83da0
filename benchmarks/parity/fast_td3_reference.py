"""Golden numbers for FastTD3 from the reference implementation itself.

Runs younggyoseo/FastTD3's own code, never copied: its networks (``fast_td3/fast_td3.py``:
``Actor``, ``Critic`` with the C51 ``projection`` and ``get_value``) imported by path, and
its critic and actor updates, ``update_main`` / ``update_pol`` / ``soft_update``, which are
closures inside ``train.py``'s ``main()``: their definitions are taken from the file's
syntax tree and executed unchanged, with the names they read from ``main()`` (args,
networks, optimisers, AMP off) provided. The harness drives them as ``main()``'s loop
does: ``NUM_UPDATES`` critic updates per vector step, the actor on ``i % 2 == 1``, the
Polyak step after each. It writes ``tests/golden/fast_td3.json``:

* ``pieces``: on the initial weights and the first batch, the critics' logits Q(s, a),
  each target critic's projected distribution at (s', a') (a' with the recorded
  smoothing noise) and its value;
* ``updates``: every update's critic loss (and actor loss when the actor stepped), then
  every parameter after all of them.

Inputs: tiny networks (actor width 16, critic width 32: the reference halves them layer
by layer), fixed batches from ``default_rng`` with terminated and truncated rows, rewards
x3 so that targets cross the support's edges, target-smoothing noise std 0.5 (so that the
0.5 clip matters), ``torch.randn_like``'s draws recorded for the test to replay.
``tests/test_parity_fast_td3.py`` runs rlcore's FastTD3 on the same inputs.

Run it in a side env outside the repository (only torch and numpy are needed):

    python3 -m venv /work/side/fasttd3/venv
    /work/side/fasttd3/venv/bin/pip install torch==2.13.0 numpy
    # fetch github:younggyoseo/FastTD3, then
    git --git-dir=<mirror> archive 229ed59bbf43ea2f7a2d5d90d1076314839944d7 fast_td3 \
        | tar -x -C /work/side/fasttd3/ref
    OMP_NUM_THREADS=1 /work/side/fasttd3/venv/bin/python \
        benchmarks/parity/fast_td3_reference.py --fasttd3 /work/side/fasttd3/ref \
        --out tests/golden/fast_td3.json
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import types
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.amp import GradScaler, autocast

REPO, COMMIT = "younggyoseo/FastTD3", "229ed59bbf43ea2f7a2d5d90d1076314839944d7"
BATCH, OBS, ACT = 32, 3, 2
VECTOR_STEPS, NUM_UPDATES = 4, 2
SETTINGS = {
    "gamma": 0.97, "tau": 0.1, "actor_lr": 1e-3, "critic_lr": 1e-3, "weight_decay": 0.1,
    "actor_hidden_dim": 16, "critic_hidden_dim": 32, "num_atoms": 11, "v_min": -5.0,
    "v_max": 5.0, "policy_noise": 0.5, "noise_clip": 0.5, "init_scale": 0.01,
    "policy_frequency": 2, "num_updates": NUM_UPDATES, "use_cdq": True,
}  # fmt: skip


def floats(x: torch.Tensor) -> list | float:
    """Float32 values as JSON numbers (9 significant digits round-trip a float32)."""
    arr = x.detach().cpu().numpy().astype(np.float64)
    if arr.ndim == 0:
        return float(f"{float(arr):.9g}")
    return np.vectorize(lambda v: float(f"{v:.9g}"))(arr).tolist()


def state(**modules: torch.nn.Module) -> dict[str, list]:
    """Parameters by the reference's names ``<module>.<parameter>``."""
    return {
        f"{prefix}.{name}": floats(value)
        for prefix, module in modules.items()
        for name, value in module.named_parameters()
    }


def load_module(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def update_functions(train_py: Path, names: dict) -> dict:
    """``update_main``, ``update_pol`` and ``soft_update`` as defined inside ``main()`` of
    the reference's ``train.py``, executed with ``names`` as the names they close over."""
    tree = ast.parse(train_py.read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    wanted = {"update_main", "update_pol", "soft_update"}
    defs = [n for n in main.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {d.name for d in defs} == wanted, "train.py changed: update functions not found"
    module = ast.Module(body=defs, type_ignores=[])
    exec(compile(module, str(train_py), "exec"), names)  # noqa: S102 - the reference's code
    return {name: names[name] for name in wanted}


def batches(seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(VECTOR_STEPS * NUM_UPDATES):
        terminated = rng.random(BATCH) < 0.25
        truncated = ~terminated & (rng.random(BATCH) < 0.25)
        terminated[0], truncated[0] = True, False
        terminated[1], truncated[1] = False, True
        out.append({
            "obs": rng.standard_normal((BATCH, OBS)).astype(np.float32),
            "action": rng.uniform(-1.0, 1.0, (BATCH, ACT)).astype(np.float32),
            "reward": (3.0 * rng.standard_normal(BATCH)).astype(np.float32),
            "next_obs": rng.standard_normal((BATCH, OBS)).astype(np.float32),
            "terminated": terminated.astype(np.float32),
            "truncated": truncated.astype(np.float32),
        })  # fmt: skip
    return out


def reference_data(b: dict[str, np.ndarray]) -> dict:
    """The reference's sampled-batch layout: ``dones`` = episode ended (terminated or
    truncated, as its env wrappers report), ``truncations`` = time-outs, 1-step returns."""
    t = {k: torch.as_tensor(v) for k, v in b.items()}
    ended = ((t["terminated"] + t["truncated"]) > 0).long()
    return {
        "observations": t["obs"],
        "actions": t["action"],
        "next": {
            "observations": t["next_obs"],
            "rewards": t["reward"],
            "dones": ended,
            "truncations": t["truncated"].long(),
            "effective_n_steps": torch.ones_like(ended),
        },
    }


def run(ref: Path) -> dict:
    s = SETTINGS
    nets = load_module(ref / "fast_td3" / "fast_td3.py", "fast_td3_reference_nets")
    torch.manual_seed(1)
    actor = nets.Actor(
        OBS, ACT, num_envs=1, init_scale=s["init_scale"], hidden_dim=s["actor_hidden_dim"]
    )
    critic_kwargs = dict(
        n_obs=OBS, n_act=ACT, num_atoms=s["num_atoms"], v_min=s["v_min"], v_max=s["v_max"],
        hidden_dim=s["critic_hidden_dim"], sim_type="", sim_dimension=64, seq_len=8,
    )  # fmt: skip
    qnet, qnet_target = nets.Critic(**critic_kwargs), nets.Critic(**critic_kwargs)
    qnet_target.load_state_dict(qnet.state_dict())
    init = state(actor=actor, qnet=qnet)

    # the smoothing noise: every torch.randn_like draw recorded (the test replays them)
    noise: list[torch.Tensor] = []
    original = torch.randn_like

    def recorded(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        draw = original(x, *args, **kwargs)
        noise.append(draw.clone())
        return draw

    torch.randn_like = recorded
    args = types.SimpleNamespace(
        gamma=s["gamma"], use_cdq=s["use_cdq"], disable_bootstrap=False,
        use_grad_norm_clipping=False, max_grad_norm=0.0,
    )  # fmt: skip
    names = {
        "torch": torch, "F": F, "autocast": autocast, "args": args,
        "envs": types.SimpleNamespace(asymmetric_obs=False), "actor": actor, "qnet": qnet,
        "qnet_target": qnet_target,
        "q_optimizer": torch.optim.AdamW(
            list(qnet.parameters()), lr=torch.tensor(s["critic_lr"]),
            weight_decay=s["weight_decay"],
        ),
        "actor_optimizer": torch.optim.AdamW(
            list(actor.parameters()), lr=torch.tensor(s["actor_lr"]),
            weight_decay=s["weight_decay"],
        ),
        "scaler": GradScaler(enabled=False), "amp_enabled": False, "amp_device_type": "cpu",
        "amp_dtype": torch.bfloat16, "policy_noise": s["policy_noise"],
        "noise_clip": s["noise_clip"], "action_low": -1.0, "action_high": 1.0,
        "device": torch.device("cpu"),
    }  # fmt: skip
    fns = update_functions(ref / "fast_td3" / "train.py", names)

    inputs = batches()
    # the pieces, on the initial weights and the first batch (the noise draw replayed)
    data = reference_data(inputs[0])
    torch.manual_seed(2)
    smoothing = torch.randn(BATCH, ACT)
    with torch.no_grad():
        clipped = (smoothing * s["policy_noise"]).clamp(-s["noise_clip"], s["noise_clip"])
        next_action = (actor(data["next"]["observations"]) + clipped).clamp(-1.0, 1.0)
        bootstrap = 1.0 - torch.as_tensor(inputs[0]["terminated"])
        discount = s["gamma"] ** data["next"]["effective_n_steps"]
        proj1, proj2 = qnet_target.projection(
            data["next"]["observations"], next_action, data["next"]["rewards"], bootstrap,
            discount,
        )  # fmt: skip
        logits1, logits2 = qnet(data["observations"], data["actions"])
    pieces = {
        "smoothing_noise": floats(smoothing),
        "logits": [floats(logits1), floats(logits2)],
        "projected": [floats(proj1), floats(proj2)],
        "projected_value": [
            floats(qnet_target.get_value(proj1)),
            floats(qnet_target.get_value(proj2)),
        ],
    }

    torch.manual_seed(3)
    noise.clear()
    updates = []
    for step in range(VECTOR_STEPS):
        for i in range(NUM_UPDATES):
            logs: dict = {}
            data = reference_data(inputs[step * NUM_UPDATES + i])
            logs = fns["update_main"](data, logs)
            record = {"critic_loss": floats(logs["qf_loss"])}
            if i % s["policy_frequency"] == 1:  # main()'s policy delay for num_updates > 1
                logs = fns["update_pol"](data, logs)
                record["actor_loss"] = floats(logs["actor_loss"])
            fns["soft_update"](qnet, qnet_target, s["tau"])
            updates.append(record)
    torch.randn_like = original
    assert len(noise) == len(updates), "one smoothing draw per critic update"
    return {
        "reference": {"repo": REPO, "commit": COMMIT, "torch": torch.__version__},
        "command": (
            "OMP_NUM_THREADS=1 /work/side/fasttd3/venv/bin/python "
            "benchmarks/parity/fast_td3_reference.py --fasttd3 <FastTD3@229ed59b> "
            "--out tests/golden/fast_td3.json"
        ),
        "settings": {**s, "batch": BATCH, "obs_dim": OBS, "action_dim": ACT},
        "inputs": {
            "init": init,
            "batches": [{k: floats(torch.as_tensor(v)) for k, v in b.items()} for b in inputs],
            "noise": [floats(n) for n in noise],
        },
        "pieces": pieces,
        "updates": updates,
        "final": state(actor=actor, qnet=qnet, qnet_target=qnet_target),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fasttd3", type=Path, required=True, help="FastTD3 source tree")
    parser.add_argument("--out", type=Path, default=Path("tests/golden/fast_td3.json"))
    cli = parser.parse_args()
    cli.out.write_text(json.dumps(run(cli.fasttd3), separators=(",", ":")) + "\n")
    print(f"wrote {cli.out}")


if __name__ == "__main__":
    main()
