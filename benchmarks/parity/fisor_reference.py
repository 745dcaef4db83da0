"""FISOR parity: run ZhengYinan-AIR/FISOR's ``FISOR.update`` (two weighted denoising steps,
then V, Q, V_h, Q_h on the first 256 rows) from rlcore's initial weights on recorded
batches and noise, and write tests/golden/fisor.json.

Run (side environment and reference checkout as in ``rlpd_reference.py``'s header)::

    OMP_NUM_THREADS=1 /work/side/parity-jax/venv/bin/python benchmarks/parity/fisor_reference.py

Everything is the reference's code (its expectile losses, the Hamilton-Jacobi target, the
feasibility-guided weights, the weighted epsilon loss, AdamW with weight decay 0, the EMA
actor, its update order) except:
* the denoiser: FISOR's LayerNorm/dropout ``MLPResNet`` with learnable Fourier time
  features is replaced by a flax copy of rlcore's ``DenoisingMLP`` (a documented
  departure of algos/safe/fisor.py), so both sides start from the same weights;
* the actor's learning rate is constant 3e-4 (``decay_steps=None``): the cosine over 3e6
  steps is another helper's item and moves the rate by < 1e-11 here;
* the batch's ``masks`` are 1 - terminated (explicit terminal rows, no timeouts), and the
  costs come relabelled as the reference's dataset does (+25 where cost > 0, else -1);
* the update runs unjitted with the DDPM timesteps and noise from the recorded inputs.
"""

from __future__ import annotations

import sys
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training.train_state import TrainState
from jax_refs_harness import SRC, Feed, commit, stub_package, versions, write_golden

from rlcore.benchmarks.parity.jax_refs_data import FISOR_SIZES, fisor_inputs

REPO = "ZhengYinan-AIR/FISOR"
ROOT = SRC / REPO.replace("/", "+")
sys.path.insert(0, str(ROOT))
gym_spaces = types.SimpleNamespace(Space=object, Box=object)
stub_package("gym", spaces=gym_spaces)  # type hints only
stub_package("jaxrl5", ROOT / "jaxrl5")
stub_package("jaxrl5.data", ROOT / "jaxrl5" / "data")  # skip dsrl / gym datasets
stub_package("jaxrl5.data.dataset", DatasetDict=dict)

import flax  # noqa: E402
import jaxrl5.agents.fisor.fisor as fisor_module  # noqa: E402
from jaxrl5.networks import get_weight_decay_mask as frozen_mask  # noqa: E402


def get_weight_decay_mask(params: dict) -> dict:
    """The reference's mask as a plain dict: flax 0.12 parameters are dicts, not the
    FrozenDicts flax 0.5 made (optax refuses the mixed trees). Decay is 0 anyway."""
    return flax.core.unfreeze(frozen_mask(params))


fisor_module.get_weight_decay_mask = get_weight_decay_mask

S = FISOR_SIZES
TIMES, EPS = Feed(), Feed()
_random = types.SimpleNamespace(**{k: getattr(jax.random, k) for k in dir(jax.random)})
_random.randint = lambda key, shape, low, high: jnp.asarray(TIMES.next(shape))
_random.normal = lambda key, shape: jnp.asarray(EPS.next(shape))
_jax = types.SimpleNamespace(**{k: getattr(jax, k) for k in dir(jax) if not k.startswith("__")})
_jax.random = _random
fisor_module.jax = _jax  # the reference's update_actor draws its timesteps and noise here


def mish(x: jnp.ndarray) -> jnp.ndarray:
    return x * jnp.tanh(jax.nn.softplus(x))


class RlcoreDenoiser(nn.Module):
    """rlcore.generative.DenoisingMLP in flax (horizon 1): [obs, x, time embedding] ->
    input layer -> residual blocks (Mish, Dense, Mish, Dense) -> Mish -> Dense; the time
    embedding is sinusoidal features -> Dense -> Mish -> Dense."""

    hidden: int
    blocks: int
    time_dim: int
    action_dim: int

    @nn.compact
    def __call__(self, obs, x, time, training: bool = False):  # noqa: ANN001, ANN204, ARG002
        t = time[:, 0].astype(jnp.float32)
        exponents = jnp.arange(0, self.time_dim, 2, dtype=jnp.float32) / self.time_dim
        angle = t[:, None] / jnp.power(1e4, exponents)
        features = jnp.stack([jnp.sin(angle), jnp.cos(angle)], -1).reshape(len(t), -1)
        temb = nn.Dense(self.time_dim, name="time_1")(
            mish(nn.Dense(2 * self.time_dim, name="time_0")(features))
        )
        h = nn.Dense(self.hidden, name="inp")(jnp.concatenate([obs, x, temb], -1))
        for j in range(self.blocks):
            r = nn.Dense(self.hidden, name=f"block{j}_0")(mish(h))
            h = h + nn.Dense(self.hidden, name=f"block{j}_1")(mish(r))
        return nn.Dense(self.action_dim, name="out")(mish(h))


