"""The documentation site builds strictly (a broken link, a page missing from the nav or an
API page whose module cannot be read fails), the API pages of the namespaced packages
(``rlcore.algos`` ... live in folders beside ``rlcore/``) carry their docstrings, and the
README keeps the test command CI runs."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

HANG_GUARD_S = 300


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built with ``mkdocs build --strict`` into a temporary folder."""
    if not all(importlib.util.find_spec(name) for name in ("mkdocs", "mkdocstrings")):
        pytest.skip('mkdocs is not installed (pip install -e ".[docs]"; CI installs it)')
    out = tmp_path_factory.mktemp("site")
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    proc = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_every_markdown_page_is_built(site: Path):
    pages = list((REPO / "docs").rglob("*.md"))
    assert len(pages) > 20
    for page in pages:
        rel = page.relative_to(REPO / "docs").with_suffix("")
        built = site / ("index.html" if rel.name == "index" else rel / "index.html")
        assert built.is_file(), f"{page} not built"


@pytest.mark.parametrize(
    ("page", "text"),
    [
        ("api/algos_sac", "Haarnoja"),  # a module beside rlcore/, read through the hook
        ("api/algos_safe_fisor", "FISOR"),
        ("api/envs_make", "make_vec_env"),
        ("api/offline_datasets", "load_dataset"),
        ("api/buffers", "MixedSampler"),
        ("benchmark-results", "rlcore.benchmarks.throughput"),  # benchmarks/README.md included
    ],
)
def test_pages_carry_their_content(site: Path, page: str, text: str):
    assert text in (site / page / "index.html").read_text()


def test_readme_test_command_is_the_one_ci_runs():
    command = "python -m pytest -q -n 2 --durations=15"
    assert command in (REPO / "README.md").read_text()
    assert command in (REPO / ".ci" / "run").read_text()


def test_readme_is_a_quick_start():
    """The README stays short; the rest lives in docs/ (every page it names exists)."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 120
    for name in ("cli", "library", "offline", "o2o", "finetune", "safe", "snapshot"):
        assert f"docs/{name}.md" in readme and (REPO / "docs" / f"{name}.md").is_file()
    assert "../shared" not in readme
    for page in (REPO / "docs").rglob("*.md"):
        assert "../shared" not in page.read_text(), page
