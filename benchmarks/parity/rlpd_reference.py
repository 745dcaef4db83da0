"""RLPD parity: run ikostrikov/rlpd's ``SACLearner.update`` (10 LayerNorm critics, target
min over a random 2, entropy backup, utd 20, then one actor and temperature step) from
rlcore's initial weights on recorded batches and noise, and write tests/golden/rlpd.json.
Also the reference's antmaze flags (README: 3 hidden layers, ``num_min_qs=1``,
``backup_entropy=False``; rewards - 1 as train_finetuning.py shifts them), aligned.

Run (side environment with jax 0.9.2, outside the repository; reference unpacked with
``git archive`` of the fetched github:ikostrikov/rlpd into /work/side/parity-jax/src)::

    python3 -m venv /work/side/parity-jax/venv
    /work/side/parity-jax/venv/bin/pip install jax==0.9.2 jaxlib==0.9.2 flax==0.12.6 \\
        optax==0.2.8 tensorflow-probability==0.25.0 ml_collections
    OMP_NUM_THREADS=1 /work/side/parity-jax/venv/bin/python benchmarks/parity/rlpd_reference.py

The reference's update runs unjitted (``jax.disable_jit``) so its Gaussian samples and
critic subsets come from the recorded inputs (``benchmarks/parity/jax_refs_data.py``);
everything else is the reference's code. Two variants:
* ``reference``: the reference as it is (log-std clipped to [-20, 2], flax LayerNorm eps 1e-6);
* ``aligned``: rlcore's two documented network departures put into the reference's
  modules (log-std squashed by tanh into [-5, 2]; LayerNorm eps 1e-5), nothing else.
"""

from __future__ import annotations

import functools
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
from jax_refs_harness import SRC, Feed, commit, feed_gaussians, stub_package, versions, write_golden

from rlcore.benchmarks.parity.jax_refs_data import RLPD_RECIPES, RLPD_SIZES, rlpd_inputs

REPO = "ikostrikov/rlpd"
ROOT = SRC / REPO.replace("/", "+")
sys.path.insert(0, str(ROOT))
stub_package("gym", Space=object)  # only type hints and spaces' .sample() in create()
stub_package("rlpd", ROOT / "rlpd")
stub_package("rlpd.agents", ROOT / "rlpd" / "agents")  # skip DrQ (pixels)
stub_package("rlpd.data", ROOT / "rlpd" / "data")  # skip replay buffers (gym.spaces)
stub_package("rlpd.data.dataset", DatasetDict=dict)

import flax.linen as nn  # noqa: E402
import rlpd.agents.sac.sac_learner as sac_learner  # noqa: E402
import rlpd.distributions.tanh_normal as tanh_normal  # noqa: E402
import rlpd.networks.mlp as mlp_module  # noqa: E402

S = RLPD_SIZES
NOISE = Feed()
SUBSETS = Feed()
feed_gaussians(NOISE)


def subsample_ensemble(key, params, num_sample, num_qs):  # noqa: ANN001, ANN201, ARG001
    """The reference's subset of target critics, indices from the recorded draws."""
    index = jnp.asarray(SUBSETS.next((num_sample,)))
    return jax.tree_util.tree_map(lambda p: p[index], params)


sac_learner.subsample_ensemble = subsample_ensemble


def align(on: bool) -> None:
    """Put rlcore's log-std squash and LayerNorm eps into the reference's modules (or not)."""
    if on:
        squash = types.SimpleNamespace(
            **{k: getattr(jnp, k) for k in dir(jnp) if not k.startswith("__")}
        )
        squash.clip = lambda x, lo, hi: lo + 0.5 * (hi - lo) * (jnp.tanh(x) + 1.0)  # ours, nets.py
        squash_normal = functools.partial(tanh_normal.Normal, log_std_min=-5.0)
        linen = types.SimpleNamespace(
            **{k: getattr(nn, k) for k in dir(nn) if not k.startswith("__")}
        )
        linen.LayerNorm = functools.partial(nn.LayerNorm, epsilon=1e-5)
        tanh_normal.jnp, mlp_module.nn = squash, linen
        sac_learner.TanhNormal = functools.partial(squash_normal, squash_tanh=True)
    else:
        tanh_normal.jnp, mlp_module.nn = jnp, nn
        sac_learner.TanhNormal = tanh_normal.TanhNormal