def dense(w: np.ndarray, b: np.ndarray) -> dict:
    return {"kernel": jnp.asarray(w.T), "bias": jnp.asarray(b)}


def denoiser_tree(p: dict) -> dict:
    tree = {
        "time_0": dense(p["net.time.net.0.weight"], p["net.time.net.0.bias"]),
        "time_1": dense(p["net.time.net.2.weight"], p["net.time.net.2.bias"]),
        "inp": dense(p["net.inp.weight"], p["net.inp.bias"]),
        "out": dense(p["net.out.1.weight"], p["net.out.1.bias"]),
    }
    for j in range(2):
        for k, i in enumerate((1, 3)):
            tree[f"block{j}_{k}"] = dense(
                p[f"net.blocks.{j}.{i}.weight"], p[f"net.blocks.{j}.{i}.bias"]
            )
    return tree


def denoiser_arrays(tree: dict) -> dict:
    n = lambda x: np.asarray(x, np.float32)  # noqa: E731
    names = {"time_0": "net.time.net.0", "time_1": "net.time.net.2", "inp": "net.inp",
             "out": "net.out.1"}  # fmt: skip
    names |= {
        f"block{j}_{k}": f"net.blocks.{j}.{i}" for j in range(2) for k, i in enumerate((1, 3))
    }
    out = {}
    for flax_name, ours in names.items():
        out[f"{ours}.weight"] = n(tree[flax_name]["kernel"]).T
        out[f"{ours}.bias"] = n(tree[flax_name]["bias"])
    return out


def critic_tree(p: dict) -> dict:
    c = {k: jnp.asarray(v) for k, v in p.items()}
    mlp = {
        f"Dense_{i}": {
            "kernel": c[f"net.hidden_layers.{i}.weight"],
            "bias": c[f"net.hidden_layers.{i}.bias"][:, 0],
        }
        for i in range(2)
    }
    return {"VmapStateActionValue_0": {"MLP_0": mlp, "Dense_0": {
        "kernel": c["net.output_layer.weight"], "bias": c["net.output_layer.bias"][:, 0]}}}  # fmt: skip


def critic_arrays(tree: dict) -> dict:
    n = lambda x: np.asarray(x, np.float32)  # noqa: E731
    v = tree["VmapStateActionValue_0"]
    out = {}
    for i in range(2):
        out[f"net.hidden_layers.{i}.weight"] = n(v["MLP_0"][f"Dense_{i}"]["kernel"])
        out[f"net.hidden_layers.{i}.bias"] = n(v["MLP_0"][f"Dense_{i}"]["bias"])[:, None]
    out["net.output_layer.weight"] = n(v["Dense_0"]["kernel"])
    out["net.output_layer.bias"] = n(v["Dense_0"]["bias"])[:, None]
    return out


def value_tree(p: dict) -> dict:
    return {"MLP_0": {"Dense_0": dense(p["0.weight"], p["0.bias"]),
                      "Dense_1": dense(p["2.weight"], p["2.bias"])},
            "OutputVDense": dense(p["4.weight"], p["4.bias"])}  # fmt: skip


def value_arrays(tree: dict) -> dict:
    n = lambda x: np.asarray(x, np.float32)  # noqa: E731
    layers = [tree["MLP_0"]["Dense_0"], tree["MLP_0"]["Dense_1"], tree["OutputVDense"]]
    out = {}
    for i, layer in zip((0, 2, 4), layers):
        out[f"{i}.weight"], out[f"{i}.bias"] = n(layer["kernel"]).T, n(layer["bias"])
    return out


class Box:
    def __init__(self, n: int) -> None:
        self.shape = (n,)

    def sample(self) -> np.ndarray:
        return np.zeros(self.shape, np.float32)


