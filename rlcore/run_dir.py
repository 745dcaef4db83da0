"""A run directory: what makes a folder a run, whether a new run may use it, what
``resume=`` finds in it, and the metadata a run writes (its config, versions, commit).

A folder holds one of three things:

* nothing of a run (absent, empty, or only Hydra's own files): a new run uses it;
* a run with a checkpoint: only ``resume=<dir>`` continues it, a new run is refused;
* a run without a checkpoint (refused before its first one, or killed in its first
  minute: ``rlcore.loops`` writes the first checkpoint after ``FIRST_CHECKPOINT_S``): there
  is nothing to continue, so a new run with ``run_dir=<dir>`` reuses it and
  ``resume=<dir>`` starts it again from step 0 with its own config; either way its old
  files are removed (``train.log`` is kept and appended to) and a note says so.

A folder another live process writes (``run.lock``) is refused in every case.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rlcore.checkpoint import (
    CHECKPOINT_DIR,
    FORMAT_VERSION,
    LATEST,
    PREVIOUS,
    read_checkpoint,
    save_checkpoint,
)
from rlcore.run_lock import RunLock
from rlcore.settings import check_resume_compatible

PACKAGES = ("torch", "numpy", "mujoco", "gymnasium", "minari", "hydra-core", "rlcore")

# Files and folders that make a directory a run (Hydra's own .hydra/ and an empty
# train.log do not: Hydra creates them before the run starts).
RUN_MARKERS = ("config.yaml", "meta.json", "train.csv", "eval.csv", CHECKPOINT_DIR, "tb")
# What a run without a checkpoint leaves that a new start replaces (train.log stays)
UNCHECKPOINTED_FILES = (
    *RUN_MARKERS, "config_resumed.yaml", "meta_resumed.json", ".hydra", ".hydra_resumed",
    "videos", "snapshots.npz",
)  # fmt: skip


class RunDirExistsError(ValueError):
    """``run_dir`` already holds a run with a checkpoint and ``resume=`` was not given:
    never overwrite it."""


def existing_run_markers(run_dir: str | Path) -> list[str]:
    """The run files already in ``run_dir`` (empty for a new or empty directory)."""
    run_dir = Path(run_dir)
    return [name for name in RUN_MARKERS if (run_dir / name).exists()]


def has_checkpoint(run_dir: str | Path) -> bool:
    """True when ``run_dir`` holds a checkpoint that ``resume=`` can continue from."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    return any((folder / name).is_file() for name in (LATEST, PREVIOUS))


def check_new_run_dir(run_dir: str | Path) -> bool:
    """Whether a new run may write ``run_dir``: False when it holds no run, True when it
    holds a run without a checkpoint (the new run replaces it). Raises RunDirExistsError
    when it holds a checkpointed run, RunLockedError when a live process writes it."""
    found = existing_run_markers(run_dir)
    if not found:
        return False
    RunLock(run_dir).check_free()
    if has_checkpoint(run_dir):
        raise RunDirExistsError(
            f"run_dir={run_dir} already holds a run ({', '.join(found)}); refusing to write a "
            f"new run into it. Continue that run with resume={run_dir}, or choose another "
            "run_dir= (or leave it out for a fresh time-stamped one)."
        )
    return True


def replaced_run_note(run_dir: Path, resumed: bool) -> str:
    """The note a run logs when it starts over in a folder whose run has no checkpoint."""
    why = (
        f"resume={run_dir}: the run has no checkpoint yet (it stopped before its first "
        "one), so it starts again from step 0 with its own config"
        if resumed
        else f"run_dir={run_dir} held a run without a checkpoint (it stopped before its "
        "first one); this run replaces it"
    )
    return f"note: {why}; its old files were removed (train.log keeps their lines)"


def clear_uncheckpointed_run(run_dir: Path) -> None:
    """Remove what a run without a checkpoint left in ``run_dir`` (train.log stays)."""
    if has_checkpoint(run_dir):  # never: callers check first; a last guard against loss
        raise RunDirExistsError(f"{run_dir} holds a checkpoint; it is not cleared")
    for name in UNCHECKPOINTED_FILES:
        path = run_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def resume_run_dir(resume: str | Path) -> Path:
    """The run directory ``resume=`` names: the directory itself, or the run a checkpoint
    file belongs to (``<run>/checkpoints/latest.pt``; a loose .pt: its folder)."""
    path = Path(resume)
    if path.is_dir():
        return path
    return path.parent.parent if path.parent.name == CHECKPOINT_DIR else path.parent


