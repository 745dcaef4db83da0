"""FamO2O parity: run LeapLabTHU/FamO2O's IQL variant (``jax_iql/family_learner.py``
``_family_update_jit``: V, balance model, its temperature, the universal policy by AWR with
uniform betas (the offline phase), Q, Polyak) from rlcore's initial weights on recorded
batches and noise, and write tests/golden/famo2o.json.

Run (side environment and reference checkout as in ``rlpd_reference.py``'s header)::

    OMP_NUM_THREADS=1 /work/side/parity-jax/venv/bin/python benchmarks/parity/famo2o_reference.py

The reference is JAX/flax (its ``jax_iql`` and ``jax_cql`` both). Its ``Model.create``
unpacks ``variables.pop('params')`` as a FrozenDict (flax <= 0.5), so the harness turns
on flax 0.12's ``flax_return_frozendict``; ``jax.tree_map`` (gone in jax 0.6) is
aliased to ``jax.tree_util.tree_map``. Settings as our FamO2O defaults where the
reference takes them as arguments: expectile 0.7, beta range (1, 5), constant policy lr
(the reference configs' ``opt_decay_schedule=None``), target entropy -0.5.

Three variants, unjitted, the Gaussian samples and uniform betas fed from the recorded
inputs:
* ``reference_as_is``: ``_family_update_jit`` untouched: its betas are (B, 1) and
  ``exp((q - v) * beta)`` broadcasts to (B, B), every row's log-likelihood weighted by
  every row's advantage (``family_actor.py`` ``family_update``);
* ``broadcast_fixed``: the same with the betas fed as (B,) (the encoding reshapes them to
  (B, 1) itself), i.e. that one line as the paper writes it;
* ``aligned``: ``broadcast_fixed`` composed of the reference's own step functions in our
  order: the advantage of the policy step and the Q target use V before its update (a
  documented departure of algos/famo2o.py; the reference uses the updated V).
"""

from __future__ import annotations

import sys
import types

import flax
import jax
import jax.numpy as jnp
import numpy as np
from jax_refs_harness import SRC, Feed, commit, feed_gaussians, stub_package, versions, write_golden

from rlcore.benchmarks.parity.jax_refs_data import FAMO2O_SIZES, famo2o_inputs

REPO = "LeapLabTHU/FamO2O"
ROOT = SRC / REPO.replace("/", "+") / "jax_iql"
sys.path.insert(0, str(ROOT))
flax.config.update("flax_return_frozendict", True)  # the reference's Model.create needs it
jax.tree_map = jax.tree_util.tree_map  # learner.target_update's name, removed in jax 0.6
stub_package("gym")  # never used by the modules imported here

import family_actor  # noqa: E402
import family_learner  # noqa: E402
import family_temperature  # noqa: E402
from critic import update_q, update_v  # noqa: E402
from learner import target_update  # noqa: E402

S = FAMO2O_SIZES
GAUSS, UNIFORM = Feed(), Feed()
feed_gaussians(GAUSS)
BETA_SHAPE = {"shape": "column"}  # "column": (B, 1) as the reference; "row": (B,)


def uniform(key, shape, minval, maxval):  # noqa: ANN001, ANN201, ARG001
    """The offline betas: minval + u (maxval - minval) (jax.random.uniform's formula) with
    u recorded; shaped (B, 1) as requested, or (B,) for the corrected line."""
    u = jnp.asarray(UNIFORM.next((shape[0],)))
    beta = u * (maxval - minval) + minval
    return beta[:, None] if BETA_SHAPE["shape"] == "column" else beta


_random = types.SimpleNamespace(**{k: getattr(jax.random, k) for k in dir(jax.random)})
_random.uniform = uniform
family_actor.jax = types.SimpleNamespace(
    **{k: getattr(jax, k) for k in dir(jax) if not k.startswith("__")}
)
family_actor.jax.random = _random


def dense(w: np.ndarray, b: np.ndarray) -> dict:
    return {"kernel": jnp.asarray(w.T), "bias": jnp.asarray(b)}