def run() -> dict:
    inputs = fisor_inputs()
    h = S["hidden"]
    agent = fisor_module.FISOR.create(
        0,
        Box(S["obs_dim"]),
        Box(S["act_dim"]),
        actor_architecture="mlp",
        critic_hidden_dims=(h, h),
        actor_hidden_dims=(h, h, h),
        decay_steps=None,
        cost_temperature=5.0,
        reward_temperature=3.0,
        T=S["steps"],
        critic_hyperparam=0.9,
        cost_critic_hyperparam=0.9,
        critic_type="hj",
        cost_ub=150.0,
        beta_schedule="vp",
        actor_objective="feasibility",
        sampling_method="ddpm",
        extract_method="minqc",
        actor_tau=0.001,
        N=16,
    )  # FISOR's configs/train_config.py values (widths shrunk, constant actor lr)
    denoiser = RlcoreDenoiser(h, 2, S["time_dim"], S["act_dim"])
    tx = optax.adamw(learning_rate=3e-4, weight_decay=0.0, mask=get_weight_decay_mask)
    actor = denoiser_tree(inputs["actor"])
    critic, cost_critic = critic_tree(inputs["critic"]), critic_tree(inputs["cost_critic"])
    agent = agent.replace(
        score_model=TrainState.create(apply_fn=denoiser.apply, params=actor, tx=tx),
        target_score_model=agent.target_score_model.replace(apply_fn=denoiser.apply, params=actor),
        critic=agent.critic.replace(params=critic),
        target_critic=agent.target_critic.replace(params=critic),
        value=agent.value.replace(params=value_tree(inputs["value"])),
        safe_critic=agent.safe_critic.replace(params=cost_critic),
        safe_target_critic=agent.safe_target_critic.replace(params=cost_critic),
        safe_value=agent.safe_value.replace(params=value_tree(inputs["cost_value"])),
    )
    halves: list[dict] = []
    update_actor = fisor_module.FISOR.update_actor

    def recording(self, batch):  # noqa: ANN001, ANN202
        new, info = update_actor(self, batch)
        halves.append(
            {"actor_loss": float(info["actor_loss"]), "weight_mean": float(info["weights"])}
        )
        return new, info

    fisor_module.FISOR.update_actor = recording
    losses = []
    with jax.disable_jit():
        for batch, noise in zip(inputs["batches"], inputs["noise"]):
            TIMES.extend([n["t"] for n in noise])
            EPS.extend([n["eps"] for n in noise])
            ref_batch = {
                "observations": batch["obs"], "actions": batch["action"],
                "rewards": batch["reward"], "masks": 1.0 - batch["terminated"],
                "next_observations": batch["next_obs"],
                "costs": np.where(batch["cost"] > 0, 25.0, -1.0).astype(np.float32),
            }  # fmt: skip
            halves.clear()
            agent, info = agent.update(ref_batch)
            assert TIMES.empty() and EPS.empty()
            losses.append({
                "actor_halves": list(halves),
                **{k: float(info[k]) for k in ("value_loss", "critic_loss", "safe_value_loss",
                                               "safe_critic_loss", "v", "vc")},
            })  # fmt: skip
    fisor_module.FISOR.update_actor = update_actor
    return {
        "losses": losses,
        "actor": denoiser_arrays(agent.score_model.params),
        "ema": denoiser_arrays(agent.target_score_model.params),
        "critic": critic_arrays(agent.critic.params),
        "target_critic": critic_arrays(agent.target_critic.params),
        "value": value_arrays(agent.value.params),
        "cost_critic": critic_arrays(agent.safe_critic.params),
        "target_cost_critic": critic_arrays(agent.safe_target_critic.params),
        "cost_value": value_arrays(agent.safe_value.params),
        "alpha_hats": np.asarray(agent.alpha_hats),
    }


def main() -> None:
    result = run()
    print({k: v for k, v in result["losses"][-1].items()})
    write_golden("fisor", {
        "reference": {"repo": REPO, "commit": commit(REPO),
                      "code": "jaxrl5/agents/fisor/fisor.py FISOR.update",
                      "command": "OMP_NUM_THREADS=1 /work/side/parity-jax/venv/bin/python "
                                 "benchmarks/parity/fisor_reference.py", **versions()},
        "sizes": S,
        "inputs": "benchmarks/parity/jax_refs_data.py fisor_inputs(seed=0)",
        "aligned": result,
    })  # fmt: skip


if __name__ == "__main__":
    main()
