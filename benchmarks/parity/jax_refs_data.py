"""Inputs of the parity checks against RLPD, FISOR, FamO2O (JAX) and OmniSafe: initial weights in
rlcore's ``state_dict`` layout, batches with terminal rows and every sampled number the
updates consume, all drawn from numpy's ``default_rng``. The reference harnesses
(``benchmarks/parity/*_reference.py``, run in a side environment with JAX) and
``tests/test_parity_jax_refs.py`` (no JAX) both call these functions, so the golden files
under ``tests/golden/`` hold only the references' outputs. Numpy only, no torch.
"""

from __future__ import annotations

import numpy as np

Arrays = dict[str, np.ndarray]


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def linear(rng: np.random.Generator, fan_in: int, fan_out: int) -> tuple[np.ndarray, np.ndarray]:
    """One ``nn.Linear``'s (weight (out, in), bias (out,)), torch's default uniform bounds."""
    bound = 1.0 / np.sqrt(fan_in)
    weight = rng.uniform(-bound, bound, (fan_out, fan_in))
    return _f32(weight), _f32(rng.uniform(-bound, bound, fan_out))


def mlp(rng: np.random.Generator, prefix: str, dims: list[int], step: int = 2) -> Arrays:
    """An ``rlcore.nets.MLP`` (Linear, activation, ...): ``{prefix}{index}.weight/bias``
    with Linear modules at indices 0, step, 2 step, ..."""
    out: Arrays = {}
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        out[f"{prefix}{step * i}.weight"], out[f"{prefix}{step * i}.bias"] = linear(rng, a, b)
    return out


def ensemble(
    rng: np.random.Generator, members: int, dims: list[int], layer_norm: bool = False
) -> Arrays:
    """An ``rlcore.nets.QEnsemble`` (``net.`` EnsembleMLP): weights (E, in, out), biases
    (E, 1, out); LayerNorm affines start at 1 / 0 plus a small perturbation, so a swapped
    scale and bias cannot go unnoticed."""
    out: Arrays = {}
    hidden = dims[1:-1]
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        bound = 1.0 / np.sqrt(a)
        name = f"net.hidden_layers.{i}" if i < len(hidden) else "net.output_layer"
        out[f"{name}.weight"] = _f32(rng.uniform(-bound, bound, (members, a, b)))
        out[f"{name}.bias"] = _f32(rng.uniform(-bound, bound, (members, 1, b)))
    if layer_norm:
        for i, width in enumerate(hidden):
            out[f"net.norms.{i}.weight"] = _f32(1 + 0.1 * rng.standard_normal((members, 1, width)))
            out[f"net.norms.{i}.bias"] = _f32(0.1 * rng.standard_normal((members, 1, width)))
    return out


def transitions(
    rng: np.random.Generator, n: int, obs_dim: int, act_dim: int, terminal_every: int = 4
) -> Arrays:
    """n transitions: Gaussian states and rewards, actions in (-0.95, 0.95), every
    ``terminal_every``-th row terminated (so a dropped mask changes the targets), a cost
    of 0 or a positive draw (about 30 % positive)."""
    terminated = np.zeros(n, np.float32)
    terminated[terminal_every - 1 :: terminal_every] = 1.0
    cost = np.where(rng.random(n) < 0.3, rng.uniform(0.1, 1.0, n), 0.0)
    return {
        "obs": _f32(rng.standard_normal((n, obs_dim))),
        "action": _f32(rng.uniform(-0.95, 0.95, (n, act_dim))),
        "reward": _f32(rng.standard_normal(n)),
        "next_obs": _f32(rng.standard_normal((n, obs_dim))),
        "terminated": terminated,
        "cost": _f32(cost),
    }


# --- RLPD ------------------------------------------------------------------------------
RLPD_SIZES = {"obs_dim": 3, "act_dim": 2, "hidden": 16, "members": 10, "subset": 2,
              "batch": 32, "utd": 20, "updates": 5}  # fmt: skip (subset: the default recipe's)


