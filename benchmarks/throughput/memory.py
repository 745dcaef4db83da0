"""Section ``memory``: peak RSS of a filled 1M-transition Hopper replay buffer vs its raw
data size, rlcore and SB3, each in a fresh subprocess."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from rlcore.benchmarks.throughput.common import (
    HOPPER_ACT,
    HOPPER_OBS,
    add_note,
    box_spaces,
    fmt,
    has_sb3,
    markdown_table,
)


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
    obs_space, act_space = box_spaces(HOPPER_OBS, HOPPER_ACT)
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
        "import json; from rlcore.benchmarks.throughput.memory import memory_child; "
        f"print(json.dumps(memory_child({kind!r}, {capacity})))"
    )
    root = str(Path(__file__).resolve().parents[2])
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
    if has_sb3():
        results["sb3"] = _memory_subprocess("sb3", capacity)
    else:
        results["sb3"] = None
        add_note(notes, "stable-baselines3 is not installed: SB3 column skipped")
    for result in results.values():
        if result is not None:
            result["ratio_to_raw"] = result["peak_rss_increase"] / raw
            if not result["peak_reset"]:
                add_note(notes, "peak RSS could not be reset: baseline is the import-time peak")
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
