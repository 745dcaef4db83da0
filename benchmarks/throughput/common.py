"""Shared pieces of the throughput suite: alternating measurement, medians and
ratios, the machine description, speed-mode skips, tables, Hopper shapes, the JSON."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parents[1] / "results"  # benchmarks/results
SECTIONS = (
    "env",
    "sac_update",
    "ensemble",
    "o2o",
    "compile",
    "sac_run",
    "ppo_run",
    "memory",
    "mjx",
    "mjx_ppo",
)
# run only when named: they need JAX + mujoco-mjx and are meant for a GPU
OPT_IN = ("mjx", "mjx_ppo")


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


def mode_names(bf16: bool, compile: bool) -> list[str]:
    return [mode for mode, used in (("bf16", bf16), ("compile", compile)) if used]


def skip_mode(modes: Sequence[str], notes: list[str]) -> bool:
    """True when a contender using ``modes`` ("bf16", "compile") is not to be timed here;
    each reason is noted once per section."""
    reasons = [reason for mode, reason in mode_skips().items() if mode in modes and reason]
    for reason in reasons:
        if reason not in notes:
            add_note(notes, reason)
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


def add_note(notes: list[str], text: str) -> None:
    print(f"  note: {text}", flush=True)
    notes.append(text)


HOPPER_OBS, HOPPER_ACT = 11, 3


def box_spaces(obs_dim: int, act_dim: int) -> tuple[Any, Any]:
    import gymnasium as gym

    return (
        gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float64),
        gym.spaces.Box(-1.0, 1.0, (act_dim,), np.float32),
    )


def has_sb3() -> bool:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return False
    return True


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
