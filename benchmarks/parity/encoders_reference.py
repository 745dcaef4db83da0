"""Image-encoder parity: CleanRL's Nature-DQN and IMPALA torsos and DrQ-v2's encoder and
random shift, run from the fetched references' own code on rlcore's weights and images
(``benchmarks/parity/encoders_data.py``); writes tests/golden/encoders.json.

Run (side environment: any venv with torch, numpy, hydra-core and omegaconf, e.g. the RLPD
harness's /work/side/parity-jax/venv; the references unpacked with ``git archive`` of the
fetched github:vwxyzjn/cleanrl (cleanrl/dqn_atari.py, ppo_procgen.py) into
/work/side/parity-cleanrl/src and of github:facebookresearch/drqv2 into
/work/side/parity-drqv2/src)::

    PYTHONPATH=. /work/side/parity-jax/venv/bin/python benchmarks/parity/encoders_reference.py

CleanRL's scripts import their whole training stack (tyro, envpool, SB3's Atari wrappers)
at the top, so the harness executes only their network definitions (the ``class`` and
``layer_init`` statements, taken from the files by ``ast``, unchanged). DrQ-v2's module
imports as it is. ``torch.randint`` is fed the recorded shifts for ``RandomShiftsAug``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import torch
from torch import nn

from rlcore.benchmarks.parity.encoders_data import (
    ENCODER_INPUTS,
    SHIFT_INPUT,
    SHIFT_PAD,
    encoder_with_weights,
    images,
    shifts,
)

CLEANRL = Path("/work/side/parity-cleanrl/src")
DRQV2 = Path("/work/side/parity-drqv2/src")
MIRRORS = Path("/work/.mirror")
GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden" / "encoders.json"


def definitions(path: Path, names: set[str]) -> types.SimpleNamespace:
    """The named top-level classes and functions of a script, executed on their own."""
    tree = ast.parse(path.read_text())
    keep = [n for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name in names]
    namespace = {"nn": nn, "torch": torch, "np": np, "Categorical": torch.distributions.Categorical}
    exec(compile(ast.Module(keep, []), str(path), "exec"), namespace)  # noqa: S102
    return types.SimpleNamespace(**namespace)


def load_renamed(module: nn.Module, state: dict[str, np.ndarray], names: dict[str, str]) -> None:
    """Load our arrays into a reference module (our name -> its name), every key used."""
    theirs = {names[k]: torch.as_tensor(v) for k, v in state.items()}
    missing, unexpected = module.load_state_dict(theirs, strict=False)
    assert not unexpected and all(k.startswith("actor") or k.startswith("critic") or
                                  k.startswith("network.9") for k in missing), (missing, unexpected)


def nature() -> np.ndarray:
    ref = definitions(CLEANRL / "cleanrl" / "dqn_atari.py", {"QNetwork"})
    env = types.SimpleNamespace(single_action_space=types.SimpleNamespace(n=6))
    network = ref.QNetwork(env)
    _, state = encoder_with_weights("nature", 1)
    names = {"convs.0.weight": "network.0.weight", "convs.0.bias": "network.0.bias",
             "convs.2.weight": "network.2.weight", "convs.2.bias": "network.2.bias",
             "convs.4.weight": "network.4.weight", "convs.4.bias": "network.4.bias",
             "head.0.weight": "network.7.weight", "head.0.bias": "network.7.bias"}  # fmt: skip
    load_renamed(network, state, names)
    x = torch.as_tensor(images(ENCODER_INPUTS["nature"][0], 11)).float()
    with torch.no_grad():  # the torso: every layer but the last (the Q-values)
        return network.network[:-1](x / 255.0).numpy()


def impala() -> np.ndarray:
    ref = definitions(CLEANRL / "cleanrl" / "ppo_procgen.py",
                      {"layer_init", "ResidualBlock", "ConvSequence", "Agent"})  # fmt: skip
    batch, c, h, w = ENCODER_INPUTS["impala"][0]
    envs = types.SimpleNamespace(
        single_observation_space=types.SimpleNamespace(shape=(h, w, c)),
        single_action_space=types.SimpleNamespace(n=15),
    )
    agent = ref.Agent(envs)
    encoder, state = encoder_with_weights("impala", 2)
    names = {}
    for i in range(3):  # ours: convs.{4i} conv, {4i+1} pool, {4i+2}, {4i+3} residual blocks
        names[f"convs.{4 * i}.weight"] = f"network.{i}.conv.weight"
        names[f"convs.{4 * i}.bias"] = f"network.{i}.conv.bias"
        for b in range(2):
            for conv in ("conv0", "conv1"):
                for kind in ("weight", "bias"):
                    names[f"convs.{4 * i + 2 + b}.{conv}.{kind}"] = (
                        f"network.{i}.res_block{b}.{conv}.{kind}"
                    )
    names |= {"head.0.weight": "network.5.weight", "head.0.bias": "network.5.bias"}
    load_renamed(agent, state, names)
    x = torch.as_tensor(images(ENCODER_INPUTS["impala"][0], 12))
    with torch.no_grad():  # its input is NHWC: our images permuted to its layout
        return agent.network(x.permute(0, 2, 3, 1).float().permute((0, 3, 1, 2)) / 255.0).numpy()


def drq() -> tuple[np.ndarray, np.ndarray]:
    sys.path.insert(0, str(DRQV2))
    import drqv2  # noqa: PLC0415 (the fetched reference, by path)

    shape = ENCODER_INPUTS["drq"][0]
    encoder = drqv2.Encoder(shape[1:])
    _, state = encoder_with_weights("drq", 3)
    names = {f"convs.{i}.{k}": f"convnet.{i}.{k}" for i in (0, 2, 4, 6) for k in ("weight", "bias")}
    encoder.load_state_dict({names[k]: torch.as_tensor(v) for k, v in state.items()})
    x = torch.as_tensor(images(shape, 13)).float()
    recorded = torch.as_tensor(shifts()).reshape(-1, 1, 1, 2)
    real_randint = torch.randint
    torch.randint = lambda low, high, size, device=None, dtype=None: recorded.to(dtype)  # noqa: ARG005
    try:
        augmented = drqv2.RandomShiftsAug(SHIFT_PAD)(torch.as_tensor(images(SHIFT_INPUT, 14)).float())
    finally:
        torch.randint = real_randint
    with torch.no_grad():
        return encoder(x).numpy(), augmented.numpy()


def commit(repo: str) -> str:
    git_dir = MIRRORS / repo.replace("/", "+") / "repo"
    return subprocess.check_output(["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"]).decode().strip()


def main() -> None:
    torch.set_num_threads(1)
    drq_features, shifted = drq()
    golden = {
        "references": {
            "cleanrl": {"repo": "vwxyzjn/cleanrl", "commit": commit("vwxyzjn/cleanrl"),
                        "code": "cleanrl/dqn_atari.py QNetwork; cleanrl/ppo_procgen.py Agent"},
            "drqv2": {"repo": "facebookresearch/drqv2", "commit": commit("facebookresearch/drqv2"),
                      "code": "drqv2.py Encoder, RandomShiftsAug"},
            "torch": torch.__version__,
            "command": "PYTHONPATH=. /work/side/parity-jax/venv/bin/python "
                       "benchmarks/parity/encoders_reference.py",
        },
        "inputs": "benchmarks/parity/encoders_data.py (weights seeds nature 1, impala 2, drq 3; "
                  "images seeds 11, 12, 13, shift images 14, shifts())",
        "nature": nature().tolist(),
        "impala": impala().tolist(),
        "drq": drq_features.tolist(),
        "shift": shifted.tolist(),
    }  # fmt: skip
    GOLDEN.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
