"""Throughput suite: rlcore side by side with its anchors, in one process.

    python -m rlcore.benchmarks.throughput                # every section (~25 min, 2 idle cores)
    python -m rlcore.benchmarks.throughput --quick        # smoke run, ~2 min
    python -m rlcore.benchmarks.throughput --sections env memory --rounds 5

Sections (``--sections``, default all):

* ``env``: env steps/s (all envs counted) of rlcore's native back end vs gymnasium's
  SyncVectorEnv and AsyncVectorEnv, envpool (when importable) and the raw MuJoCo
  ceiling (``mujoco.batch.Batch`` stepping the same model, frame_skip and thread count,
  no task code), for Hopper, HalfCheetah and Ant with 1, 16 and 64 envs.
* ``sac_update``: SAC gradient updates/s (batch 256, 256x256, Hopper shapes, actor +
  critic + temperature every update) of rlcore's ``SAC.update`` vs SB3's ``SAC.train``;
  a bf16 column (``SACConfig(precision="bf16")``).
* ``ensemble``: update steps/s of 10 LayerNorm critics (RLPD/WSRL shape) as one batched
  ``rlcore.nets.QEnsemble`` vs a Python loop over 10 ``rlcore.nets.MLP``; fp32 and
  bf16 (``torch.autocast``).
* ``o2o``: offline-to-online updates/s at Hopper shapes, eager vs ``compile=true``, fp32
  and bf16: CQL (Cal-QL's update is CQL's plus one max), IQL, RLPD (``rlcore.algos.rlpd`` when
  present: 10 LayerNorm critics, UTD 20). Then RLPD's critic step in critic steps/s:
  rlcore's pieces eager and as one compiled graph called 20 times, vs the same maths in
  JAX as one ``jax.jit`` call of a 20-step ``lax.scan`` (``pip install -e .[bench]``);
  ``--torch-threads`` also limits XLA's CPU threads.
* ``sac_run``: whole-run env-steps/s of SAC on Hopper (UTD 1), rlcore vs SB3, same
  hyper-parameters; also the post-warm-up part.
* ``ppo_run``: whole-run env-steps/s of PPO on Hopper with 8 envs, rlcore vs SB3 (SB3's
  default hyper-parameters on both sides).
* ``memory``: peak RSS increase of a filled 1M-transition Hopper ``ReplayBuffer`` vs its
  raw float32 data size, each buffer in a fresh subprocess (SB3's buffer beside it).

Every measurement alternates the contenders (A B A B ..., ``--rounds``) and reports
per-contender medians and the ratio of medians. Baselines that are not installed are
skipped with a note and ``null`` in the JSON. So are speed modes this machine lacks
(``rlcore.speed``): bf16 columns where bf16 would be emulated (an AVX2-only CPU: ~13x
slower, not a speed mode; ``RLCORE_ALLOW_EMULATED_BF16=1`` times them anyway) and compile
columns without a C++ compiler. The JSON (``--out``; default
``benchmarks/results/throughput.json``, ``throughput_quick.json`` with ``--quick``) is
rewritten after every section and holds the machine description (with
``speed_modes``: CPU capability, bf16 native or not and why, the C++ compiler), every
sample, the medians, the ratios and the target checks.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
SECTIONS = (
    "env",
    "sac_update",
    "ensemble",
    "o2o",
    "sac_run",
    "ppo_run",
    "memory",
    "mjx",
    "mjx_ppo",
)
# run only when named: they need JAX + mujoco-mjx and are meant for a GPU
OPT_IN = ("mjx", "mjx_ppo")
ENV_CONTENDERS = ("native", "sync", "async", "envpool", "ceiling")
ENV_LABELS = {
    "native": "rlcore native",
    "sync": "gym Sync",
    "async": "gym Async",
    "envpool": "envpool",
    "ceiling": "MuJoCo ceiling",
}

# --------------------------------------------------------------------------------------
# measurement helpers
# --------------------------------------------------------------------------------------
Measure = Callable[[], float | dict[str, float]]


def alternate(measures: dict[str, Measure | None], rounds: int) -> dict[str, dict | None]:
    """Run the contenders alternately (A B A B ...) for ``rounds`` rounds.

    A measure returns one rate or a dict of named rates. Returns, per contender, its
    ``samples`` and ``median`` (a float, or a dict of floats), or None for a skipped one.
    """
    samples: dict[str, list] = {name: [] for name, m in measures.items() if m is not None}
    for _ in range(rounds):
        for name, measure in measures.items():
            if measure is not None:
                samples[name].append(measure())
    out: dict[str, dict | None] = {}
    for name, measure in measures.items():
        if measure is None:
            out[name] = None
            continue
        values = samples[name]
        if isinstance(values[0], dict):
            median: Any = {k: statistics.median(v[k] for v in values) for k in values[0]}
        else:
            median = statistics.median(values)
        out[name] = {"samples": values, "median": median}
    return out


def median_of(result: dict | None, key: str | None = None) -> float | None:
    """Median of a contender (``key`` picks one rate of a multi-rate measure)."""
    if result is None:
        return None
    median = result["median"]
    return median[key] if key is not None else median


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either side is missing."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def cpu_description() -> dict[str, Any]:
    """The CPU's model name and the matmul features that decide bf16 speed (Linux
    /proc/cpuinfo; empty elsewhere): AVX512-BF16 and AMX change the bf16 ratios a lot."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())  # the first CPU's entries
    flags = set(fields.get("flags", "").split())
    model = fields.get("model name")
    features = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    return {"cpu_model": model, "cpu_features": [f for f in features if f in flags]}


def mode_skips() -> dict[str, str | None]:
    """Why each speed mode is not timed on this machine (None: it is): ``bf16`` where it
    would be emulated, ``compile`` without a C++ compiler (rlcore.speed decides both)."""
    from rlcore.speed import ALLOW_EMULATED_BF16, speed_report

    report = speed_report("cpu")
    bf16 = None
    if not report["bf16_native"] and not report["emulated_bf16_allowed"]:
        bf16 = (
            f"bf16 would be emulated here ({report['bf16_reason']}): bf16 columns skipped, "
            f"not timed ({ALLOW_EMULATED_BF16}=1 times them anyway)"
        )
    compile = None
    if report["cxx_compiler"] is None:
        compile = (
            "no C++ compiler ($CXX, g++, c++, clang++): compile columns skipped "
            "(compile=true would run eager)"
        )
    return {"bf16": bf16, "compile": compile}


def _modes(bf16: bool, compile: bool) -> list[str]:
    return [mode for mode, used in (("bf16", bf16), ("compile", compile)) if used]


def skip_mode(modes: Sequence[str], notes: list[str]) -> bool:
    """True when a contender using ``modes`` ("bf16", "compile") is not to be timed here;
    each reason is noted once per section."""
    reasons = [reason for mode, reason in mode_skips().items() if mode in modes and reason]
    for reason in reasons:
        if reason not in notes:
            _note(notes, reason)
    return bool(reasons)