class Box:
    def __init__(self, n: int) -> None:
        self.shape = (n,)

    def sample(self) -> np.ndarray:
        return np.zeros(self.shape, np.float32)


def to_flax(actor: dict, critic: dict, layers: int) -> tuple[dict, dict]:
    """rlcore state_dict arrays -> the reference's parameter trees (``layers`` hidden)."""
    a = S["act_dim"]
    dense = lambda w, b: {"kernel": jnp.asarray(w.T), "bias": jnp.asarray(b)}  # noqa: E731
    out = f"net.{2 * layers}"  # rlcore's MLP: Linear modules at 0, 2, 4, ...
    actor_tree = {
        "MLP_0": {
            f"Dense_{i}": dense(actor[f"net.{2 * i}.weight"], actor[f"net.{2 * i}.bias"])
            for i in range(layers)
        },
        "OutputDenseMean": dense(actor[f"{out}.weight"][:a], actor[f"{out}.bias"][:a]),
        "OutputDenseLogStd": dense(actor[f"{out}.weight"][a:], actor[f"{out}.bias"][a:]),
    }  # fmt: skip
    c = {k: jnp.asarray(v) for k, v in critic.items()}
    mlp = {
        f"Dense_{i}": {
            "kernel": c[f"net.hidden_layers.{i}.weight"],
            "bias": c[f"net.hidden_layers.{i}.bias"][:, 0],
        }
        for i in range(layers)
    }
    mlp |= {
        f"LayerNorm_{i}": {
            "scale": c[f"net.norms.{i}.weight"][:, 0],
            "bias": c[f"net.norms.{i}.bias"][:, 0],
        }
        for i in range(layers)
    }
    critic_tree = {
        "VmapStateActionValue_0": {
            "MLP_0": mlp,
            "Dense_0": {
                "kernel": c["net.output_layer.weight"],
                "bias": c["net.output_layer.bias"][:, 0],
            },
        }
    }
    return actor_tree, critic_tree  # fmt: skip


def from_flax(actor_tree: dict, critic_tree: dict, layers: int) -> tuple[dict, dict]:
    """The reference's parameter trees -> rlcore state_dict arrays."""
    n = lambda x: np.asarray(x, np.float32)  # noqa: E731
    m = actor_tree["MLP_0"]
    mean, log_std = actor_tree["OutputDenseMean"], actor_tree["OutputDenseLogStd"]
    actor = {}
    for i in range(layers):
        actor[f"net.{2 * i}.weight"] = n(m[f"Dense_{i}"]["kernel"]).T
        actor[f"net.{2 * i}.bias"] = n(m[f"Dense_{i}"]["bias"])
    actor[f"net.{2 * layers}.weight"] = np.concatenate([n(mean["kernel"]).T, n(log_std["kernel"]).T])
    actor[f"net.{2 * layers}.bias"] = np.concatenate([n(mean["bias"]), n(log_std["bias"])])
    v = critic_tree["VmapStateActionValue_0"]
    critic = {}
    for i in range(layers):
        critic[f"net.hidden_layers.{i}.weight"] = n(v["MLP_0"][f"Dense_{i}"]["kernel"])
        critic[f"net.hidden_layers.{i}.bias"] = n(v["MLP_0"][f"Dense_{i}"]["bias"])[:, None]
        critic[f"net.norms.{i}.weight"] = n(v["MLP_0"][f"LayerNorm_{i}"]["scale"])[:, None]
        critic[f"net.norms.{i}.bias"] = n(v["MLP_0"][f"LayerNorm_{i}"]["bias"])[:, None]
    critic["net.output_layer.weight"] = n(v["Dense_0"]["kernel"])
    critic["net.output_layer.bias"] = n(v["Dense_0"]["bias"])[:, None]
    return actor, critic


