"""Golden numbers of CORL's ReBRAC update (tests/golden/rebrac.json), for
tests/test_parity_offline.py.

Run in a side environment with the reference's own (JAX) dependencies, outside the
repository (jax 0.9.2 works on CPUs here):

    python3 -m venv /work/side/jaxvenv
    /work/side/jaxvenv/bin/pip install jax==0.9.2 jaxlib==0.9.2 flax optax chex numpy pyrallis
    git clone https://github.com/tinkoff-ai/CORL /work/side/CORL   # commit in offline_common
    /work/side/jaxvenv/bin/python benchmarks/parity/rebrac_reference.py --corl /work/side/CORL

Imports CORL's ``algorithms/offline/rebrac.py`` by path (d4rl, gym, wandb, tqdm stubbed),
builds its Flax actor and 2-critic ensemble at width 16 with ``offline_common``'s initial
weights (Dense kernels are (in, out) already), and runs its ``update_td3`` /
``update_td3_no_targets`` (actor and targets on updates 0, 2, 4, ..., as its loop's
``delayed_updates``) jitted, on 20 numpy batches (terminal rows included). The target
smoothing draw (``jax.random.normal`` in ``update_critic``) is the ``offline_common``
noise. Cases:
- "default": CORL's defaults (actor / critic BC coefficients 1 / 1, critic LayerNorm, no
  actor LayerNorm, Q normalisation), the reference exactly as it is;
- "default_ln_eps": the same with Flax's LayerNorm epsilon 1e-6 set to PyTorch's 1e-5
  (through the script's ``nn`` namespace), so that one listed departure is out of the way;
- "actor_ln_ln_eps": actor LayerNorm on, no Q normalisation, coefficients 0.05 / 0.5
  (hopper-medium-replay's), LayerNorm epsilon 1e-5.
Writes per-update critic / actor losses and every final parameter.
"""

from __future__ import annotations

import argparse
import functools
import sys
import types
from pathlib import Path

import flax.linen
import jax
import jax.numpy as jnp
import numpy as np
import optax
from offline_common import (
    ACT_DIM,
    BATCH,
    CORL_COMMIT,
    CORL_REPO,
    GOLDEN_DIR,
    HIDDEN,
    encode_case,
    inputs_digest,
    load_script,
    make_batches,
    noise_draws,
    rebrac_initial,
    save_golden,
)

UPDATES = 20
BASE = {
    "gamma": 0.99,
    "tau": 5e-3,
    "actor_lr": 1e-3,
    "critic_lr": 1e-3,
    "policy_noise": 0.2,
    "noise_clip": 0.5,
    "policy_freq": 2,
    "actor_bc_coef": 1.0,
    "critic_bc_coef": 1.0,
    "actor_ln": False,
    "critic_ln": True,
    "normalize_q": True,
    "layer_norm_eps": 1e-6,
    "updates": UPDATES,
}
CASES = {
    "default": BASE,
    "default_ln_eps": {**BASE, "layer_norm_eps": 1e-5},
    "actor_ln_ln_eps": {
        **BASE,
        "actor_ln": True,
        "normalize_q": False,
        "actor_bc_coef": 0.05,
        "critic_bc_coef": 0.5,
        "layer_norm_eps": 1e-5,
    },
}
METRICS = ["critic_loss", "q_min", "actor_loss", "bc_mse_policy", "bc_mse_random", "action_mse"]


def flax_params(params: dict, net: str, members: list[str] | None = None) -> dict:
    """Flax parameter tree of the actor ``net`` (``members`` None) or of the vmapped
    critics ``members`` (every leaf stacked on a leading member axis)."""
    names = members or [net]

    def leaf(i: int, suffix: str) -> jnp.ndarray:
        stacked = np.stack([params[f"{name}.{i}.{suffix}"] for name in names])
        return jnp.asarray(stacked if members else stacked[0])

    tree: dict = {}
    i = 0
    while f"{names[0]}.{i}.w" in params:
        tree[f"Dense_{i}"] = {"kernel": leaf(i, "w"), "bias": leaf(i, "b")}
        if f"{names[0]}.{i}.ln_scale" in params:
            tree[f"LayerNorm_{i}"] = {"scale": leaf(i, "ln_scale"), "bias": leaf(i, "ln_bias")}
        i += 1
    return {"params": {"VmapCritic_0": tree} if members else tree}


def from_flax(tree: dict, net: str, members: list[str] | None = None) -> dict:
    """The inverse of ``flax_params``: the shared layout of ``offline_common``."""
    tree = tree["params"]["VmapCritic_0"] if members else tree["params"]
    out = {}
    for m, name in enumerate(members or [net]):
        for layer, values in tree.items():
            values = {k: np.asarray(v)[m] if members else np.asarray(v) for k, v in values.items()}
            i = int(layer.split("_")[-1])
            if layer.startswith("Dense"):
                out[f"{name}.{i}.w"], out[f"{name}.{i}.b"] = values["kernel"], values["bias"]
            else:
                out[f"{name}.{i}.ln_scale"], out[f"{name}.{i}.ln_bias"] = (
                    values["scale"],
                    values["bias"],
                )
    return out