def package_versions() -> dict[str, str]:
    """The versions of the packages a run's numbers depend on."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def git_commit() -> str | None:
    """The checkout's commit (``-dirty`` with uncommitted changes), None outside git."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5)  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=here, capture_output=True, text=True, timeout=5)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def write_run_metadata(
    run_dir: Path, cfg_dict: dict[str, Any], resumed: bool, effective: dict[str, Any]
) -> None:
    """``config.yaml`` and ``meta.json`` (``*_resumed`` beside them on a resume): the
    composed config, the commit, versions, command, host and what actually ran where the
    config left a choice (``effective``: the back end, speed modes, phase lengths)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    name = "config_resumed.yaml" if resumed else "config.yaml"
    (run_dir / name).write_text(OmegaConf.to_yaml(OmegaConf.create(cfg_dict)))
    meta = {
        "git_commit": git_commit(),
        "versions": package_versions(),
        "command": sys.argv,
        "host": platform.node(),
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "effective": effective,
    }
    (run_dir / ("meta_resumed.json" if resumed else "meta.json")).write_text(
        json.dumps(meta, indent=2)
    )


def resume_state_or_new_run(
    record: dict[str, Any], resume: str | None, run_dir: Path
) -> tuple[dict[str, Any] | None, list[str], bool]:
    """(the checkpoint ``resume`` names, checked against this run's ``record``; the notes
    to log; whether the run replaces one without a checkpoint in ``run_dir``). Without
    ``resume``, ``run_dir`` must hold no checkpointed run; a ``resume`` of a run that has
    no checkpoint starts it again. A run dir a live process writes is refused first
    (RunLockedError), whatever it holds."""
    if not resume:
        replaces = check_new_run_dir(run_dir)
        return None, [replaced_run_note(run_dir, resumed=False)] if replaces else [], replaces
    RunLock(run_dir).check_free()
    if Path(resume).is_dir() and not has_checkpoint(resume):
        return None, [replaced_run_note(run_dir, resumed=True)], True
    state, resume_file, problems = read_checkpoint(resume)
    check_resume_compatible(state["config"], record)
    step = state["loop"]["counters"]["step"]
    notes = [f"note: {problem}" for problem in problems]
    notes.append(f"resuming from {resume_file} (step {step:,})")
    return state, notes, False


def _optimizer_state(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"state", "param_groups"}


def without_optimizers(agent_state: dict[str, Any]) -> dict[str, Any]:
    """``agent_state`` without the optimisers' states, at any depth (an
    ``Optimizer.state_dict()``: ``{"state", "param_groups"}``). Acting needs none of them,
    and Adam's two moments per weight make them twice the networks (a pixel SAC's
    agent-only file at 48 x 48: 108 MB with them, 49 MB without). Dicts holding none are kept as
    they are (the same objects)."""
    kept = {name: without_optimizers(value) if isinstance(value, dict) else value
            for name, value in agent_state.items() if not _optimizer_state(value)}  # fmt: skip
    if kept.keys() == agent_state.keys() and all(kept[k] is agent_state[k] for k in kept):
        return agent_state
    return kept


def checkpoint_writer(
    algo: str, record: dict[str, Any], spaces: dict[str, Any], run_dir: Path,
    keep_agent_snapshots: bool,
) -> Callable[[dict[str, Any]], Path]:  # fmt: skip
    """``save(loop_state)``: the run's latest checkpoint (the previous one kept) and, with
    ``keep_agent_snapshots``, an agent-only file per checkpoint (``without_optimizers``:
    for acting, evaluation, export, a teacher or ``algo.pretrained``). Every file holds the
    algorithm's name, the run's recorded config, the spaces and the observation
    statistics deployment needs."""

    def save(loop_state: dict[str, Any]) -> Path:
        step = loop_state["counters"]["step"]
        wrappers = (loop_state.get("env") or {}).get("wrappers", {})
        base = {
            "format": FORMAT_VERSION,
            "algo": algo,
            "config": record,
            "spaces": spaces,
            # deployment needs the observation statistics the policy was trained with
            "obs_normalizer": wrappers.get("NormalizeObservation"),
        }
        path = save_checkpoint(
            {**base, "loop": loop_state, "agent": loop_state["agent"]},
            run_dir / CHECKPOINT_DIR / LATEST,
            keep_previous=True,
        )
        if keep_agent_snapshots:
            snapshot = {**base, "agent": without_optimizers(loop_state["agent"]),
                        "loop": {"counters": loop_state["counters"]}}  # fmt: skip
            save_checkpoint(snapshot, run_dir / CHECKPOINT_DIR / f"agent_step_{step}.pt")
        return path

    return save
