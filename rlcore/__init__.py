"""rlcore: the shared core of the library (buffers, networks, loops, logging, checkpoints).

One namespace: the algorithms, envs, offline data, configs and benchmarks are
``rlcore.algos``, ``rlcore.envs``, ``rlcore.offline``, ``rlcore.configs`` and
``rlcore.benchmarks``. An installed wheel holds them inside ``rlcore/`` (pyproject.toml's
package-dir maps the repository's folders there). A source checkout keeps them in their
folders beside ``rlcore/``; ``_CheckoutFinder`` imports them from there, so that
``rlcore.envs`` is the same checkout's ``envs/`` whenever this ``rlcore`` is (tests,
``PYTHONPATH=<checkout>``, a worktree beside an editable install of another checkout).
"""

import importlib.abc
import importlib.machinery
import sys
from pathlib import Path

SUBPACKAGES = ("algos", "envs", "offline", "configs", "benchmarks")


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds ``rlcore.<name>`` (``name`` in ``SUBPACKAGES``) in the checkout's ``<name>/``."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        parent, _, name = fullname.rpartition(".")
        if parent != __name__ or name not in SUBPACKAGES:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [self.root])


_here = Path(__file__).resolve().parent
if not (_here / "envs").exists() and (_here.parent / "envs" / "__init__.py").is_file():
    sys.meta_path.insert(0, _CheckoutFinder(_here.parent))  # before an editable finder

from rlcore.policies import load_agent, load_policy  # noqa: E402
from rlcore.types import Batch  # noqa: E402

__all__ = ["Batch", "load_agent", "load_policy"]
__version__ = "0.1.0"
