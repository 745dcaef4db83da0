"""One namespace: the wheel installs nothing but ``rlcore``; the repository's folders
algos/, envs/, offline/, configs/ and benchmarks/ are ``rlcore.algos`` ... ``rlcore.benchmarks``
(pyproject.toml's package-dir). Installed beside a user's project that has its own
``envs`` / ``algos`` / ``offline`` packages, the command line runs and the user's
packages stay theirs. In the source checkout no module imports the old top-level names.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from rlcore import SUBPACKAGES
from tests.conftest import HANG_GUARD_S, REPO

SOURCES = ("rlcore", *SUBPACKAGES)  # the folders a wheel is built from


def _subpackages(folder: str) -> set[str]:
    """Dotted names of ``folder`` and every folder below it with an ``__init__.py``."""
    prefix = "rlcore" if folder == "rlcore" else f"rlcore.{folder}"
    return {
        ".".join([prefix, *init.parent.relative_to(REPO / folder).parts])
        for init in (REPO / folder).rglob("__init__.py")
    }


def _clean_env() -> dict[str, str]:
    """The environment of a fresh user's shell: no PYTHONPATH into this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def test_no_module_imports_the_old_top_level_names():
    """Every ``import`` in the checkout names ``rlcore.algos`` etc., never ``algos``: a
    module imported under both names is two modules (isinstance checks fail, gymnasium
    ids register twice)."""
    offenders = []
    for folder in (*SOURCES, "tests"):
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                offenders += [
                    f"{path.relative_to(REPO)}:{node.lineno} {name}"
                    for name in names
                    if name.split(".")[0] in SUBPACKAGES
                ]
    assert not offenders, "import rlcore.<package> instead:\n" + "\n".join(offenders)


def test_every_module_loads_without_a_top_level_copy():
    """Import every module (and every registered algorithm, whose module path is a
    string) from the checkout's root, where a top-level ``envs`` would be importable:
    none is loaded, and ``rlcore.envs`` is this checkout's ``envs/``."""
    script = (
        "import importlib, pkgutil, sys\n"
        "from rlcore import SUBPACKAGES, catalog\n"
        "for spec in catalog.ALGORITHMS.values():\n"
        "    spec.agent_class\n"
        "for package in ('rlcore', 'rlcore.algos', 'rlcore.envs', 'rlcore.offline'):\n"
        "    module = importlib.import_module(package)\n"
        "    for info in pkgutil.walk_packages(module.__path__, package + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "import rlcore.benchmarks.runs, rlcore.envs\n"
        "print(rlcore.envs.__file__)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in SUBPACKAGES))\n"
    )
    env = {**_clean_env(), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    envs_file, loaded = proc.stdout.strip().splitlines()[-2:]
    assert Path(envs_file) == REPO / "envs" / "__init__.py"
    assert loaded == "[]"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout (built from a copy: no build/ or egg-info here)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for folder in SOURCES:
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
           "--no-index", "-q", "-w", str(out), str(src)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = out.glob("rlcore-*.whl")
    return path


def test_wheel_holds_only_rlcore(wheel: Path):
    """Every file of the wheel lies under rlcore/ (or its dist-info); every package
    folder of the checkout and every config YAML is in it."""
    names = zipfile.ZipFile(wheel).namelist()
    outside = [n for n in names if n.split("/")[0] not in ("rlcore", "rlcore-0.1.0.dist-info")]
    assert not outside, f"files outside the rlcore namespace: {outside[:10]}"
    packages = {n.rsplit("/", 1)[0].replace("/", ".") for n in names if n.endswith("__init__.py")}
    expected = set().union(*(_subpackages(folder) for folder in SOURCES))
    missing = sorted(expected - packages)
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml"
    configs = {str(p.relative_to(REPO)) for p in (REPO / "configs").rglob("*.yaml")}
    assert configs and configs <= {n.removeprefix("rlcore/") for n in names}
    top_level = zipfile.ZipFile(wheel).read("rlcore-0.1.0.dist-info/top_level.txt").split()
    assert top_level == [b"rlcore"]


@pytest.mark.slow
def test_installed_wheel_runs_beside_a_users_own_packages(wheel: Path, tmp_path: Path):
    """pip install of the wheel into a fresh venv (torch etc. from the dev environment
    through a .pth line, whose own .pth files, such as an editable rlcore, do not run),
    then from a robotics project with its own envs/, algos/ and offline/ packages:
    ``python -m rlcore.train`` trains and ``import envs`` is still the user's."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    paths = {"base": str(venv), "platbase": str(venv)}
    site = Path(sysconfig.get_path("purelib", vars=paths))
    dev = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site / "dev_environment.pth").write_text("\n".join(sorted(dev)) + "\n")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
               "--no-index", "-q", str(wheel)]  # fmt: skip
    proc = subprocess.run(install, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-3000:]

    project = tmp_path / "robot_project"
    for package in ("envs", "algos", "offline"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text(f"OWNER = 'user:{package}'\n")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(python), *args],
            cwd=project, env=_clean_env(), capture_output=True, text=True, timeout=HANG_GUARD_S,
        )  # fmt: skip

    check = run(
        "-c",
        "import sys, rlcore.envs.make, rlcore.algos.sac, envs, algos, offline; "
        "print(rlcore.__file__); print(rlcore.envs.make.__file__); "
        "print(envs.OWNER, algos.OWNER, offline.OWNER); "
        "print(any('__editable__' in m for m in sys.modules))",
    )
    assert check.returncode == 0, check.stderr[-3000:]
    rlcore_file, make_file, owners, editable = check.stdout.strip().splitlines()[-4:]
    assert Path(rlcore_file).is_relative_to(site) and Path(make_file).is_relative_to(site)
    assert owners == "user:envs user:algos user:offline"
    assert editable == "False"  # the dev environment's editable rlcore did not leak in

    run_dir = tmp_path / "run"
    train = run(
        "-m", "rlcore.train", "algo=sac", "env=Pendulum", "total_steps=300",
        "algo.learning_starts=100", "algo.batch_size=32", "eval_every=300", "eval_episodes=1",
        "eval_envs=1", "logger=quiet", "threads=1", f"run_dir={run_dir}",
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    assert (run_dir / "checkpoints" / "latest.pt").is_file()