def mlp_tree(p: dict, prefix: str) -> dict:
    return {f"Dense_{k}": dense(p[f"{prefix}{i}.weight"], p[f"{prefix}{i}.bias"])
            for k, i in enumerate((0, 2, 4))}  # fmt: skip


def policy_tree(p: dict) -> dict:
    """NormalTanhPolicy (state-independent std): MLP_0 (hidden), Dense_0 (means), log_stds."""
    layers = mlp_tree(p, "mean.")
    return flax.core.freeze({"MLP_0": {"Dense_0": layers["Dense_0"], "Dense_1": layers["Dense_1"]},
                             "Dense_0": layers["Dense_2"], "log_stds": jnp.asarray(p["log_std"])})  # fmt: skip


def policy_arrays(tree: dict) -> dict:
    n = lambda x: np.asarray(x, np.float32)  # noqa: E731
    layers = [tree["MLP_0"]["Dense_0"], tree["MLP_0"]["Dense_1"], tree["Dense_0"]]
    out = {"log_std": n(tree["log_stds"])}
    for i, layer in zip((0, 2, 4), layers):
        out[f"mean.{i}.weight"], out[f"mean.{i}.bias"] = n(layer["kernel"]).T, n(layer["bias"])
    return out


def critic_tree(p: dict) -> dict:
    trees = {}
    for m in range(2):
        member = {}
        for k, name in enumerate(
            ("net.hidden_layers.0", "net.hidden_layers.1", "net.output_layer")
        ):
            member[f"Dense_{k}"] = {"kernel": jnp.asarray(p[f"{name}.weight"][m]),
                                    "bias": jnp.asarray(p[f"{name}.bias"][m, 0])}  # fmt: skip
        trees[f"Critic_{m}"] = {"MLP_0": member}
    return flax.core.freeze(trees)


def critic_arrays(tree: dict) -> dict:
    out = {}
    for k, name in enumerate(("net.hidden_layers.0", "net.hidden_layers.1", "net.output_layer")):
        layers = [tree[f"Critic_{m}"]["MLP_0"][f"Dense_{k}"] for m in range(2)]
        out[f"{name}.weight"] = np.stack([np.asarray(x["kernel"], np.float32) for x in layers])
        out[f"{name}.bias"] = np.stack([np.asarray(x["bias"], np.float32)[None] for x in layers])
    return out


def value_tree(p: dict) -> dict:
    return flax.core.freeze({"MLP_0": mlp_tree(p, "")})


def value_arrays(tree: dict) -> dict:
    out = {}
    for k, i in enumerate((0, 2, 4)):
        layer = tree["MLP_0"][f"Dense_{k}"]
        out[f"{i}.weight"] = np.asarray(layer["kernel"], np.float32).T
        out[f"{i}.bias"] = np.asarray(layer["bias"], np.float32)
    return out


def aligned_update(
    rng,
    actor,
    hierarchical_actor,
    temp,
    critic,
    value,
    target_critic,
    batch,
    discount,
    tau,
    expectile,
    target_entropy,
    family_coefficient_range,
    family_sin_cos_n,
    family_sin_cos_d,
    random_hierarchical_coefficients,
):  # noqa: ANN001, ANN201
    """``_family_update_jit``'s steps, the reference's functions, with the policy's
    advantage and the Q target from V before its update (ours)."""
    new_value, value_info = update_v(target_critic, value, batch, expectile)
    key, rng = jax.random.split(rng)
    new_hierarchical_actor, hierarchical_info = family_learner.family_update_hierarchical_actor(
        key=key,
        hierarchical_actor=hierarchical_actor,
        actor=actor,
        critic=target_critic,
        temp=temp,
        batch=batch,
        family_coefficient_range=family_coefficient_range,
        family_sin_cos_n=family_sin_cos_n,
        family_sin_cos_d=family_sin_cos_d,
    )
    new_temp, alpha_info = family_temperature.update(
        temp=temp, entropy=hierarchical_info["hierarchical_entropy"], target_entropy=target_entropy
    )
    key, rng = jax.random.split(rng)
    new_actor, actor_info = family_learner.family_awr_update_actor(
        key=key,
        actor=actor,
        hierarchical_actor=hierarchical_actor,
        critic=target_critic,
        value=value,
        batch=batch,
        random_hierarchical_coefficients=random_hierarchical_coefficients,
        family_coefficient_range=family_coefficient_range,
        family_sin_cos_n=family_sin_cos_n,
        family_sin_cos_d=family_sin_cos_d,
    )
    new_critic, critic_info = update_q(critic, value, batch, discount)
    new_target_critic = target_update(new_critic, target_critic, tau)
    return rng, new_hierarchical_actor, new_temp, new_actor, new_value, new_critic, new_target_critic, {
        **hierarchical_info, **alpha_info, **actor_info, **critic_info, **value_info}  # fmt: skip


