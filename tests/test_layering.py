"""The library's layers, read from its source with ``ast``: imports point down, no cycles.

Bottom to top: ``envs`` (simulation back ends and wrappers); rlcore's core (buffers,
nets, losses, loops, checkpoint, logging, ...); ``algos`` and ``offline`` (datasets);
the tools (rlcore.report, offline's collection recipes, the snapshot-reset teacher) and
the composition root ``rlcore.train``; ``benchmarks`` on top. Every import counts,
module level and function level alike (a function-level import still ties the layers
together; it only hides the tie until the function runs), and so does an import by
module-path string (``importlib.import_module("...")`` with a literal name): the catalog
(rlcore.catalog) names the algorithms with plain imports, and nothing of the core names
one, in code or in a string. Module names are normalised so that the test reads the same before and after
the packages move under the ``rlcore.`` namespace (``rlcore.envs.make`` is ``envs.make``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("rlcore", "envs", "algos", "offline", "benchmarks")
# the packages that will live under the rlcore namespace (rlcore.envs, rlcore.algos, ...)
NAMESPACED = ("envs", "algos", "offline", "benchmarks", "configs")

# rlcore modules above the core, each with the reason it may import algos / offline
ROOT_AND_TOOLS = {
    "rlcore": "the public API: load_policy / load_agent (rlcore.policies), imported lazily",
    "rlcore.train": "the entry points of a training run (rlcore.cli, rlcore.run)",
    "rlcore.run": "the composition root: wires algorithms, datasets and envs into a run",
    "rlcore.build": "the composition root's build step: envs, dataset, agent, phases",
    "rlcore.checks": "the composition root's checks before anything is written",
    "rlcore.cli": "the command line of a training run",
    "rlcore.catalog": "the list of algorithms, with plain imports (one loader each)",
    "rlcore.policies": "a tool: rebuilds the agent a checkpoint names (load_agent, load_policy)",
    "rlcore.report": "a tool (reads run directories, writes tables and figures)",
    "rlcore.teacher": "a tool: loads a trained agent as snapshot reset's teacher policy",
    "rlcore.evaluate": "a tool: the command line that evaluates a saved run",
    "rlcore.export": "a tool: writes a saved run's policy as ONNX / TorchScript",
    "rlcore.overrides": "the command line: composes overrides, --help lists the catalog",
    "rlcore.commands": "the command line: lists and runs rlcore's commands",
    "rlcore.__main__": "the command line: python -m rlcore",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return normalise(".".join(parts))


def normalise(name: str) -> str:
    """``rlcore.envs.make`` -> ``envs.make``: one name per module across the rename."""
    head, _, rest = name.partition(".")
    if head == "rlcore" and rest.split(".")[0] in NAMESPACED:
        return rest
    return name


def library_sources() -> dict[str, Path]:
    """Every module of the library packages, by dotted name (a package folder may sit at
    the top or inside rlcore/: either way ``envs/make.py`` is ``envs.make``)."""
    found = {}
    for package in PACKAGES:
        folder = REPO / package
        if folder.is_dir():
            found.update((_module_name(p), p) for p in sorted(folder.rglob("*.py")))
    return found


def _imported_names(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Every module a source imports, at any depth (functions, branches, try blocks)."""
    package = module if is_package else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if _string_import(node) is not None:
            names.add(_string_import(node))
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import: resolve against the importing package
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            # ``from pkg import sub`` imports the submodule pkg.sub where there is one
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _string_import(node: ast.AST) -> str | None:
    """The module an ``importlib.import_module("name")`` / ``import_module("name")`` /
    ``__import__("name")`` call names with a literal string, else None."""
    if not (isinstance(node, ast.Call) and node.args):
        return None
    func, first = node.func, node.args[0]
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name in ("import_module", "__import__") and isinstance(first, ast.Constant):
        return first.value if isinstance(first.value, str) else None
    return None


def import_graph() -> dict[str, set[str]]:
    """Edges module -> library module it imports (directly or by running a package's
    ``__init__`` on the way: importing ``offline.scores`` from outside ``offline`` runs
    ``offline/__init__.py`` first)."""
    sources = library_sources()
    graph: dict[str, set[str]] = {}
    for module, path in sources.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets = set()
        for raw in _imported_names(tree, module, path.name == "__init__.py"):
            name = normalise(raw)
            if name not in sources:
                continue
            parts = name.split(".")
            targets.update(".".join(parts[:depth]) for depth in range(1, len(parts) + 1))
        # a module's own packages are initialised before it runs: importing them is a
        # lookup, not an edge (``from rlcore import catalog`` inside rlcore.train); the
        # namespaced packages (envs, algos, ...) run as rlcore.<name>, inside ``rlcore``
        graph[module] = {t for t in targets if not _own(module, t)}
    return graph


