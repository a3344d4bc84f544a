"""docs/architecture.md names only what exists: every module path it cites
(``driver/loop.py``, ``rollout/setup.load_prompt_set``, ``grouprl.engines.base``), every
``Class.method``, every ``module.function`` in a code span, every bare ``file.py`` and
``ClassName`` anywhere, and the keywords of every worker call it shows
(``.call(PolicyWorker.update, batch, k=...)``). Names resolve with ast over src/ (nothing
is imported); a failure lists each name that does not resolve."""

from __future__ import annotations

import ast
import builtins
import contextlib
import re
import typing
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "grouprl"
DOCS = ["docs/architecture.md"]
ROOT_DIRS = {"src", "tests", "scripts", "docs", "benchmarks", "examples"}

PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+)([\w-]+(?:\.(?:py|md|yaml|json))?)?((?:\.\w+)*)")
"""``pkg/sub/``, ``pkg/mod.py``, ``pkg/mod.name.attr``: the path, then attributes."""
DOTTED = re.compile(r"(?<![\w./-])([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)+)")
FILE = re.compile(r"(?<![\w./-])(\w+\.py)\b")
SPAN = re.compile(r"`([^`\n]+)`")
CAMEL = re.compile(r"[A-Z]\w*[a-z]\w*")  # a class's name: not ALL_CAPS
CONSTANT = re.compile(r"[A-Z][A-Z0-9_]{2,}")  # a registry or table: `REWARDS`, `FLOORS`
CLASS_WORD = re.compile(r"(?<![\w.])[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b")  # RolloutBuilder
OUTSIDE = {"AdamW", "OpenAI"}  # names of other projects the page mentions
PLACEHOLDERS = {"pkg"}  # `pkg.module:attr`: the form of an import path, not a module
CALL = re.compile(r"\.(?:call|each|gather)\(([A-Z]\w*)\.(\w+)((?:,[^)]*)?)\)")


@cache
def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