def run(variant: str) -> dict:
    inputs = famo2o_inputs()
    BETA_SHAPE["shape"] = "column" if variant == "reference_as_is" else "row"
    original = family_learner._family_update_jit
    if variant == "aligned":
        family_learner._family_update_jit = aligned_update
    learner = family_learner.FamilyLearner(
        0, np.zeros((1, S["obs_dim"]), np.float32), np.zeros((1, S["act_dim"]), np.float32),
        hidden_dims=(S["hidden"],) * 2, expectile=0.7, opt_decay_schedule=None,
        family_coefficient_range=(S["beta_low"], S["beta_high"]),
    )  # fmt: skip
    critic = critic_tree(inputs["critic"])
    learner.actor = learner.actor.replace(params=policy_tree(inputs["actor"]))
    learner.hierarchical_actor = learner.hierarchical_actor.replace(
        params=policy_tree(inputs["balance"])
    )
    learner.critic = learner.critic.replace(params=critic)
    learner.target_critic = learner.target_critic.replace(params=critic)
    learner.value = learner.value.replace(params=value_tree(inputs["value"]))
    losses = []
    with jax.disable_jit():
        for batch, noise in zip(inputs["batches"], inputs["noise"]):
            GAUSS.extend([noise["balance"], noise["action"]])  # u, then a ~ pi(. | s, beta(u))
            UNIFORM.extend([noise["uniform"]])
            ref_batch = family_learner.Batch(
                observations=batch["obs"], actions=batch["action"], rewards=batch["reward"],
                masks=1.0 - batch["terminated"], next_observations=batch["next_obs"],
            )  # fmt: skip
            info = learner.update(ref_batch, random_hierarchical_coefficients=True)
            assert GAUSS.empty() and UNIFORM.empty()
            keys = ("value_loss", "critic_loss", "actor_loss", "hierarchical_loss",
                    "temp_loss", "temperature", "hierarchical_entropy")  # fmt: skip
            losses.append({k: float(info[k]) for k in keys})
    family_learner._family_update_jit = original
    return {
        "losses": losses,
        "actor": policy_arrays(learner.actor.params),
        "balance": policy_arrays(learner.hierarchical_actor.params),
        "critic": critic_arrays(learner.critic.params),
        "target_critic": critic_arrays(learner.target_critic.params),
        "value": value_arrays(learner.value.params),
        "log_alpha": float(learner.hierarchical_temp.params["log_temp"]),
    }


def main() -> None:
    variants = {v: run(v) for v in ("aligned", "broadcast_fixed", "reference_as_is")}
    for name, result in variants.items():
        print(name, result["losses"][-1])
    write_golden("famo2o", {
        "reference": {"repo": REPO, "commit": commit(REPO),
                      "code": "jax_iql/family_learner.py _family_update_jit (offline phase)",
                      "command": "OMP_NUM_THREADS=1 /work/side/parity-jax/venv/bin/python "
                                 "benchmarks/parity/famo2o_reference.py", **versions()},
        "sizes": S,
        "inputs": "benchmarks/parity/jax_refs_data.py famo2o_inputs(seed=0)",
        **variants,
    })  # fmt: skip


if __name__ == "__main__":
    main()
