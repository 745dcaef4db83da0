"""Section ``o2o``: offline-to-online updates/s, eager vs compiled, fp32 and bf16; RLPD's
critic steps vs the same maths in JAX."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import math
import os
import sys
import time
from typing import Any

import numpy as np

from rlcore.benchmarks.throughput.common import (
    HOPPER_ACT,
    HOPPER_OBS,
    Measure,
    add_note,
    alternate,
    box_spaces,
    fmt,
    markdown_table,
    median_of,
    mode_names,
    ratio,
    skip_mode,
)

O2O_AGENTS = ("cql", "iql")
O2O_MODES = {  # name suffix: (bf16, compile)
    "fp32": (False, False),
    "fp32_compile": (False, True),
    "bf16": (True, False),
    "bf16_compile": (True, True),
}
RLPD_UTD, RLPD_CRITICS, RLPD_SUBSET, RLPD_GAMMA, RLPD_TAU, RLPD_ALPHA = 20, 10, 2, 0.99, 0.005, 0.1


def _hopper_batches(rows: int, count: int, seed: int) -> list[Any]:
    """``count`` random Hopper-shaped Batches of ``rows`` rows (with mc_return)."""
    import torch

    from rlcore.types import Batch

    gen = torch.Generator().manual_seed(seed)
    return [
        Batch(
            obs=torch.randn(rows, HOPPER_OBS, generator=gen),
            action=torch.rand(rows, HOPPER_ACT, generator=gen) * 2 - 1,
            reward=torch.randn(rows, generator=gen),
            next_obs=torch.randn(rows, HOPPER_OBS, generator=gen),
            terminated=(torch.rand(rows, generator=gen) < 0.01).float(),
            truncated=torch.zeros(rows),
            mc_return=torch.randn(rows, generator=gen),
        )
        for _ in range(count)
    ]


def _agent_measure(agent: Any, batches: list[Any], updates: int) -> Measure:
    """Updates/s of ``agent.update`` cycling through ``batches``; warm-up (and
    compilation) first."""

    def run(n: int) -> float:
        start = time.perf_counter()
        for i in range(n):
            agent.update(batches[i % len(batches)])
        return n / (time.perf_counter() - start)

    run(max(3, updates // 10))
    return lambda: run(updates)


def _o2o_agent(name: str, bf16: bool, compile: bool) -> Any:
    """CQL / IQL with their default (CORL) networks at Hopper shapes."""
    import torch

    from rlcore.algos.cql import CQL, CQLConfig
    from rlcore.algos.iql import IQL, IQLConfig

    torch.manual_seed(0)
    precision = "bf16" if bf16 else "float32"
    spaces = box_spaces(HOPPER_OBS, HOPPER_ACT)
    if name == "cql":
        return CQL(*spaces, CQLConfig(precision=precision, compile=compile))
    return IQL(*spaces, IQLConfig(precision=precision, compile=compile))


def _rlpd_measure(bf16: bool, compile: bool, updates: int, seed: int) -> Measure | None:
    """RLPD updates/s (one update = UTD 20 critic steps on 20 x 256 rows + the actor),
    or None when rlcore.algos.rlpd is not on this branch."""
    try:
        from rlcore.algos.rlpd import RLPD, RLPDConfig
    except ImportError:
        return None
    import torch

    torch.manual_seed(seed)
    config = RLPDConfig(precision="bf16" if bf16 else "float32", compile=compile)
    agent = RLPD(*box_spaces(HOPPER_OBS, HOPPER_ACT), config)
    return _agent_measure(agent, _hopper_batches(RLPD_UTD * 256, 4, seed), updates)


def _torch_critic_steps_measure(compiled: bool, calls: int, seed: int) -> Measure:
    """Critic steps/s of RLPD's critic update written with rlcore's pieces: 10-member
    LayerNorm 256x256 QEnsemble, tanh-Gaussian 256x256 actor for a' ~ pi(s'), min over a
    random 2 of the 10 target critics' values, minus alpha log pi, sum of the members'
    MSEs, Adam, Polyak. ``compiled``: the step is one graph (rlcore.compiled pieces),
    called 20 times per measured call, as an agent's UTD loop would."""
    import copy

    import torch

    from rlcore.compiled import (
        LossModule,
        adam_constants,
        adam_state,
        adam_update_,
        compile_graph,
        functional_grads,
    )
    from rlcore.losses import ensemble_mse
    from rlcore.nets import QEnsemble, TanhGaussianActor, polyak_update
    from rlcore.utils import adam

    torch.manual_seed(seed)
    actor = TanhGaussianActor(HOPPER_OBS, HOPPER_ACT, hidden=(256, 256))
    critic = QEnsemble(HOPPER_OBS, HOPPER_ACT, RLPD_CRITICS, (256, 256), layer_norm=True)
    target = copy.deepcopy(critic).requires_grad_(False)
    optimizer = adam(critic.parameters(), 3e-4, fused=True)
    batches = _hopper_batches(256, RLPD_UTD, seed)
    data = [(b.obs, b.action, b.reward, b.next_obs, b.terminated) for b in batches]

    def loss(obs, action, reward, next_obs, terminated) -> tuple[torch.Tensor]:
        with torch.no_grad():
            next_action, next_log_prob = actor(next_obs)
            subset = torch.randperm(RLPD_CRITICS)[:RLPD_SUBSET]
            next_q = target(next_obs, next_action)[subset].min(0).values
            soft_v = next_q - RLPD_ALPHA * next_log_prob
            target_q = reward + RLPD_GAMMA * (1.0 - terminated) * soft_v
        return (ensemble_mse(critic(obs, action), target_q),)

    if not compiled:

        def step(*inputs: torch.Tensor) -> None:
            (value,) = loss(*inputs)
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
            polyak_update(target, critic, RLPD_TAU)
    else:
        module = LossModule({"actor": actor, "critic": critic, "target": target}, loss)
        names = [n for n, _ in module.named_parameters()]
        params = [p for _, p in module.named_parameters()]
        critic_names = [n for n in names if n.startswith("parts.critic.")]
        target_names = [n for n in names if n.startswith("parts.target.")]
        constants = adam_constants(optimizer)

        def graph(params, state, lr, *inputs):
            values = {n: p.detach() for n, p in zip(names, params)}
            grads, _ = functional_grads(module, values, critic_names, *inputs)
            critic_values = [values[n] for n in critic_names]
            adam_update_(critic_values, grads, state, lr, constants)
            torch._foreach_lerp_([values[n] for n in target_names], critic_values, RLPD_TAU)

        compiled_graph = compile_graph(graph)
        lr = torch.tensor(3e-4)

        def step(*inputs: torch.Tensor) -> None:
            state = adam_state(optimizer, list(critic.parameters()))
            with torch.no_grad():
                compiled_graph(params, state, lr, *inputs)

    def run(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            for inputs in data:  # one UTD-20 burst
                step(*inputs)
        return n * RLPD_UTD / (time.perf_counter() - start)

    run(2)
    return lambda: run(calls)


def _jax_critic_steps_measure(calls: int, seed: int) -> Measure | None:
    """The same critic step in JAX (hand-written ensemble, actor and Adam), 20 steps as
    one ``jax.jit`` call (``lax.scan`` over the minibatches); None without jax."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    def dense(key: Any, shape: tuple[int, ...], fan_in: int) -> Any:
        bound = 1.0 / math.sqrt(fan_in)
        return jax.random.uniform(key, shape, jnp.float32, -bound, bound)

    keys = iter(jax.random.split(jax.random.PRNGKey(seed), 32))
    width, e, in_dim = 256, RLPD_CRITICS, HOPPER_OBS + HOPPER_ACT
    critic = {
        "w": [
            dense(next(keys), (e, in_dim, width), in_dim),
            dense(next(keys), (e, width, width), width),
            dense(next(keys), (e, width, 1), width),
        ],
        "b": [jnp.zeros((e, width)), jnp.zeros((e, width)), jnp.zeros((e, 1))],
        "ln_scale": [jnp.ones((e, width)), jnp.ones((e, width))],
        "ln_bias": [jnp.zeros((e, width)), jnp.zeros((e, width))],
    }
    actor = {
        "w": [
            dense(next(keys), (HOPPER_OBS, width), HOPPER_OBS),
            dense(next(keys), (width, width), width),
            dense(next(keys), (width, 2 * HOPPER_ACT), width),
        ],
        "b": [jnp.zeros(width), jnp.zeros(width), jnp.zeros(2 * HOPPER_ACT)],
    }

    def q_values(params: dict, obs: Any, action: Any) -> Any:  # (E, B)
        x = jnp.broadcast_to(jnp.concatenate([obs, action], -1), (e, obs.shape[0], in_dim))
        for i in range(2):
            x = jnp.einsum("ebi,eio->ebo", x, params["w"][i]) + params["b"][i][:, None]
            mean = x.mean(-1, keepdims=True)
            var = ((x - mean) ** 2).mean(-1, keepdims=True)
            x = (x - mean) / jnp.sqrt(var + 1e-5)
            x = x * params["ln_scale"][i][:, None] + params["ln_bias"][i][:, None]
            x = jax.nn.relu(x)
        return (jnp.einsum("ebi,eio->ebo", x, params["w"][2]) + params["b"][2][:, None])[..., 0]

    def sample(obs: Any, key: Any) -> tuple[Any, Any]:
        x = obs
        for i in range(2):
            x = jax.nn.relu(x @ actor["w"][i] + actor["b"][i])
        mean, raw = jnp.split(x @ actor["w"][2] + actor["b"][2], 2, -1)
        log_std = -5.0 + 3.5 * (jnp.tanh(raw) + 1.0)
        noise = jax.random.normal(key, mean.shape)
        pre_tanh = mean + noise * jnp.exp(log_std)
        log_prob = -0.5 * noise**2 - log_std - 0.5 * math.log(2 * math.pi)
        log_det = 2.0 * (math.log(2.0) - pre_tanh - jax.nn.softplus(-2.0 * pre_tanh))
        return jnp.tanh(pre_tanh), (log_prob - log_det).sum(-1)

    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 3e-4

    def critic_step(carry: tuple, batch: tuple) -> tuple[tuple, None]:
        params, target, m, v, count, key = carry
        obs, action, reward, next_obs, terminated = batch
        key, k_action, k_subset = jax.random.split(key, 3)
        next_action, next_log_prob = sample(next_obs, k_action)
        subset = jax.random.permutation(k_subset, e)[:RLPD_SUBSET]
        next_q = q_values(target, next_obs, next_action)[subset].min(0)
        target_q = reward + RLPD_GAMMA * (1.0 - terminated) * (next_q - RLPD_ALPHA * next_log_prob)

        def loss(p: dict) -> Any:
            return ((q_values(p, obs, action) - target_q) ** 2).mean(-1).sum()

        grads = jax.grad(loss)(params)
        count = count + 1
        m = jax.tree.map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
        v = jax.tree.map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
        c1, c2 = 1 - b1**count, 1 - b2**count
        params = jax.tree.map(
            lambda p, m_, v_: p - lr / c1 * m_ / (jnp.sqrt(v_ / c2) + eps), params, m, v
        )
        target = jax.tree.map(lambda t, p: t + RLPD_TAU * (p - t), target, params)
        return (params, target, m, v, count, key), None

    @jax.jit
    def utd_update(carry: tuple, batches: tuple) -> tuple:
        carry, _ = jax.lax.scan(critic_step, carry, batches)
        return carry

    zeros = jax.tree.map(jnp.zeros_like, critic)
    carry = (critic, jax.tree.map(jnp.copy, critic), zeros, zeros, jnp.zeros(()), next(keys))
    batches = _hopper_batches(256, RLPD_UTD, seed)
    stacked = tuple(
        jnp.asarray(np.stack([getattr(b, f).numpy() for b in batches]))
        for f in ("obs", "action", "reward", "next_obs", "terminated")
    )
    state = {"carry": carry}

    def run(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            state["carry"] = utd_update(state["carry"], stacked)
        jax.block_until_ready(state["carry"])
        return n * RLPD_UTD / (time.perf_counter() - start)

    run(2)  # compilation
    return lambda: run(calls)


def _limit_xla_threads(threads: int | None) -> None:
    """XLA's CPU thread pool to ``threads`` (before jax is imported), as torch's is."""
    if threads is not None and "jax" not in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        if threads == 1 and "multi_thread_eigen" not in flags:
            flags += " --xla_cpu_multi_thread_eigen=false"
        os.environ["XLA_FLAGS"] = f"{flags} intra_op_parallelism_threads={threads}".strip()


def section_o2o(args: argparse.Namespace) -> dict[str, Any]:
    """CQL / IQL / RLPD updates/s eager vs compiled (fp32, bf16), and RLPD's critic steps
    vs the same maths in JAX."""
    notes: list[str] = []
    measures: dict[str, Measure | None] = {}
    cql_updates = max(5, args.updates // 10)  # CQL scores 256 x 31 rows per critic
    for agent in O2O_AGENTS:
        for mode, (bf16, compile) in O2O_MODES.items():
            skip = skip_mode(mode_names(bf16, compile), notes)
            n = cql_updates if agent == "cql" else args.updates
            batches = _hopper_batches(256, 8, args.seed)
            measures[f"{agent}_{mode}"] = (
                None if skip else _agent_measure(_o2o_agent(agent, bf16, compile), batches, n)
            )
    rlpd_calls = max(2, args.updates // 100)  # one call = 20 critic steps + the actor
    for mode, (bf16, compile) in O2O_MODES.items():
        skip = skip_mode(mode_names(bf16, compile), notes)
        measures[f"rlpd_{mode}"] = (
            None if skip else _rlpd_measure(bf16, compile, rlpd_calls, args.seed)
        )
    if importlib.util.find_spec("rlcore.algos.rlpd") is None:
        add_note(notes, "rlcore.algos.rlpd is not on this branch: RLPD update columns skipped")
    measures["critic_torch_eager"] = _torch_critic_steps_measure(False, rlpd_calls, args.seed)
    measures["critic_torch_compile"] = (
        None
        if skip_mode(["compile"], notes)
        else _torch_critic_steps_measure(True, rlpd_calls, args.seed)
    )
    _limit_xla_threads(args.torch_threads)
    measures["critic_jax"] = _jax_critic_steps_measure(rlpd_calls, args.seed)
    if measures["critic_jax"] is None:
        add_note(notes, "jax is not installed (pip install -e .[bench]): JAX column skipped")
    result = alternate(measures, args.rounds)
    med = {k: median_of(v) for k, v in result.items()}
    ratios: dict[str, float | None] = {}
    rows = []
    for agent in (*O2O_AGENTS, "rlpd"):
        for precision in ("fp32", "bf16"):
            eager, compiled = med[f"{agent}_{precision}"], med[f"{agent}_{precision}_compile"]
            ratios[f"{agent}_{precision}_compile/{agent}_fp32"] = ratio(
                compiled, med[f"{agent}_fp32"]
            )
            ratios[f"{agent}_{precision}_compile/{agent}_{precision}"] = ratio(compiled, eager)
            rows.append(
                [
                    f"{agent.upper()} update, {precision}",
                    fmt(eager),
                    fmt(compiled),
                    fmt(ratio(compiled, eager), True),
                    fmt(ratio(compiled, med[f"{agent}_fp32"]), True),
                ]
            )
    jax_rate = med["critic_jax"]
    ratios["critic_torch_compile/critic_jax"] = ratio(med["critic_torch_compile"], jax_rate)
    ratios["critic_torch_eager/critic_jax"] = ratio(med["critic_torch_eager"], jax_rate)
    # an RLPD update does 20 critic steps AND an actor step: its critic steps/s is a lower
    # bound of what its critic steps alone would reach
    rlpd_steps = {
        m: None if med[f"rlpd_{m}"] is None else med[f"rlpd_{m}"] * RLPD_UTD for m in O2O_MODES
    }
    ratios["rlpd_fp32_compile_critic_steps/critic_jax"] = ratio(
        rlpd_steps["fp32_compile"], jax_rate
    )
    ratios["rlpd_bf16_compile_critic_steps/critic_jax"] = ratio(
        rlpd_steps["bf16_compile"], jax_rate
    )
    rows.append(
        [
            "RLPD critic step (steps/s)",
            fmt(med["critic_torch_eager"]),
            fmt(med["critic_torch_compile"]),
            fmt(ratio(med["critic_torch_compile"], med["critic_torch_eager"]), True),
            "",
        ]
    )
    table = markdown_table(
        ["contender", "eager /s", "compiled /s", "compiled / eager", "compiled / eager fp32"],
        rows,
    )
    jax_table = markdown_table(
        ["20 critic steps as", "critic steps/s", "/ JAX"],
        [
            ["JAX: one jit call (lax.scan)", fmt(jax_rate), "1.00x" if jax_rate else "n/a"],
            [
                "torch: 20 calls of one compiled step",
                fmt(med["critic_torch_compile"]),
                fmt(ratios["critic_torch_compile/critic_jax"], True),
            ],
            [
                "torch: 20 eager steps",
                fmt(med["critic_torch_eager"]),
                fmt(ratios["critic_torch_eager/critic_jax"], True),
            ],
            [
                "RLPD fp32 compiled update x 20 (critic + actor)",
                fmt(rlpd_steps["fp32_compile"]),
                fmt(ratios["rlpd_fp32_compile_critic_steps/critic_jax"], True),
            ],
        ],
    )
    return {
        "title": "Offline-to-online updates/s at Hopper shapes (obs 11, act 3, batch 256; "
        "CORL default networks: CQL 3x256 actor and twin critics, 10 sampled actions; IQL "
        "2x256; RLPD: 10 LayerNorm critics, subset 2, UTD 20 = 20 x 256 rows per update; "
        "compile = config compile=true, compiled during the warm-up; RLPD with its default "
        "compile_steps=1: one critic step per graph call). Then RLPD's critic "
        "step (a' ~ tanh-Gaussian 256x256 actor, min over a random 2 of 10 LayerNorm "
        "256x256 target critics (all 10 evaluated on both sides), minus 0.1 log pi, sum of "
        "the 10 MSEs, Adam 3e-4, Polyak 0.005) in critic steps/s: rlcore pieces vs the same "
        "maths in JAX (hand-written Adam, 20 steps per jit call via lax.scan)",
        "unit": "updates/s (critic rows: critic steps/s)",
        "updates_per_s": result,
        "ratios": ratios,
        "notes": notes,
        "table": f"{table}\n\n{jax_table}",
    }


COMPILE_AGENTS = ("sac", "cql", "iql")


def _compile_agent(name: str, bf16: bool, compile: bool) -> Any:
    """SAC (its defaults: 256x256, batch 256), CQL or IQL at Hopper shapes."""
    import torch

    from rlcore.algos.sac import SAC, SACConfig

    if name != "sac":
        return _o2o_agent(name, bf16, compile)
    torch.manual_seed(0)
    config = SACConfig(precision="bf16" if bf16 else "float32", compile=compile)
    return SAC(*box_spaces(HOPPER_OBS, HOPPER_ACT), config)


def section_compile(args: argparse.Namespace) -> dict[str, Any]:
    """SAC / CQL / IQL updates/s with their default configs, eager vs ``compile=true``
    (fp32 and, where native, bf16), alternating in one process: the measurement behind
    keeping a compiled path (it must gain >= 1.2x over eager)."""
    notes: list[str] = []
    measures: dict[str, Measure | None] = {}
    cql_updates = max(5, args.updates // 10)  # CQL scores 256 x 31 rows per critic
    for agent in COMPILE_AGENTS:
        n = cql_updates if agent == "cql" else args.updates
        for mode, (bf16, compile) in O2O_MODES.items():
            skip = skip_mode(mode_names(bf16, compile), notes)
            batches = _hopper_batches(256, 8, args.seed)
            measures[f"{agent}_{mode}"] = (
                None if skip else _agent_measure(_compile_agent(agent, bf16, compile), batches, n)
            )
    result = alternate(measures, args.rounds)
    med = {k: median_of(v) for k, v in result.items()}
    ratios: dict[str, float | None] = {}
    rows = []
    for agent in COMPILE_AGENTS:
        for precision in ("fp32", "bf16"):
            eager, compiled = med[f"{agent}_{precision}"], med[f"{agent}_{precision}_compile"]
            ratios[f"{agent}_{precision}_compile/{agent}_{precision}"] = ratio(compiled, eager)
            rows.append(
                [f"{agent.upper()}, {precision}", fmt(eager), fmt(compiled),
                 fmt(ratio(compiled, eager), True)]
            )  # fmt: skip
    return {
        "title": "Updates/s eager vs compile=true at Hopper shapes (obs 11, act 3, batch 256, "
        f"default configs: SAC 256x256, CQL 3x256 with 10 sampled actions, IQL 2x256); "
        f"{args.updates} updates per measurement ({cql_updates} for CQL), compiled during "
        "the warm-up; a compiled path is kept where compiled / eager >= 1.2",
        "unit": "updates/s",
        "updates_per_s": result,
        "ratios": ratios,
        "notes": notes,
        "table": markdown_table(["update", "eager /s", "compiled /s", "compiled / eager"], rows),
    }
