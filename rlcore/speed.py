"""Speed modes that never make a run slower: what this machine does natively, and the
effective ``precision`` / ``compile`` of an agent.

* ``precision="bf16"`` pays only where bfloat16 matmuls are native: a GPU with bf16
  (``torch.cuda.is_bf16_supported``), a CPU whose ATen kernels run at an AVX512 level
  (``torch.backends.cpu.get_cpu_capability()``, which honours ``ATEN_CPU_CAPABILITY``)
  and that has AVX512-BF16 or AMX. Elsewhere bf16 is emulated (an AVX2-only AMD EPYC ran
  SAC's update ~13x slower than float32), so the agent falls back to float32 with one
  ``SpeedModeWarning`` naming the missing feature. ``RLCORE_ALLOW_EMULATED_BF16=1`` keeps
  bf16 anyway: correctness tests exercise the bf16 maths on every CPU with it.
* ``compile``: ``True | False | "auto"``. ``"auto"`` compiles runs longer than
  ``AUTO_COMPILE_ABOVE_STEPS`` (the config's ``plan()``: offline plus online steps) when
  a C++ compiler exists. ``True`` without a compiler runs eager with one warning (same
  maths; the compiled path equals eager to float tolerance, tests/test_speed_options.py).

``resolve_speed_modes`` applies both to an algorithm's config, once, in its constructor;
the agent's ``config`` then holds the effective values (``precision`` float32 / bf16,
``compile`` a bool).

Simulating an AVX2-only CPU on a bf16 machine takes ``ONEDNN_MAX_CPU_ISA=AVX2`` (bf16
matmuls run in oneDNN; alone it makes SAC's bf16 update ~8-15x slower than float32 here)
and ``ATEN_CPU_CAPABILITY=avx2`` (ATen's own kernels; alone it leaves bf16 fast). Detection
treats either as emulated, erring toward float32. Compiled graphs then need a fresh
``TORCHINDUCTOR_CACHE_DIR``: kernels cached without the variables crashed with them set.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, TypeVar

import torch

from rlcore.capabilities import Planned
from rlcore.compiled import cxx_compiler
from rlcore.utils import check_precision

ALLOW_EMULATED_BF16 = "RLCORE_ALLOW_EMULATED_BF16"

# compile="auto" compiles runs of more than this many env steps. Compilation costs ~20-60 s
# once per process; SAC repays it within ~5-15k updates (57.9 -> 99.9 updates/s on an
# AVX2-only EPYC, 172 -> 285 on a Xeon with AMX), PPO within its first rollouts, so 100k
# leaves a wide margin on slower machines, while short runs (quick looks, every run of
# the test suite, <= 100k steps) skip the start-up wait.
AUTO_COMPILE_ABOVE_STEPS = 100_000
COMPILE_CHOICES = (True, False, "auto")

T = TypeVar("T", bound=Planned)


class SpeedModeWarning(UserWarning):
    """A requested speed mode is unavailable or slow here; the run falls back to one that
    gives the same maths (float32, eager)."""


def cpu_capability() -> str:
    """The SIMD level of torch's ATen CPU kernels ("AVX2", "AVX512", "DEFAULT", ...)."""
    return torch.backends.cpu.get_cpu_capability()


def _onednn_isa_limit() -> str | None:
    """``ONEDNN_MAX_CPU_ISA`` (or its old name) when it keeps oneDNN's matmuls below the
    bf16 instructions (e.g. ``AVX2``, ``AVX512_CORE``); None when unset or high enough."""
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        value = os.environ.get(name, "").strip().upper()
        high = value == "DEFAULT" or any(
            k in value for k in ("BF16", "AMX", "FP16", "AVX10", "ALL")
        )
        if value and not high:
            return f"{name}={value}"
    return None


def bf16_native(device: str | torch.device = "cpu") -> tuple[bool, str]:
    """(whether bfloat16 matmuls run natively on ``device``, the reason in words)."""
    device = torch.device(device)
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return True, "the CUDA device supports bf16"
        return False, "the CUDA device has no native bf16 (compute capability below 8.0)"
    if device.type != "cpu":
        return True, f"bf16 support is not checked on {device.type} devices"
    capability = cpu_capability()
    features = [
        name
        for name, present in (
            ("avx512_bf16", torch.cpu._is_avx512_bf16_supported()),
            ("amx_bf16", torch.cpu._is_amx_tile_supported()),
        )
        if present
    ]
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    where = f"CPU capability {capability}" + (
        f", set by ATEN_CPU_CAPABILITY={forced}" if forced else ""
    )
    if not features:
        return False, f"avx512_bf16/amx_bf16 not found ({where})"
    if not capability.startswith("AVX512"):
        return False, f"{'/'.join(features)} present but unused ({where})"
    limit = _onednn_isa_limit()
    if limit is not None:
        return False, f"{'/'.join(features)} present but unused ({limit})"
    return True, f"{'/'.join(features)} ({where})"


