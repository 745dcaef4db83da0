"""How many CPU threads a process's torch work uses: the ``threads`` option.

``threads: auto`` (the default of ``rlcore.train``, ``rlcore.evaluate``, ``rlcore.export``
and ``rlcore.offline.collect``) runs torch on one intra-op and one inter-op thread.
``threads: N`` uses N intra-op threads; ``threads: null`` leaves torch's own default
(one thread per physical core, or ``$OMP_NUM_THREADS``) untouched.
Your own code (an agent in your own loop) keeps torch's default until it calls
``apply_threads("auto")``, the same rule (docs/library.md, "Threads").

Why one. An RL update is a chain of small matmuls (batch 256, 256 wide). Spread over
every core, each one ends at a barrier where torch's OpenMP threads spin until all have
arrived; when another process holds one of those cores, every barrier waits for the
scheduler to hand the core back. Measured on a 2-core AMD EPYC beside one CPU-bound
process: SAC's Hopper run 10 env steps/s on 2 threads against 57-67 on one, IQL 2
updates/s against ~100 (docs/cli.md, "Threads and busy machines", has the table of
``python -m rlcore.benchmarks.busy``, with what one thread gives up on an idle machine);
``threads=N`` takes the cores back where they pay.

The choice depends on the option only, never on the machine's load, so a seed and a
config give the same numbers on one machine every time (the thread count changes float
summation order, so runs with different ``threads`` differ in their last bits).

Not here: the native back end's MuJoCo C threads (``envs/native.py``: they sleep while
idle and did not slow down next to a busy process) and XLA's CPU thread pool under
``env.backend=mjx`` (Eigen's pool spins only briefly: MJX Hopper's 64-env step kept ~85%
of its quiet speed next to a busy process with XLA's default pool, and its flags would
have to be set before JAX starts its backend). The async back end's worker processes
run their envs on one torch thread whatever this option says (``envs/make.py``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

AUTO = "auto"
AUTO_THREADS = 1  # what ``auto`` means: intra-op and inter-op threads
RULE = "auto, an integer >= 1, or null (torch's own default)"


def check_threads(value: Any) -> int | str | None:
    """``value`` as a ``threads`` setting (``"auto"``, an int >= 1, or None); else
    ``ValueError`` naming the choices. Command-line text is read too: ``"null"`` is None,
    integral strings (and floats) are ints."""
    if value is None or value == "null":
        return None
    if value == AUTO:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(f"threads={value!r}: must be {RULE}")


def intra_op_threads(setting: int | str | None) -> int | None:
    """The intra-op thread count ``setting`` asks for (None: torch's own default)."""
    setting = check_threads(setting)
    return AUTO_THREADS if setting == AUTO else setting


def apply_threads(setting: int | str | None) -> int:
    """Set this process's torch threads as ``setting`` asks; returns the intra-op count.

    ``auto`` also asks for one inter-op thread. torch takes that only before the
    process's first inter-op work (and only once); later calls keep what the process has,
    which costs nothing here: rlcore's updates run no inter-op parallel work."""
    threads = intra_op_threads(setting)
    if threads is not None:
        torch.set_num_threads(threads)
    if setting == AUTO and torch.get_num_interop_threads() != AUTO_THREADS:
        # once the pool has started (or was set before) it keeps its size
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(AUTO_THREADS)
    return torch.get_num_threads()