# the reference README's antmaze command: --config.hidden_dims="(256, 256, 256)"
# --config.num_min_qs=1 --config.backup_entropy=False; train_finetuning.py: rewards - 1
RLPD_RECIPES = {
    "default": {"layers": 2, "subset": 2, "backup_entropy": True, "sparse_reward": False},
    "antmaze": {"layers": 3, "subset": 1, "backup_entropy": False, "sparse_reward": True},
}


def rlpd_inputs(seed: int = 0, recipe: str = "default") -> dict:
    """RLPD: SAC actor, 10-critic LayerNorm ensemble, ``updates`` batches of utd x batch
    rows, and per update: the next-action noise of each critic step (utd, batch, A), the
    target subset of each critic step (utd, subset) and the actor step's noise (batch, A).
    ``recipe`` "antmaze": 3 hidden layers, one target critic, and AntMaze's sparse rewards
    (1 on about 20 % of rows) already shifted by the recipe's -1 (both sides get -1 / 0)."""
    s, r = RLPD_SIZES, RLPD_RECIPES[recipe]
    rng = np.random.default_rng(seed)
    o, a, h, e = s["obs_dim"], s["act_dim"], s["hidden"], s["members"]
    actor = mlp(rng, "net.", [o, *[h] * r["layers"], 2 * a])
    critic = ensemble(rng, e, [o + a, *[h] * r["layers"], 1], layer_norm=True)
    batches, noise = [], []
    rows = s["batch"] * s["utd"]
    for _ in range(s["updates"]):
        batch = transitions(rng, rows, o, a)
        if r["sparse_reward"]:
            batch["reward"] = _f32((rng.random(rows) < 0.2).astype(np.float64) - 1.0)
        batches.append(batch)
        noise.append({
            "critic": _f32(rng.standard_normal((s["utd"], s["batch"], a))),
            "subsets": np.stack([rng.permutation(e)[: r["subset"]] for _ in range(s["utd"])]),
            "actor": _f32(rng.standard_normal((s["batch"], a))),
        })  # fmt: skip
    return {"actor": actor, "critic": critic, "batches": batches, "noise": noise}


# --- FISOR -----------------------------------------------------------------------------
FISOR_SIZES = {"obs_dim": 4, "act_dim": 2, "hidden": 16, "time_dim": 8, "steps": 5,
               "batch": 512, "critic_batch": 256, "updates": 5}  # fmt: skip


def fisor_inputs(seed: int = 0) -> dict:
    """FISOR: denoiser (rlcore's DenoisingMLP layout), reward/cost critics and values,
    ``updates`` batches of ``batch`` rows (the critics use the first ``critic_batch``), and
    per update and actor half-step: DDPM timesteps (half,) and noise (half, A)."""
    s = FISOR_SIZES
    rng = np.random.default_rng(seed)
    o, a, h, t = s["obs_dim"], s["act_dim"], s["hidden"], s["time_dim"]
    actor = mlp(rng, "net.time.net.", [t, 2 * t, t])  # TimeEmbedding: Linear, Mish, Linear
    actor["net.inp.weight"], actor["net.inp.bias"] = linear(rng, o + a + t, h)
    for j in range(2):  # hidden (h, h, h): two residual blocks (Mish, Linear, Mish, Linear)
        for i in (1, 3):
            actor[f"net.blocks.{j}.{i}.weight"], actor[f"net.blocks.{j}.{i}.bias"] = linear(
                rng, h, h
            )
    actor["net.out.1.weight"], actor["net.out.1.bias"] = linear(rng, h, a)  # Mish, Linear
    nets = {
        "critic": ensemble(rng, 2, [o + a, h, h, 1]),
        "value": mlp(rng, "", [o, h, h, 1]),
        "cost_critic": ensemble(rng, 2, [o + a, h, h, 1]),
        "cost_value": mlp(rng, "", [o, h, h, 1]),
    }
    half = s["batch"] // 2
    batches, noise = [], []
    for _ in range(s["updates"]):
        batches.append(transitions(rng, s["batch"], o, a))
        noise.append([
            {"t": rng.integers(0, s["steps"], half), "eps": _f32(rng.standard_normal((half, a)))}
            for _ in range(2)
        ])  # fmt: skip
    return {"actor": actor, **nets, "batches": batches, "noise": noise}