@cache
def module_files() -> dict[str, Path]:
    """Dotted module name under grouprl (``engines.base``) -> its file."""
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def top_level(module: ast.Module) -> dict[str, ast.AST]:
    """Names a module defines or imports at its top level (under ``if``/``try`` too), and the
    string keys of its dict literals (a package's PEP 562 names)."""
    out: dict[str, ast.AST] = {}
    body = list(module.body)
    while body:
        node = body.pop(0)
        if isinstance(node, ast.If | ast.Try):
            body += node.body + node.orelse
            body += node.finalbody if isinstance(node, ast.Try) else []
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                out[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {t.id: node for t in targets if isinstance(t, ast.Name)}
            if isinstance(node.value, ast.Dict):
                keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
                out |= {k: node for k in keys if isinstance(k, str)}
    return out


@cache
def classes() -> dict[str, list[ast.ClassDef]]:
    out: dict[str, list[ast.ClassDef]] = {}
    for path in module_files().values():
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append(node)
    return out


def class_has(cls: ast.ClassDef, attrs: list[str], seen: frozenset[str] = frozenset()) -> bool:
    """The class (or a base class defined in src) has ``attrs[0]``, and so on down."""
    if not attrs:
        return True
    members = top_level(ast.Module(body=cls.body, type_ignores=[])) | instance_attrs(cls)
    if attrs[0] in members:
        node = members[attrs[0]]
        return not isinstance(node, ast.ClassDef) or class_has(node, attrs[1:])
    bases = [b.id for b in cls.bases if isinstance(b, ast.Name) and b.id not in seen]
    return any(
        class_has(base, attrs, seen | {cls.name}) for b in bases for base in classes().get(b, [])
    )


def instance_attrs(cls: ast.ClassDef) -> dict[str, ast.AST]:
    """``self.x = ...`` in the class's methods."""
    out: dict[str, ast.AST] = {}
    for node in ast.walk(cls):
        stored = isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
        if stored and isinstance(node.value, ast.Name) and node.value.id == "self":
            out[node.attr] = node
    return out


def module_has(module: str, attrs: list[str]) -> bool:
    """``grouprl.<module>`` has ``attrs[0]`` (a name, or a submodule), and so on down."""
    if not attrs:
        return True
    if f"{module}.{attrs[0]}".strip(".") in module_files():
        return module_has(f"{module}.{attrs[0]}".strip("."), attrs[1:])
    path = module_files().get(module.strip(".") or "")
    if path is None:
        return False
    node = top_level(tree(path)).get(attrs[0])
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("grouprl"):
        return module_has(node.module.removeprefix("grouprl"), attrs)
    if isinstance(node, ast.ClassDef):
        return class_has(node, attrs[1:])
    return node is not None  # a function or a value: attributes past it are not checked


def dotted_has(first: str, attrs: list[str]) -> bool:
    """``first.attrs``: a class by name, a top-level package or module, or any module of
    that last name (``shaping.overlong_penalty``), whose top level or classes hold it."""
    if CAMEL.fullmatch(first):
        return any(class_has(cls, attrs) for cls in classes().get(first, []))
    if first == "grouprl":
        return module_has("", attrs)
    candidates = [m for m in module_files() if m.split(".")[-1] == first]
    return any(
        module_has(m, attrs)
        or any(class_has(c, attrs) for c in ast.walk(tree(module_files()[m])) if is_class(c))
        for m in candidates
    )


def is_class(node: ast.AST) -> bool:
    return isinstance(node, ast.ClassDef)


@cache
def config_sections() -> set[str]:
    """The run config's sections (``rollout``, ``algo`` ...): ``rollout.n`` is a key."""
    return {
        n.target.id
        for cls in classes().get("RunConfig", [])
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }


def path_problems(text: str) -> list[str]:
    packages = {m.split(".")[0] for m in module_files() if m}
    out = []
    for dirs, last, attrs in PATH.findall(text):
        first = dirs.split("/")[0]
        if first not in packages | ROOT_DIRS:
            continue
        base = ROOT if first in ROOT_DIRS else SRC
        cited = f"{dirs}{last}{attrs}"
        if last.endswith((".py", ".md", ".yaml", ".json")):
            if not (base / dirs / last).is_file():
                out.append(f"{cited}: no such file")
            continue
        if not last and not attrs:
            if not (base / dirs).is_dir():
                out.append(f"{cited}: no such folder")
            continue
        module = f"{dirs}{last}".strip("/").replace("/", ".")
        if base is SRC and not (
            module in module_files() and module_has(module, attrs.split(".")[1:])
        ):
            out.append(f"{cited}: not in src/grouprl")
    return out


def span_problems(text: str) -> list[str]:
    """``module.name`` and ``ClassName`` in code spans; config keys (``rollout.n``) are
    left alone."""
    out = []
    known = set(dir(builtins)) | set(dir(contextlib)) | set(dir(typing))
    for span in SPAN.findall(text):
        for first, attrs in DOTTED.findall(PATH.sub(" ", span)):
            names = attrs.split(".")[1:]
            if first in config_sections() | PLACEHOLDERS or names[-1] in ("py", "md"):
                continue
            if not (CAMEL.fullmatch(first) or first == "grouprl" or is_module(first)):
                out.append(f"`{span}`: no module {first} in src/grouprl")
            elif not dotted_has(first, names):
                out.append(f"`{span}`: {first}{attrs} not in src/grouprl")
        name = span.split("[")[0]
        named = CAMEL.fullmatch(name) or CONSTANT.fullmatch(name)
        if named and name not in known and name not in all_names():
            out.append(f"`{span}`: {name} not in src/grouprl")
    return out


def is_module(name: str) -> bool:
    return any(m.split(".")[-1] == name for m in module_files())


@cache
def all_names() -> set[str]:
    """Every top-level name and class in src/grouprl and scripts/ (``FLOORS``)."""
    paths = [*module_files().values(), *(ROOT / "scripts").glob("*.py")]
    return {n for path in paths for n in top_level(tree(path))} | set(classes())


def class_problems(text: str) -> list[str]:
    """``Class.method`` anywhere (diagrams too)."""
    return [
        f"{first}{attrs}: not in src/grouprl"
        for first, attrs in DOTTED.findall(PATH.sub(" ", text))
        if CAMEL.fullmatch(first) and not dotted_has(first, attrs.split(".")[1:])
    ]


def class_name_problems(text: str) -> list[str]:
    """Every CamelCase word (``RolloutBuilder``, ``TrainingBatch``), diagrams too."""
    known = set(dir(builtins)) | set(dir(contextlib)) | set(dir(typing)) | OUTSIDE
    return [
        f"{word}: no such class or name in src/grouprl"
        for word in dict.fromkeys(CLASS_WORD.findall(text))
        if word not in known and word not in all_names()
    ]


def file_problems(text: str) -> list[str]:
    names = {p.name for d in ("src", "tests", "scripts") for p in (ROOT / d).rglob("*.py")}
    return [f"{name}: no such file" for name in FILE.findall(text) if name not in names]


def call_problems(text: str) -> list[str]:
    """The keywords a worker call passes are the method's parameters."""
    out = []
    for cls, method, rest in CALL.findall(text):
        keywords = re.findall(r"(\w+)=", rest)
        for c in classes().get(cls, []):
            node = top_level(ast.Module(body=c.body, type_ignores=[])).get(method)
            if isinstance(node, ast.FunctionDef) and node.args.kwarg is None:
                args = node.args
                params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
                out += [f"{cls}.{method}: no parameter {k}=" for k in keywords if k not in params]
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_every_name_the_doc_cites_exists(doc: str):
    text = (ROOT / doc).read_text()
    problems = [
        *path_problems(text),
        *class_problems(text),
        *span_problems(text),
        *class_name_problems(text),
        *file_problems(text),
        *call_problems(text),
    ]
    assert problems == [], "\n".join(dict.fromkeys(problems))


def test_the_checks_catch_a_moved_module_a_missing_method_and_a_wrong_keyword():
    text = (
        "driver/loop.py driver/nowhere.py `rollout/nowhere.run` engines/base.RolloutEngine\n"
        "via rollout/gone, engines/ and rollout/gateway/server.py\n"
        "`RolloutEngine.generate` `RolloutEngine.fly` `grouprl.engines.base.Nothing`\n"
        "`rollout.n=4` `algo.correction` `NoSuchClass` `ExitStack` nowhere.py `gone.f(x)`\n"
        "`REWARDS` `FLOORS` `NO_SUCH_TABLE`\n"
        "c.policy.call(PolicyWorker.update, batch, no_such_keyword=1)\n"
    )
    assert path_problems(text) == [
        "driver/nowhere.py: no such file",
        "rollout/nowhere.run: not in src/grouprl",
        "rollout/gone: not in src/grouprl",
    ]
    assert class_problems(text) == ["RolloutEngine.fly: not in src/grouprl"]
    assert span_problems(text) == [
        "`RolloutEngine.fly`: RolloutEngine.fly not in src/grouprl",
        "`grouprl.engines.base.Nothing`: grouprl.engines.base.Nothing not in src/grouprl",
        "`NoSuchClass`: NoSuchClass not in src/grouprl",
        "`gone.f(x)`: no module gone in src/grouprl",
        "`NO_SUCH_TABLE`: NO_SUCH_TABLE not in src/grouprl",
    ]
    assert class_name_problems(text + "the RolloutBuilder, a GoneBuilder") == [
        "NoSuchClass: no such class or name in src/grouprl",
        "GoneBuilder: no such class or name in src/grouprl",
    ]
    assert file_problems(text) == ["nowhere.py: no such file"]
    assert call_problems(text) == ["PolicyWorker.update: no parameter no_such_keyword="]
