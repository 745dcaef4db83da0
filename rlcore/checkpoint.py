"""Atomic checkpoints and one-call loading of trained agents for inference.

``latest.pt`` is written atomically and the one it replaces is kept as ``previous.pt``,
so a checkpoint damaged later (a bad disk, a truncated copy) still leaves a good one:
loading a run directory falls back to ``previous.pt`` and says so.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest.pt"
PREVIOUS = "previous.pt"
FORMAT_VERSION = 1


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (e.g. disk full); the previous file is intact."""


class CheckpointReadError(ValueError):
    """No readable rlcore checkpoint was found where one was expected."""


def save_checkpoint(state: dict[str, Any], path: str | Path, keep_previous: bool = False) -> Path:
    """Write ``state`` to ``path`` atomically: a crash or a full disk mid-write never
    corrupts ``path``.

    The data goes to a temporary file in the same directory, is fsync'ed, then renamed
    over the target (rename is atomic on POSIX file systems). ``keep_previous`` first
    moves the file being replaced to ``previous.pt`` beside it. A failed write raises
    ``CheckpointWriteError`` naming the file and leaves every existing file as it was.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise CheckpointWriteError(
            error.errno, f"could not write checkpoint {path}: {error.strerror or error}"
        ) from error
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        if keep_previous and path.exists():
            os.replace(path, path.with_name(PREVIOUS))
        os.replace(tmp, path)
    except BaseException as error:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(error, OSError) and not isinstance(error, CheckpointWriteError):
            raise CheckpointWriteError(
                error.errno,
                f"could not write checkpoint {path}: {error.strerror or error} "
                f"(the existing files in {path.parent} are intact)",
            ) from error
        raise
    return path


def checkpoint_candidates(path: str | Path) -> list[Path]:
    """The .pt files to try, newest first: for a run directory (or its checkpoints/
    folder) ``latest.pt`` then ``previous.pt``; for a file, the file itself."""
    path = Path(path)
    if path.is_dir():
        folders = [path / CHECKPOINT_DIR, path]
        found = [f / name for f in folders for name in (LATEST, PREVIOUS) if (f / name).is_file()]
        if not found:
            raise FileNotFoundError(
                f"no checkpoint found in {path} (looked for {CHECKPOINT_DIR}/{LATEST} and "
                f"{CHECKPOINT_DIR}/{PREVIOUS})"
            )
        return found
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    return [path]


def resolve_checkpoint(path: str | Path) -> Path:
    """A run directory, its checkpoints/ folder, or a .pt file -> the newest .pt file."""
    return checkpoint_candidates(path)[0]


def _read(file: Path, map_location: str | torch.device) -> dict[str, Any]:
    try:
        state = torch.load(file, map_location=map_location, weights_only=False)
    except Exception as error:  # truncated zip, bad pickle, ...: torch raises many types
        text = str(error).strip()
        # first sentence only: torch appends a paragraph of generic advice
        reason = text.splitlines()[0].split(". ")[0] if text else type(error).__name__
        raise CheckpointReadError(f"{file} is unreadable ({reason})") from error
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointReadError(f"{file} is not an rlcore checkpoint (format {found})")
    return state


def read_checkpoint(
    path: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[dict[str, Any], Path, list[str]]:
    """(state, file used, problems with newer files skipped): the newest readable
    checkpoint of a run directory, falling back from a damaged ``latest.pt`` to
    ``previous.pt``. Raises ``CheckpointReadError`` naming every file when none reads."""
    problems: list[str] = []
    for file in checkpoint_candidates(path):
        try:
            return _read(file, map_location), file, problems
        except CheckpointReadError as error:
            problems.append(str(error))
    raise CheckpointReadError("no readable checkpoint: " + "; ".join(problems))


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by rlcore (trusted file: it holds numpy RNG states),
    warning when a damaged ``latest.pt`` made it fall back to ``previous.pt``."""
    state, file, problems = read_checkpoint(path, map_location)
    if problems:
        warnings.warn(f"{'; '.join(problems)}: loaded {file} instead", stacklevel=2)
    return state