# --- FamO2O ----------------------------------------------------------------------------
FAMO2O_SIZES = {"obs_dim": 3, "act_dim": 2, "hidden": 16, "encoding_dim": 6, "batch": 32,
                "updates": 5, "beta_low": 1.0, "beta_high": 5.0}  # fmt: skip


def famo2o_inputs(seed: int = 0) -> dict:
    """FamO2O-IQL: universal policy (state + 6 encoding features), balance model, twin Q,
    V, ``updates`` batches, and per update: the offline phase's uniform draws (batch,),
    the balance model's noise (batch, 1) and the policy's noise in its loss (batch, A)."""
    s = FAMO2O_SIZES
    rng = np.random.default_rng(seed)
    o, a, h, d = s["obs_dim"], s["act_dim"], s["hidden"], s["encoding_dim"]
    nets = {
        "actor": {**mlp(rng, "mean.", [o + d, h, h, a]), "log_std": _f32(np.zeros(a))},
        "balance": {**mlp(rng, "mean.", [o, h, h, 1]), "log_std": _f32(np.zeros(1))},
        "critic": ensemble(rng, 2, [o + a, h, h, 1]),
        "value": mlp(rng, "", [o, h, h, 1]),
    }
    batches, noise = [], []
    for _ in range(s["updates"]):
        batches.append(transitions(rng, s["batch"], o, a))
        noise.append({
            "uniform": _f32(rng.random(s["batch"])),
            "balance": _f32(rng.standard_normal((s["batch"], 1))),
            "action": _f32(rng.standard_normal((s["batch"], a))),
        })  # fmt: skip
    return {**nets, "batches": batches, "noise": noise}


# --- SAC-Lagrangian (OmniSafe, torch) ----------------------------------------------------
SACLAG_SIZES = {"obs_dim": 3, "act_dim": 2, "hidden": 16, "batch": 32, "updates": 10,
                "lagrangian_init": 0.5, "episode_cost": 30.0, "cost_limit": 25.0}  # fmt: skip


def sac_lag_inputs(seed: int = 0) -> dict:
    """SAC-Lagrangian: SAC actor, twin reward critics, one cost critic, ``updates`` batches,
    and per update the reward critic's next-action noise and the actor step's noise (both
    (batch, A); the cost critic's next action is the policy's mean)."""
    s = SACLAG_SIZES
    rng = np.random.default_rng(seed)
    o, a, h = s["obs_dim"], s["act_dim"], s["hidden"]
    nets = {
        "actor": mlp(rng, "net.", [o, h, h, 2 * a]),
        "critic": ensemble(rng, 2, [o + a, h, h, 1]),
        "cost_critic": ensemble(rng, 1, [o + a, h, h, 1]),
    }
    batches, noise = [], []
    for _ in range(s["updates"]):
        batches.append(transitions(rng, s["batch"], o, a))
        noise.append({"critic": _f32(rng.standard_normal((s["batch"], a))),
                      "actor": _f32(rng.standard_normal((s["batch"], a)))})  # fmt: skip
    return {**nets, "batches": batches, "noise": noise}


# --- PPO-Lagrangian (OmniSafe, torch) ----------------------------------------------------
PPOLAG_SIZES = {
    "obs_dim": 3,
    "act_dim": 2,
    "hidden": 16,
    "rows": 256,
    "minibatch": 64,
    "epochs": 8,
    "updates": 2,
    "episode_cost": 30.0,
    "cost_limit": 25.0,
    "target_kl": 0.001,
}  # fmt: skip  (a KL stop within 8 passes)