def run(aligned: bool, recipe: str = "default") -> dict:
    """The reference's updates; ``recipe`` "antmaze": its README's antmaze flags."""
    align(aligned)
    inputs = rlpd_inputs(recipe=recipe)
    r = RLPD_RECIPES[recipe]
    agent = sac_learner.SACLearner.create(
        0,
        Box(S["obs_dim"]),
        Box(S["act_dim"]),
        hidden_dims=(S["hidden"],) * r["layers"],
        num_qs=S["members"],
        num_min_qs=r["subset"],
        critic_layer_norm=True,
        backup_entropy=r["backup_entropy"],
    )  # RLPD's settings: lr 3e-4, init temperature 1, target entropy -|A|/2
    actor_tree, critic_tree = to_flax(inputs["actor"], inputs["critic"], r["layers"])
    agent = agent.replace(
        actor=agent.actor.replace(params=actor_tree),
        critic=agent.critic.replace(params=critic_tree),
        target_critic=agent.target_critic.replace(params=critic_tree),
    )
    critic_losses: list[float] = []
    update_critic = sac_learner.SACLearner.update_critic

    def recording(self, batch):  # noqa: ANN001, ANN202
        new, info = update_critic(self, batch)
        critic_losses.append(float(info["critic_loss"]))
        return new, info

    sac_learner.SACLearner.update_critic = recording
    losses = []
    with jax.disable_jit():
        for batch, noise in zip(inputs["batches"], inputs["noise"]):
            NOISE.extend([*noise["critic"], noise["actor"]])
            SUBSETS.extend(list(noise["subsets"]))
            ref_batch = {
                "observations": batch["obs"], "actions": batch["action"],
                "rewards": batch["reward"], "masks": 1.0 - batch["terminated"],
                "next_observations": batch["next_obs"],
            }  # fmt: skip
            critic_losses.clear()
            agent, info = agent.update(ref_batch, S["utd"])
            assert NOISE.empty() and SUBSETS.empty()
            losses.append({
                "critic_losses": list(critic_losses),  # per critic step, mean over members
                "actor_loss": float(info["actor_loss"]), "entropy": float(info["entropy"]),
                "temperature_loss": float(info["temperature_loss"]),
            })  # fmt: skip
    sac_learner.SACLearner.update_critic = update_critic
    actor, critic = from_flax(agent.actor.params, agent.critic.params, r["layers"])
    _, target = from_flax(agent.actor.params, agent.target_critic.params, r["layers"])
    return {
        "losses": losses,
        "actor": actor,
        "critic": critic,
        "target_critic": target,
        "log_alpha": float(agent.temp.params["log_temp"]),
    }


def main() -> None:
    aligned, as_is = run(aligned=True), run(aligned=False)
    antmaze = run(aligned=True, recipe="antmaze")
    del antmaze["target_critic"]  # size, as the as-is variant
    diff = max(
        float(np.abs(aligned["critic"][k] - as_is["critic"][k]).max()) for k in aligned["critic"]
    )
    print(f"aligned vs as-is reference: max |critic param diff| {diff:.3g}")
    del as_is["target_critic"]  # size: the as-is variant keeps losses, actor, critic, alpha
    write_golden("rlpd", {
        "reference": {"repo": REPO, "commit": commit(REPO),
                      "code": "rlpd/agents/sac/sac_learner.py SACLearner.update",
                      "command": "OMP_NUM_THREADS=1 /work/side/parity-jax/venv/bin/python "
                                 "benchmarks/parity/rlpd_reference.py", **versions()},
        "sizes": S,
        "inputs": "benchmarks/parity/jax_refs_data.py rlpd_inputs(seed=0)",
        "aligned": aligned,
        "reference_as_is": as_is,
        "antmaze": {"recipe": RLPD_RECIPES["antmaze"], **antmaze},
    })  # fmt: skip


if __name__ == "__main__":
    main()
