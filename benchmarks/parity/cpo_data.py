"""Inputs of the CPO parity check against OmniSafe (``benchmarks/parity/cpo_reference.py``
runs OmniSafe on them, ``tests/test_parity_cpo.py`` runs ours): initial weights in rlcore's
``state_dict`` layout and per update a rollout (states, actions, raw reward and cost
advantages, value targets, a perturbation of the behaviour log-probabilities), the
episode cost J_c and the critics' permutations, all drawn from numpy's ``default_rng``.
Numpy only, no torch.

The episode costs are chosen so that the four updates take the dual's four cases
(OmniSafe's unscaled c): 1 (J_c just over the limit, B >= 0), 2 (just under, B >= 0),
3 (far under) and 0 (far over).
"""

from __future__ import annotations

import numpy as np

from rlcore.benchmarks.parity.jax_refs_data import _f32, mlp

CPO_SIZES = {
    "obs_dim": 3,
    "act_dim": 2,
    "hidden": 16,
    "rows": 256,
    "minibatch": 64,
    "epochs": 2,
    "cost_limit": 25.0,
    "target_kl": 0.02,
    "cg_iters": 15,
    "cg_damping": 0.03,
    "critic_lr": 1e-3,
    "episode_costs": [25.08, 24.97, 15.0, 40.0, 24.9715],
}  # fmt: skip


def cpo_inputs(seed: int = 0) -> dict:
    """CPO: Gaussian policy (mean MLP, log-std 0), V_r, V_c, and per update a rollout of
    ``rows`` rows and one permutation per critic pass."""
    s = CPO_SIZES
    rng = np.random.default_rng(seed)
    o, a, h, n = s["obs_dim"], s["act_dim"], s["hidden"], s["rows"]
    nets = {
        "actor": {**mlp(rng, "mean.", [o, h, h, a]), "log_std": _f32(np.zeros(a))},
        "reward_critic": mlp(rng, "", [o, h, h, 1]),
        "cost_critic": mlp(rng, "", [o, h, h, 1]),
    }
    rollouts = []
    for episode_cost in s["episode_costs"]:
        rollouts.append({
            "obs": _f32(rng.standard_normal((n, o))),
            "action": _f32(rng.normal(0.0, 1.0, (n, a))),
            "advantage": _f32(2.0 * rng.standard_normal(n) + 0.5),
            "cost_advantage": _f32(rng.uniform(-5.0, 15.0, n)),
            "returns": _f32(rng.standard_normal(n)),
            "cost_returns": _f32(np.abs(rng.standard_normal(n))),
            "log_prob_offset": _f32(0.05 * rng.standard_normal(n)),
            "permutations": np.stack([rng.permutation(n) for _ in range(s["epochs"])]),
            "episode_cost": float(episode_cost),
        })  # fmt: skip
    return {**nets, "rollouts": rollouts}