def resolve_precision(precision: str, device: str | torch.device = "cpu") -> str:
    """The precision a run uses: ``precision`` itself, or float32 with one
    ``SpeedModeWarning`` when bf16 would be emulated on ``device`` (unless
    ``RLCORE_ALLOW_EMULATED_BF16=1``). Unknown values raise a ValueError."""
    if check_precision(precision) != "bf16" or os.environ.get(ALLOW_EMULATED_BF16) == "1":
        return precision
    native, reason = bf16_native(device)
    if native:
        return precision
    warnings.warn(
        f"precision=bf16 -> float32: {reason}, so bf16 would be emulated and ~13x slower "
        f"than float32. Running float32 (set {ALLOW_EMULATED_BF16}=1 to run emulated bf16 "
        "anyway, e.g. to test its maths).",
        SpeedModeWarning,
        stacklevel=3,
    )
    return "float32"


def resolve_compile(compile: bool | str, total_steps: int | None) -> bool:
    """Whether to ``torch.compile``: ``True`` / ``False`` as asked, ``"auto"`` for runs of
    more than ``AUTO_COMPILE_ABOVE_STEPS`` steps; without a C++ compiler always False, with
    one ``SpeedModeWarning`` when compilation was asked for (or chosen by auto)."""
    if isinstance(compile, str):
        compile = {"true": True, "false": False}.get(compile.lower(), compile.lower())
    if compile not in COMPILE_CHOICES:
        raise ValueError(f"unknown compile={compile!r}, choose from true, false, auto")
    asked = "compile=true"
    if compile == "auto":
        compile = total_steps is not None and total_steps > AUTO_COMPILE_ABOVE_STEPS
        asked = f"compile=auto (a run of {total_steps} > {AUTO_COMPILE_ABOVE_STEPS} steps)"
    if not compile or cxx_compiler() is not None:
        return bool(compile)
    warnings.warn(
        f"{asked} needs a C++ compiler for torch.compile (none of $CXX, g++, c++, clang++ "
        "found): running eager, the same maths and ~1.7x slower per SAC update. Install "
        "one (e.g. apt install g++) for the compiled speed.",
        SpeedModeWarning,
        stacklevel=3,
    )
    return False


def settle_compile(config: T, run_steps: int) -> T:
    """``config`` with ``compile="auto"`` decided for a run of ``run_steps`` steps, the
    phases it will really run (``rlcore.train``: pre-training skipped by ``init_from``
    counts nothing; WSRL's CQL pre-training and online steps both count); any other
    value, or a config without ``compile``, unchanged."""
    names = {field.name for field in dataclasses.fields(config)}  # type: ignore[arg-type]
    if "compile" not in names:
        return config
    value = config.compile  # type: ignore[attr-defined]
    if not (isinstance(value, str) and value.lower() == "auto"):
        return config
    return dataclasses.replace(config, compile=resolve_compile("auto", run_steps))  # type: ignore[type-var]


def resolve_speed_modes(config: T, device: str | torch.device = "cpu") -> T:
    """A copy of an algorithm's config with its effective ``precision`` and ``compile``
    (whichever of the two fields it has; ``compile="auto"`` reads the length of the run
    the config plans, ``plan().schedule``'s offline plus online steps)."""
    names = {field.name for field in dataclasses.fields(config)}  # type: ignore[arg-type]
    changes: dict[str, Any] = {}
    if "precision" in names:
        precision = config.precision  # type: ignore[attr-defined]
        changes["precision"] = resolve_precision(precision, device)
    if "compile" in names:  # "auto" decides on the run's length, from its plan
        schedule = config.plan().schedule
        run_steps = schedule.offline_steps + schedule.online_steps
        changes["compile"] = resolve_compile(config.compile, run_steps)  # type: ignore[attr-defined]
    return dataclasses.replace(config, **changes)  # type: ignore[type-var]


def speed_report(device: str | torch.device = "cpu") -> dict[str, Any]:
    """What this machine runs natively, for benchmark JSON and run notes."""
    native, reason = bf16_native(device)
    return {
        "device": str(torch.device(device)),
        "cpu_capability": cpu_capability(),
        "bf16_native": native,
        "bf16_reason": reason,
        "cxx_compiler": cxx_compiler(),
        "emulated_bf16_allowed": os.environ.get(ALLOW_EMULATED_BF16) == "1",
    }
