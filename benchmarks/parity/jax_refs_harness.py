"""Helpers of the JAX-reference harnesses (``rlpd_reference.py``, ``fisor_reference.py``,
``famo2o_reference.py``). Runs only in the side environment that has jax 0.9.2, flax,
optax and tensorflow-probability (see those scripts' headers); the repository's tests do
not import it.

What it does to the references, and nothing else: import their modules by path with the
packages they do not need stubbed, make tensorflow-probability 0.25 import under jax 0.9
(one renamed jax attribute), and feed recorded numbers where an update samples
(``Feed``, ``feed_gaussians``) instead of the reference's JAX key.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from collections.abc import Iterable
from pathlib import Path

import jax
import jax._src.core as jax_core
import numpy as np

# tfp 0.25 reads jax.interpreters.xla.pytype_aval_mappings, which jax 0.9 moved to jax core
jax.interpreters.xla.pytype_aval_mappings = jax_core.pytype_aval_mappings
import tensorflow_probability.substrates.jax as tfp  # noqa: E402

SRC = Path("/work/side/parity-jax/src")  # references unpacked by `git archive`
MIRRORS = Path("/work/.mirror")
GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden"
sys.path.insert(
    0, str(Path(__file__).resolve().parents[2])
)  # rlcore.benchmarks.parity.jax_refs_data


def stub_package(name: str, path: Path | None = None, **attrs: object) -> types.ModuleType:
    """A module registered under ``name`` without running its ``__init__`` (``path``: its
    submodules stay importable from there), with ``attrs`` set on it."""
    module = types.ModuleType(name)
    if path is not None:
        module.__path__ = [str(path)]
    for key, value in attrs.items():
        setattr(module, key, value)
    sys.modules[name] = module
    return module


class Feed:
    """Numbers handed out in order (the recorded noise of one update)."""

    def __init__(self, items: Iterable[np.ndarray] = ()) -> None:
        self.items = list(items)

    def extend(self, items: Iterable[np.ndarray]) -> None:
        self.items.extend(items)

    def next(self, shape: tuple[int, ...] | None = None) -> np.ndarray:
        item = np.asarray(self.items.pop(0))
        if shape is not None and tuple(item.shape) != tuple(shape):
            raise AssertionError(f"fed noise of shape {item.shape}, the update wants {shape}")
        return item

    def empty(self) -> bool:
        return not self.items


def feed_gaussians(feed: Feed) -> None:
    """Every ``tfd.MultivariateNormalDiag.sample`` (also inside a tanh-transformed
    distribution, whose ``log_prob`` then reads the cached pre-tanh value) returns
    loc + scale * eps with eps from ``feed``."""

    def sample(self, sample_shape=(), seed=None, **kwargs):  # noqa: ANN001, ANN202, ARG001
        loc = self.loc
        return loc + self.stddev() * feed.next(loc.shape)

    tfp.distributions.MultivariateNormalDiag.sample = sample


def stub_omnisafe_on_policy(family: str) -> Path:
    """Make OmniSafe's on-policy ``family`` (e.g. "naive_lagrange", "second_order")
    importable from the fetched tree without its trainer, adapter, logger and registry
    (only the update maths runs); returns the tree's ``omnisafe`` folder."""
    root = SRC / "PKU-Alignment+omnisafe" / "omnisafe"
    sys.path.insert(0, str(root.parent))
    for name in ("", ".algorithms", ".algorithms.on_policy", ".algorithms.on_policy.base",
                 f".algorithms.on_policy.{family}", ".common", ".common.buffer", ".models",
                 ".models.actor_critic", ".utils"):  # fmt: skip
        stub_package("omnisafe" + name, root / name[1:].replace(".", "/"))
    stub_package("omnisafe.algorithms.registry", register=lambda cls: cls)
    sys.modules["omnisafe.algorithms"].registry = sys.modules["omnisafe.algorithms.registry"]
    stub_package("omnisafe.algorithms.base_algo", BaseAlgo=object)
    stub_package("omnisafe.adapter", OnPolicyAdapter=object)
    sys.modules["omnisafe.common.buffer"].VectorOnPolicyBuffer = object
    stub_package("omnisafe.common.logger", Logger=object)
    return root


def commit(repo: str) -> str:
    """The fetched reference's commit (its bare mirror's HEAD)."""
    git_dir = MIRRORS / repo.replace("/", "+") / "repo"
    return (
        subprocess.check_output(["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"])
        .decode()
        .strip()
    )


def versions() -> dict[str, str]:
    import flax
    import optax

    return {"jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__,
            "tensorflow_probability": tfp.__version__, "numpy": np.__version__}  # fmt: skip


def rounded(x: object) -> object:
    """JSON-ready copy: arrays as nested lists of float32 values to 8 significant digits."""
    if x is None or isinstance(x, (str, bool, int)):
        return x
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [rounded(v) for v in x]
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 0:
        return float(f"{float(arr):.8g}")
    return [rounded(v) for v in arr]


def write_golden(name: str, payload: dict) -> Path:
    path = GOLDEN / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rounded(payload), separators=(",", ":")) + "\n")
    size = path.stat().st_size
    print(f"wrote {path} ({size / 1024:.0f} KB)")
    if size > 300 * 1024:
        raise SystemExit(f"{path} is over 300 KB")
    return path