def _own(module: str, target: str) -> bool:
    """``target`` is a package ``module`` lives in (initialised before it runs)."""
    return _in(module, target) or (target == "rlcore" and _in(module, *NAMESPACED))


def _in(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import that points up a layer, as 'importer -> imported (rule)'."""
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if _in(module, "envs") and _in(target, "rlcore", "algos", "offline", "benchmarks"):
                found.append(f"{module} -> {target} (envs imports nothing above it)")
            core = _in(module, "rlcore") and module not in ROOT_AND_TOOLS
            if core and _in(target, "algos", "offline", "benchmarks"):
                found.append(f"{module} -> {target} (rlcore's core imports no algo/dataset)")
            if core and target in ROOT_AND_TOOLS:
                found.append(f"{module} -> {target} (the tools and the root sit above the core)")
            if _in(module, "algos") and (
                _in(target, "offline", "benchmarks") or target in ROOT_AND_TOOLS
            ):
                found.append(f"{module} -> {target} (algos import no dataset/tool/root)")
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


# --------------------------------------------------------------------------- the rules


def test_the_checker_sees_every_kind_of_import(tmp_path):
    """The reader finds function-level, relative, ``from pkg import sub`` and
    ``rlcore.``-prefixed imports, and the checks flag an upward edge and a cycle."""
    src = (
        "import envs.make\n"
        "def f():\n"
        "    from rlcore.offline import scores\n"
        "    from . import sibling\n"
        "    if True:\n"
        "        import rlcore.algos.sac as s\n"
    )
    names = _imported_names(ast.parse(src), "envs.snapshot", is_package=False)
    assert {"envs.make", "rlcore.offline.scores", "envs.sibling", "rlcore.algos.sac"} <= names
    by_string = "import importlib\ndef g():\n    importlib.import_module('rlcore.algos.td3')\n"
    assert "rlcore.algos.td3" in _imported_names(ast.parse(by_string), "rlcore.x", False)
    assert normalise("rlcore.offline.scores") == "offline.scores"
    assert normalise("rlcore.checkpoint") == "rlcore.checkpoint"
    graph = {"envs.snapshot": {"rlcore.checkpoint"}, "rlcore.checkpoint": {"algos.sac"}}
    assert len(layer_violations(graph)) == 2
    assert layer_violations({"rlcore.loops": {"rlcore.report"}}) == [
        "rlcore.loops -> rlcore.report (the tools and the root sit above the core)"
    ]
    assert layer_violations({"rlcore.train": {"algos.sac", "offline.datasets"}}) == []
    graph["algos.sac"] = {"rlcore.train"}
    assert any("algos.sac -> rlcore.train" in v for v in layer_violations(graph))
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_every_library_module_is_read():
    sources = library_sources()
    assert {"envs.snapshot", "rlcore.report", "offline.collect", "algos.sac"} <= set(sources)
    assert "algos.safe.cpo" in sources and "algos.safe" in sources
    assert set(ROOT_AND_TOOLS) <= set(sources), "a named tool module no longer exists"


def test_imports_point_down_the_layers():
    violations = layer_violations(import_graph())
    assert not violations, "imports that point up a layer:\n" + "\n".join(violations)


def test_no_import_cycles():
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles (function-level imports count):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


# the three upward ties issue 33 named must not come back under another name


def test_envs_snapshot_takes_the_teacher_as_callables():
    """Teacher loading lives in rlcore.teacher; envs.snapshot imports nothing of rlcore."""
    targets = import_graph()["envs.snapshot"]
    assert not any(_in(t, "rlcore", "algos", "offline") for t in targets), targets


def test_the_report_reads_no_dataset_module():
    """The general rule lets a tool import offline; the report needs no more than the core
    (the D4RL reference table is rlcore.evaluate's)."""
    targets = import_graph()["rlcore.report"]
    assert not any(_in(t, "offline", "algos") for t in targets), targets


def test_the_collect_command_line_is_imported_by_nothing():
    """``python -m offline.collect recipe`` dispatches down to the recipe; the recipe and
    the recording library below it never import the command line back."""
    graph = import_graph()
    assert "offline.recipe" in graph["offline.collect"]
    assert [m for m, targets in graph.items() if "offline.collect" in targets] == []


def test_no_core_module_names_an_algorithm():
    """Not in an import, not in a string: the core receives classes from the catalog."""
    for module, path in library_sources().items():
        if not _in(module, "rlcore") or module in ROOT_AND_TOOLS:
            continue
        strings = [
            node.value
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
        named = [text for text in strings if "rlcore.algos." in text or text.startswith("algos.")]
        assert not named, f"{module} names an algorithm module: {named}"
