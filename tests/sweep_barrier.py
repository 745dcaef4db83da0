"""A Hydra callback for the sweep tests: every job waits at its start until ``parties``
jobs of the sweep have started. Jobs that run concurrently all pass the barrier at once;
jobs run one after another never do (the first waits for the second, which cannot start,
gives up at the hang guard and leaves no ``met_`` mark), so a sweep's concurrency is
judged by this event, not by file times on a busy machine."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback


class Rendezvous(Callback):
    """``+hydra.callbacks.barrier._target_=tests.sweep_barrier.Rendezvous`` with
    ``folder`` (a fresh directory) and ``parties`` (jobs that must overlap)."""

    def __init__(self, folder: str, parties: int, hang_guard_s: float = 1800.0) -> None:
        self.folder, self.parties, self.hang_guard_s = Path(folder), int(parties), hang_guard_s

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        """Mark this job started, wait for the others; mark it ``met`` if they came (Hydra
        turns a callback's exception into a warning, so the test reads the marks)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        job = f"{config.hydra.job.num}_{os.getpid()}"
        (self.folder / f"started_{job}").touch()
        give_up = time.monotonic() + self.hang_guard_s  # a hang guard, not a speed claim
        while len(list(self.folder.glob("started_*"))) < self.parties:
            if time.monotonic() > give_up:
                raise RuntimeError(
                    f"job {config.hydra.job.num} waited {self.hang_guard_s:.0f} s for "
                    f"{self.parties} concurrent jobs: the sweep ran its jobs one at a time"
                )
            time.sleep(0.05)
        (self.folder / f"met_{job}").touch()
