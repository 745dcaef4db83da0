"""rlcore: the shared core of the library (buffers, networks, loops, logging, checkpoints)."""

from rlcore.checkpoint import load_agent, load_policy
from rlcore.types import Batch

__all__ = ["Batch", "load_agent", "load_policy"]
__version__ = "0.1.0"
