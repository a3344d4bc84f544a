"""The package's structure, read with ast (nothing is imported): import loops, imports
that run up the layers (or up layer 3's floors), lines per package, the largest files
and longest functions, and the size budget.

    python scripts/structure.py [--src src/grouprl] [--layers layers.json]

``tests/unit/test_structure.py`` holds the project to it: no import loop, no loop
between packages, at most one upward import, marked ``# upward import:`` with why, and
the size budget: no file over 500 lines, no function over 70, fewer than 150 parameters
and variables annotated exactly ``Any``, fewer than 60 calls of the builtin ``getattr``,
fewer than 12 floors (the layers, layer 3 counted as its floors). A feature that needs
more room splits a file by concern first (../shared/STYLE.md, "The size budget").
docs/architecture.md draws the layers and floors these tables encode.
"""

from __future__ import annotations

import argparse
import ast
import json
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

LAYERS: dict[str, int] = {
    # records and pure math: tensors in, tensors out
    "types": 0,
    "algo": 0,
    "assets": 0,
    "lazy": 0,  # PEP 562 names for packages' __init__ (grouprl, rewards)
    "seeds": 0,  # every sampling seed of a run, derived in one place
    "host": 0,  # what talks to the kernel: namespaces, process sessions and trees
    # torch-free: the schema, loading, checks; above it the memory planner
    "config": 1,
    "plan": 2,
    # shared parts: what both the driver and the workers use
    "device": 3,
    "runtime": 3,
    "lora_weights": 3,
    "cluster": 3,
    "data": 3,
    "rewards": 3,
    "envs": 3,
    "engines": 3,
    "tools": 3,
    "rollout": 3,
    "sandbox": 3,
    "agents": 3,
    "ckpt": 3,
    "metrics": 3,
    # the code that runs on each training rank
    "workers": 4,
    # the run: the loop, checkpoint orchestration, evaluation
    "driver": 5,
    # the command line and the public API
    "cli": 6,
    "api": 6,
    "__main__": 6,
    "grouprl": 6,
}
"""Layer of each top-level module or package of ``grouprl``: a module imports only from
its own layer or below (and, within a layer, without loops between packages)."""

FLOORS: list[tuple[str, list[str]]] = [
    # the machine and the run around it: devices, run files and seeds, LoRA names, Ray,
    # worker processes for user code, metrics sinks, checkpoints
    ("services", ["device", "runtime", "lora_weights", "cluster", "sandbox", "metrics", "ckpt"]),
    # a task's parts, without torch: rows and prompts, reward functions, tools (and
    # agents/, the tools' public face for env.agent)
    ("task", ["data", "rewards", "tools", "agents"]),
    # environments made of those parts, without torch: they run in worker processes
    ("envs", ["envs"]),
    # the generation backends (hf, vLLM, Ray actors): nothing below them loads one (torch
    # loads below only in algo/, types and the services: docs/architecture.md)
    ("engines", ["engines"]),
    # episodes: an engine against environments, scored; the agent gateway
    ("rollout", ["rollout"]),
]
"""Layer 3's floors, bottom up: within layer 3 a module imports only from its own floor
or below. Packages on one floor may import each other, one way only (no package loops)."""

FLOOR_OF: dict[str, int] = {p: i for i, (_, packages) in enumerate(FLOORS) for p in packages}

UPWARD_MARK = "# upward import:"

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 70
ANY_BELOW = 150  # `: Any` says nothing of what a thing is
GETATTR_BELOW = 60  # sniffing attributes: a sign that a protocol is missing
FLOORS_BELOW = 12


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module
    line: int
    marked: bool  # the line carries UPWARD_MARK


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def parse(path: Path) -> ast.Module:
    """The file's ast, parsed once per version of it (each measure walks every file)."""
    stat = path.stat()
    return _parse(path, stat.st_mtime_ns, stat.st_size)


