"""mkdocs hook: lets mkdocstrings read ``rlcore.algos``, ``rlcore.envs`` ... from source.

A checkout keeps those packages in folders beside ``rlcore/`` (pyproject.toml's
``[tool.setuptools.package-dir]`` maps them into the namespace when installing), so a
static reader that looks for ``rlcore/algos/`` finds nothing. Before the build, this hook
lays out the installed shape in a temporary folder, ``rlcore/`` holding links to the
checkout's ``rlcore/*`` and to each mapped folder, and points the Python handler there:
the API pages are read from the checkout's source, without importing it.
"""

from __future__ import annotations

import shutil
import tempfile
import tomllib
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority

_trees: list[Path] = []


def namespace_tree(root: Path, into: Path) -> Path:
    """``into/rlcore``: links to ``root/rlcore/*`` plus one per mapped subpackage folder."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    package = into / "rlcore"
    package.mkdir()
    for item in (root / mapping["rlcore"]).iterdir():
        if item.name != "__pycache__":
            (package / item.name).symlink_to(item)
    for name, folder in mapping.items():
        if name.startswith("rlcore."):
            (package / name.removeprefix("rlcore.")).symlink_to(root / folder)
    return package


@event_priority(100)  # before mkdocstrings reads its handler options
def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Build the tree and make it the Python handler's only search path."""
    tree = Path(tempfile.mkdtemp(prefix="rlcore-api-"))
    _trees.append(tree)
    namespace_tree(Path(config.config_file_path).parent, tree)
    handlers = config.plugins["mkdocstrings"].config.handlers
    handlers.setdefault("python", {})["paths"] = [str(tree)]
    return config


def on_shutdown() -> None:
    """Remove the temporary trees."""
    while _trees:
        shutil.rmtree(_trees.pop(), ignore_errors=True)
