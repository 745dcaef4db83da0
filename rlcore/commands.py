"""rlcore's command-line entry points, listed in one place: ``python -m rlcore`` prints
them, ``python -m rlcore <command> [args]`` runs one (the same as ``python -m
rlcore.<module>``), and every one answers ``--help`` / ``-h`` with its usage."""

from __future__ import annotations

import runpy
import sys
from collections.abc import Sequence

# (command, module, what it does)
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("train", "rlcore.train", "train an algorithm on an environment (algo=sac env=Hopper ...)"),
    ("evaluate", "rlcore.evaluate", "evaluate a saved run: returns, costs, videos"),
    ("export", "rlcore.export", "write a trained policy as one ONNX or TorchScript file"),
    ("report", "rlcore.report", "tables with confidence intervals and figures from runs"),
    ("collect", "rlcore.offline.collect", "record a Minari dataset from a policy or a run"),
    ("recipe", "rlcore.offline.recipe", "D4RL-like datasets: train an expert, record levels"),
    ("safe_recipe", "rlcore.offline.safe_recipe", "a constrained-task dataset from policies"),
    ("antmaze", "rlcore.offline.antmaze", "D4RL-style AntMaze datasets from a waypoint runner"),
    ("neorl2_recipe", "rlcore.offline.neorl2_recipe", "NeoRL-2's datasets, as its authors built"),
    ("benchmarks", "rlcore.benchmarks.throughput", "speed side by side (more: benchmarks/)"),
)

HELP_FLAGS = ("--help", "-h")


def print_help_if_asked(argv: Sequence[str], text: str) -> bool:
    """Print ``text`` (a command's usage) and return True when ``argv`` asks for help."""
    if any(arg in HELP_FLAGS for arg in argv):
        print(text.strip())
        return True
    return False


def listing() -> str:
    """The commands, one per line, with how to run them."""
    width = max(len(name) for name, _, _ in COMMANDS)
    lines = ["usage: python -m rlcore <command> [args]   (or python -m <module> [args])", ""]
    lines += [f"  {name:<{width}}  {what}  [{module}]" for name, module, what in COMMANDS]
    lines += ["", "python -m rlcore <command> --help shows a command's usage."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlcore``: list the commands; with one, run it with the rest of argv."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in HELP_FLAGS:
        print(listing())
        return 0
    modules = {name: module for name, module, _ in COMMANDS}
    if args[0] not in modules:
        print(f"error: unknown command '{args[0]}'; choose from {', '.join(modules)}",
              file=sys.stderr)  # fmt: skip
        return 2
    sys.argv = [f"python -m {modules[args[0]]}", *args[1:]]
    runpy.run_module(modules[args[0]], run_name="__main__", alter_sys=True)
    return 0