def run_case(corl: Path, settings: dict) -> dict:
    rebrac = load_script(corl, "algorithms/offline/rebrac.py", f"corl_rebrac_{id(settings)}")
    shim = types.ModuleType("flax.linen (LayerNorm epsilon set)")
    shim.__dict__.update(vars(flax.linen))
    shim.LayerNorm = functools.partial(flax.linen.LayerNorm, epsilon=settings["layer_norm_eps"])
    rebrac.nn = shim  # the constructors' look-ups; the classes themselves are unchanged
    params = rebrac_initial(settings["actor_ln"])
    actor_module = rebrac.DetActor(
        action_dim=ACT_DIM, hidden_dim=HIDDEN, layernorm=settings["actor_ln"], n_hiddens=3
    )
    critic_module = rebrac.EnsembleCritic(
        hidden_dim=HIDDEN, num_critics=2, layernorm=settings["critic_ln"], n_hiddens=3
    )
    actor = rebrac.ActorTrainState.create(
        apply_fn=actor_module.apply,
        params=flax_params(params, "actor"),
        target_params=flax_params(params, "target_actor"),
        tx=optax.adam(learning_rate=settings["actor_lr"]),
    )
    critic = rebrac.CriticTrainState.create(
        apply_fn=critic_module.apply,
        params=flax_params(params, "critic", ["critic0", "critic1"]),
        target_params=flax_params(params, "target", ["target_critic0", "target_critic1"]),
        tx=optax.adam(learning_rate=settings["critic_lr"]),
    )
    common = {
        k: settings[k]
        for k in ("gamma", "actor_bc_coef", "critic_bc_coef", "tau", "policy_noise", "noise_clip")
    }

    def step(noise, key, actor, critic, batch, metrics, full: bool):
        """One update with ``noise`` as update_critic's jax.random.normal draw."""
        saved = jax.random.normal

        def normal(_key, shape, *args, **kwargs):
            assert tuple(shape) == noise.shape, (shape, noise.shape)
            return noise

        jax.random.normal = normal
        try:
            if full:
                return rebrac.update_td3(
                    key,
                    actor,
                    critic,
                    batch,
                    metrics,
                    normalize_q=settings["normalize_q"],
                    **common,
                )
            return rebrac.update_td3_no_targets(
                key, actor, critic, batch, metrics=metrics, **common
            )
        finally:
            jax.random.normal = saved

    steps = {full: jax.jit(functools.partial(step, full=full)) for full in (True, False)}
    noise = noise_draws(2, UPDATES, {"target": (BATCH, ACT_DIM)})
    key = jax.random.PRNGKey(0)  # only for the actor's logging draw (bc_mse_random)
    losses: dict[str, list] = {"critic_loss": [], "actor_loss": []}
    batches = make_batches(1, UPDATES)
    for i, batch in enumerate(batches):
        jax_batch = {
            "states": batch["obs"],
            "actions": batch["action"],
            "rewards": batch["reward"],
            "next_states": batch["next_obs"],
            "next_actions": batch["next_action"],
            "dones": batch["terminated"],
        }
        full = i % settings["policy_freq"] == 0  # CORL's delayed_updates
        metrics = rebrac.Metrics.create(METRICS)
        key, actor, critic, metrics = steps[full](
            jnp.asarray(noise[i]["target"]), key, actor, critic, jax_batch, metrics
        )
        values = metrics.compute()
        losses["critic_loss"].append(float(values["critic_loss"][0]))
        losses["actor_loss"].append(float(values["actor_loss"][0]) if full else None)
    final = {
        **from_flax(actor.params, "actor"),
        **from_flax(actor.target_params, "target_actor"),
        **from_flax(critic.params, "critic", ["critic0", "critic1"]),
        **from_flax(critic.target_params, "target", ["target_critic0", "target_critic1"]),
    }
    return encode_case(settings, inputs_digest(params, batches, noise), losses, final)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corl", type=Path, required=True, help="a CORL checkout")
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR / "rebrac.json")
    args = parser.parse_args()
    cases = {name: run_case(args.corl, settings) for name, settings in CASES.items()}
    meta = {
        "reference": f"{CORL_REPO}@{CORL_COMMIT} algorithms/offline/rebrac.py",
        "command": "python " + " ".join(["benchmarks/parity/rebrac_reference.py", *sys.argv[1:]]),
        "jax": jax.__version__,
        "flax": flax.__version__,
        "optax": optax.__version__,
        "data": "offline_common: rebrac_initial, make_batches seed 1, noise_draws seed 2",
    }
    save_golden(args.out, meta, cases)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
