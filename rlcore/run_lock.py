"""One writer per run directory: ``run.lock`` names the process that writes the run.

A second process on the same run directory (a ``resume=`` while the first copy still
trains, a requeued cluster job whose old copy still runs) is refused with one line naming
the holder. A lock left by a process that no longer runs on this host is stale and is
taken over, so a killed run can be resumed.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

LOCK_FILE = "run.lock"


class RunLockedError(RuntimeError):
    """Another live process writes this run directory."""


def _alive(pid: int) -> bool:
    """True when a process with ``pid`` runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # half written by a process killed right then, or removed meanwhile


def _holder_text(holder: dict[str, Any]) -> str:
    return f"pid {holder.get('pid')} on host {holder.get('host')} since {holder.get('started')}"


class RunLock:
    """The lock of one run directory, held from ``acquire`` to ``release``."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.held = False

    def acquire(self) -> None:
        """Take the lock (creating the run directory), or raise RunLockedError naming the
        live holder. A stale lock (its pid no longer runs on this host) is replaced."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "pid": os.getpid(),
            "host": platform.node(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        for _ in range(3):  # a stale lock removed, then one more try (another may win it)
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _read(self.path)
                if holder is None:
                    time.sleep(0.05)  # being written right now: read it again
                    holder = _read(self.path) or {}
                if self._stale(holder):
                    self.path.unlink(missing_ok=True)
                    continue
                raise self._locked(holder) from None
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
            self.held = True
            return
        raise RunLockedError(f"could not take the lock {self.path}: it keeps changing")

    def check_free(self) -> None:
        """Raise RunLockedError when a live process holds the lock (nothing is taken or
        written: a check before a run decides what to do with the directory)."""
        if not self.path.exists():
            return
        holder = _read(self.path)
        if holder is None:
            time.sleep(0.05)  # being written right now: read it again
            holder = _read(self.path) or {}
        if not self._stale(holder):
            raise self._locked(holder)

    def _locked(self, holder: dict[str, Any]) -> RunLockedError:
        return RunLockedError(
            f"run dir {self.path.parent} is being written by another process "
            f"({_holder_text(holder)}); wait for it to end or stop it (a lock left by "
            f"a process that no longer runs on this host is taken over: remove "
            f"{self.path} only if that process runs on another host and has ended)"
        )

    @staticmethod
    def _stale(holder: dict[str, Any]) -> bool:
        """A lock whose process ended: same host and the pid no longer runs (a lock from
        another host cannot be checked and is respected; an unreadable one is stale)."""
        if not holder or not isinstance(holder.get("pid"), int):
            return True
        if holder.get("host") != platform.node():
            return False
        return holder["pid"] != os.getpid() and not _alive(holder["pid"])

    def release(self) -> None:
        """Remove the lock if this process holds it."""
        if self.held:
            holder = _read(self.path)
            if holder is not None and holder.get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
            self.held = False