@cache
def _parse(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def imports(root: Path) -> list[Import]:
    """Every import of one of the package's own modules (also inside functions and under
    TYPE_CHECKING: each ties two modules together for a reader)."""
    files = modules(root)
    found = []
    for name, path in files.items():
        text = path.read_text()
        lines = text.splitlines()
        base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Import):
                wanted = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base[: len(base) - (node.level - 1)]
                    target = ".".join(anchor + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                wanted = [f"{target}.{a.name}" for a in node.names] + [target]
            else:
                continue
            marked = any(UPWARD_MARK in lines[i - 1] for i in (node.lineno, node.lineno - 1))
            for target in _resolve(wanted, files, name):
                found.append(Import(name, target, node.lineno, marked))
    return found


def _resolve(wanted: list[str], files: dict[str, Path], source: str) -> set[str]:
    """A dotted name resolves to the longest module it names (pkg.mod.func -> pkg.mod);
    a package's own children are not counted as its imports."""
    out = set()
    for w in wanted:
        parts = w.split(".")
        for k in range(len(parts), 0, -1):
            cand = ".".join(parts[:k])
            if cand in files:
                if cand != source and not cand.startswith(source + "."):
                    out.add(cand)
                break
    # `from pkg import mod` names both pkg and pkg.mod: keep the module
    return {t for t in out if not any(o.startswith(t + ".") for o in out)}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of nodes that reach each other (Tarjan), each of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def top(module: str) -> str:
    """The top-level package or module of ``grouprl.X.Y``: ``X``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def module_loops(found: list[Import]) -> list[list[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in found:
        graph[imp.source].add(imp.target)
    return strongly_connected(graph)


def package_loops(found: list[Import]) -> list[list[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in found:
        a, b = top(imp.source), top(imp.target)
        if a != b and "grouprl" not in (a, b):
            graph[a].add(b)
    return strongly_connected(graph)


def upward(
    found: list[Import], layers: dict[str, int], *, floors: dict[str, int] = FLOOR_OF
) -> list[Import]:
    """Imports from a higher layer than the importer's, or, within one layer, from a
    higher floor (unknown packages count as violations: every package must have a
    layer; a package without a floor stands on its layer's ground floor)."""
    out = []
    for imp in found:
        a, b = top(imp.source), top(imp.target)
        if (layers.get(b, 99), floors.get(b, 0)) > (layers.get(a, -1), floors.get(a, 0)):
            out.append(imp)
    return out


def floors_line(floors: list[tuple[str, list[str]]]) -> str:
    """``services (device ...) < task (data ...) < envs < ...``: a floor that holds only
    the package it is named for shows the name alone."""
    return " < ".join(
        name if packages == [name] else f"{name} ({' '.join(packages)})"
        for name, packages in floors
    )


def functions(root: Path) -> list[tuple[int, str]]:
    """(lines, module:qualname) of every function."""
    out = []
    for name, path in modules(root).items():
        tree = parse(path)

        def walk(node: ast.AST, prefix: str, module: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    qual = f"{prefix}{child.name}"
                    out.append((child.end_lineno - child.lineno + 1, f"{module}:{qual}"))
                    walk(child, qual + ".", module)
                elif isinstance(child, ast.ClassDef):
                    walk(child, f"{prefix}{child.name}.", module)

        walk(tree, "", name)
    return out


def _trees(root: Path) -> dict[str, ast.Module]:
    return {name: parse(path) for name, path in modules(root).items()}


def any_annotations(root: Path) -> list[tuple[str, int]]:
    """(module, line) of every parameter (``*args`` and ``**kwargs`` too) and annotated
    variable whose annotation is exactly ``Any`` (or ``typing.Any``)."""

    def is_any(node: ast.expr | None) -> bool:
        return (isinstance(node, ast.Name) and node.id == "Any") or (
            isinstance(node, ast.Attribute) and node.attr == "Any"
        )

    out = []
    for name, tree in _trees(root).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.arguments):
                params = [*node.posonlyargs, *node.args, *node.kwonlyargs]
                params += [a for a in (node.vararg, node.kwarg) if a is not None]
                out += [(name, a.lineno) for a in params if is_any(a.annotation)]
            elif isinstance(node, ast.AnnAssign) and is_any(node.annotation):
                out.append((name, node.lineno))
    return sorted(out)


def getattr_calls(root: Path) -> list[tuple[str, int]]:
    """(module, line) of every call of the builtin ``getattr``."""
    return sorted(
        (name, node.lineno)
        for name, tree in _trees(root).items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
    )


def floor_count(layers: dict[str, int]) -> int:
    """The layers, with layer 3 counted as its floors."""
    return len(set(layers.values()) - {3}) + len(FLOORS)


def places(found: list[tuple[str, int]]) -> str:
    """``module (n): line, line ...`` per module, most first."""
    lines: dict[str, list[int]] = defaultdict(list)
    for module, line in found:
        lines[module].append(line)
    ranked = sorted(lines.items(), key=lambda x: (-len(x[1]), x[0]))
    return "; ".join(f"{m} ({len(ls)}): {', '.join(map(str, ls))}" for m, ls in ranked)


def over(sized: list[tuple[str, int]], limit: int) -> str:
    """``name n, ...`` of the sizes over the limit, largest first."""
    return ", ".join(f"{q} {n}" for q, n in sorted(sized, key=lambda x: -x[1]) if n > limit)


def budget_lines(root: Path, layers: dict[str, int], sizes: dict[str, int]) -> list[str]:
    """The size budget, one line each: the measure, its budget, and what is over it."""
    long_functions = [(q, n) for n, q in functions(root)]
    n_any, n_getattr = len(any_annotations(root)), len(getattr_calls(root))
    big = over(list(sizes.items()), MAX_FILE_LINES)
    long = over(long_functions, MAX_FUNCTION_LINES)
    return [
        f"budget: files over {MAX_FILE_LINES} lines: {big or 'none'} (budget: none)",
        f"budget: functions over {MAX_FUNCTION_LINES} lines: {long or 'none'} (budget: none)",
        f"budget: parameters and variables annotated `Any`: {n_any} (budget < {ANY_BELOW})",
        f"budget: `getattr(` calls: {n_getattr} (budget < {GETATTR_BELOW})",
        f"budget: floors (layers, layer 3 as its floors): {floor_count(layers)} "
        f"(budget < {FLOORS_BELOW})",
    ]


def file_sizes(root: Path) -> dict[str, int]:
    """Lines of each module."""
    return {name: len(path.read_text().splitlines()) for name, path in modules(root).items()}


def report(root: Path, layers: dict[str, int]) -> str:
    found = imports(root)
    files = modules(root)
    sizes = file_sizes(root)
    per_package: dict[str, int] = defaultdict(int)
    for name, n in sizes.items():
        per_package[top(name)] += n
    loops, pkg_loops, up = module_loops(found), package_loops(found), upward(found, layers)
    lines = [
        f"{len(files)} modules, {sum(sizes.values())} lines; median file "
        f"{sorted(sizes.values())[len(sizes) // 2]} lines",
        f"import loops between modules: {len(loops)}",
        *[f"  {' <-> '.join(loop)}" for loop in loops],
        f"packages importing each other (loops): {len(pkg_loops)}",
        *[f"  {' <-> '.join(loop)}" for loop in pkg_loops],
        f"layer 3 floors, bottom up: {floors_line(FLOORS)}",
        f"upward imports (up the layers or layer 3's floors): {len(up)}",
        *[f"  {i.source}:{i.line} -> {i.target}{'  (marked)' if i.marked else ''}" for i in up],
        "lines per package: "
        + ", ".join(f"{p} {n}" for p, n in sorted(per_package.items(), key=lambda x: -x[1])),
        "largest files: "
        + ", ".join(f"{m} {n}" for m, n in sorted(sizes.items(), key=lambda x: -x[1])[:6]),
        "longest functions: "
        + ", ".join(f"{q} {n}" for n, q in sorted(functions(root), reverse=True)[:6]),
        *budget_lines(root, layers, sizes),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default=str(Path(__file__).parents[1] / "src/grouprl"))
    parser.add_argument("--layers", help="a JSON file mapping top-level names to layers")
    args = parser.parse_args()
    layers = json.loads(Path(args.layers).read_text()) if args.layers else LAYERS
    print(report(Path(args.src).resolve(), layers))


if __name__ == "__main__":
    main()