def ppo_lag_inputs(seed: int = 0) -> dict:
    """PPO-Lagrangian: Gaussian policy (mean MLP, log-std 0), V_r, V_c, and per update a
    rollout of ``rows`` states, actions, raw (unstandardised) reward and cost advantages,
    value targets, a perturbation of the behaviour log-probabilities (added by the harness
    to the policy's own, so ratios start near 1), and one permutation per epoch."""
    s = PPOLAG_SIZES
    rng = np.random.default_rng(seed)
    o, a, h, n = s["obs_dim"], s["act_dim"], s["hidden"], s["rows"]
    nets = {
        "actor": {**mlp(rng, "mean.", [o, h, h, a]), "log_std": _f32(np.zeros(a))},
        "reward_critic": mlp(rng, "", [o, h, h, 1]),
        "cost_critic": mlp(rng, "", [o, h, h, 1]),
    }
    rollouts = []
    for _ in range(s["updates"]):
        rollouts.append({
            "obs": _f32(rng.standard_normal((n, o))),
            "action": _f32(rng.normal(0.0, 1.0, (n, a))),
            "advantage": _f32(2.0 * rng.standard_normal(n) + 0.5),
            "cost_advantage": _f32(rng.uniform(-0.5, 1.5, n)),
            "returns": _f32(rng.standard_normal(n)),
            "cost_returns": _f32(np.abs(rng.standard_normal(n))),
            "log_prob_offset": _f32(0.05 * rng.standard_normal(n)),
            "permutations": np.stack([rng.permutation(n) for _ in range(s["epochs"])]),
        })  # fmt: skip
    return {**nets, "rollouts": rollouts}


# --- WSRL ------------------------------------------------------------------------------
WSRL_SIZES = {"obs_dim": 3, "act_dim": 2, "hidden": 16, "members": 10, "subset": 2,
              "n_actions": 10, "batch": 32, "utd": 4, "offline_updates": 5,
              "online_updates": 5}  # fmt: skip


def wsrl_inputs(seed: int = 0) -> dict:
    """WSRL: tanh-Gaussian actor with LayerNorm (rlcore's ``TanhGaussianActor`` layout:
    Linear 0, LayerNorm 1, Linear 3, LayerNorm 4, Linear 6 with [mean, log-std] rows), a
    10-critic LayerNorm ensemble, then

    * ``offline``: ``offline_updates`` CQL batches of ``batch`` rows, each with the draws of
      one CQL update: actor step noise (B, A), the TD backup's next-action noise, the
      penalty's noise at s and at s' and the uniform [0, 1) draws of its random actions
      (each (B, N, A)), the TD target subset (2,), the reference's second (penalty) subset
      (2,) and the reference's temperature-loss noise at s' (B, N, A);
    * ``online``: ``online_updates`` SAC batches of utd x batch rows, each with the
      next-action noise (utd, B, A) and subset (utd, 2) of its critic steps, the actor
      step's noise (utd B, A) and the reference's temperature-loss noise at s' (utd B, A).

    Subsets are drawn without replacement (as ours)."""
    s = WSRL_SIZES
    rng = np.random.default_rng(seed)
    o, a, h, e, n, b = (
        s["obs_dim"],
        s["act_dim"],
        s["hidden"],
        s["members"],
        s["n_actions"],
        s["batch"],
    )
    actor = mlp(rng, "net.", [o, h, h, 2 * a], step=3)
    for i in (1, 4):
        actor[f"net.{i}.weight"] = _f32(1 + 0.1 * rng.standard_normal(h))
        actor[f"net.{i}.bias"] = _f32(0.1 * rng.standard_normal(h))
    critic = ensemble(rng, e, [o + a, h, h, 1], layer_norm=True)
    subset = lambda: rng.permutation(e)[: s["subset"]]  # noqa: E731
    offline = []
    for _ in range(s["offline_updates"]):
        offline.append({
            "batch": transitions(rng, b, o, a),
            "actor": _f32(rng.standard_normal((b, a))),
            "backup": _f32(rng.standard_normal((b, n, a))),
            "current": _f32(rng.standard_normal((b, n, a))),
            "next": _f32(rng.standard_normal((b, n, a))),
            "uniform": _f32(rng.random((b, n, a))),
            "subset": subset(),
            "penalty_subset": subset(),
            "temperature": _f32(rng.standard_normal((b, n, a))),
        })  # fmt: skip
    online = []
    u = s["utd"]
    for _ in range(s["online_updates"]):
        online.append({
            "batch": transitions(rng, u * b, o, a),
            "critic": _f32(rng.standard_normal((u, b, a))),
            "subsets": np.stack([subset() for _ in range(u)]),
            "actor": _f32(rng.standard_normal((u * b, a))),
            "temperature": _f32(rng.standard_normal((u * b, a))),
        })  # fmt: skip
    return {"actor": actor, "critic": critic, "offline": offline, "online": online}


