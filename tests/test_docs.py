"""The documentation site builds strictly (a broken link, a page missing from the nav or an
API page whose module cannot be read fails), the API pages of the namespaced packages
(``rlcore.algos`` ... live in folders beside ``rlcore/``) carry their docstrings, and the
README keeps the test command CI runs."""

import glob
import importlib.util
import os
import re
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


CITED_RESULT = re.compile(r"(?<![\w/])(benchmarks/(?:results|assets)/(?:[\w.*/-]|\{[^{}\s]*\})+)")
OUTPUT_FLAGS = ("--out ", "--out=", "--run-dir ", "run_dir=", "export=", "-> ")


def expand_braces(pattern: str) -> list[str]:
    """``a/sac_{1,2}.pt`` -> ``a/sac_1.pt``, ``a/sac_2.pt`` (shell brace expansion)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [path for alt in match.group(1).split(",") for path in expand_braces(head + alt + tail)]


def cited_results(text: str) -> list[str]:
    """The ``benchmarks/results/...`` and ``benchmarks/assets/...`` paths a page cites as
    existing (a path right after an output flag, which a command writes, is left out)."""
    found = []
    for match in CITED_RESULT.finditer(text):
        before = text[max(0, match.start() - 12) : match.start()]
        if not before.endswith(OUTPUT_FLAGS):
            found.extend(expand_braces(match.group(1).rstrip(".")))
    return found


def test_cited_results_parsing_by_hand():
    text = (
        "see `benchmarks/results/a/runs/*` and benchmarks/assets/n/sac_{1,2}.pt, "
        "--out benchmarks/results/new.json, policies=benchmarks/assets/x.pt,benchmarks/assets/y.pt"
    )
    assert cited_results(text) == [
        "benchmarks/results/a/runs/*", "benchmarks/assets/n/sac_1.pt",
        "benchmarks/assets/n/sac_2.pt", "benchmarks/assets/x.pt", "benchmarks/assets/y.pt",
    ]  # fmt: skip


def test_results_and_assets_the_docs_cite_are_in_the_repository():
    """A page that points a reader at a committed result, run folder or asset (a report
    command's input, a snapshot to record from) points at something a clean clone holds:
    ``runs/`` is git-ignored, so a run folder a table cites must be added on purpose."""
    pages = [REPO / "README.md", REPO / "benchmarks" / "README.md",
             REPO / "benchmarks" / "assets" / "README.md", *(REPO / "docs").rglob("*.md")]  # fmt: skip
    missing = [
        f"{page.relative_to(REPO)}: {path}"
        for page in pages
        for path in cited_results(page.read_text())
        if not glob.glob(str(REPO / path))
    ]
    assert not missing, "\n".join(missing)
