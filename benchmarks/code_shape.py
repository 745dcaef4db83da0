"""The shape of the library, measured: what a redesign claims to improve, before and after.

    python -m rlcore.benchmarks.code_shape [--out benchmarks/results/code_shape_<label>.json]

Prints and writes (JSON):

* library lines: the Python lines of ``rlcore/``, ``algos/``, ``envs/``, ``offline/`` and
  ``configs/`` (tests and benchmarks left out), and the longest files;
* the ten longest functions (lines from ``def`` to the last line of the body);
* the files one SAC run crosses: the library's Python files in which at least one
  function runs during ``python -m rlcore.train algo=sac env=Hopper`` with one gradient
  update (run in this process under a profiler; module bodies executed by imports do not
  count), and the YAML files its config is composed from;
* the pairs of places the ``duplicates`` tool finds in the library (when it is installed);
* the command line's start time: the median wall time of ``python -m rlcore.train
  algo=sac env=Hopper total_steps=0`` (refused once the config is checked: start-up,
  imports, composition and validation) over five runs.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("rlcore", "algos", "envs", "offline", "configs")


def library_files() -> list[Path]:
    return sorted(p for folder in LIBRARY for p in (ROOT / folder).rglob("*.py"))


def line_counts() -> dict[str, Any]:
    """Total library lines and the ten longest files."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in library_files()}
    longest = sorted(sizes.items(), key=lambda item: -item[1])[:10]
    return {"total": sum(sizes.values()), "files": len(sizes), "longest_files": longest}


def longest_functions(count: int = 10) -> list[tuple[str, int]]:
    """(``file:function``, lines) of the longest functions and methods."""
    found = []
    for path in library_files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                found.append((f"{path.relative_to(ROOT)}:{node.name}", lines))
    return sorted(found, key=lambda item: -item[1])[:count]


# A SAC run with one gradient update: 2 random-action steps, then one online step
SAC_ONE_UPDATE = ["algo=sac", "env=Hopper", "total_steps=3", "algo.learning_starts=2",
                  "algo.batch_size=2", "eval_every=0", "eval_episodes=1", "eval_envs=1",
                  "threads=1", "logger=quiet", "keep_agent_snapshots=false"]  # fmt: skip


def files_crossed() -> dict[str, Any]:
    """The library's Python files with a function that runs during a one-update SAC run
    from the command line, and the config's YAML files (in a child process)."""
    script = f"""
import json, runpy, sys
from pathlib import Path
root = {str(ROOT)!r}
library = tuple(str(Path(root) / f) + "/" for f in {LIBRARY!r})
seen = set()
def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_name != "<module>":
        name = frame.f_code.co_filename
        if name.startswith(library):
            seen.add(name[len(root) + 1:])
sys.setprofile(profile)
sys.argv = ["rlcore.cli", *sys.argv[1:]]
try:
    runpy.run_module("rlcore.cli", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
sys.setprofile(None)
print(json.dumps(sorted(seen)))
"""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-c", script, *SAC_ONE_UPDATE, f"run_dir={tmp}/run"],
            capture_output=True, text=True, cwd=tmp, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    python_files = json.loads(out.stdout.strip().splitlines()[-1])
    return {"python": len(python_files), "yaml": len(yaml_files()), "files": python_files,
            "yaml_files": yaml_files()}  # fmt: skip


def yaml_files() -> list[str]:
    """The config files ``algo=sac env=Hopper`` is composed from (the primary config and
    one file per group choice that exists as a file)."""
    from hydra import compose, initialize_config_module

    from rlcore.overrides import normalize_overrides

    with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
        overrides = normalize_overrides(["algo=sac", "env=hopper"])
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    files = ["configs/config.yaml"]
    for group, choice in cfg.hydra.runtime.choices.items():
        path = ROOT / "configs" / group / f"{choice}.yaml"
        if choice is not None and path.is_file():
            files.append(str(path.relative_to(ROOT)))
    return files


def duplicate_pairs() -> dict[str, Any]:
    """The ``duplicates`` tool's pair count over the library (None where it is absent)."""
    tool = shutil.which("duplicates")
    if tool is None:
        return {"pairs": None}
    counts = {}
    for folder in LIBRARY:
        out = subprocess.run([tool, "--repo", str(ROOT / folder), "--most", "1"],
                             capture_output=True, text=True).stdout  # fmt: skip
        match = re.match(r"(\d+) pairs? of places", out) or re.match(r"no duplicates", out)
        counts[folder] = 0 if match is None or not match.groups() else int(match.group(1))
    whole = subprocess.run([tool, "--repo", str(ROOT), "--most", "1"], capture_output=True,
                           text=True).stdout  # fmt: skip
    match = re.match(r"(\d+) pairs? of places", whole)
    return {"pairs": int(match.group(1)) if match else 0, "by_folder": counts,
            "first_line": whole.splitlines()[0] if whole else ""}  # fmt: skip


def cli_start_time(runs: int = 5) -> dict[str, Any]:
    """Median wall seconds of ``python -m rlcore.train algo=sac env=Hopper total_steps=0``."""
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(runs):
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "rlcore.train", "algo=sac", "env=Hopper", "total_steps=0"],
                capture_output=True, cwd=tmp, env={**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip
            times.append(time.perf_counter() - started)
    return {"median_s": statistics.median(times), "runs_s": times}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    from rlcore.benchmarks.runs import cpu_info

    result = {
        "lines": line_counts(),
        "longest_functions": longest_functions(),
        "files_crossed": files_crossed(),
        "duplicates": duplicate_pairs(),
        "cli_start": cli_start_time(),
        "lscpu": cpu_info(),
    }
    lines, crossed = result["lines"], result["files_crossed"]
    print(f"library lines: {lines['total']:,} in {lines['files']} files; longest files:")
    for name, size in lines["longest_files"]:
        print(f"  {size:5d}  {name}")
    print("ten longest functions:")
    for name, size in result["longest_functions"]:
        print(f"  {size:5d}  {name}")
    print(f"files one SAC run crosses: {crossed['python']} Python, {crossed['yaml']} YAML")
    print(f"duplicates pairs: {result['duplicates']['pairs']}")
    print(f"CLI start (algo=sac env=Hopper total_steps=0): {result['cli_start']['median_s']:.2f} s")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