WSRL_ANTMAZE_SIZES = {**WSRL_SIZES, "critic_layers": 4}


def wsrl_antmaze_inputs(seed: int = 0) -> dict:
    """WSRL's antmaze recipe (Cal-QL pre-training with the tuned CQL weight, online
    max-target backup): ``wsrl_inputs``' networks with 4 critic hidden layers, then

    * ``offline``: as ``wsrl_inputs`` plus each row's Monte-Carlo return-to-go
      (``mc_return``, N(0, 1): the bound is active on about half the penalty's values) and
      the draws of the reference's second penalty computation (its multiplier loss, a
      fresh ``_get_cql_q_diff``): ``lagrange_current`` / ``lagrange_next`` (B, N, A),
      ``lagrange_uniform`` (B, N, A), ``lagrange_subset`` (2,);
    * ``online``: as ``wsrl_inputs`` with the next-action noise of every critic step for
      ``n_actions`` samples per row, sample-major: (utd, N, B, A), and the reference's
      temperature-loss noise at s' likewise (N, utd B, A).
    """
    s = WSRL_ANTMAZE_SIZES
    rng = np.random.default_rng(seed)
    o, a, h, e, n, b = (s["obs_dim"], s["act_dim"], s["hidden"], s["members"],
                        s["n_actions"], s["batch"])  # fmt: skip
    actor = mlp(rng, "net.", [o, h, h, 2 * a], step=3)
    for i in (1, 4):
        actor[f"net.{i}.weight"] = _f32(1 + 0.1 * rng.standard_normal(h))
        actor[f"net.{i}.bias"] = _f32(0.1 * rng.standard_normal(h))
    critic = ensemble(rng, e, [o + a, *[h] * s["critic_layers"], 1], layer_norm=True)
    subset = lambda: rng.permutation(e)[: s["subset"]]  # noqa: E731
    noise = lambda *shape: _f32(rng.standard_normal(shape))  # noqa: E731
    offline = []
    for _ in range(s["offline_updates"]):
        batch = transitions(rng, b, o, a)
        batch["mc_return"] = noise(b)
        offline.append({
            "batch": batch, "actor": noise(b, a), "backup": noise(b, n, a),
            "current": noise(b, n, a), "next": noise(b, n, a),
            "uniform": _f32(rng.random((b, n, a))), "subset": subset(),
            "penalty_subset": subset(), "temperature": noise(b, n, a),
            "lagrange_current": noise(b, n, a), "lagrange_next": noise(b, n, a),
            "lagrange_uniform": _f32(rng.random((b, n, a))), "lagrange_subset": subset(),
        })  # fmt: skip
    online = []
    u = s["utd"]
    for _ in range(s["online_updates"]):
        online.append({
            "batch": transitions(rng, u * b, o, a), "critic": noise(u, n, b, a),
            "subsets": np.stack([subset() for _ in range(u)]),
            "actor": noise(u * b, a), "temperature": noise(n, u * b, a),
        })  # fmt: skip
    return {"actor": actor, "critic": critic, "offline": offline, "online": online}
