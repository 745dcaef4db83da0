"""The suite's target lines: each a ratio read from a measured section, its goal and
whether it is met."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


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
