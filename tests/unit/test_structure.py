"""The package's structure: layers (and layer 3's floors) that only look down, no import
loops, the size budget (each test names what is over it), typed worker calls, and every
source file linted."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grouprl.workers.group import LocalGroup, Role

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "grouprl"


def _structure():
    spec = importlib.util.spec_from_file_location("structure", ROOT / "scripts" / "structure.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["structure"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


structure = _structure()


def test_no_import_loops_between_modules_or_packages():
    found = structure.imports(SRC)
    assert structure.module_loops(found) == []
    assert structure.package_loops(found) == []


def test_every_package_has_a_layer_and_at_most_one_upward_import_each_marked():
    found = structure.imports(SRC)
    tops = {structure.top(name) for name in structure.modules(SRC)}
    assert tops <= set(structure.LAYERS), tops - set(structure.LAYERS)
    up = structure.upward(found, structure.LAYERS)
    assert len(up) <= 1, up
    assert all(i.marked for i in up), [i for i in up if not i.marked]


def test_every_package_of_layer_3_stands_on_one_floor_and_only_those_do():
    on_floors = [p for _, packages in structure.FLOORS for p in packages]
    assert len(on_floors) == len(set(on_floors)), on_floors
    shared = {p for p, layer in structure.LAYERS.items() if layer == 3}
    assert set(on_floors) == shared, set(on_floors) ^ shared


def test_layer_3_floors_run_from_services_up_to_rollout():
    """Pins the order docs/architecture.md draws: the torch-free task code (data,
    rewards, tools, envs) below the engines, which nothing below them may load."""
    floor = structure.FLOOR_OF
    assert floor["sandbox"] == floor["ckpt"] < floor["data"] == floor["rewards"]
    assert floor["rewards"] == floor["tools"] < floor["envs"] < floor["engines"]
    assert floor["engines"] < floor["rollout"]


def test_no_file_over_the_budget():
    big = structure.over(list(structure.file_sizes(SRC).items()), structure.MAX_FILE_LINES)
    assert not big, f"files over {structure.MAX_FILE_LINES} lines (split by concern): {big}"


def test_no_function_over_the_budget():
    lengths = [(qualname, n) for n, qualname in structure.functions(SRC)]
    long = structure.over(lengths, structure.MAX_FUNCTION_LINES)
    assert not long, f"functions over {structure.MAX_FUNCTION_LINES} lines: {long}"


def test_any_annotations_within_the_budget():
    found = structure.any_annotations(SRC)
    assert len(found) < structure.ANY_BELOW, (
        f"{len(found)} parameters and variables annotated `Any` (budget < "
        f"{structure.ANY_BELOW}): name the type; by module: {structure.places(found)}"
    )


def test_getattr_calls_within_the_budget():
    found = structure.getattr_calls(SRC)
    assert len(found) < structure.GETATTR_BELOW, (
        f"{len(found)} `getattr(` calls (budget < {structure.GETATTR_BELOW}): a protocol "
        f"says what a thing has; by module: {structure.places(found)}"
    )


def test_floors_within_the_budget():
    floors = structure.floors_line(structure.FLOORS)
    assert structure.floor_count(structure.LAYERS) < structure.FLOORS_BELOW, (
        f"{structure.floor_count(structure.LAYERS)} floors (budget < "
        f"{structure.FLOORS_BELOW}): layers {sorted(set(structure.LAYERS.values()))}, "
        f"layer 3: {floors}"
    )


def test_the_budget_counts_any_and_getattr_as_written(tmp_path: Path):
    """`Any` exactly (a parameter, *args, **kwargs, a variable; not `list[Any]`, not a
    return), and calls of the builtin getattr (not a method named getattr)."""
    pkg = tmp_path / "grouprl"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(
        "import typing\n"
        "from typing import Any\n"
        "def f(a: Any, b: list[Any], *args: Any, c: typing.Any = 1, **kw: Any) -> Any:\n"
        "    x: Any = getattr(a, 'x')\n"
        "    y: dict[str, Any] = {}\n"
        "    return a.getattr('y')\n"
    )
    assert structure.any_annotations(pkg) == [("grouprl.m", 3)] * 4 + [("grouprl.m", 4)]
    assert structure.getattr_calls(pkg) == [("grouprl.m", 4)]
    assert structure.places([("grouprl.m", 4), ("grouprl.n", 1), ("grouprl.m", 3)]) == (
        "grouprl.m (2): 4, 3; grouprl.n (1): 1"
    )


def test_the_structure_script_finds_a_loop_and_an_upward_import(tmp_path: Path):
    pkg = tmp_path / "grouprl"
    (pkg / "driver").mkdir(parents=True)
    (pkg / "algo").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "driver" / "__init__.py").write_text("")
    (pkg / "algo" / "__init__.py").write_text("")
    (pkg / "driver" / "a.py").write_text("from grouprl.driver import b\n")
    (pkg / "driver" / "b.py").write_text("import grouprl.driver.a\n")
    (pkg / "algo" / "c.py").write_text("from grouprl.driver.a import x\n")
    found = structure.imports(pkg)
    assert structure.module_loops(found) == [["grouprl.driver.a", "grouprl.driver.b"]]
    [up] = structure.upward(found, structure.LAYERS)
    assert (up.source, up.target, up.marked) == ("grouprl.algo.c", "grouprl.driver.a", False)


def test_the_structure_script_finds_an_import_up_layer_3s_floors(tmp_path: Path):
    """Same layer, higher floor: an environment that imports the rollout, a reward that
    imports an engine (marked). Down the floors and within one floor are fine."""
    pkg = tmp_path / "grouprl"
    for name in ("envs", "rollout", "rewards", "engines", "data", "sandbox"):
        (pkg / name).mkdir(parents=True)
        (pkg / name / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "envs" / "a.py").write_text("from grouprl.rollout.b import run\n")
    (pkg / "rollout" / "b.py").write_text("")
    (pkg / "rewards" / "c.py").write_text(
        "from grouprl.data import d\n"  # the same floor: fine
        "from grouprl.sandbox import e\n"  # down: fine
        "# upward import: a judge model\n"
        "from grouprl.engines.f import generate\n"
    )
    for name in ("data/d", "sandbox/e", "engines/f"):  # modules with nothing in them
        (pkg / f"{name}.py").write_text("")
    found = structure.imports(pkg)
    up = structure.upward(found, structure.LAYERS)
    assert [(i.source, i.target, i.marked) for i in up] == [
        ("grouprl.envs.a", "grouprl.rollout.b", False),
        ("grouprl.rewards.c", "grouprl.engines.f", True),
    ]


def test_no_worker_call_names_its_method_in_a_string():
    pattern = re.compile(r"\.(run|rows|call|gather|each)\(\"")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in SRC.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if pattern.search(line)
    ]
    assert offenders == []


@pytest.mark.procs
def test_ruff_sees_every_python_file_under_src():
    """ruff skips folders named like build output (``dist/``, ``build/``): every file
    under src must be among those `make lint` checks."""
    ruff = Path(sys.executable).parent / "ruff"
    listed = subprocess.run(
        [str(ruff), "check", "src", "--show-files"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    seen = {Path(line.strip()).resolve() for line in listed.splitlines() if line.strip()}
    on_disk = {p.resolve() for p in (ROOT / "src").rglob("*.py")}
    assert on_disk - seen == set()


class Adder:
    def __init__(self, rank, *, base: int) -> None:
        self.base = base

    def add(self, x: int, *, times: int = 1) -> int:
        return self.base + x * times

    def rows(self, n: int) -> torch.Tensor:
        return torch.arange(n)


class Other:
    def add(self, x: int) -> int:
        return x


def test_a_role_calls_the_method_it_is_given_and_refuses_another_class():
    group = LocalGroup("cpu")
    role = group.add("adder", Adder, base=10)
    assert isinstance(role, Role) and role.cls is Adder
    assert role.call(Adder.add, 2, times=3) == 16
    assert role.each(Adder.add, 1) == [11]
    assert torch.equal(role.gather(Adder.rows, 3), torch.arange(3))
    with pytest.raises(TypeError, match=r"Other.add.*not a method of Adder.*'adder'"):
        role.call(Other.add, 2)
    with pytest.raises(TypeError, match="not a method of Adder"):
        role.call(lambda worker: worker.base)


def test_a_role_built_with_uses_gets_the_ranks_other_roles():
    class Summer:
        def __init__(self, rank, *, parts) -> None:
            self.parts = parts

        def total(self) -> int:
            return sum(p.base for p in self.parts)

    group = LocalGroup("cpu")
    group.add("a", Adder, base=1)
    group.add("b", Adder, base=2)
    assert group.add("sum", Summer, uses=["a", "b"]).call(Summer.total) == 3
