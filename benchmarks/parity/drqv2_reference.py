"""DrQ-v2 parity: facebookresearch/drqv2's own ``DrQV2Agent`` (``drqv2.py``, ``utils.py``,
imported by path, unchanged) on the weights, batches, schedule steps and torch seeds of
``benchmarks/parity/drqv2_data.py``; writes tests/golden/drqv2.json (each update's
metrics, the weights after the updates as ``drqv2_data.digest``, greedy and sampled
actions), which ``tests/test_drqv2.py`` checks rlcore's DrQ-v2 against.

Run (side environment: a venv with torch 2.13 and hydra-core, e.g. the CleanRL parity
venv /work/side/parity-online/venv plus ``pip install hydra-core``; the reference unpacked
with ``git --git-dir=<mirror of github:facebookresearch/drqv2> archive c0c650b drqv2.py
utils.py | tar -x -C /work/side/parity-drqv2/src``)::

    OMP_NUM_THREADS=1 /work/side/parity-online/venv/bin/python \\
        benchmarks/parity/drqv2_reference.py --drqv2 /work/side/parity-drqv2/src

Each update gets a batch as the reference's replay loader yields it (obs, action, reward,
discount, next_obs; the discount gamma^3, 0 on terminal rows) and runs after
``torch.manual_seed(seed)``, so its draws (two shifts, two noise tensors) are reproducible.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
GOLDEN = HERE.parents[1] / "tests" / "golden" / "drqv2.json"
COMMIT = "c0c650b"


def data_module():
    """benchmarks/parity/drqv2_data.py, by path (numpy only; rlcore is not installed here)."""
    spec = importlib.util.spec_from_file_location("drqv2_data", HERE / "drqv2_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drqv2", type=Path, required=True, help="unpacked drqv2@c0c650b")
    parser.add_argument("--out", type=Path, default=GOLDEN)
    args = parser.parse_args()
    sys.path.insert(0, str(args.drqv2.resolve()))
    import drqv2  # noqa: PLC0415 (the fetched reference, by path)

    data = data_module()
    torch.set_num_threads(1)
    init, final, duration = data.STD_SCHEDULE
    agent = drqv2.DrQV2Agent(
        obs_shape=data.OBS_SHAPE, action_shape=(data.ACTION_DIM,), device="cpu", lr=data.LR,
        feature_dim=data.FEATURE_DIM, hidden_dim=data.HIDDEN, critic_target_tau=data.TAU,
        num_expl_steps=0, update_every_steps=2,
        stddev_schedule=f"linear({init},{final},{duration})", stddev_clip=data.STD_CLIP,
        use_tb=True,
    )  # fmt: skip
    weights = {k: torch.as_tensor(v) for k, v in data.weights().items()}
    for net in ("encoder", "actor", "critic"):
        module = getattr(agent, net)
        module.load_state_dict(
            {k[len(net) + 1 :]: v for k, v in weights.items() if k.startswith(net + ".")}
        )
    agent.critic_target.load_state_dict(agent.critic.state_dict())

    updates = []
    for batch, step, seed in zip(data.batches(), data.UPDATE_STEPS, data.UPDATE_SEEDS):
        torch.manual_seed(seed)
        fields = tuple(batch[k] for k in ("obs", "action", "reward", "discount", "next_obs"))
        metrics = agent.update(iter([fields]), step)
        updates.append({k: metrics[k] for k in
                        ("critic_loss", "critic_q1", "critic_q2", "critic_target_q", "actor_loss")})  # fmt: skip

    state = {}
    for net in ("encoder", "actor", "critic", "critic_target"):
        for k, v in getattr(agent, net).state_dict().items():
            state[f"{net}.{k}"] = v.numpy()
    observations = data.act_observations()
    with torch.no_grad():
        greedy = [agent.act(o, data.ACT_STEP, eval_mode=True).tolist() for o in observations]
        torch.manual_seed(data.ACT_SEED)
        sampled = [agent.act(o, data.ACT_STEP, eval_mode=False).tolist() for o in observations]
    golden = {
        "reference": {"repo": "facebookresearch/drqv2", "commit": COMMIT,
                      "code": "drqv2.py DrQV2Agent.update / act; utils.py TruncatedNormal, schedule",
                      "torch": torch.__version__},
        "command": "OMP_NUM_THREADS=1 /work/side/parity-online/venv/bin/python "
                   "benchmarks/parity/drqv2_reference.py --drqv2 <drqv2@c0c650b>",
        "inputs": "benchmarks/parity/drqv2_data.py (weights(), batches(), act_observations(), "
                  "UPDATE_STEPS / UPDATE_SEEDS, ACT_STEP / ACT_SEED)",
        "updates": updates,
        "weights": data.digest(state),
        "greedy": greedy,
        "sampled": sampled,
    }  # fmt: skip
    args.out.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KB)")
    print(json.dumps(updates, indent=1))
    print("greedy", np.round(greedy, 6).tolist(), "sampled", np.round(sampled, 6).tolist())


if __name__ == "__main__":
    main()