def _dist_version(name: str) -> str | None:
    """An installed distribution's version without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def machine_info(threads: int) -> dict[str, Any]:
    """Platform, CPUs, library versions, thread counts, load (contention hint) and which
    speed modes are native (bf16, a C++ compiler for compile)."""
    import torch

    from rlcore.speed import speed_report

    def version(module: str) -> str | None:
        try:
            return __import__(module).__version__
        except ImportError:
            return None

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        **cpu_description(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_avg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "native_threads": threads,
        "numpy": np.__version__,
        "mujoco": version("mujoco"),
        "gymnasium": version("gymnasium"),
        "stable_baselines3": version("stable_baselines3"),
        "envpool": version("envpool"),
        "jax": _dist_version("jax"),  # not imported here: XLA reads its thread flags once
        "speed_modes": speed_report("cpu"),
    }


def fmt(value: float | None, ratio_like: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if ratio_like:
        return f"{value:.2f}x"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _note(notes: list[str], text: str) -> None:
    print(f"  note: {text}", flush=True)
    notes.append(text)


# --------------------------------------------------------------------------------------
# env: vector env steps/s
# --------------------------------------------------------------------------------------
def _env_rate(env: Any, actions: np.ndarray) -> float:
    """Env steps/s (all envs counted) over a pre-drawn action sequence (resets included)."""
    start = time.perf_counter()
    for action in actions:
        env.step(action)
    return actions.shape[0] * actions.shape[1] / (time.perf_counter() - start)


def envpool_env(env_id: str, num_envs: int, seed: int, threads: int) -> tuple[Any, str]:
    """An envpool gymnasium env for ``env_id`` (its own v5 task if it has one, else v4)
    with ``min(threads, num_envs)`` C threads; returns (env, task id used).
    Raises ImportError when envpool is not installed."""
    import envpool

    available = set(envpool.list_all_envs())
    task = env_id if env_id in available else env_id.replace("-v5", "-v4")
    if task not in available:
        raise ValueError(f"envpool has no {env_id} (nor {task})")
    env = envpool.make_gymnasium(
        task, num_envs=num_envs, seed=seed, num_threads=max(1, min(threads, num_envs))
    )
    return env, task


class Ceiling:
    """Raw MuJoCo: ``num_envs`` simulations of gymnasium's model for ``env_id`` stepped by
    ``mujoco.batch.Batch`` (``frame_skip`` substeps, ``threads`` C threads), ctrl written
    from the pre-drawn actions, no task code (no observations, rewards or resets)."""

    def __init__(self, env_id: str, num_envs: int, threads: int) -> None:
        import gymnasium as gym
        from mujoco.batch import Batch

        base = gym.make(env_id).unwrapped
        self.frame_skip = int(base.frame_skip)
        self.batch = Batch(base.model, nsim=num_envs, nthread=threads)
        self.ctrl = self.batch.bind("ctrl")
        self.num_envs = num_envs
        base.close()

    def reset(self, seed: int | None = None) -> None:
        self.batch.reset()

    def step(self, action: np.ndarray) -> None:
        self.ctrl[:] = action
        self.batch.step(nstep=self.frame_skip)

    def close(self) -> None:
        self.batch = None


def section_env(args: argparse.Namespace) -> dict[str, Any]:
    """Env steps/s per (task, num_envs): native, Sync, Async, envpool, MuJoCo ceiling."""
    from rlcore.envs.make import make_vec_env, resolve_env_id

    notes: list[str] = []
    rows = []
    skipped: set[tuple[str, str]] = set()
    try:
        import envpool  # noqa: F401

        has_envpool = True
    except ImportError:
        has_envpool = False
        _note(notes, "envpool is not installed (pip install envpool): envpool column skipped")
    for name in args.envs:
        env_id = resolve_env_id(name)
        for num_envs in args.num_envs:
            steps = max(10, args.env_steps // num_envs)
            envs: dict[str, Any] = {}
            labels: dict[str, str] = {}
            for backend in ("native", "sync", "async"):
                try:
                    envs[backend] = make_vec_env(
                        env_id, num_envs, seed=args.seed, backend=backend, num_threads=args.threads
                    )
                except ValueError as error:  # e.g. a task the native back end lacks
                    if (env_id, backend) not in skipped:
                        skipped.add((env_id, backend))
                        _note(notes, f"{env_id} {backend} skipped: {error}")
            if has_envpool:
                try:
                    envs["envpool"], labels["envpool"] = envpool_env(
                        env_id, num_envs, args.seed, args.threads
                    )
                except Exception as error:  # envpool version without this task, ...
                    if (env_id, "envpool") not in skipped:
                        skipped.add((env_id, "envpool"))
                        _note(notes, f"{env_id} envpool skipped: {error}")
            envs["ceiling"] = Ceiling(env_id, num_envs, args.threads)
            space = envs["sync"].single_action_space
            rng = np.random.default_rng(args.seed)
            actions = rng.uniform(space.low, space.high, (steps, num_envs, *space.shape))
            actions = actions.astype(np.float32)
            measures: dict[str, Measure | None] = {}
            for key in ENV_CONTENDERS:
                env = envs.get(key)
                if env is None:
                    measures[key] = None
                    continue
                if key == "envpool":
                    env.reset()  # envpool is seeded at construction
                else:
                    env.reset(seed=args.seed)
                _env_rate(env, actions[: max(1, steps // 10)])  # warm-up
                measures[key] = lambda env=env, actions=actions: _env_rate(env, actions)
            try:
                result = alternate(measures, args.rounds)
            finally:  # async workers and thread pools go, whatever happened
                for env in envs.values():
                    env.close()
            med = {k: median_of(result[k]) for k in ENV_CONTENDERS}
            row = {
                "env": env_id,
                "num_envs": num_envs,
                "vector_steps": steps,
                "envpool_task": labels.get("envpool"),
                "steps_per_s": result,
                "ratios": {f"native/{k}": ratio(med["native"], med[k]) for k in ENV_CONTENDERS[1:]},
            }
            rows.append(row)
            print(
                f"  {env_id} x{num_envs}: "
                + ", ".join(f"{k} {fmt(v)}" for k, v in med.items() if v is not None),
                flush=True,
            )
    envpool_tasks = sorted({r["envpool_task"] for r in rows if r["envpool_task"]})
    headers = [
        "env",
        "envs",
        *(ENV_LABELS[k] for k in ENV_CONTENDERS[:3]),
        "envpool" + (f" ({', '.join(envpool_tasks)})" if envpool_tasks else ""),
        ENV_LABELS["ceiling"],
        *(f"native/{ENV_LABELS[k]}" for k in ENV_CONTENDERS[1:]),
    ]
    table = [
        [
            r["env"],
            str(r["num_envs"]),
            *(fmt(median_of(r["steps_per_s"][k])) for k in ENV_CONTENDERS),
            *(fmt(r["ratios"][f"native/{k}"], True) for k in ENV_CONTENDERS[1:]),
        ]
        for r in rows
    ]
    return {
        "title": "env steps/s (all envs counted; median of rounds; random actions, resets "
        f"included; native and ceiling on {args.threads} C threads)",
        "unit": "env steps/s",
        "rows": rows,
        "notes": notes,
        "table": markdown_table(headers, table),
    }


# --------------------------------------------------------------------------------------
# sac_update: SAC gradient updates/s
# --------------------------------------------------------------------------------------
HOPPER_OBS, HOPPER_ACT = 11, 3


def _spaces(obs_dim: int, act_dim: int) -> tuple[Any, Any]:
    import gymnasium as gym

    return (
        gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float64),
        gym.spaces.Box(-1.0, 1.0, (act_dim,), np.float32),
    )


def filled_replay_buffer(capacity: int, obs_dim: int, act_dim: int, seed: int = 0) -> Any:
    """An rlcore ReplayBuffer filled with ``capacity`` random transitions."""
    from rlcore.buffers import ReplayBuffer

    chunk = min(capacity, 10_000)
    buffer = ReplayBuffer(capacity, (obs_dim,), (act_dim,), num_envs=chunk, seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(capacity // chunk):
        buffer.add(
            rng.standard_normal((chunk, obs_dim), np.float32),
            rng.uniform(-1, 1, (chunk, act_dim)).astype(np.float32),
            rng.standard_normal(chunk, np.float32),
            rng.standard_normal((chunk, obs_dim), np.float32),
            rng.random(chunk) < 0.01,
            rng.random(chunk) < 0.001,
        )
    return buffer


def _rlcore_sac_measure(
    precision: str | None, updates: int, buffer: Any, compile: bool = False
) -> Measure:
    import torch

    from rlcore.algos.sac import SAC, SACConfig

    kwargs: dict[str, Any] = dict(
        actor_lr=3e-4,
        critic_lr=3e-4,
        alpha_lr=3e-4,
        policy_frequency=1,
        hidden=(256, 256),
        batch_size=256,
    )
    if precision is not None:
        kwargs["precision"] = precision
    kwargs["compile"] = compile
    torch.manual_seed(0)
    agent = SAC(*_spaces(HOPPER_OBS, HOPPER_ACT), SACConfig(**kwargs))

    def run(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            agent.update(buffer.sample(256))
        return n / (time.perf_counter() - start)

    run(max(5, updates // 10))  # warm-up (and compilation)
    return lambda: run(updates)


SAC_UPDATE_VARIANTS = {  # name: (precision, compile, label)
    "rlcore_fp32": (None, False, "rlcore fp32"),
    "rlcore_bf16": ("bf16", False, "rlcore bf16"),
    "rlcore_fp32_compile": (None, True, "rlcore fp32 compile"),
    "rlcore_bf16_compile": ("bf16", True, "rlcore bf16 compile"),
}


def _sb3_sac_measure(updates: int, capacity: int, seed: int) -> Measure:
    import gymnasium as gym
    from stable_baselines3.common.logger import Logger

    from rlcore.benchmarks.sac_hopper_vs_sb3 import make_sb3_sac

    model = make_sb3_sac(gym.make("Hopper-v5"), capacity, 0, seed)
    model.set_logger(Logger(folder=None, output_formats=[]))
    rb = model.replay_buffer
    rng = np.random.default_rng(seed)
    rb.observations[:] = rng.standard_normal(rb.observations.shape)
    rb.next_observations[:] = rng.standard_normal(rb.next_observations.shape)
    rb.actions[:] = rng.uniform(-1, 1, rb.actions.shape)
    rb.rewards[:] = rng.standard_normal(rb.rewards.shape)
    rb.dones[:] = rng.random(rb.dones.shape) < 0.01
    rb.timeouts[:] = rng.random(rb.timeouts.shape) < 0.001
    rb.full, rb.pos = True, 0

    def run(n: int) -> float:
        start = time.perf_counter()
        model.train(gradient_steps=n, batch_size=256)
        return n / (time.perf_counter() - start)

    run(max(5, updates // 10))  # warm-up
    return lambda: run(updates)


def _has_sb3() -> bool:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return False
    return True


def section_sac_update(args: argparse.Namespace) -> dict[str, Any]:
    """SAC updates/s at Hopper shapes: rlcore fp32 and bf16 vs SB3."""

    notes: list[str] = []
    buffer = filled_replay_buffer(args.buffer_size, HOPPER_OBS, HOPPER_ACT, args.seed)
    measures: dict[str, Measure | None] = {
        name: None
        if skip_mode(_modes(precision == "bf16", compile), notes)
        else _rlcore_sac_measure(precision, args.updates, buffer, compile)
        for name, (precision, compile, _) in SAC_UPDATE_VARIANTS.items()
    }
    if _has_sb3():
        measures["sb3"] = _sb3_sac_measure(args.updates, args.buffer_size, args.seed)
    else:
        measures["sb3"] = None
        _note(notes, "stable-baselines3 is not installed: SB3 column skipped")
    result = alternate(measures, args.rounds)
    med = {k: median_of(v) for k, v in result.items()}
    ratios = {f"{name}/sb3": ratio(med[name], med["sb3"]) for name in SAC_UPDATE_VARIANTS}
    labels = [label for _, _, label in SAC_UPDATE_VARIANTS.values()]
    table = markdown_table(
        ["shape", *labels, "SB3", *(f"{label} / SB3" for label in labels)],
        [
            [
                "Hopper obs 11 act 3, batch 256, 256x256",
                *(fmt(med[k]) for k in (*SAC_UPDATE_VARIANTS, "sb3")),
                *(fmt(v, True) for v in ratios.values()),
            ]
        ],
    )
    return {
        "title": f"SAC gradient updates/s ({args.updates} per measurement; actor + critic + "
        f"temperature every update, lr 3e-4; batches sampled from a {args.buffer_size:,}-"
        "transition random buffer on both sides; compile = algo.compile=true, compiled "
        "during the warm-up)",
        "unit": "updates/s",
        "updates_per_s": result,
        "ratios": ratios,
        "notes": notes,
        "table": table,
    }


# --------------------------------------------------------------------------------------
# ensemble: 10 critics, batched vs Python loop
# --------------------------------------------------------------------------------------
ENS_MEMBERS, ENS_OBS, ENS_ACT, ENS_BATCH = 10, 17, 6, 256


def _ensemble_measure(
    batched: bool, bf16: bool, updates: int, seed: int, compiled: bool = False
) -> Measure:
    """Update steps/s of 10 256x256 LayerNorm critics regressed (MSE) onto a target;
    ``compiled``: the whole step as one graph (``rlcore.compiled.CompiledAdamStep``)."""
    import torch

    from rlcore.compiled import CompiledAdamStep
    from rlcore.losses import ensemble_mse
    from rlcore.nets import MLP, QEnsemble
    from rlcore.utils import adam

    torch.manual_seed(seed)
    if batched:
        net: torch.nn.Module = QEnsemble(ENS_OBS, ENS_ACT, ENS_MEMBERS, (256, 256), layer_norm=True)

        def forward(obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
            return net(obs, act)
    else:
        net = torch.nn.ModuleList(
            MLP(ENS_OBS + ENS_ACT, 1, (256, 256), layer_norm=True) for _ in range(ENS_MEMBERS)
        )

        def forward(obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
            x = torch.cat([obs, act], dim=-1)
            return torch.stack([critic(x).squeeze(-1) for critic in net])

    optimizer = adam(net.parameters(), 3e-4, fused=True)
    gen = torch.Generator().manual_seed(seed)
    batches = [
        (
            torch.randn(ENS_BATCH, ENS_OBS, generator=gen),
            torch.rand(ENS_BATCH, ENS_ACT, generator=gen) * 2 - 1,
            torch.randn(ENS_BATCH, generator=gen),
        )
        for _ in range(8)
    ]

    def losses(obs: torch.Tensor, act: torch.Tensor, target: torch.Tensor) -> tuple:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            q = forward(obs, act)
        return (ensemble_mse(q.float(), target),)

    step = CompiledAdamStep({"net": net}, losses, optimizer) if compiled else None

    def run(n: int) -> float:
        start = time.perf_counter()
        for i in range(n):
            if step is not None:
                step(*batches[i % len(batches)])
                continue
            (loss,) = losses(*batches[i % len(batches)])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        return n / (time.perf_counter() - start)

    run(max(5, updates // 10))  # warm-up
    return lambda: run(updates)


def section_ensemble(args: argparse.Namespace) -> dict[str, Any]:
    """10-critic ensemble update steps/s: QEnsemble vs loop of MLPs, fp32 and bf16."""
    names = {  # name: (batched, bf16, compiled)
        "qensemble_fp32": (True, False, False),
        "loop_fp32": (False, False, False),
        "qensemble_bf16": (True, True, False),
        "loop_bf16": (False, True, False),
        "qensemble_fp32_compile": (True, False, True),
        "qensemble_bf16_compile": (True, True, True),
    }
    notes: list[str] = []
    measures: dict[str, Measure | None] = {
        k: None
        if skip_mode(_modes(p, c), notes)
        else _ensemble_measure(b, p, args.updates, args.seed, c)
        for k, (b, p, c) in names.items()
    }
    result = alternate(measures, args.rounds)
    med = {k: median_of(v) for k, v in result.items()}
    ratios = {
        "qensemble_fp32/loop_fp32": ratio(med["qensemble_fp32"], med["loop_fp32"]),
        "qensemble_bf16/loop_bf16": ratio(med["qensemble_bf16"], med["loop_bf16"]),
        "qensemble_bf16/loop_fp32": ratio(med["qensemble_bf16"], med["loop_fp32"]),
        "qensemble_fp32_compile/loop_fp32": ratio(med["qensemble_fp32_compile"], med["loop_fp32"]),
        "qensemble_bf16_compile/loop_fp32": ratio(med["qensemble_bf16_compile"], med["loop_fp32"]),
    }
    table = markdown_table(
        ["precision", "QEnsemble", "loop of 10 MLPs", "ratio", "QEnsemble / loop fp32"],
        [
            [
                "fp32",
                fmt(med["qensemble_fp32"]),
                fmt(med["loop_fp32"]),
                fmt(ratios["qensemble_fp32/loop_fp32"], True),
                fmt(ratios["qensemble_fp32/loop_fp32"], True),
            ],
            [
                "bf16 autocast",
                fmt(med["qensemble_bf16"]),
                fmt(med["loop_bf16"]),
                fmt(ratios["qensemble_bf16/loop_bf16"], True),
                fmt(ratios["qensemble_bf16/loop_fp32"], True),
            ],
            *(
                [
                    f"{precision} compiled step",
                    fmt(med[f"qensemble_{precision}_compile"]),
                    "",
                    "",
                    fmt(ratios[f"qensemble_{precision}_compile/loop_fp32"], True),
                ]
                for precision in ("fp32", "bf16")
            ),
        ],
    )
    return {
        "title": f"10-critic ensemble update steps/s ({args.updates} per measurement; obs 17, "
        "act 6, 256x256 + LayerNorm, batch 256, MSE to a target, fused Adam on both sides; "
        "compiled step = loss, gradients and Adam as one torch.compile graph)",
        "unit": "updates/s",
        "updates_per_s": result,
        "ratios": ratios,
        "notes": notes,
        "table": table,
    }


# --------------------------------------------------------------------------------------
# o2o: offline-to-online updates, eager vs compiled; RLPD's critic steps vs JAX
# --------------------------------------------------------------------------------------
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
    spaces = _spaces(HOPPER_OBS, HOPPER_ACT)
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
    agent = RLPD(*_spaces(HOPPER_OBS, HOPPER_ACT), config)
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
            skip = skip_mode(_modes(bf16, compile), notes)
            n = cql_updates if agent == "cql" else args.updates
            batches = _hopper_batches(256, 8, args.seed)
            measures[f"{agent}_{mode}"] = (
                None if skip else _agent_measure(_o2o_agent(agent, bf16, compile), batches, n)
            )
    rlpd_calls = max(2, args.updates // 100)  # one call = 20 critic steps + the actor
    for mode, (bf16, compile) in O2O_MODES.items():
        skip = skip_mode(_modes(bf16, compile), notes)
        measures[f"rlpd_{mode}"] = (
            None if skip else _rlpd_measure(bf16, compile, rlpd_calls, args.seed)
        )
    if importlib.util.find_spec("rlcore.algos.rlpd") is None:
        _note(notes, "rlcore.algos.rlpd is not on this branch: RLPD update columns skipped")
    measures["critic_torch_eager"] = _torch_critic_steps_measure(False, rlpd_calls, args.seed)
    measures["critic_torch_compile"] = (
        None
        if skip_mode(["compile"], notes)
        else _torch_critic_steps_measure(True, rlpd_calls, args.seed)
    )
    _limit_xla_threads(args.torch_threads)
    measures["critic_jax"] = _jax_critic_steps_measure(rlpd_calls, args.seed)
    if measures["critic_jax"] is None:
        _note(notes, "jax is not installed (pip install -e .[bench]): JAX column skipped")
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


# --------------------------------------------------------------------------------------
# sac_run / ppo_run: whole training runs
# --------------------------------------------------------------------------------------
def _rlcore_run(overrides: list[str]) -> tuple[float, Path, tempfile.TemporaryDirectory]:
    """Compose rlcore's config with ``overrides`` and train in a temporary run dir;
    returns (wall seconds including config, env and agent setup, run dir, its holder).

    torch.compile's in-process caches are cleared first, so every run starts like a fresh
    process (a user's run): compiled graphs kept from earlier rounds slowed later rounds'
    compiled steps by 5-15% here. Compilation then reads torch's on-disk cache, as a
    user's second run on a machine does."""
    import torch
    from hydra import compose, initialize_config_module

    from rlcore.train import train

    torch._dynamo.reset()

    holder = tempfile.TemporaryDirectory(prefix="rlcore_bench_")
    run_dir = Path(holder.name)
    start = time.perf_counter()
    with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    train(cfg, run_dir)
    return time.perf_counter() - start, run_dir, holder


def _loop_seconds(run_dir: Path, step: int) -> float | None:
    """Seconds from the loop's start to ``step``, from ``time/sps`` in time.csv."""
    from rlcore.logging import read_csv

    for row in read_csv(run_dir / "time.csv"):
        if int(row["step"]) == step and row.get("time/sps"):
            return step / row["time/sps"]
    return None


def _run_modes(overrides: list[str]) -> list[str]:
    """The speed modes a run's overrides ask for ("bf16", "compile")."""
    modes = {"algo.precision=bf16": "bf16", "algo.compile=true": "compile"}
    return [modes[o] for o in overrides if o in modes]


def _run_table(
    rlcore: dict[str, Callable[[], dict[str, float]] | None],
    sb3: Callable[[], dict[str, float]],
    rounds: int,
    parts: dict[str, str],
    labels: dict[str, str],
) -> tuple[dict[str, Any], dict[str, dict[str, float | None]], str]:
    """Alternate rlcore variants and SB3; ratios ``<variant>/sb3`` per part; the table."""
    result = alternate({**rlcore, "sb3": sb3 if _has_sb3() else None}, rounds)
    ratios = {
        f"{name}/sb3": {
            part: ratio(median_of(result[name], part), median_of(result["sb3"], part))
            for part in parts
        }
        for name in rlcore
    }
    table = markdown_table(
        ["part", *labels.values(), "SB3", *(f"{labels[n]} / SB3" for n in rlcore)],
        [
            [
                label,
                *(fmt(median_of(result[name], part)) for name in rlcore),
                fmt(median_of(result["sb3"], part)),
                *(fmt(ratios[f"{name}/sb3"][part], True) for name in rlcore),
            ]
            for part, label in parts.items()
        ],
    )
    return result, ratios, table


_QUIET_RUN = [
    "logger=quiet",
    "eval_episodes=1",  # the loop always evaluates at its end: keep that to one episode
    "eval_envs=1",
    "keep_agent_snapshots=false",
]


def section_sac_run(args: argparse.Namespace) -> dict[str, Any]:
    """SAC on Hopper, UTD 1, whole-run env-steps/s: rlcore (rlcore.train) vs SB3 learn."""
    notes: list[str] = []
    total, starts = args.sac_steps, args.sac_learning_starts
    log_every = math.gcd(total, starts) if starts else total

    from rlcore.benchmarks.sac_hopper_vs_sb3 import make_sb3_sac, rlcore_sac_overrides

    overrides = [
        *rlcore_sac_overrides(total, starts, total, args.seed),
        *_QUIET_RUN,
        f"eval_every={10 * total}",
        f"checkpoint_every={10 * total}",
        f"log_every={log_every}",
    ]

    def rlcore_measure(extra: list[str]) -> Callable[[], dict[str, float]]:
        def measure() -> dict[str, float]:
            wall, run_dir, holder = _rlcore_run([*overrides, *extra])
            t_total, t_start = _loop_seconds(run_dir, total), _loop_seconds(run_dir, starts)
            holder.cleanup()
            post = (
                (total - starts) / (t_total - t_start)
                if t_total is not None and t_start is not None and total > starts
                else float("nan")
            )
            return {"whole": total / wall, "post_warmup": post}

        return measure

    def sb3_measure() -> dict[str, float]:
        import gymnasium as gym
        from stable_baselines3.common.callbacks import BaseCallback

        class WarmupClock(BaseCallback):
            t_start = float("nan")

            def _on_step(self) -> bool:
                if self.num_timesteps == starts:
                    self.t_start = time.perf_counter()
                return True

        start = time.perf_counter()
        model = make_sb3_sac(gym.make("Hopper-v5"), total, starts, args.seed)
        clock = WarmupClock()
        model.learn(total_timesteps=total, callback=clock)
        end = time.perf_counter()
        post = (total - starts) / (end - clock.t_start) if total > starts else float("nan")
        return {"whole": total / (end - start), "post_warmup": post}

    if not _has_sb3():
        _note(notes, "stable-baselines3 is not installed: SB3 column skipped")
    variants = {  # compile named explicitly: the default "auto" depends on the run length
        "rlcore": ["algo.compile=false"],
        "rlcore_compile": ["algo.compile=true"],
        "rlcore_bf16_compile": ["algo.precision=bf16", "algo.compile=true"],
    }
    result, ratios, table = _run_table(
        {
            name: None if skip_mode(_run_modes(extra), notes) else rlcore_measure(extra)
            for name, extra in variants.items()
        },
        sb3_measure,
        args.rounds,
        {"whole": "whole run", "post_warmup": "after warm-up"},
        {
            "rlcore": "rlcore fp32",
            "rlcore_compile": "rlcore fp32 compile",
            "rlcore_bf16_compile": "rlcore bf16 compile",
        },
    )
    return {
        "title": f"SAC Hopper-v5 training env-steps/s ({total:,} steps, {starts:,} random "
        "warm-up, UTD 1; rlcore on its default native env back end, SB3 on gym.make; "
        "bf16 = algo.precision=bf16, compile = algo.compile=true, compilation counted in the "
        "whole run)",
        "unit": "env steps/s",
        "steps_per_s": result,
        "ratios": ratios,
        "notes": notes,
        "table": table,
    }


# SB3 PPO defaults (stable_baselines3.PPO): lr 3e-4 constant, n_steps 2048 per env,
# batch 64, 10 epochs, gamma 0.99, GAE 0.95, clip 0.2, no value clipping, advantages
# normalised, ent 0, vf 0.5, grad norm 0.5, 64x64 tanh actor and critic, log-std 0,
# Adam eps 1e-5, no observation / reward normalisation.
def rlcore_ppo_overrides(total: int, rollout: int, num_envs: int, seed: int) -> list[str]:
    """rlcore PPO on Hopper configured to SB3's PPO defaults (comment above)."""
    return [
        "algo=ppo",
        "env=hopper",
        f"env.num_envs={num_envs}",
        f"seed={seed}",
        f"total_steps={total}",
        f"algo.rollout_steps={rollout}",
        f"algo.num_minibatches={max(1, rollout * num_envs // 64)}",
        "algo.update_epochs=10",
        "algo.hidden=[64,64]",
        "algo.activation=tanh",
        "algo.lr=3e-4",
        "algo.anneal_lr=false",
        "algo.gamma=0.99",
        "algo.gae_lambda=0.95",
        "algo.clip_coef=0.2",
        "algo.clip_value_loss=false",
        "algo.ent_coef=0.0",
        "algo.vf_coef=0.5",
        "algo.max_grad_norm=0.5",
        "algo.norm_adv=true",
        "algo.init_log_std=0.0",
        "algo.normalize_obs=false",
        "algo.normalize_reward=false",
    ]


def section_ppo_run(args: argparse.Namespace) -> dict[str, Any]:
    """PPO on Hopper with 8 envs, whole-run env-steps/s: rlcore vs SB3 (SB3 defaults)."""
    notes: list[str] = []
    num_envs, rollout = 8, args.ppo_rollout
    per_rollout = num_envs * rollout
    total = max(1, args.ppo_steps // per_rollout) * per_rollout
    overrides = [
        *rlcore_ppo_overrides(total, rollout, num_envs, args.seed),
        *_QUIET_RUN,
        f"eval_every={10 * total}",
        f"checkpoint_every={10 * total}",
    ]

    def rlcore_measure(extra: list[str]) -> Callable[[], dict[str, float]]:
        def measure() -> dict[str, float]:
            wall, run_dir, holder = _rlcore_run([*overrides, *extra])
            loop, first = _loop_seconds(run_dir, total), _loop_seconds(run_dir, per_rollout)
            holder.cleanup()
            steady = (
                (total - per_rollout) / (loop - first)
                if loop is not None and first is not None and total > per_rollout
                else float("nan")
            )
            return {
                "whole": total / wall,
                "loop": total / loop if loop else float("nan"),
                "steady": steady,
            }

        return measure

    def sb3_measure() -> dict[str, float]:
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env

        class RolloutClock(BaseCallback):
            def __init__(self) -> None:
                super().__init__()
                self.starts: list[float] = []

            def _on_rollout_start(self) -> None:
                self.starts.append(time.perf_counter())

            def _on_step(self) -> bool:
                return True

        start = time.perf_counter()
        env = sb3_make_vec_env("Hopper-v5", n_envs=num_envs, seed=args.seed)
        model = PPO("MlpPolicy", env, n_steps=rollout, batch_size=64, seed=args.seed, device="cpu")
        learn_start = time.perf_counter()
        clock = RolloutClock()
        model.learn(total_timesteps=total, callback=clock)
        end = time.perf_counter()
        env.close()
        steady = (
            (total - per_rollout) / (end - clock.starts[1])
            if len(clock.starts) > 1
            else float("nan")
        )
        return {
            "whole": total / (end - start),
            "loop": total / (end - learn_start),
            "steady": steady,
        }

    if not _has_sb3():
        _note(notes, "stable-baselines3 is not installed: SB3 column skipped")
    variants = {  # compile named explicitly: the default "auto" depends on the run length
        "rlcore": ["algo.compile=false"],
        "rlcore_fast": ["algo.fused_optimizer=true", "algo.compile=true"],
    }
    result, ratios, table = _run_table(
        {
            name: None if skip_mode(_run_modes(extra), notes) else rlcore_measure(extra)
            for name, extra in variants.items()
        },
        sb3_measure,
        args.rounds,
        {
            "whole": "whole run",
            "loop": "training loop only",
            "steady": "after the first update",
        },
        {"rlcore": "rlcore", "rlcore_fast": "rlcore fused+compile"},
    )
    return {
        "title": f"PPO Hopper-v5 training env-steps/s ({total:,} steps = "
        f"{total // per_rollout} rollouts of {num_envs} envs x {rollout}; batch 64, 10 epochs, "
        "64x64; rlcore on its default native env back end, SB3 on DummyVecEnv; fused+compile "
        "= algo.fused_optimizer=true algo.compile=true, compilation time included except in "
        "'after the first update' (rollouts 2.. with their updates, both sides))",
        "unit": "env steps/s",
        "steps_per_s": result,
        "ratios": ratios,
        "notes": notes,
        "table": table,
    }


# --------------------------------------------------------------------------------------
# memory: peak RSS of a filled 1M-transition buffer (fresh subprocess each)
# --------------------------------------------------------------------------------------
def _rss_bytes() -> tuple[int | None, int | None]:
    """(current RSS, peak RSS) of this process in bytes, from /proc (Linux) or getrusage."""
    try:
        fields = dict(
            line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines()
        )
        return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return None, peak if sys.platform == "darwin" else peak * 1024


def memory_child(kind: str, capacity: int) -> dict[str, Any]:
    """Run in a fresh process: build and completely fill a Hopper replay buffer of
    ``kind`` ("rlcore" or "sb3"), return the peak RSS increase and the buffer's bytes."""
    import torch  # noqa: F401  (imported before the baseline is taken)

    if kind == "sb3":
        from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer
    else:
        from rlcore.buffers import ReplayBuffer
    obs_space, act_space = _spaces(HOPPER_OBS, HOPPER_ACT)
    rng = np.random.default_rng(0)
    chunk = 1_000  # rows per write: small temporaries, so the peak is the buffer's
    # clear the peak ("5" resets VmHWM, Linux >= 4.0) so the import transients drop out
    try:
        Path("/proc/self/clear_refs").write_text("5")
        peak_reset = True
    except OSError:
        peak_reset = False
    base_rss, base_peak = _rss_bytes()
    baseline = base_rss if peak_reset and base_rss is not None else base_peak
    if kind == "sb3":
        buffer = SB3ReplayBuffer(capacity, obs_space, act_space, device="cpu", n_envs=1)
        arrays = {
            "observations": buffer.observations,
            "next_observations": buffer.next_observations,
            "actions": buffer.actions,
            "rewards": buffer.rewards,
            "dones": buffer.dones,
            "timeouts": buffer.timeouts,
        }
        for start in range(0, capacity, chunk):
            for array in arrays.values():
                block = array[start : start + chunk]
                block[:] = rng.standard_normal(block.shape)
        buffer.full = True
        held = sum(a.nbytes for a in arrays.values())
    else:
        buffer = ReplayBuffer(capacity, (HOPPER_OBS,), (HOPPER_ACT,), num_envs=chunk)
        for _ in range(capacity // chunk):
            buffer.add(
                rng.standard_normal((chunk, HOPPER_OBS)),
                rng.uniform(-1, 1, (chunk, HOPPER_ACT)),
                rng.standard_normal(chunk),
                rng.standard_normal((chunk, HOPPER_OBS)),
                rng.random(chunk) < 0.01,
                rng.random(chunk) < 0.001,
            )
        assert len(buffer) == capacity
        held = sum(getattr(buffer, f).nbytes for f in ReplayBuffer.FIELDS)
    _, peak = _rss_bytes()
    return {
        "peak_rss_increase": peak - baseline,
        "buffer_bytes": held,
        "baseline_rss": baseline,
        "peak_rss": peak,
        "peak_reset": peak_reset,
    }


def _memory_subprocess(kind: str, capacity: int) -> dict[str, Any]:
    code = (
        "import json; from rlcore.benchmarks.throughput import memory_child; "
        f"print(json.dumps(memory_child({kind!r}, {capacity})))"
    )
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def section_memory(args: argparse.Namespace) -> dict[str, Any]:
    """Peak RSS increase of a filled Hopper replay buffer vs its raw float32 data size."""
    notes: list[str] = []
    capacity = args.memory_capacity
    # obs, next_obs (11 each), action (3), reward, terminated, truncated at float32
    raw = capacity * 4 * (2 * HOPPER_OBS + HOPPER_ACT + 3)
    results: dict[str, dict | None] = {"rlcore": _memory_subprocess("rlcore", capacity)}
    if _has_sb3():
        results["sb3"] = _memory_subprocess("sb3", capacity)
    else:
        results["sb3"] = None
        _note(notes, "stable-baselines3 is not installed: SB3 column skipped")
    for result in results.values():
        if result is not None:
            result["ratio_to_raw"] = result["peak_rss_increase"] / raw
            if not result["peak_reset"]:
                _note(notes, "peak RSS could not be reset: baseline is the import-time peak")
    mib = 2**20
    table = markdown_table(
        ["buffer", "peak RSS increase (MiB)", "buffer tensors (MiB)", "raw data (MiB)", "ratio"],
        [
            [
                label,
                fmt(r["peak_rss_increase"] / mib) if r else "n/a",
                fmt(r["buffer_bytes"] / mib) if r else "n/a",
                fmt(raw / mib),
                fmt(r["ratio_to_raw"], True) if r else "n/a",
            ]
            for label, r in (
                ("rlcore ReplayBuffer", results["rlcore"]),
                ("SB3 ReplayBuffer (info)", results["sb3"]),
            )
        ],
    )
    return {
        "title": f"memory of a filled {capacity:,}-transition Hopper replay buffer (obs 11, "
        "act 3; fresh subprocess each; raw = obs, action, reward, next_obs, terminated, "
        "truncated at float32)",
        "unit": "bytes",
        "capacity": capacity,
        "raw_bytes": raw,
        "buffers": results,
        "ratios": {"rlcore/raw": results["rlcore"]["ratio_to_raw"]},
        "notes": notes,
        "table": table,
    }


# --------------------------------------------------------------------------------------
# targets, CLI
# --------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------
# mjx: MJX (JAX, GPU) env throughput next to the native back end; PPO to a return
# --------------------------------------------------------------------------------------
def _mjx_device(requested: str | None) -> str:
    import torch

    if requested:
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


def _mjx_rate(env: Any, actions: Any, steps: int) -> float:
    """Env steps/s of an MJX env over ``steps`` steps of pre-drawn device actions (the
    last observation is synchronised before the clock stops)."""
    import torch

    obs = None
    start = time.perf_counter()
    for i in range(steps):
        obs, *_ = env.step(actions[i % len(actions)])
    if obs is not None and obs.is_cuda:
        torch.cuda.synchronize(obs.device)
    return steps * env.num_envs / (time.perf_counter() - start)


def section_mjx(args: argparse.Namespace) -> dict[str, Any]:
    """Env steps/s of ``backend="mjx"`` (on ``--mjx-device``: cuda when torch sees a GPU)
    vs the native back end on ``--mjx-native-threads`` C threads (the 2-core machine's
    back end), at ``--mjx-num-envs`` envs; the first MJX step's compile time beside it."""
    import torch

    from rlcore.envs.mjx import MjxVectorEnv
    from rlcore.envs.native import NativeVectorEnv

    device = _mjx_device(args.mjx_device)
    notes: list[str] = [
        f"mjx on {device}"
        + (
            f" ({torch.cuda.get_device_name(device)})"
            if device.startswith("cuda")
            else " (JAX's CPU device: slow, for coverage)"
        ),
        f"native on {args.mjx_native_threads} C threads; steps/s count every env",
        f"MJX implementation: {args.mjx_impl}",
        f"jax {importlib.metadata.version('jax')}, jaxlib {importlib.metadata.version('jaxlib')}, "
        f"mujoco-mjx {importlib.metadata.version('mujoco-mjx')}",
    ]
    rows = []
    for name in args.mjx_envs:
        env_id = f"{name}-v5"
        for num_envs in args.mjx_num_envs:
            steps = max(args.mjx_min_steps, min(args.mjx_max_steps, args.mjx_env_steps // num_envs))
            generator = torch.Generator(device="cpu").manual_seed(args.seed)
            row: dict[str, Any] = {"env": env_id, "num_envs": num_envs, "steps": steps,
                                   "impl": args.mjx_impl}  # fmt: skip
            mjx_env = MjxVectorEnv(env_id, num_envs, device=device, impl=args.mjx_impl)
            space = mjx_env.single_action_space
            low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
            draws = torch.rand((8, num_envs, low.numel()), generator=generator)
            actions = (low + (high - low) * draws).to(device)
            t0 = time.perf_counter()
            mjx_env.reset(seed=args.seed)
            mjx_env.step(actions[0])[0].cpu()
            row["mjx_compile_s"] = time.perf_counter() - t0
            native = NativeVectorEnv(env_id, num_envs, num_threads=args.mjx_native_threads)
            native.reset(seed=args.seed)
            native_actions = actions.cpu().numpy()
            native_steps = max(3, min(steps, args.mjx_native_env_steps // num_envs))
            samples: dict[str, list[float]] = {"mjx": [], "native": []}
            for _ in range(args.rounds):
                samples["mjx"].append(_mjx_rate(mjx_env, actions, steps))
                samples["native"].append(
                    _env_rate(native, native_actions[np.arange(native_steps) % 8])
                )
            native.close()
            mjx_env.close()
            del mjx_env
            row["samples"] = samples
            row["mjx"] = statistics.median(samples["mjx"])
            row["native"] = statistics.median(samples["native"])
            row["ratio"] = row["mjx"] / row["native"]
            rows.append(row)
            # a run cut short by a time limit keeps the rows measured so far
            write_json(args.out.with_suffix(".partial.json"), {"device": device, "rows": rows})
            print(
                f"{env_id} {num_envs:>6} envs: mjx {row['mjx']:>12,.0f} steps/s, native "
                f"{row['native']:>10,.0f}, ratio {row['ratio']:.2f} (compile {row['mjx_compile_s']:.0f} s)",
                flush=True,
            )
    table = markdown_table(
        ["env", "envs", "mjx steps/s", f"native ({args.mjx_native_threads} threads)", "mjx / native", "first step (compile) s"],
        [[r["env"], str(r["num_envs"]), fmt(r["mjx"]), fmt(r["native"]), fmt(r["ratio"], True),
          f"{r['mjx_compile_s']:.1f}"] for r in rows],
    )  # fmt: skip
    return {"title": f"MJX env steps/s on {device} vs native", "table": table, "rows": rows,
            "device": device, "notes": notes}  # fmt: skip


def _ppo_to_target(
    args: argparse.Namespace, backend: str, device: str, minutes: float
) -> dict[str, Any]:
    """One ``+experiment=ppo_hopper_mjx`` run on ``backend`` until an evaluation reaches
    ``--mjx-ppo-target`` or ``minutes`` pass: the process's wall time and the evaluation
    curve."""
    import torch

    from rlcore.logging import read_csv

    run_dir = Path(tempfile.mkdtemp(prefix=f"ppo_{backend}_"))
    overrides = ["+experiment=ppo_hopper_mjx", f"env.backend={backend}", f"device={device}",
                 f"seed={args.seed}", f"env.num_envs={args.mjx_ppo_envs}",
                 f"stop_at_return={args.mjx_ppo_target}", f"run_dir={run_dir}",
                 "logger.tensorboard=false"]  # fmt: skip
    if backend == "mjx":
        overrides.append(f"env.mjx_impl={args.mjx_impl}")
    if args.mjx_ppo_eval_every:
        overrides.append(f"eval_every={args.mjx_ppo_eval_every}")
    command = [sys.executable, "-m", "rlcore.train", *overrides]
    cpus = os.cpu_count()
    if backend == "native":  # the envs' and torch's threads on --mjx-native-threads cores
        threads = args.mjx_native_threads
        command.append(f"threads={threads}")
        if shutil.which("taskset") and (os.cpu_count() or 1) > threads:
            command = ["taskset", "-c", f"0-{threads - 1}", *command]
            cpus = threads
    print(" ".join(command), flush=True)
    start = time.perf_counter()
    try:
        subprocess.run(command, timeout=minutes * 60, check=False)
        stopped = "finished"
    except subprocess.TimeoutExpired:
        stopped = f"stopped at the {minutes} min limit"
    wall = time.perf_counter() - start
    evals = read_csv(run_dir / "eval.csv") if (run_dir / "eval.csv").exists() else []
    reached = next((r for r in evals if r["eval/return"] >= args.mjx_ppo_target), None)
    cuda = device.startswith("cuda")
    return {"backend": backend, "device": device,
            "gpu": torch.cuda.get_device_name(device) if cuda else None,
            "num_envs": args.mjx_ppo_envs, "target": args.mjx_ppo_target, "cpus": cpus,
            "reached_at_step": None if reached is None else int(reached["step"]),
            "process_wall_s": wall, "stopped": stopped,
            "best_return": max((r["eval/return"] for r in evals), default=None),
            "curve": [{"step": int(r["step"]), "return": r["eval/return"]} for r in evals]}  # fmt: skip


def section_mjx_ppo(args: argparse.Namespace) -> dict[str, Any]:
    """PPO on Hopper with ``+experiment=ppo_hopper_mjx`` (``--mjx-ppo-envs`` MJX envs on
    ``--mjx-device``) to ``--mjx-ppo-target``: wall time (the whole process: start-up,
    compilation and evaluations included; the run stops at the first evaluation that
    reaches it) and evaluation curve. The baseline (``--mjx-ppo-baseline``, on by
    default) is the same experiment on the native back end (``--mjx-native-threads``
    threads for the envs and torch, device cpu), run after it on the same machine."""
    device = _mjx_device(args.mjx_device)
    rows = [_ppo_to_target(args, "mjx", device, args.mjx_ppo_minutes)]
    if args.mjx_ppo_baseline:
        minutes = args.mjx_ppo_baseline_minutes or args.mjx_ppo_minutes
        rows.append(_ppo_to_target(args, "native", "cpu", minutes))
    mjx_row = rows[0]
    for row in rows:
        both = row["reached_at_step"] is not None and mjx_row["reached_at_step"] is not None
        row["wall_vs_mjx"] = row["process_wall_s"] / mjx_row["process_wall_s"] if both else None
    table = markdown_table(
        ["back end", "device", "envs", "target", "reached at env step", "best eval return",
         "process wall s", "wall / mjx's"],
        [[r["backend"], r["device"], str(r["num_envs"]), f"{r['target']:,.0f}",
          "-" if r["reached_at_step"] is None else f"{r['reached_at_step']:,}",
          fmt(r["best_return"]), f"{r['process_wall_s']:.0f}", fmt(r["wall_vs_mjx"], True)]
         for r in rows],
    )  # fmt: skip
    notes = [f"{r['backend']}: run {r['stopped']}" for r in rows]
    notes.append("evaluation curves in the JSON (10 episodes on the sync back end)")
    return {"title": "PPO Hopper on MJX: wall time to the target return", "table": table,
            "rows": rows, "notes": notes}  # fmt: skip


def _env_ratio(section: dict, env_id: str, num_envs: int, key: str) -> float | None:
    for row in section["rows"]:
        if row["env"] == env_id and row["num_envs"] == num_envs:
            return row["ratios"][key]
    return None


# (section, target line, goal, at most (else at least), measured ratio from the section)
TARGETS: list[tuple[str, str, float, bool, Callable[[dict], float | None]]] = [
    (
        "env",
        "env Hopper 16 envs: native / gym Sync",
        2.5,
        False,
        lambda s: _env_ratio(s, "Hopper-v5", 16, "native/sync"),
    ),
    (
        "env",
        "env Hopper 16 envs: native / envpool",
        1.2,
        False,
        lambda s: _env_ratio(s, "Hopper-v5", 16, "native/envpool"),
    ),
    (
        "env",
        "env Hopper 64 envs: native / MuJoCo ceiling",
        0.7,
        False,
        lambda s: _env_ratio(s, "Hopper-v5", 64, "native/ceiling"),
    ),
    (
        "sac_update",
        "sac_update: rlcore fp32 / SB3",
        1.2,
        False,
        lambda s: s["ratios"]["rlcore_fp32/sb3"],
    ),
    (
        "sac_update",
        "sac_update: rlcore fp32 compile / SB3",
        1.2,
        False,
        lambda s: s["ratios"]["rlcore_fp32_compile/sb3"],
    ),
    (
        "sac_update",
        "sac_update: rlcore bf16 / SB3",
        2.5,
        False,
        lambda s: s["ratios"]["rlcore_bf16/sb3"],
    ),
    (
        "sac_update",
        "sac_update: rlcore bf16 compile / SB3",
        2.5,
        False,
        lambda s: s["ratios"]["rlcore_bf16_compile/sb3"],
    ),
    (
        "ensemble",
        "ensemble fp32: QEnsemble / loop",
        1.2,
        False,
        lambda s: s["ratios"]["qensemble_fp32/loop_fp32"],
    ),
    (
        "ensemble",
        "ensemble fp32: QEnsemble compiled step / loop",
        1.2,
        False,
        lambda s: s["ratios"]["qensemble_fp32_compile/loop_fp32"],
    ),
    (
        "ensemble",
        "ensemble bf16: QEnsemble bf16 / loop fp32",
        2.5,
        False,
        lambda s: s["ratios"]["qensemble_bf16/loop_fp32"],
    ),
    (
        "ensemble",
        "ensemble bf16: QEnsemble bf16 compiled step / loop fp32",
        2.5,
        False,
        lambda s: s["ratios"]["qensemble_bf16_compile/loop_fp32"],
    ),
    (
        "o2o",
        "CQL update: compiled / eager, fp32",
        3.0,
        False,
        lambda s: s["ratios"]["cql_fp32_compile/cql_fp32"],
    ),
    (
        "o2o",
        "RLPD critic steps: torch compiled / JAX jit, fp32",
        1.0,
        False,
        lambda s: s["ratios"]["critic_torch_compile/critic_jax"],
    ),
    (
        "o2o",
        "RLPD update (critic + actor) critic steps / JAX critic-only steps, fp32",
        1.0,
        False,
        lambda s: s["ratios"]["rlpd_fp32_compile_critic_steps/critic_jax"],
    ),
    (
        "sac_run",
        "sac_run whole run: rlcore fp32 / SB3",
        1.2,
        False,
        lambda s: s["ratios"]["rlcore/sb3"]["whole"],
    ),
    (
        "sac_run",
        "sac_run whole run: rlcore fp32 compile / SB3",
        1.2,
        False,
        lambda s: s["ratios"]["rlcore_compile/sb3"]["whole"],
    ),
    (
        "sac_run",
        "sac_run whole run: rlcore bf16 compile / SB3",
        2.0,
        False,
        lambda s: s["ratios"]["rlcore_bf16_compile/sb3"]["whole"],
    ),
    (
        "ppo_run",
        "ppo_run whole run: rlcore fused+compile / SB3",
        2.0,
        False,
        lambda s: s["ratios"]["rlcore_fast/sb3"]["whole"],
    ),
    (
        "ppo_run",
        "ppo_run after the first update (no compilation): rlcore fused+compile / SB3",
        2.0,
        False,
        lambda s: s["ratios"]["rlcore_fast/sb3"]["steady"],
    ),
    (
        "memory",
        "memory: rlcore peak RSS / raw data",
        1.2,
        True,
        lambda s: s["ratios"]["rlcore/raw"],
    ),
]


def _mjx_ratio(section: dict, env_id: str, num_envs: int) -> float | None:
    if section.get("device", "cpu") == "cpu":  # the targets are for one GPU
        return None
    for row in section["rows"]:
        if row["env"] == env_id and row["num_envs"] == num_envs:
            return row["ratio"]
    return None


def _mjx_ppo_minutes(section: dict) -> float | None:
    row = section["rows"][0]
    if row["device"] == "cpu" or row["reached_at_step"] is None:
        return None
    return row["process_wall_s"] / 60  # the run stops at the target: all of it counts


TARGETS += [
    ("mjx", "mjx Hopper 4096 envs (GPU) / native on 2 threads", 30.0, False,
     lambda s: _mjx_ratio(s, "Hopper-v5", 4096)),
    ("mjx", "mjx Hopper 16384 envs (GPU) / native on 2 threads", 30.0, False,
     lambda s: _mjx_ratio(s, "Hopper-v5", 16384)),
    ("mjx_ppo", "PPO Hopper on MJX (GPU): minutes to the target return", 10.0, True,
     _mjx_ppo_minutes),
]  # fmt: skip


def targets(sections: dict[str, dict]) -> list[dict[str, Any]]:
    """Every target line of the measured sections: ratio (None: not measured) and verdict."""
    out = []
    for section_name, name, goal, at_most, measured in TARGETS:
        section = sections.get(section_name)
        if section is None:
            continue
        value = None if "error" in section else measured(section)
        if value is not None and not math.isfinite(value):
            value = None
        met = None if value is None else (value <= goal if at_most else value >= goal)
        out.append(
            {
                "section": section_name,
                "name": name,
                "goal": f"{'<=' if at_most else '>='} {goal}",
                "value": value,
                "met": met,
            }
        )
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--sections", nargs="+", choices=SECTIONS,
        default=[s for s in SECTIONS if s not in OPT_IN],
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="smoke run: everything shrunk")
    parser.add_argument("--rounds", type=int, default=None, help="A B rounds (3; quick 1)")
    parser.add_argument("--out", type=Path, default=None, help="JSON path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--envs", nargs="+", default=["Hopper", "HalfCheetah", "Ant"])
    parser.add_argument("--num-envs", type=int, nargs="+", default=None, help="1 16 64")
    parser.add_argument(
        "--env-steps", type=int, default=None, help="env steps per measurement (20000)"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="native/ceiling C threads (all CPUs)"
    )
    parser.add_argument(
        "--torch-threads", type=int, default=None, help="torch intra-op threads (torch default)"
    )
    parser.add_argument(
        "--updates", type=int, default=None, help="gradient updates per measurement (500)"
    )
    parser.add_argument("--buffer-size", type=int, default=100_000, help="sac_update buffer")
    parser.add_argument("--sac-steps", type=int, default=None, help="sac_run env steps (20000)")
    parser.add_argument("--sac-learning-starts", type=int, default=None, help="(5000)")
    parser.add_argument("--ppo-steps", type=int, default=None, help="ppo_run env steps (131072)")
    parser.add_argument(
        "--ppo-rollout", type=int, default=None, help="PPO steps per env per rollout (2048)"
    )
    parser.add_argument("--memory-capacity", type=int, default=1_000_000)
    parser.add_argument("--mjx-device", default=None, help="mjx: cuda if available, else cpu")
    parser.add_argument("--mjx-envs", nargs="+", default=["Hopper", "Ant"])
    parser.add_argument("--mjx-impl", default="jax", choices=["jax", "warp"],
                        help="MJX implementation (warp: needs warp-lang)")  # fmt: skip
    parser.add_argument("--mjx-num-envs", type=int, nargs="+", default=None,
                        help="mjx: 1 1024 4096 16384 (quick: 1 16)")  # fmt: skip
    parser.add_argument("--mjx-native-threads", type=int, default=2)
    parser.add_argument("--mjx-env-steps", type=int, default=None, help="mjx steps x envs (2M)")
    parser.add_argument("--mjx-native-env-steps", type=int, default=None, help="(100k)")
    parser.add_argument("--mjx-min-steps", type=int, default=None, help="(10)")
    parser.add_argument("--mjx-max-steps", type=int, default=None, help="(200)")
    parser.add_argument("--mjx-ppo-envs", type=int, default=1024)
    parser.add_argument("--mjx-ppo-target", type=float, default=2500.0)
    parser.add_argument("--mjx-ppo-minutes", type=float, default=10.0)
    parser.add_argument("--mjx-ppo-eval-every", type=int, default=None,
                        help="env steps between evaluations (the experiment's: 1M)")  # fmt: skip
    parser.add_argument("--mjx-ppo-baseline", action=argparse.BooleanOptionalAction,
                        default=True, help="also run the experiment on the native back end")  # fmt: skip
    parser.add_argument("--mjx-ppo-baseline-minutes", type=float, default=None,
                        help="time limit of the native run (default: --mjx-ppo-minutes)")  # fmt: skip
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "rounds": (3, 1),
        "num_envs": ([1, 16, 64], [1, 16]),
        "env_steps": (20_000, 2_000),
        "updates": (500, 50),
        "sac_steps": (20_000, 2_000),
        "sac_learning_starts": (5_000, 1_000),
        "ppo_steps": (131_072, 4_096),
        "ppo_rollout": (2_048, 256),
        "mjx_num_envs": ([1, 1024, 4096, 16384], [1, 16]),
        "mjx_env_steps": (2_000_000, 2_000),
        "mjx_native_env_steps": (100_000, 2_000),
        "mjx_min_steps": (10, 3),
        "mjx_max_steps": (200, 20),
    }
    for key, (full, small) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, small if quick else full)
    if args.threads is None:
        args.threads = os.cpu_count() or 1
    if args.out is None:
        args.out = RESULTS / ("throughput_quick.json" if quick else "throughput.json")
    args.sections = [s for s in SECTIONS if s in args.sections]  # canonical order
    return args


SECTION_FUNCS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "env": section_env,
    "sac_update": section_sac_update,
    "ensemble": section_ensemble,
    "o2o": section_o2o,
    "sac_run": section_sac_run,
    "ppo_run": section_ppo_run,
    "memory": section_memory,
    "mjx": section_mjx,
    "mjx_ppo": section_mjx_ppo,
}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the selected sections, print their tables and the targets, write the JSON."""
    args = parse_args(argv)
    started = time.perf_counter()
    if args.torch_threads is not None:
        import torch

        torch.set_num_threads(args.torch_threads)
    payload: dict[str, Any] = {
        "benchmark": "throughput",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "quick": args.quick,
        "args": vars(args),
        "machine": machine_info(args.threads),
        "sections": {},
        "targets": [],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    modes = payload["machine"]["speed_modes"]
    print(
        f"{payload['machine'].get('cpu_model')}: CPU capability {modes['cpu_capability']}, "
        f"bf16 native {modes['bf16_native']} ({modes['bf16_reason']}), C++ compiler "
        f"{modes['cxx_compiler']}",
        flush=True,
    )
    for name in args.sections:
        print(f"\n## {name}", flush=True)
        t0 = time.perf_counter()
        try:
            section = SECTION_FUNCS[name](args)
        except Exception as error:  # one failing section must not lose the others
            traceback.print_exc()
            section = {"error": f"{type(error).__name__}: {error}", "notes": [], "table": ""}
        section["seconds"] = time.perf_counter() - t0
        payload["sections"][name] = section
        if "error" in section:
            print(f"section {name} failed: {section['error']}")
        else:
            print(f"\n{section['title']}\n\n{section['table']}")
            for note in section["notes"]:
                print(f"\n* {note}")
        payload["targets"] = targets(payload["sections"])
        write_json(args.out, payload)

    payload["machine"]["load_avg_end"] = (
        list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    )
    payload["seconds"] = time.perf_counter() - started
    rows = [
        [
            t["name"],
            fmt(t["value"], True),
            t["goal"],
            {True: "yes", False: "NO", None: "not measured"}[t["met"]],
        ]
        for t in payload["targets"]
    ]
    print("\n## targets\n")
    print(markdown_table(["target", "measured", "goal", "met"], rows))
    write_json(args.out, payload)
    print(f"\nwrote {args.out} ({payload['seconds']:.0f} s)")
    return payload


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float (a rate that could not be measured) as None."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Strict JSON (NaN/inf written as null)."""
    path.write_text(json.dumps(_finite(payload), indent=2, allow_nan=False))


if __name__ == "__main__":
    main()
